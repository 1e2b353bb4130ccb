// The emulator runtime's state (see emu_runtime.h): each worker's arena of fiber
// stacks, the threads, warps and block it runs, the launch (Job) and the Runtime;
// what the hooks (emu_hooks.h) and the rest of the runtime build on.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#if !(defined(__x86_64__) && defined(__linux__)) || defined(ATTNBOOK_EMU_UCONTEXT)
#define ATTNBOOK_EMU_USE_UCONTEXT 1
#endif

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1)
      : x(x_), y(y_), z(z_) {}
};
struct uint3 { unsigned x, y, z; };
typedef struct CUstream_st* cudaStream_t;

namespace attnbook_emu {

constexpr int kWarp = 32;
constexpr int kMaxThreads = 1024;
constexpr size_t kDefaultDynamicSmem = 48 * 1024;   // what a launch may use without
                                                    // opting in
constexpr size_t kMaxDynamicSmem = 227 * 1024;      // the most any current GPU grants
                                                    // (sm_90)
constexpr size_t kPageBytes = 4096;
constexpr size_t kDynamicSmemBytes =                // whole pages: the part a launch
    (kMaxDynamicSmem + kPageBytes - 1) / kPageBytes * kPageBytes;   // lacks is unmapped
// A thread's stack: room for the 512 KiB of local memory a GPU thread may have (ptxas
// refuses more; so does the emulator's build, see compile.py), and for frames of the
// emulator's own.
constexpr size_t kMaxLocalBytes = 512 * 1024;
constexpr size_t kEmulatorFrameBytes = 64 * 1024;
constexpr size_t kStackBytes = kMaxLocalBytes + kEmulatorFrameBytes;
constexpr size_t kGuardBytes = 64 * 1024;           // printf's frame alone can jump
                                                    // a 4 KiB guard

struct KernelError : std::runtime_error { using std::runtime_error::runtime_error; };

// ---- context switching --------------------------------------------------------------
#ifndef ATTNBOOK_EMU_USE_UCONTEXT
// switch: save the callee-saved registers on the current stack, store the stack pointer
// in *save, and resume the context whose stack pointer is `next`. The CPU predicts a
// return from its stack of recent calls, here those of the fiber switching away: right
// when the next fiber resumes where this one waits (the same barrier), wrong for every
// thread when consecutive fibers wait at different barriers (a kernel alternating two
// barriers in a loop). So switch returns only in the first case and jumps otherwise,
// which the CPU predicts from where that jump went last. (The jump leaves the return
// stack one entry out of step: returns out of the resumed fiber's frames mispredict,
// but only after a switch between different barriers, and a kernel's barriers are
// mostly in its own body.) call_on: save the same way, then call fn(arg) on the stack
// whose top is `top`: a new fiber starts with a call, not with a return into a prepared
// stack, which would mispredict. The FP control words (MXCSR, x87) are not switched:
// loading them costs more than all the rest, and kernel code has no way to change them,
// so every fiber runs with its worker's, as a function call would. A few ns, against
// ~350 ns for swapcontext's signal-mask syscall.
extern "C" void attnbook_emu_switch(void** save, void* next);
extern "C" void attnbook_emu_call_on(void** save, char* top, void (*fn)(void*),
                                     void* arg);
// Each in a COMDAT group: an extension's translation units each define them, the
// linker keeps one.
asm(R"(
.macro attnbook_emu_push_callee_saved
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
.endm
.pushsection .text.attnbook_emu_switch,"axG",@progbits,attnbook_emu_switch,comdat
.p2align 4
.globl attnbook_emu_switch
.hidden attnbook_emu_switch
.type attnbook_emu_switch,@function
attnbook_emu_switch:
    attnbook_emu_push_callee_saved
    movq %rsp, (%rdi)
    movq 48(%rsp), %rax
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    cmpq (%rsp), %rax
    jne 1f
    ret
1:  popq %rcx
    jmpq *%rcx
.size attnbook_emu_switch, .-attnbook_emu_switch
.popsection
.pushsection .text.attnbook_emu_call_on,"axG",@progbits,attnbook_emu_call_on,comdat
.p2align 4
.globl attnbook_emu_call_on
.hidden attnbook_emu_call_on
.type attnbook_emu_call_on,@function
attnbook_emu_call_on:
    attnbook_emu_push_callee_saved
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    movq %rcx, %rdi
    callq *%rdx
    ud2
.size attnbook_emu_call_on, .-attnbook_emu_call_on
.popsection
)");

struct Context {
  void* sp = nullptr;
  static void jump(Context& from, Context& to) { attnbook_emu_switch(&from.sp, to.sp); }
  // Run fn(arg), which never returns, as context `to` on a new stack (top 16-byte
  // aligned).
  static void start(Context& from, Context&, char* top, void (*fn)(void*), void* arg) {
    attnbook_emu_call_on(&from.sp, top, fn, arg);
  }
};
#else
// Portable fallback: makecontext/swapcontext (a syscall per switch, so ~30x slower).
struct Context {
  ucontext_t uc;
  static void start(Context& from, Context& to, char* top, void (*fn)(void*),
                    void* arg) {
    getcontext(&to.uc);
    to.uc.uc_stack.ss_sp = top - kStackBytes;
    to.uc.uc_stack.ss_size = kStackBytes;
    to.uc.uc_link = nullptr;
    auto f = reinterpret_cast<uintptr_t>(fn), a = reinterpret_cast<uintptr_t>(arg);
    // makecontext passes int arguments only: pointers travel as 32-bit halves.
    makecontext(&to.uc, reinterpret_cast<void (*)()>(&trampoline), 4, unsigned(f >> 32),
                unsigned(f), unsigned(a >> 32), unsigned(a));
    jump(from, to);
  }
  static void trampoline(unsigned fhi, unsigned flo, unsigned ahi, unsigned alo) {
    auto fn = reinterpret_cast<void (*)(void*)>((uintptr_t(fhi) << 32) | flo);
    fn(reinterpret_cast<void*>((uintptr_t(ahi) << 32) | alo));
  }
  static void jump(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
};
#endif

// ---- memory: one arena per worker ---------------------------------------------------
// An arena, aligned to its size, holds the worker's Runtime at its start, then one slot
// per fiber: a PROT_NONE guard (an overflow faults at once) below the fiber's stack.
// Code on a fiber finds its worker by rounding the stack pointer down (see rt()). The
// stacks' tops are staggered ("coloured"): at one offset in equal slots, the hot top
// lines of all fibers would share a few cache sets and evict each other at each switch.
constexpr size_t kColorBytes = 64 * 1024;
constexpr size_t kSlotBytes = kGuardBytes + kStackBytes + kColorBytes;
constexpr size_t kArenaBytes = size_t(1) << 30;

// Address space for an arena, all PROT_NONE until committed.
inline char* reserve_arena() {
  void* p = mmap(nullptr, 2 * kArenaBytes, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("emulator: no room for fiber stacks");
  char* start = static_cast<char*>(p);
  auto up = (reinterpret_cast<uintptr_t>(p) + kArenaBytes - 1) & ~(kArenaBytes - 1);
  char* arena = reinterpret_cast<char*>(up);
  if (arena > start) munmap(start, arena - start);
  munmap(arena + kArenaBytes, start + kArenaBytes - arena);
  return arena;
}

inline void commit(char* p, size_t bytes) {
  if (mprotect(p, bytes, PROT_READ | PROT_WRITE))
    throw std::runtime_error("emulator: cannot allocate a fiber stack");
}

// ---- threads, warps, blocks ---------------------------------------------------------
// Fresh: not started yet (it has no fiber until it needs one). Fresh sorts before
// Runnable so that "may run now" is one comparison.
enum class State : uint8_t { Fresh, Runnable, AtBarrier, AtWarp, AtMbarrier, Done };

// A warp collective: every participating lane deposits a pointer to its own data; the
// last to arrive runs `fn` over all of them (reading inputs, writing each lane's
// outputs), then the group is released. Because each lane's data lives on its own
// stack, which is not touched while it waits, no value can be overwritten before its
// owner reads it.
using WarpFn = void (*)(void* const* lane_data, uint32_t group);

struct Warp {
  uint32_t lanes = 0;      // the lanes that exist (a block's last warp may be partial)
  uint32_t arrived = 0;
  uint32_t exited = 0;
  uint32_t mask[kWarp];
  WarpFn fn[kWarp];
  void* data[kWarp];
  int line[kWarp];
};

struct Thread {
  Context ctx;
  uint3 tid;
  int linear = 0;
  State state = State::Fresh;
  bool pred = false;       // at a barrier: its __syncthreads_count/_and/_or argument
  int barrier_line = 0;
};

enum class Order { Forward, Reverse, Shuffle };

// splitmix64: a shuffle needs speed and independence between blocks, not crypto.
struct Rng {
  uint64_t s = 0;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint32_t below(uint32_t n) { return uint32_t((next() >> 32) * n >> 32); }
};

// One launch, shared by every worker that runs its blocks.
struct Job {
  const char* kernel = "";
  dim3 grid, block;
  int nthreads = 0;
  size_t smem = 0;
  void (*fiber)(void*) = nullptr;   // fiber_main<the kernel's closure>
  const void* closure = nullptr;
  const void* params = nullptr;     // the kernel's arguments, which its threads copy
  size_t params_bytes = 0;
  Order order = Order::Forward;
  uint64_t seed = 0;
  uint64_t nblocks = 0;
  size_t stack = kMaxLocalBytes;   // cudaLimitStackSize when the launch was made
  std::atomic<uint64_t> next{0};   // blocks are taken in increasing linear order
  // The lowest failing block and its error. Workers start no block above it, and every
  // block below it was taken before it failed, so the error reported is the one a
  // single worker, running the blocks in order, would have stopped at.
  std::atomic<uint64_t> failed_block{UINT64_MAX};
  std::mutex m;
  std::string error;
  // Hang guard: the watchdog sets `cancel` (kTimeout or kInterrupt); workers then take
  // no new block, and a fiber still running is abandoned (see on_cancel_signal).
  std::atomic<int> cancel{0};
  std::atomic<uint64_t> finished{0};        // blocks run to their end
  // passes begun (threads released by a barrier) and blocks finished, by all workers;
  // the watchdog notes when it last changed
  std::atomic<uint64_t> progress{0};
  uint64_t progress_seen = 0;
  int64_t budget_ns = 0;                    // 0: no time budget
  int64_t stall_ns = 0;                     // 0: no stall guard
  std::chrono::steady_clock::time_point start, progressed;
  // The OS threads running this job, for the watchdog to signal; an entry is set once
  // the thread's thread-locals exist (the signal handler reads them).
  std::unique_ptr<std::atomic<pthread_t>[]> tids;
  int max_tids = 0;
  std::atomic<int> ntids{0};

  void fail(uint64_t b, const std::string& msg) {
    std::lock_guard<std::mutex> lock(m);
    if (b < failed_block.load()) {
      failed_block = b;
      error = msg;
    }
  }
};

// What one worker (an OS thread) needs to run blocks: the running block's threads and
// their fibers, its shared memory, and a copy of the launch's coordinates.
struct Runtime {
  const char* kernel = "";
  dim3 grid, block;
  uint3 block_idx{0, 0, 0};
  int nthreads = 0;
  uint64_t block_epoch = 0;
  size_t static_smem_bytes = 0;   // static __shared__ bytes this block has declared
  void (*fiber)(void*) = nullptr;   // fiber_main<the kernel's closure>
  const void* closure = nullptr;
  Thread* cur = nullptr;
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  int stacks = 0;           // fibers whose stack slot is committed
  // Bytes of each committed stack open below its lowest top (at least the launch's
  // cudaLimitStackSize and the emulator's own frames); the rest of the stack is
  // PROT_NONE, so a deeper thread faults as a stack overflow.
  size_t stack_open = kStackBytes;
  Context scheduler;       // the worker's own stack, where a block starts and ends
  std::string error;       // set by the fiber that failed
  // The pass in progress: threads run in order[0..], pos is the one running now.
  Order mode = Order::Forward;
  Rng rng;
  std::vector<Thread*> order;
  int pos = 0;
  int done = 0;
  int arrived = 0;          // at the barrier being gathered
  int sync_result = 0;      // of the last barrier released
  const std::atomic<int>* cancel = nullptr;   // the current job's
  std::atomic<uint64_t>* progress = nullptr;  // the current job's
  volatile sig_atomic_t stopped = 0;   // a fiber was abandoned by the hang guard
  // Kernel code is running (not the emulator's own): what the checked build's memory
  // hooks look at (emu_checked.h); unused otherwise.
  bool in_kernel = false;
  struct CheckState* check = nullptr;   // the checked build's per-worker state
  // A fault of kernel code (on_fault), read once the fiber is abandoned.
  struct Fault { int signo, code, thread; uintptr_t addr, pc; bool write; } fault{};
  // Where on_fault runs: a fiber that overflowed its stack has none left.
  alignas(16) char signal_stack[64 * 1024];
  size_t smem_open = kDynamicSmemBytes;
  size_t smem_bytes = 0;   // what the launch asked for
  struct StaticShared { void* addr; size_t bytes; uint64_t epoch; };
  std::vector<StaticShared> static_smem;   // epoch: the block that last poisoned it
  // Dynamic shared memory: this worker's, reused by each block it runs, last. Only the
  // pages of the bytes the launch asked for are accessible (smem_open of them, whole
  // pages), and neither the page below it nor kSmemGuardAbove bytes above it ever are,
  // so that a kernel using more, or less than index 0, faults as on a GPU.
  alignas(kPageBytes) unsigned char smem_below[kPageBytes];
  alignas(kPageBytes) unsigned char dynamic_smem[kDynamicSmemBytes];
};

// Emulator code called from kernel code (barriers, collectives) reads other threads'
// stacks and its own state: the checked build must not take those for the kernel's.
// A plain build keeps no flag (a store or two per barrier is not free: a fiber switch
// costs a few ns).
#ifdef ATTNBOOK_CHECKED
constexpr bool kChecked = true;
struct EmulatorCode {
  bool& flag;
  bool was;
  explicit EmulatorCode(Runtime& r) : flag(r.in_kernel), was(r.in_kernel) {
    flag = false;
  }
  ~EmulatorCode() { flag = was; }
};
#else
constexpr bool kChecked = false;
struct EmulatorCode {
  explicit EmulatorCode(Runtime&) {}
};
#endif

// The runtime of the worker running the calling fiber, found from the stack pointer: a
// thread_local in a dlopen'ed library costs a call per access, and kernels ask for
// threadIdx often. Only code on a fiber may call it. Fibers never move between workers
// (a block runs start to end on one): what rt() returned stays right across a switch.
inline Runtime& rt() {
  char here;
  auto sp = reinterpret_cast<uintptr_t>(&here);
  asm("" : "+r"(sp));   // the Runtime is not part of `here`: hide where sp came from
  return *reinterpret_cast<Runtime*>(sp & ~uintptr_t(kArenaBytes - 1));
}

// The Runtime fills the arena's first slots; fiber i's stack is in the i-th slot after.
constexpr size_t kSmemGuardAbove = size_t(16) << 20;   // address space, never mapped
constexpr size_t kRuntimeSlots =
    (sizeof(Runtime) + kSmemGuardAbove + kSlotBytes - 1) / kSlotBytes;
static_assert(sizeof(Runtime) % kPageBytes == 0, "the guard above starts on a page");
static_assert((kMaxThreads + kRuntimeSlots) * kSlotBytes <= kArenaBytes, "small arena");
inline char* slot(Runtime& r, int fiber) {
  return reinterpret_cast<char*>(&r) + (fiber + kRuntimeSlots) * kSlotBytes;
}
inline char* stack_top(Runtime& r, int fiber) {
  return slot(r, fiber) + kSlotBytes - size_t(fiber) * 1088 % kColorBytes;
}

// Each worker's arena, by the arena's number: whose fiber a stack pointer belongs to,
// found without a thread_local (the checked build's hooks ask at every access, the
// fault handler cannot use one). Lock-free, so a signal handler may read it.
constexpr int kArenaTable = 4096;
inline Runtime* arenas[kArenaTable];
__attribute__((no_sanitize("thread"), always_inline)) inline Runtime* arena_of(
    uintptr_t sp) {
  uintptr_t base = sp & ~uintptr_t(kArenaBytes - 1);
  Runtime* r = __atomic_load_n(&arenas[(base / kArenaBytes) % kArenaTable],
                               __ATOMIC_ACQUIRE);
  return reinterpret_cast<uintptr_t>(r) == base ? r : nullptr;
}

// This OS thread's Runtime, or nullptr (read by the hang guard's signal handler).
inline Runtime*& worker_runtime() {
  static thread_local Runtime* r = nullptr;
  return r;
}

inline std::string where(const Thread& t) {
  const Runtime& r = rt();
  char buf[256];
  std::snprintf(buf, sizeof buf, "kernel '%s', block (%u,%u,%u), thread (%u,%u,%u)",
                r.kernel, r.block_idx.x, r.block_idx.y, r.block_idx.z, t.tid.x, t.tid.y,
                t.tid.z);
  return buf;
}

[[noreturn]] inline void fail(const std::string& msg) { throw KernelError(msg); }

// A failure of the whole block, found by the scheduler: its message is complete
// (kernel, block and, where one is to blame, thread), so it is reported as it is.
struct BlockError : KernelError { using KernelError::KernelError; };

}  // namespace attnbook_emu
