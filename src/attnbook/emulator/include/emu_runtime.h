// The CPU emulator's runtime: each thread of a block is a fiber with its own stack; a
// block's fibers run cooperatively, one at a time, switching only at synchronisation
// points (__syncthreads, warp collectives). Between two such points every thread runs
// to the next one before the following thread starts, in an order chosen per phase
// (forward, reverse or a shuffle seeded by the launch's seed and the block's index), so
// a missing barrier changes the answer under some order. Blocks are independent:
// workers, one OS thread per core by default (ATTNBOOK_EMU_WORKERS), each run one block
// at a time, so a block's schedule does not depend on how many workers there are.
// Included once per extension, by cuda_emulator.h (through emu_builtins.h); the hooks
// it calls at launches, blocks, barriers and accesses are emu_hooks.h's.
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
.pushsection .text.attnbook_emu_switch,"axG",@progbits,attnbook_emu_switch,comdat
.p2align 4
.globl attnbook_emu_switch
.hidden attnbook_emu_switch
.type attnbook_emu_switch,@function
attnbook_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
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
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
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
enum class State : uint8_t { Fresh, Runnable, AtBarrier, AtWarp, Done };

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
  int64_t budget_ns = 0;                    // 0: no time budget
  std::chrono::steady_clock::time_point start;
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
  volatile sig_atomic_t stopped = 0;   // a fiber was abandoned by the hang guard
  // Kernel code is running (not the emulator's own): what the checked build's memory
  // hooks look at (emu_checked.h); unused otherwise.
  bool in_kernel = false;
  struct CheckState* check = nullptr;   // the checked build's per-worker state
  // A fault of kernel code (on_fault), read once the fiber is abandoned.
  struct Fault { int signo, code, thread; uintptr_t addr, pc; bool write; } fault{};
  // Where on_fault runs: a fiber that overflowed its stack has none left.
  alignas(16) char signal_stack[64 * 1024];
  // Dynamic shared memory: this worker's, reused by each block it runs. Only the pages
  // of the bytes the launch asked for are accessible (smem_open of them, whole pages),
  // so that a kernel using more faults as on a GPU.
  alignas(kPageBytes) unsigned char dynamic_smem[kDynamicSmemBytes];
  size_t smem_open = kDynamicSmemBytes;
  size_t smem_bytes = 0;   // what the launch asked for
  struct StaticShared { void* addr; size_t bytes; uint64_t epoch; };
  std::vector<StaticShared> static_smem;   // epoch: the block that last poisoned it
};

// The checked build's hooks (emu_checked.h); empty in a plain build (emu_hooks.h).
inline void on_launch(const struct Job& job);
inline void on_block_start(Runtime& r, const struct Job& job);
inline void on_block_end(Runtime& r);
inline void on_barrier(Runtime& r);
inline void on_warp_sync(Runtime& r, int warp, uint32_t group);
inline void on_named_barrier(Runtime& r, const std::vector<int>& threads);
inline void leave_kernel();
inline void note_barrier();
inline void note_access(const void* p, size_t bytes, bool write);
inline void on_static_shared(Runtime& r, void* p, size_t bytes);

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
constexpr size_t kRuntimeSlots = (sizeof(Runtime) + kSlotBytes - 1) / kSlotBytes;
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

inline void use_signal_stack(Runtime& r);
inline void install_fault_handlers();

// This OS thread's Runtime, or nullptr (read by the hang guard's signal handler).
inline Runtime*& worker_runtime() {
  static thread_local Runtime* r = nullptr;
  return r;
}

inline Runtime& own_runtime() {
  Runtime*& r = worker_runtime();
  if (!r) {   // never destroyed: an abandoned fiber may still point into it
    char* a = reserve_arena();
    commit(a, kRuntimeSlots * kSlotBytes);
    r = new (a) Runtime();
    auto base = reinterpret_cast<uintptr_t>(a);
    __atomic_store_n(&arenas[(base / kArenaBytes) % kArenaTable], r, __ATOMIC_RELEASE);
    use_signal_stack(*r);
  }
  return *r;
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

// ---- scheduling ---------------------------------------------------------------------
// Between two synchronisation points each thread runs alone until it blocks or exits,
// then switches straight to the next thread of the pass that may run. A pass visits the
// threads in the block's order; threads freed during a pass (by a warp collective) run
// in it if the pass has not gone by them yet, in the next one otherwise, exactly as
// when a scheduler loop ran every pass. The last thread to arrive at a complete barrier
// releases it. A shuffle draws a new order for every pass.
inline void new_pass(Runtime& r) {
  r.pos = -1;
  if (r.mode == Order::Shuffle)
    for (int i = r.nthreads - 1; i > 0; --i)
      std::swap(r.order[i], r.order[r.rng.below(i + 1)]);
}

inline Thread* scan(Runtime& r) {
  while (++r.pos < r.nthreads) {
    Thread* t = r.order[r.pos];
    if (t->state <= State::Runnable) return t;
  }
  return nullptr;
}

// Called when no thread can run and some have not finished: say why the block is stuck.
[[noreturn]] inline void diagnose(Runtime& r) {
  int waiting = 0, at_warp = 0, line = -1;
  const Thread* exited = nullptr;
  const Thread* other_line = nullptr;
  for (auto& t : r.threads) {
    if (t.state == State::AtBarrier) {
      if (line < 0) line = t.barrier_line;
      else if (t.barrier_line != line && !other_line) other_line = &t;
      ++waiting;
    } else if (t.state == State::Done) {
      if (!exited) exited = &t;
    } else if (t.state == State::AtWarp) {
      ++at_warp;
    }
  }
  char block[160], buf[256];
  std::snprintf(block, sizeof block, "kernel '%s', block (%u,%u,%u): ", r.kernel,
                r.block_idx.x, r.block_idx.y, r.block_idx.z);
  if (waiting == 0) {
    std::snprintf(buf, sizeof buf,
                  "deadlock: %d threads wait in warp collectives that can never "
                  "complete (a lane of their mask exited or never arrives)", at_warp);
    throw BlockError(block + std::string(buf));
  }
  if (other_line) {
    std::snprintf(buf, sizeof buf,
                  "divergent barrier: threads wait at __syncthreads on line %d and on "
                  "line %d", line, other_line->barrier_line);
    throw BlockError(where(*other_line) + ": " + buf);
  }
  if (at_warp > 0) {
    std::snprintf(buf, sizeof buf,
                  "deadlock: %d threads wait at __syncthreads (line %d) while %d wait "
                  "in a warp collective", waiting, line, at_warp);
    throw BlockError(block + std::string(buf));
  }
  // Every thread waits on one line, yet the barrier was not released: some have exited.
  std::snprintf(buf, sizeof buf,
                "divergent barrier: %d threads wait at __syncthreads on line %d but "
                "this thread has exited", waiting, line);
  throw BlockError(where(*exited) + ": " + buf);
}

// The next thread to run: the rest of this pass, else a new pass; nullptr when every
// thread has finished. The caller has just run, so an empty new pass means a stuck
// block: nobody can run, yet not everybody has finished.
inline Thread* pick(Runtime& r) {
  if (Thread* t = scan(r)) return t;
  if (r.done == r.nthreads) return nullptr;
  new_pass(r);
  if (Thread* t = scan(r)) return t;
  diagnose(r);
}

// Save the running context in `from` and run `next`: resume it, or start it afresh.
inline void resume(Runtime& r, Context& from, Thread* next) {
  r.cur = next;
  if (next->state != State::Fresh) return Context::jump(from, next->ctx);
  next->state = State::Runnable;
  Context::start(from, next->ctx, stack_top(r, next->linear), r.fiber, next);
}

// Run `next` in place of `self`, which has just blocked; returns once `self` resumes.
inline void switch_to(Runtime& r, Thread* self, Thread* next) {
  if (next != self) resume(r, self->ctx, next);
}

// A fiber: runs thread `arg`, then any that have not started when it finishes. It calls
// the kernel itself (Closure is inlined here), not through a wrapper: a frame less.
template <class Closure>
void fiber_main(void* arg) {
  Runtime& r = rt();
  // A copy on this stack, which the checked build lets kernel code read (it is the
  // launching thread's otherwise).
  const Closure kernel = *static_cast<const Closure*>(r.closure);
  Thread* self = static_cast<Thread*>(arg);
  Thread* next = nullptr;
  try {
    for (;;) {
      if constexpr (kChecked) r.in_kernel = true;
      kernel();
      if constexpr (kChecked) r.in_kernel = false;
      self->state = State::Done;
      ++r.done;
      r.warps[self->linear / kWarp].exited |= 1u << (self->linear % kWarp);
      next = pick(r);
      // A thread that has not started owns nothing yet: rather than start it on a stack
      // of its own, run it here, on the stack of the thread that just finished (whose
      // frames are dead, and whose warp-collective data nobody reads any more: a
      // collective is complete before its lanes go on). A kernel without
      // synchronisation thus runs its threads as a plain loop.
      if (!next || next->state != State::Fresh) break;
      next->state = State::Runnable;
      r.cur = self = next;
    }
  } catch (const BlockError& e) {
    r.in_kernel = false;
    r.error = e.what();
    next = nullptr;
  } catch (const std::exception& e) {
    r.in_kernel = false;
    r.error = where(*self) + ": " + e.what();
    next = nullptr;
  } catch (...) {
    r.in_kernel = false;
    r.error = where(*self) + ": unknown exception";
    next = nullptr;
  }
  // This fiber is finished (or the block failed): it is never resumed.
  if (next) resume(r, self->ctx, next);
  else Context::jump(self->ctx, r.scheduler);
  __builtin_unreachable();
}

// ---- barriers -----------------------------------------------------------------------
// Wait until every thread of the block arrives; returns how many passed a non-zero
// `pred` (what __syncthreads_count/_and/_or report). As on a GPU (bar.sync 0), every
// __syncthreads is the same barrier: threads waiting on different lines release it
// together (a warp-specialised kernel does this); a thread that exits first is an
// error.
inline int syncthreads(int line, int pred = 0) {
  Runtime& r = rt();
  EmulatorCode guard(r);
  Thread* self = r.cur;
  self->state = State::AtBarrier;
  self->pred = pred != 0;
  self->barrier_line = line;
  Thread* next;
  if (++r.arrived < r.nthreads) {
    next = pick(r);
  } else {
    // One result for the block: no thread can reach the next barrier, let alone
    // complete it, before every thread has resumed from this one and read it.
    int count = 0;
    for (auto& t : r.threads) {
      t.state = State::Runnable;
      count += t.pred;
    }
    r.sync_result = count;
    r.arrived = 0;
    on_barrier(r);
    new_pass(r);
    next = scan(r);
  }
  switch_to(r, self, next);
  return r.sync_result;
}

// ---- warp collectives ---------------------------------------------------------------
inline uint32_t existing_lanes(int warp) { return rt().warps[warp].lanes; }

inline void warp_collective(uint32_t mask, int line, void* data, WarpFn fn) {
  Runtime& r = rt();
  EmulatorCode guard(r);
  Thread* self = r.cur;
  int w = self->linear / kWarp, lane = self->linear % kWarp;
  Warp& warp = r.warps[w];
  uint32_t group = mask & warp.lanes;
  if (!(group & (1u << lane))) {
    char buf[128];
    std::snprintf(buf, sizeof buf,
                  "warp collective on line %d: mask 0x%08x excludes the calling "
                  "lane %d",
                  line, mask, lane);
    fail(buf);
  }
  warp.mask[lane] = mask;
  warp.fn[lane] = fn;
  warp.data[lane] = data;
  warp.line[lane] = line;
  warp.arrived |= 1u << lane;
  if (uint32_t gone = group & warp.exited) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "warp collective on line %d: lane %d of mask 0x%08x has exited", line,
                  __builtin_ctz(gone), mask);
    fail(buf);
  }
  if ((warp.arrived & group) != group) {
    self->state = State::AtWarp;
    switch_to(r, self, pick(r));
    return;
  }
  for (int l = 0; l < kWarp; ++l) {
    if (!(group & (1u << l))) continue;
    if (warp.mask[l] != mask || warp.fn[l] != fn) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "mismatched warp collectives: lane %d (line %d, mask 0x%08x) "
                    "and lane %d (line %d, mask 0x%08x)",
                    lane, line, mask, l, warp.line[l], warp.mask[l]);
      fail(buf);
    }
  }
  fn(warp.data + 0, group);   // lane_data indexed by lane
  warp.arrived &= ~group;
  on_warp_sync(r, w, group);
  for (int l = 0; l < kWarp; ++l)
    if ((group & (1u << l)) && l != lane)
      r.threads[w * kWarp + l].state = State::Runnable;
}

// ---- hang guard ---------------------------------------------------------------------
// A fiber that never reaches a synchronisation point (an endless loop, a spin on a flag
// that another warp of the block would set: fibers do not preempt each other) would
// hang the launch, and the notebook with it. A watchdog thread per extension watches
// each launch: past its time budget (ATTNBOOK_EMU_TIMEOUT seconds, 60 by default, 0
// for none), or once SIGINT arrived during the launch, it sets job.cancel and then
// signals every worker of the launch every millisecond (cancel_signal(), through
// pthread_sigqueue, whose value names the handler of this extension). The handler
// abandons the running fiber by switching to the worker's scheduler context, as if the
// fiber had finished, but only where that is safe: the fiber is running (its stack
// pointer lies in the worker's arena) and the interrupted instruction belongs to this
// extension (kernel code or the emulator's own), never libc or libstdc++, which may
// hold a lock (malloc's, stdio's). A fiber stuck in a library call (a printf in a
// loop) is caught once a signal finds it back in kernel code (a loop that spends
// nearly all its time printing to a file: up to tens of seconds). The abandoned
// fiber's frames are never unwound: destructors of its locals do not run (kernel code
// has none that matter). Without x86-64 the handler does nothing: only blocks not yet
// started are cancelled.
constexpr int64_t kDefaultBudgetNs = int64_t(60) * 1000000000;
constexpr int kTimeout = 1, kInterrupt = 2;
inline int cancel_signal() { return SIGRTMIN + 5; }

// The executable segments of this extension, found once outside any signal handler.
struct CodeRanges {
  uintptr_t lo[8], hi[8];
  int n = 0;
};
inline CodeRanges& code_ranges() {
  static CodeRanges c;
  return c;
}
inline void find_code_ranges() {
  CodeRanges& c = code_ranges();
  if (c.n) return;
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&find_code_ranges), &info)) return;
  struct Ctx { void* base; CodeRanges* c; } ctx{info.dli_fbase, &c};
  dl_iterate_phdr([](dl_phdr_info* i, size_t, void* p) -> int {
    auto* x = static_cast<Ctx*>(p);
    for (int k = 0; k < i->dlpi_phnum; ++k) {
      const auto& h = i->dlpi_phdr[k];
      if (h.p_type != PT_LOAD || !(h.p_flags & PF_X)) continue;
      if (x->base != reinterpret_cast<void*>(i->dlpi_addr)) return 0;
      uintptr_t lo = i->dlpi_addr + h.p_vaddr;
      if (x->c->n < 8) {
        x->c->lo[x->c->n] = lo;
        x->c->hi[x->c->n++] = lo + h.p_memsz;
      }
    }
    return 0;
  }, &ctx);
}
inline bool own_code(uintptr_t pc) {
  const CodeRanges& c = code_ranges();
  for (int i = 0; i < c.n; ++i)
    if (c.lo[i] <= pc && pc < c.hi[i]) return true;
  return false;
}

// Called by the signal handler (any extension's: it dispatches on the signal's value).
// Uninstrumented in the checked build: it runs on a fiber, in the middle of kernel
// code, where its reads would count as the kernel's (until the guard below).
__attribute__((no_sanitize("thread"))) inline void on_cancel_signal(void* ucv) {
#if defined(__x86_64__) && !defined(ATTNBOOK_EMU_USE_UCONTEXT)
  Runtime* r = worker_runtime();
  if (!r) return;
  EmulatorCode guard(*r);   // it may interrupt kernel code
  if (!r->cur || !r->cancel || !r->cancel->load(std::memory_order_relaxed)) return;
  auto* uc = static_cast<ucontext_t*>(ucv);
  auto pc = uintptr_t(uc->uc_mcontext.gregs[REG_RIP]);
  auto sp = uintptr_t(uc->uc_mcontext.gregs[REG_RSP]);
  if ((sp & ~uintptr_t(kArenaBytes - 1)) != reinterpret_cast<uintptr_t>(r)) return;
  if (!own_code(pc)) return;
  Thread* self = r->cur;
  r->stopped = 1;
  r->cur = nullptr;
  // SA_NODEFER: leaving the handler this way leaves the signal unblocked.
  Context::jump(self->ctx, r->scheduler);
#else
  (void)ucv;
#endif
}

extern "C" inline void attnbook_emu_dispatch(int, siginfo_t* si, void* uc) {
  if (si->si_code == SI_QUEUE && si->si_value.sival_ptr)
    reinterpret_cast<void (*)(void*)>(si->si_value.sival_ptr)(uc);
}

inline std::atomic<int>& sigint_seen() {
  static std::atomic<int> seen{0};
  return seen;
}
extern "C" inline void attnbook_emu_on_sigint(int) {
  sigint_seen().store(1);
}

// What the stopped block had left: how many threads had not finished, and a few.
inline std::string unfinished(Runtime& r) {
  int left = 0;
  std::string some;
  for (auto& t : r.threads) {
    if (t.state == State::Done) continue;
    if (++left <= 4) {
      char buf[48];
      std::snprintf(buf, sizeof buf, "%s(%u,%u,%u)", left > 1 ? ", " : "", t.tid.x,
                    t.tid.y, t.tid.z);
      some += buf;
    }
  }
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "block (%u,%u,%u): %d of %d threads had not finished, threads ",
                r.block_idx.x, r.block_idx.y, r.block_idx.z, left, r.nthreads);
  return buf + some + (left > 4 ? ", ..." : "");
}

struct Watch {
  std::mutex m;
  std::condition_variable cv;
  Job* job = nullptr;        // the launch being watched
  bool started = false;
  bool asleep = false;       // waiting for a notify (else it looks every 20 ms)
  pid_t pid = getpid();
};

// Between launches the watchdog keeps looking every 20 ms for a second before it
// sleeps until notified: a notify (a system call) per launch would cost launches in a
// loop a few microseconds each.
inline void watchdog_main(Watch* w) {
  std::unique_lock<std::mutex> lock(w->m);
  int idle = 0;
  for (;;) {
    if (!w->job && idle >= 50) {
      w->asleep = true;
      w->cv.wait(lock);
      w->asleep = false;
      idle = 0;
      continue;
    }
    Job* job = w->job;
    // Once cancelled, look (and signal) every millisecond: a fiber that spends most
    // of its time in a library call (printf in a loop) is sooner caught in its own
    // code.
    bool cancelled = job && job->cancel.load();
    w->cv.wait_for(lock, std::chrono::milliseconds(cancelled ? 1 : 20));
    if (!job) {
      ++idle;
      continue;
    }
    idle = 0;
    if (w->job != job) continue;   // that launch is over (job may be gone)
    if (!job->cancel.load()) {
      int why = 0;
      if (sigint_seen().load()) why = kInterrupt;
      else if (job->budget_ns > 0 &&
               std::chrono::steady_clock::now() - job->start >
                   std::chrono::nanoseconds(job->budget_ns))
        why = kTimeout;
      if (!why) continue;
      job->cancel.store(why);
    }
    // Until the launch ends: a fiber in a library call is caught later.
    sigval v;
    v.sival_ptr = reinterpret_cast<void*>(&on_cancel_signal);
    int n = std::min(job->ntids.load(), job->max_tids);
    for (int i = 0; i < n; ++i)
      if (pthread_t t = job->tids[i].load()) pthread_sigqueue(t, cancel_signal(), v);
  }
}

inline Watch& watch() {
  static Watch* w = new Watch();   // never destroyed, like the pool
  // A forked child has no watchdog thread: it starts one of its own.
  if (w->pid != getpid()) w = new Watch();
  return *w;
}

inline int64_t budget_from_env() {
  const char* s = std::getenv("ATTNBOOK_EMU_TIMEOUT");
  if (!s || !*s) return kDefaultBudgetNs;
  char* end;
  double sec = std::strtod(s, &end);
  if (*end || !(sec >= 0))
    throw std::invalid_argument(
        std::string("ATTNBOOK_EMU_TIMEOUT must be a number of seconds >= 0, got '") +
        s + "'");
  return sec > 1e9 ? 0 : int64_t(sec * 1e9);
}

// Watches one launch from construction to destruction; on the main thread it also
// turns SIGINT into a cancel (Python's own handler would only act once the launch
// returned), and hands a SIGINT that came too late to cancel anything back to Python.
struct Watched {
  Job& job;
  bool main_thread = getpid() == pid_t(syscall(SYS_gettid));
  struct sigaction old_int {};

  explicit Watched(Job& j) : job(j) {
    Watch& w = watch();
    std::lock_guard<std::mutex> lock(w.m);
    if (!w.started) {
      find_code_ranges();
      struct sigaction sa {};
      sa.sa_sigaction = &attnbook_emu_dispatch;
      sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
      sigemptyset(&sa.sa_mask);
      sigaction(cancel_signal(), &sa, nullptr);
      install_fault_handlers();
      std::thread(watchdog_main, &w).detach();
      w.started = true;
    }
    if (main_thread) {
      sigint_seen().store(0);
      struct sigaction sa {};
      sa.sa_handler = &attnbook_emu_on_sigint;
      sa.sa_flags = SA_RESTART;
      sigemptyset(&sa.sa_mask);
      sigaction(SIGINT, &sa, &old_int);
    }
    w.job = &job;
    if (w.asleep) w.cv.notify_one();
  }
  ~Watched() {
    Watch& w = watch();
    {
      std::lock_guard<std::mutex> lock(w.m);
      w.job = nullptr;
    }
    if (main_thread) {
      sigaction(SIGINT, &old_int, nullptr);
      if (sigint_seen().load() && job.cancel.load() != kInterrupt) raise(SIGINT);
    }
  }
};

// The exception of a cancelled launch: what was left, and why.
inline std::string cancelled_message(Job& job) {
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                             job.start).count();
  char buf[256];
  if (job.cancel.load() == kTimeout)
    std::snprintf(buf, sizeof buf, "kernel '%s' ran past its time budget of %.3g s "
                  "(ATTNBOOK_EMU_TIMEOUT, or attnbook.time_budget) and was stopped "
                  "after %.3g s", job.kernel, job.budget_ns / 1e9, sec);
  else
    std::snprintf(buf, sizeof buf, "kernel '%s' was interrupted after %.3g s",
                  job.kernel, sec);
  std::string msg = buf;
  uint64_t done = job.finished.load();
  std::snprintf(buf, sizeof buf, "; %llu of %llu blocks had not finished",
                (unsigned long long)(job.nblocks - done),
                (unsigned long long)job.nblocks);
  msg += buf;
  if (!job.error.empty()) msg += "; " + job.error;
  return msg;
}

// ---- faults -------------------------------------------------------------------------
// A wild access, a stack overflow or a division by zero in kernel code raises
// SIGSEGV, SIGBUS, SIGFPE or SIGILL on the worker running it; on a GPU it is a CUDA
// error and the process goes on, so here too. The handler runs on the worker's own
// signal stack (an overflowing fiber has no stack left) and asks which stack the
// fault interrupted: a fiber stack in one of this extension's arenas means a thread of
// one of its blocks, which is abandoned as the hang guard abandons one (its frames
// never unwound), with what happened left in Runtime::fault for run_block to report.
// Any other fault (the emulator's own scheduler, Python, another extension's workers)
// goes on to the handler that was installed before, down to the default: a crash, as
// without the emulator.
// A fault inside a library call made by kernel code (memcpy, printf given a bad
// pointer) is caught too; a lock that call held (stdout's) stays held.
constexpr int kFaultSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
inline struct sigaction* previous_fault_actions() {
  static struct sigaction old[4];
  return old;
}

inline void use_signal_stack(Runtime& r) {
  stack_t old;
  if (sigaltstack(nullptr, &old) == 0 && !(old.ss_flags & SS_DISABLE)) return;
  stack_t ss{};
  ss.ss_sp = r.signal_stack;
  ss.ss_size = sizeof r.signal_stack;
  sigaltstack(&ss, nullptr);
}

// Uninstrumented in the checked build, like on_cancel_signal.
__attribute__((no_sanitize("thread"))) inline void on_fault(int sig, siginfo_t* si,
                                                           void* ucv) {
#if defined(__x86_64__) && !defined(ATTNBOOK_EMU_USE_UCONTEXT)
  auto* uc = static_cast<ucontext_t*>(ucv);
  auto sp = uintptr_t(uc->uc_mcontext.gregs[REG_RSP]);
  Runtime* r = arena_of(sp);
  uintptr_t fibers = reinterpret_cast<uintptr_t>(r) + kRuntimeSlots * kSlotBytes;
  if (r && r->cur && sp >= fibers) {
    Thread* self = r->cur;
    // The page fault's error code: bit 1 set for a write.
    bool write = sig == SIGSEGV && (uc->uc_mcontext.gregs[REG_ERR] & 2);
    r->fault = {sig, si->si_code, self->linear, uintptr_t(si->si_addr),
                uintptr_t(uc->uc_mcontext.gregs[REG_RIP]), write};
    r->cur = nullptr;
    // SA_NODEFER: leaving the handler this way leaves the signal unblocked; the
    // signal stack is free again once the stack pointer has left it.
    Context::jump(self->ctx, r->scheduler);
  }
#endif
  int i = 0;
  while (kFaultSignals[i] != sig) ++i;
  const struct sigaction& old = previous_fault_actions()[i];
  if (old.sa_flags & SA_SIGINFO) {
    old.sa_sigaction(sig, si, ucv);
  } else if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) {
    old.sa_handler(sig);
  } else {   // the faulting instruction runs again, and kills the process
    signal(sig, SIG_DFL);
  }
}

inline void install_fault_handlers() {
  struct sigaction sa {};
  sa.sa_sigaction = &on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 4; ++i)
    sigaction(kFaultSignals[i], &sa, &previous_fault_actions()[i]);
}

// Where a faulting address lies, where another library knows more than the runtime:
// the guard pages of a call's tensors (emulator/guard.cpp, which Python hands to each
// extension it guards) write ", 16 bytes past the end of a 4000-byte tensor" into
// `out` (a C string of at most `n` bytes), or nothing.
using DescribeAddress = void (*)(uintptr_t addr, char* out, size_t n);
inline DescribeAddress describe_address = nullptr;

// What the fault of a block's thread was, for the exception: which thread, what it
// did, where (@pc(offset in this library), which Python turns into file:line).
inline std::string fault_message(Runtime& r) {
  const Runtime::Fault& f = r.fault;
  const Thread& t = r.threads[f.thread];
  char buf[512];
  std::snprintf(buf, sizeof buf, "kernel '%s', block (%u,%u,%u), thread (%u,%u,%u): ",
                r.kernel, r.block_idx.x, r.block_idx.y, r.block_idx.z, t.tid.x, t.tid.y,
                t.tid.z);
  std::string msg = buf;
  auto dyn = reinterpret_cast<uintptr_t>(r.dynamic_smem);
  uintptr_t fibers = reinterpret_cast<uintptr_t>(&r) + kRuntimeSlots * kSlotBytes;
  bool memory = true;
  if (f.signo == SIGFPE) {
    memory = false;
    msg += f.code == FPE_INTDIV ? "integer division by zero" : "arithmetic exception";
    msg += " (SIGFPE; a GPU gives an unspecified value instead)";
  } else if (f.signo == SIGILL) {
    memory = false;
    msg += "illegal instruction (SIGILL)";
  } else if (f.addr >= dyn && f.addr < dyn + kDynamicSmemBytes) {
    std::snprintf(buf, sizeof buf,
                  "out-of-bounds shared memory access: byte %zu of dynamic shared "
                  "memory, of which the launch gave the block %zu bytes (SIGSEGV)",
                  size_t(f.addr - dyn), r.smem_bytes);
    msg += buf;
  } else if (f.addr >= fibers && f.addr - fibers < kArenaBytes - kRuntimeSlots *
                                                        kSlotBytes &&
             (f.addr - fibers) % kSlotBytes <
                 kGuardBytes + kStackBytes - r.stack_open) {
    memory = false;
    std::snprintf(buf, sizeof buf,
                  "stack overflow: the thread used more than its %zu KiB of stack "
                  "(cudaLimitStackSize in whole pages, and %zu KiB for the emulator's "
                  "own frames; recursion too deep, or local arrays too large) "
                  "(SIGSEGV)", r.stack_open / 1024, kEmulatorFrameBytes / 1024);
    msg += buf;
  } else if (f.addr == 0 && f.code == SI_KERNEL) {
    msg += "illegal memory access: an address outside the CPU's address space "
           "(SIGSEGV)";
  } else {
    std::snprintf(buf, sizeof buf, "illegal memory access: a %s at address 0x%llx (%s)",
                  f.signo != SIGSEGV ? "access" : f.write ? "write" : "read",
                  (unsigned long long)f.addr, f.signo == SIGBUS ? "SIGBUS" : "SIGSEGV");
    msg += buf;
    if (describe_address) {
      buf[0] = 0;
      describe_address(f.addr, buf, sizeof buf);
      msg += buf;
    }
  }
  Dl_info info;
  if (own_code(f.pc) && dladdr(reinterpret_cast<void*>(&fault_message), &info)) {
    std::snprintf(buf, sizeof buf, " at @pc(0x%llx)",
                  (unsigned long long)(f.pc - uintptr_t(info.dli_fbase)));
    msg += buf;
  }
  if (memory) msg += "; inside attnbook.sanitize() memcheck names the first bad access";
  return msg;
}

// ---- launching ----------------------------------------------------------------------
inline Order order_from_env(uint64_t& seed) {
  const char* s = std::getenv("ATTNBOOK_THREAD_ORDER");
  seed = 0;
  if (!s || !*s || !std::strcmp(s, "forward")) return Order::Forward;
  if (!std::strcmp(s, "reverse")) return Order::Reverse;
  if (!std::strncmp(s, "shuffle", 7)) {
    if (s[7] == ':') seed = std::strtoull(s + 8, nullptr, 10);
    return Order::Shuffle;
  }
  throw std::invalid_argument(
      std::string("ATTNBOOK_THREAD_ORDER must be forward, reverse or "
                  "shuffle[:seed], got '") + s + "'");
}

inline int core_count() {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

inline int workers_from_env() {
  const char* s = std::getenv("ATTNBOOK_EMU_WORKERS");
  if (!s || !*s) return core_count();
  char* end;
  long n = std::strtol(s, &end, 10);
  if (*end || n < 1 || n > 4096)
    throw std::invalid_argument(
        std::string("ATTNBOOK_EMU_WORKERS must be a positive integer, got '") + s +
        "'");
  return int(n);
}

// State of the host side, shared by every thread of the process.
struct Host {
  std::mutex m;
  std::vector<std::pair<const void*, int>> smem_optin;   // by cudaFuncSetAttribute
  std::atomic<size_t> stack_limit{kMaxLocalBytes};       // cudaLimitStackSize
};
inline Host& host() {
  static Host* h = new Host();   // never destroyed: workers outlive static destructors
  return *h;
}

inline size_t dynamic_smem_limit(const void* fn) {
  std::lock_guard<std::mutex> lock(host().m);
  for (auto& [f, bytes] : host().smem_optin)
    if (f == fn) return size_t(bytes);
  return kDefaultDynamicSmem;
}

// Get this worker ready for the job's block shape.
inline void prepare(Runtime& r, const Job& job) {
  r.kernel = job.kernel;
  r.grid = job.grid;
  r.block = job.block;
  r.fiber = job.fiber;
  r.closure = job.closure;
  r.mode = job.order;
  r.cancel = &job.cancel;
  int n = job.nthreads;
  r.nthreads = n;
  r.threads.assign(n, Thread{});
  r.warps.assign((n + kWarp - 1) / kWarp, Warp{});
  for (size_t w = 0; w < r.warps.size(); ++w) {
    int lanes = std::min(kWarp, n - int(w) * kWarp);
    r.warps[w].lanes = lanes >= kWarp ? 0xffffffffu : ((1u << lanes) - 1u);
  }
  const size_t stack = std::min(
      kStackBytes,
      (job.stack + kEmulatorFrameBytes + kPageBytes - 1) / kPageBytes * kPageBytes);
  if (stack != r.stack_open) {   // close (or open) the stacks' bottoms to the limit
    const size_t lo = std::min(stack, r.stack_open), hi = std::max(stack, r.stack_open);
    const int prot = stack > r.stack_open ? PROT_READ | PROT_WRITE : PROT_NONE;
    for (int i = 0; i < r.stacks; ++i)
      if (mprotect(slot(r, i) + kGuardBytes + kStackBytes - hi, hi - lo, prot))
        throw std::runtime_error("emulator: cannot resize a fiber stack");
    r.stack_open = stack;
  }
  for (; r.stacks < n; ++r.stacks) {
    commit(slot(r, r.stacks) + kGuardBytes + kStackBytes - stack,
           kSlotBytes - kGuardBytes - kStackBytes + stack);
  }
  r.order.resize(n);
  r.smem_bytes = job.smem;
  size_t open = (job.smem + kPageBytes - 1) / kPageBytes * kPageBytes;
  if (open != r.smem_open) {
    bool more = open > r.smem_open;
    size_t lo = std::min(open, r.smem_open), hi = std::max(open, r.smem_open);
    int prot = more ? PROT_READ | PROT_WRITE : PROT_NONE;
    if (mprotect(r.dynamic_smem + lo, hi - lo, prot))
      throw std::runtime_error("emulator: cannot map dynamic shared memory");
    r.smem_open = open;
  }
  const dim3& b = job.block;
  for (int i = 0; i < n; ++i) {
    Thread& t = r.threads[i];
    t.linear = i;
    t.tid = {unsigned(i % b.x), unsigned(i / b.x % b.y), unsigned(i / (b.x * b.y))};
  }
}

inline void run_block(Runtime& r, Job& job, uint64_t b) {
  const dim3& g = job.grid;
  r.block_idx = {unsigned(b % g.x), unsigned(b / g.x % g.y),
                 unsigned(b / (uint64_t(g.x) * g.y))};
  ++r.block_epoch;
  r.static_smem_bytes = 0;
  std::memset(r.dynamic_smem, 0xff, job.smem);   // NaN as float, half, bf16; -1 as int
  for (auto& t : r.threads) t.state = State::Fresh;
  for (auto& w : r.warps) w.arrived = w.exited = 0;
  r.done = r.arrived = 0;
  r.error.clear();
  r.in_kernel = false;
  on_block_start(r, job);
  // The order depends on the block alone (never on which worker ran what before), so
  // every worker count gives the same schedule.
  for (int i = 0; i < r.nthreads; ++i)
    r.order[i] = &r.threads[r.mode == Order::Reverse ? r.nthreads - 1 - i : i];
  r.rng.s = job.seed ^ ((b + 1) * 0xd1b54a32d192ed03ull);
  new_pass(r);
  resume(r, r.scheduler, scan(r));
  if (r.stopped) {
    r.stopped = 0;
    throw KernelError(unfinished(r));
  }
  if (r.fault.signo) {
    std::string msg = fault_message(r);
    r.fault = {};
    throw KernelError(msg);
  }
  if (!r.error.empty()) throw KernelError(r.error);
  on_block_end(r);
  job.finished.fetch_add(1, std::memory_order_relaxed);
}

// Run blocks of `job` until none is left or one has failed.
inline void work(Job& job) {
  Runtime& r = own_runtime();
  int slot = job.ntids.fetch_add(1);
  if (slot < job.max_tids) job.tids[slot].store(pthread_self());
  uint64_t b = 0;
  try {
    prepare(r, job);
    for (;;) {
      if (job.cancel.load(std::memory_order_relaxed)) break;
      b = job.next.fetch_add(1);
      if (b >= job.nblocks || b > job.failed_block.load()) break;
      run_block(r, job, b);
    }
  } catch (const std::exception& e) {
    job.fail(b, e.what());
  }
  r.cur = nullptr;
}

// Helper OS threads, started on demand and kept for the life of the process (each keeps
// its fiber stacks and thread-local shared memory). Launches come one at a time:
// launch() holds `launching` throughout.
struct Pool {
  std::mutex launching;
  std::mutex m;
  std::condition_variable wake, finished;
  uint64_t generation = 0;   // one per launch that helpers join
  Job* job = nullptr;
  int wanted = 0;            // helpers 0..wanted-1 join the current job
  int busy = 0;              // of those, how many are still at it
  int started = 0;
  pid_t pid = getpid();
};

inline void helper_main(Pool* p, int index) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(p->m);
  for (;;) {
    p->wake.wait(lock, [&] { return p->generation != seen; });
    seen = p->generation;
    if (index >= p->wanted) continue;
    Job* job = p->job;
    lock.unlock();
    work(*job);
    lock.lock();
    if (--p->busy == 0) p->finished.notify_one();
  }
}

inline Pool& pool() {
  static Pool* p = new Pool();   // never destroyed: its helpers wait on it until exit
  // A forked child has none of the parent's helpers: start over with a pool of its own.
  if (p->pid != getpid()) p = new Pool();
  return *p;
}

// Python's other threads (a timer, Jupyter's output) run while a kernel does, as they
// do while a GPU works: a launch touches no Python object. The checked build keeps the
// GIL: its allocation records must not change during a launch. Python's API is looked
// up at run time (the emulator does not include Python's headers), once.
struct GilReleased {
  void* state = nullptr;
  GilReleased() {
    if constexpr (kChecked) return;
    static auto held = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT,
                                                         "PyGILState_Check"));
    static auto save = reinterpret_cast<void* (*)()>(dlsym(RTLD_DEFAULT,
                                                           "PyEval_SaveThread"));
    if (held && save && held()) state = save();
  }
  ~GilReleased() {
    static auto restore = reinterpret_cast<void (*)(void*)>(
        dlsym(RTLD_DEFAULT, "PyEval_RestoreThread"));
    if (state) restore(state);
  }
};

inline void launch(Job& job) {
  Pool& p = pool();
  std::lock_guard<std::mutex> one_launch(p.launching);
  int helpers = int(std::min<uint64_t>(uint64_t(workers_from_env()), job.nblocks)) - 1;
  job.budget_ns = budget_from_env();
  job.max_tids = std::max(helpers, 0) + 1;
  job.tids.reset(new std::atomic<pthread_t>[job.max_tids]);
  for (int i = 0; i < job.max_tids; ++i) job.tids[i].store(pthread_t());
  job.start = std::chrono::steady_clock::now();
  Watched watched(job);
  GilReleased released;
  on_launch(job);
  if (helpers > 0) {
    std::lock_guard<std::mutex> lock(p.m);
    for (; p.started < helpers; ++p.started)
      std::thread(helper_main, &p, p.started).detach();
    p.job = &job;
    p.wanted = p.busy = helpers;
    ++p.generation;
    p.wake.notify_all();
  }
  work(job);
  if (helpers > 0) {
    std::unique_lock<std::mutex> lock(p.m);
    p.finished.wait(lock, [&] { return p.busy == 0; });
    p.job = nullptr;
  }
  std::fflush(stdout);
  if (job.cancel.load()) throw KernelError(cancelled_message(job));
  if (job.failed_block.load() != UINT64_MAX) throw KernelError(job.error);
}

template <class... P>
struct Launch {
  void (*kernel)(P...);
  const char* name;
  dim3 grid{1}, block{1};
  size_t smem = 0;

  Launch& cfg(dim3 g, dim3 b, size_t shared = 0, cudaStream_t = nullptr) {
    grid = g;
    block = b;
    smem = shared;
    return *this;
  }

  template <class... A>
  void operator()(A&&... args) {
    static_assert(sizeof...(A) == sizeof...(P), "wrong number of kernel arguments");
    std::tuple<P...> params(std::forward<A>(args)...);
    struct Closure {
      void (*k)(P...);
      std::tuple<P...>* p;
      // Each thread gets its own copy of the parameters.
      void operator()() const { std::apply(k, *p); }
    } closure{kernel, &params};
    run(&fiber_main<Closure>, &closure, &params, sizeof params);
  }

  void run(void (*fiber)(void*), const void* closure, const void* params,
           size_t params_bytes) {
    char buf[256];
    long n = long(block.x) * block.y * block.z;
    // CUDA's limits, checked before any thread runs; CUDA reports both as
    // cudaErrorInvalidConfiguration, "invalid configuration argument".
    if (n < 1 || n > kMaxThreads || block.z > 64) {
      std::snprintf(buf, sizeof buf,
                    "kernel '%s': invalid configuration argument: block (%u,%u,%u) "
                    "must have 1 to %d threads, z <= 64",
                    name, block.x, block.y, block.z, kMaxThreads);
      throw KernelError(buf);
    }
    if (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.x > 2147483647u ||
        grid.y > 65535 || grid.z > 65535) {
      std::snprintf(buf, sizeof buf,
                    "kernel '%s': invalid configuration argument: grid (%u,%u,%u) "
                    "must be x in [1, 2^31 - 1], y and z in [1, 65535]",
                    name, grid.x, grid.y, grid.z);
      throw KernelError(buf);
    }
    size_t limit = dynamic_smem_limit(reinterpret_cast<const void*>(kernel));
    if (smem > limit) {
      std::snprintf(buf, sizeof buf,
                    "kernel '%s': %zu bytes of dynamic shared memory requested, the "
                    "limit is %zu (raise it with cudaFuncSetAttribute(kernel, "
                    "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes))",
                    name, smem, limit);
      throw KernelError(buf);
    }
    Job job;
    job.order = order_from_env(job.seed);
    job.kernel = name;
    job.grid = grid;
    job.block = block;
    job.nthreads = int(n);
    job.smem = smem;
    job.stack = host().stack_limit.load();
    job.fiber = fiber;
    job.closure = closure;
    job.params = params;
    job.params_bytes = params_bytes;
    job.nblocks = uint64_t(grid.x) * grid.y * grid.z;
    launch(job);
  }
};

template <class... P>
Launch<P...> launch_of(void (*kernel)(P...), const char* name) {
  Launch<P...> l;
  l.kernel = kernel;
  l.name = name;
  return l;
}

// Static __shared__ variables are thread-local statics: shared by the fibers of a
// worker, which run one block at a time. The source transform binds a reference to each
// through opaque(), so that the compiler keeps the address it looked up (a call, in a
// shared library) instead of looking it up again at every use.
template <class T>
inline T* opaque(T* p) {
  asm("" : "+r"(p));
  return p;
}

// The source transform calls this right after each static __shared__ declaration; the
// first thread of each block to pass it fills the variable with NaN, so a read of
// shared memory nobody wrote shows up.
// A block may declare at most 48 KB of static __shared__ memory (nvcc's ptxas rejects
// more). Each variable is counted once per block, when its declaration is first
// reached, so one in a branch no thread of the block takes is not counted.
constexpr size_t kMaxStaticSmem = 48 * 1024;
inline void count_static_shared(Runtime& r, size_t bytes) {
  r.static_smem_bytes += bytes;
  if (r.static_smem_bytes <= kMaxStaticSmem) return;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "static __shared__ variables take %zu bytes, more than the %zu a block "
                "may declare (ptxas: 'uses too much shared data'); above 48 KB use "
                "extern __shared__ with cudaFuncSetAttribute",
                r.static_smem_bytes, kMaxStaticSmem);
  throw BlockError(std::string("kernel '") + r.kernel + "': " + buf);
}

inline void poison_static_shared(const volatile void* cv, size_t bytes) {
  void* p = const_cast<void*>(cv);   // a volatile __shared__ variable too
  Runtime& r = rt();
  EmulatorCode guard(r);
  for (auto& v : r.static_smem) {
    if (v.addr == p) {
      if (v.epoch != r.block_epoch) {
        std::memset(p, 0xff, bytes);
        v.epoch = r.block_epoch;
        count_static_shared(r, bytes);
        on_static_shared(r, p, bytes);
      }
      return;
    }
  }
  std::memset(p, 0xff, bytes);
  r.static_smem.push_back({p, bytes, r.block_epoch});
  count_static_shared(r, bytes);
  on_static_shared(r, p, bytes);
}

}  // namespace attnbook_emu
