// The CPU emulator's runtime: each thread of a block is a fiber with its own stack; a
// block's fibers run cooperatively, one at a time, switching only at synchronisation
// points (__syncthreads, warp collectives). Between two such points every thread runs
// to the next one before the following thread starts, in an order chosen per phase
// (forward, reverse or a shuffle seeded by the launch's seed and the block's index), so
// a missing barrier changes the answer under some order. Blocks are independent:
// workers, one OS thread per core by default (ATTNBOOK_EMU_WORKERS), each run one block
// at a time, so a block's schedule does not depend on how many workers there are.
// Included once per extension, by cuda_emulator.h.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#if !(defined(__x86_64__) && defined(__linux__)) || defined(ATTNBOOK_EMU_UCONTEXT)
#define ATTNBOOK_EMU_USE_UCONTEXT 1
#include <ucontext.h>
#endif

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 { unsigned x, y, z; };
typedef struct CUstream_st* cudaStream_t;

namespace attnbook_emu {

constexpr int kWarp = 32;
constexpr int kMaxThreads = 1024;
constexpr size_t kDefaultDynamicSmem = 48 * 1024;   // what a launch may use without opting in
constexpr size_t kMaxDynamicSmem = 227 * 1024;      // the most any current GPU grants (sm_90)
constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kGuardBytes = 64 * 1024;           // printf's frame alone can jump a 4 KiB guard

struct KernelError : std::runtime_error { using std::runtime_error::runtime_error; };

// ---- context switching ------------------------------------------------------------------
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
asm(R"(
.text
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
constexpr size_t kArenaBytes = size_t(1) << 29;

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

// ---- threads, warps, blocks --------------------------------------------------------------
// Fresh: not started yet (it has no fiber until it needs one). Fresh sorts before
// Runnable so that "may run now" is one comparison.
enum class State : uint8_t { Fresh, Runnable, AtBarrier, AtWarp, Done };

// A warp collective: every participating lane deposits a pointer to its own data; the last
// to arrive runs `fn` over all of them (reading inputs, writing each lane's outputs), then the
// group is released. Because each lane's data lives on its own stack, which is not touched
// while it waits, no value can be overwritten before its owner reads it.
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
  Order order = Order::Forward;
  uint64_t seed = 0;
  uint64_t nblocks = 0;
  std::atomic<uint64_t> next{0};   // blocks are taken in increasing linear order
  // The lowest failing block and its error. Workers start no block above it, and every
  // block below it was taken before it failed, so the error reported is the one a
  // single worker, running the blocks in order, would have stopped at.
  std::atomic<uint64_t> failed_block{UINT64_MAX};
  std::mutex m;
  std::string error;

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
  void (*fiber)(void*) = nullptr;   // fiber_main<the kernel's closure>
  const void* closure = nullptr;
  Thread* cur = nullptr;
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  int stacks = 0;           // fibers whose stack slot is committed
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
  // Dynamic shared memory: this worker's, reused by each block it runs.
  alignas(128) unsigned char dynamic_smem[kMaxDynamicSmem];
  std::vector<std::pair<void*, uint64_t>> static_smem;   // address, epoch poisoned
};

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

// The calling OS thread's worker runtime, made on first use.
inline Runtime& own_runtime() {
  static thread_local Runtime* r = nullptr;
  if (!r) {   // never destroyed: an abandoned fiber may still point into it
    char* a = reserve_arena();
    commit(a, kRuntimeSlots * kSlotBytes);
    r = new (a) Runtime();
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
  const Closure& kernel = *static_cast<const Closure*>(r.closure);
  Thread* self = static_cast<Thread*>(arg);
  Thread* next = nullptr;
  try {
    for (;;) {
      kernel();
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
    r.error = e.what();
    next = nullptr;
  } catch (const std::exception& e) {
    r.error = where(*self) + ": " + e.what();
    next = nullptr;
  } catch (...) {
    r.error = where(*self) + ": unknown exception";
    next = nullptr;
  }
  // This fiber is finished (or the block failed): it is never resumed.
  if (next) resume(r, self->ctx, next);
  else Context::jump(self->ctx, r.scheduler);
  __builtin_unreachable();
}

// ---- barriers ------------------------------------------------------------------------------
// Wait until every thread of the block arrives; returns how many passed a non-zero `pred`
// (what __syncthreads_count/_and/_or report).
inline int syncthreads(int line, int pred = 0) {
  Runtime& r = rt();
  Thread* self = r.cur;
  self->state = State::AtBarrier;
  self->pred = pred != 0;
  self->barrier_line = line;
  Thread* next;
  if (++r.arrived < r.nthreads) {
    next = pick(r);
  } else if (std::all_of(r.threads.begin(), r.threads.end(),
                         [line](const Thread& t) { return t.barrier_line == line; })) {
    // One result for the block: no thread can reach the next barrier, let alone
    // complete it, before every thread has resumed from this one and read it.
    int count = 0;
    for (auto& t : r.threads) {
      t.state = State::Runnable;
      count += t.pred;
    }
    r.sync_result = count;
    r.arrived = 0;
    new_pass(r);
    next = scan(r);
  } else {
    next = pick(r);   // finds nobody to run, and says so
  }
  switch_to(r, self, next);
  return r.sync_result;
}

// ---- warp collectives ----------------------------------------------------------------------
inline uint32_t existing_lanes(int warp) { return rt().warps[warp].lanes; }

inline void warp_collective(uint32_t mask, int line, void* data, WarpFn fn) {
  Runtime& r = rt();
  Thread* self = r.cur;
  int w = self->linear / kWarp, lane = self->linear % kWarp;
  Warp& warp = r.warps[w];
  uint32_t group = mask & warp.lanes;
  if (!(group & (1u << lane))) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "warp collective on line %d: mask 0x%08x excludes the calling lane %d",
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
      std::snprintf(buf, sizeof buf, "mismatched warp collectives: lane %d (line %d, mask 0x%08x) "
                    "and lane %d (line %d, mask 0x%08x)", lane, line, mask, l, warp.line[l], warp.mask[l]);
      fail(buf);
    }
  }
  fn(warp.data + 0, group);   // lane_data indexed by lane
  warp.arrived &= ~group;
  for (int l = 0; l < kWarp; ++l)
    if ((group & (1u << l)) && l != lane) r.threads[w * kWarp + l].state = State::Runnable;
}

// ---- launching -----------------------------------------------------------------------------
inline Order order_from_env(uint64_t& seed) {
  const char* s = std::getenv("ATTNBOOK_THREAD_ORDER");
  seed = 0;
  if (!s || !*s || !std::strcmp(s, "forward")) return Order::Forward;
  if (!std::strcmp(s, "reverse")) return Order::Reverse;
  if (!std::strncmp(s, "shuffle", 7)) {
    if (s[7] == ':') seed = std::strtoull(s + 8, nullptr, 10);
    return Order::Shuffle;
  }
  throw std::invalid_argument(std::string("ATTNBOOK_THREAD_ORDER must be forward, reverse or "
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
  int n = job.nthreads;
  r.nthreads = n;
  r.threads.assign(n, Thread{});
  r.warps.assign((n + kWarp - 1) / kWarp, Warp{});
  for (size_t w = 0; w < r.warps.size(); ++w) {
    int lanes = std::min(kWarp, n - int(w) * kWarp);
    r.warps[w].lanes = lanes >= kWarp ? 0xffffffffu : ((1u << lanes) - 1u);
  }
  for (; r.stacks < n; ++r.stacks)
    commit(slot(r, r.stacks) + kGuardBytes, kSlotBytes - kGuardBytes);
  r.order.resize(n);
  const dim3& b = job.block;
  for (int i = 0; i < n; ++i) {
    Thread& t = r.threads[i];
    t.linear = i;
    t.tid = {unsigned(i % b.x), unsigned(i / b.x % b.y), unsigned(i / (b.x * b.y))};
  }
}

inline void run_block(Runtime& r, const Job& job, uint64_t b) {
  const dim3& g = job.grid;
  r.block_idx = {unsigned(b % g.x), unsigned(b / g.x % g.y),
                 unsigned(b / (uint64_t(g.x) * g.y))};
  ++r.block_epoch;
  std::memset(r.dynamic_smem, 0xff, job.smem);   // NaN as float, half, bf16; -1 as int
  for (auto& t : r.threads) t.state = State::Fresh;
  for (auto& w : r.warps) w.arrived = w.exited = 0;
  r.done = r.arrived = 0;
  r.error.clear();
  // The order depends on the block alone (never on which worker ran what before), so
  // every worker count gives the same schedule.
  for (int i = 0; i < r.nthreads; ++i)
    r.order[i] = &r.threads[r.mode == Order::Reverse ? r.nthreads - 1 - i : i];
  r.rng.s = job.seed ^ ((b + 1) * 0xd1b54a32d192ed03ull);
  new_pass(r);
  resume(r, r.scheduler, scan(r));
  if (!r.error.empty()) throw KernelError(r.error);
}

// Run blocks of `job` until none is left or one has failed.
inline void work(Job& job) {
  Runtime& r = own_runtime();
  uint64_t b = 0;
  try {
    prepare(r, job);
    for (;;) {
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

inline void launch(Job& job) {
  Pool& p = pool();
  std::lock_guard<std::mutex> one_launch(p.launching);
  int helpers = int(std::min<uint64_t>(uint64_t(workers_from_env()), job.nblocks)) - 1;
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
    run(&fiber_main<Closure>, &closure);
  }

  void run(void (*fiber)(void*), const void* closure) {
    char buf[256];
    long n = long(block.x) * block.y * block.z;
    if (n < 1 || n > kMaxThreads || block.z > 64) {
      std::snprintf(buf, sizeof buf, "kernel '%s': invalid block (%u,%u,%u): at most %d threads, z <= 64",
                    name, block.x, block.y, block.z, kMaxThreads);
      throw KernelError(buf);
    }
    if (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.y > 65535 || grid.z > 65535) {
      std::snprintf(buf, sizeof buf, "kernel '%s': invalid grid (%u,%u,%u)", name, grid.x, grid.y, grid.z);
      throw KernelError(buf);
    }
    size_t limit = dynamic_smem_limit(reinterpret_cast<const void*>(kernel));
    if (smem > limit) {
      std::snprintf(buf, sizeof buf, "kernel '%s': %zu bytes of dynamic shared memory requested, the "
                    "limit is %zu (raise it with cudaFuncSetAttribute(kernel, "
                    "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes))", name, smem, limit);
      throw KernelError(buf);
    }
    Job job;
    job.order = order_from_env(job.seed);
    job.kernel = name;
    job.grid = grid;
    job.block = block;
    job.nthreads = int(n);
    job.smem = smem;
    job.fiber = fiber;
    job.closure = closure;
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
inline void poison_static_shared(void* p, size_t bytes) {
  Runtime& r = rt();
  for (auto& [addr, epoch] : r.static_smem) {
    if (addr == p) {
      if (epoch != r.block_epoch) {
        std::memset(p, 0xff, bytes);
        epoch = r.block_epoch;
      }
      return;
    }
  }
  std::memset(p, 0xff, bytes);
  r.static_smem.emplace_back(p, r.block_epoch);
}

}  // namespace attnbook_emu
