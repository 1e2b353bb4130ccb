// The CPU emulator's runtime: each thread of a block is a fiber with its own stack; a block's
// fibers run cooperatively, one at a time, switching only at synchronisation points
// (__syncthreads, warp collectives). Between two such points every thread runs to the next one
// before the following thread starts, in an order chosen per phase (forward, reverse or a seeded
// shuffle), so a missing barrier changes the answer under some order. Blocks run one after
// another. Included once per extension, by cuda_emulator.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>
#include <sys/mman.h>

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
// Save the callee-saved registers and the FP control words on the current stack, store the
// stack pointer in *save, and resume the context whose stack pointer is `next`. A new fiber's
// stack is laid out by Context::start so that its first resume "returns" into emu_start,
// which calls r13(r12). About 10 ns, against ~350 ns for swapcontext's signal-mask syscall.
extern "C" void attnbook_emu_switch(void** save, void* next);
extern "C" void attnbook_emu_start();
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
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size attnbook_emu_switch, .-attnbook_emu_switch
.p2align 4
.globl attnbook_emu_start
.hidden attnbook_emu_start
.type attnbook_emu_start,@function
attnbook_emu_start:
    movq %r12, %rdi
    callq *%r13
    ud2
.size attnbook_emu_start, .-attnbook_emu_start
)");

struct Context {
  void* sp = nullptr;
  void start(char* stack_top, void (*fn)(void*), void* arg) {
    auto* s = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(stack_top) & ~uintptr_t(15));
    s[-1] = reinterpret_cast<uint64_t>(&attnbook_emu_start);   // "return" address
    s[-2] = 0;                                                   // rbp
    s[-3] = 0;                                                   // rbx
    s[-4] = reinterpret_cast<uint64_t>(arg);                     // r12
    s[-5] = reinterpret_cast<uint64_t>(fn);                      // r13
    s[-6] = s[-7] = 0;                                           // r14, r15
    uint32_t ctl[2];
    asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(ctl[0]), "=m"(ctl[1]));
    std::memcpy(&s[-8], ctl, 8);
    sp = &s[-8];
  }
  static void jump(Context& from, Context& to) { attnbook_emu_switch(&from.sp, to.sp); }
};
#else
// Portable fallback: makecontext/swapcontext (a syscall per switch, so ~30x slower).
struct Context {
  ucontext_t uc;
  void start(char* stack_top, void (*fn)(void*), void* arg) {
    getcontext(&uc);
    uc.uc_stack.ss_sp = stack_top - kStackBytes;
    uc.uc_stack.ss_size = kStackBytes;
    uc.uc_link = nullptr;
    auto f = reinterpret_cast<uintptr_t>(fn), a = reinterpret_cast<uintptr_t>(arg);
    // makecontext passes int arguments only: pointers travel as 32-bit halves.
    makecontext(&uc, reinterpret_cast<void (*)()>(&trampoline), 4, unsigned(f >> 32), unsigned(f),
                unsigned(a >> 32), unsigned(a));
  }
  static void trampoline(unsigned fhi, unsigned flo, unsigned ahi, unsigned alo) {
    auto fn = reinterpret_cast<void (*)(void*)>((uintptr_t(fhi) << 32) | flo);
    fn(reinterpret_cast<void*>((uintptr_t(ahi) << 32) | alo));
  }
  static void jump(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
};
#endif

// A fiber stack with a PROT_NONE guard region below it: an overflow faults at once.
struct Stack {
  char* base = nullptr;
  Stack() {
    void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("emulator: cannot allocate a fiber stack");
    base = static_cast<char*>(p);
    mprotect(base, kGuardBytes, PROT_NONE);
  }
  char* top() const { return base + kGuardBytes + kStackBytes; }
  Stack(const Stack&) = delete;
  ~Stack() { munmap(base, kStackBytes + kGuardBytes); }
};

// ---- threads, warps, blocks --------------------------------------------------------------
enum class State { Runnable, AtBarrier, AtWarp, Done };

struct Thread;
// A warp collective: every participating lane deposits a pointer to its own data; the last
// to arrive runs `fn` over all of them (reading inputs, writing each lane's outputs), then the
// group is released. Because each lane's data lives on its own stack, which is not touched
// while it waits, no value can be overwritten before its owner reads it.
using WarpFn = void (*)(void* const* lane_data, uint32_t group);

struct Warp {
  uint32_t arrived = 0;
  uint32_t mask[kWarp];
  WarpFn fn[kWarp];
  void* data[kWarp];
  int line[kWarp];
};

struct Thread {
  Context ctx;
  uint3 tid;
  int linear = 0;
  State state = State::Runnable;
  int barrier_line = 0;
  int sync_result = 0;     // what __syncthreads_count/_and/_or return
  int sync_arg = 0;
};

enum class Order { Forward, Reverse, Shuffle };

struct Runtime {
  // The launch in progress.
  const char* kernel = "";
  dim3 grid, block;
  uint3 block_idx{0, 0, 0};
  int nthreads = 0;
  uint64_t block_epoch = 0;
  void (*body)(void*) = nullptr;
  void* body_arg = nullptr;
  Thread* cur = nullptr;
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  std::vector<Stack*> stacks;
  Context scheduler;
  std::string error;       // set by the fiber that failed
  Order order = Order::Forward;
  std::mt19937_64 rng;
  // Dynamic shared memory: one buffer for every launch (blocks run one at a time).
  alignas(128) unsigned char dynamic_smem[kMaxDynamicSmem];
  std::vector<std::pair<const void*, int>> smem_optin;   // cudaFuncSetAttribute's grants
  std::vector<std::pair<void*, uint64_t>> static_smem;    // address -> epoch it was poisoned
};

inline Runtime& rt() {
  static Runtime* r = new Runtime();   // never destroyed: fibers may outlive static destructors
  return *r;
}

inline std::string where(const Thread& t) {
  const Runtime& r = rt();
  char buf[256];
  std::snprintf(buf, sizeof buf, "kernel '%s', block (%u,%u,%u), thread (%u,%u,%u)", r.kernel,
                r.block_idx.x, r.block_idx.y, r.block_idx.z, t.tid.x, t.tid.y, t.tid.z);
  return buf;
}

[[noreturn]] inline void fail(const std::string& msg) { throw KernelError(msg); }

// Give control back to the scheduler; returns when this thread is resumed.
inline void yield() {
  Runtime& r = rt();
  Thread* self = r.cur;
  Context::jump(self->ctx, r.scheduler);
  r.cur = self;
}

inline void fiber_main(void* arg) {
  Runtime& r = rt();
  Thread* self = static_cast<Thread*>(arg);
  r.cur = self;
  try {
    r.body(r.body_arg);
  } catch (const std::exception& e) {
    r.error = where(*self) + ": " + e.what();
  } catch (...) {
    r.error = where(*self) + ": unknown exception";
  }
  self->state = State::Done;
  Context::jump(self->ctx, r.scheduler);   // never resumed
  __builtin_unreachable();
}

// ---- barriers ------------------------------------------------------------------------------
// Wait until every thread of the block arrives; returns how many passed a non-zero `pred`
// (what __syncthreads_count/_and/_or report).
inline int syncthreads(int line, int pred = 0) {
  Runtime& r = rt();
  Thread* self = r.cur;
  self->state = State::AtBarrier;
  self->barrier_line = line;
  self->sync_arg = pred != 0;
  yield();
  return self->sync_result;
}

// Called by the scheduler when no thread can run: release a complete barrier or report why the
// block can make no progress.
inline void release_or_diagnose() {
  Runtime& r = rt();
  int waiting = 0, done = 0, at_warp = 0, line = -1;
  const Thread* exited = nullptr;
  const Thread* other_line = nullptr;
  int count = 0;
  for (auto& t : r.threads) {
    if (t.state == State::AtBarrier) {
      if (line < 0) line = t.barrier_line;
      else if (t.barrier_line != line) other_line = &t;
      ++waiting;
      count += t.sync_arg;
    } else if (t.state == State::Done) {
      ++done;
      if (!exited) exited = &t;
    } else if (t.state == State::AtWarp) {
      ++at_warp;
    }
  }
  char buf[256];
  if (waiting == 0 && at_warp > 0) {
    std::snprintf(buf, sizeof buf, "deadlock: %d threads wait in warp collectives that can never "
                  "complete (a lane of their mask exited or never arrives)", at_warp);
    fail(buf);
  }
  if (other_line) {
    std::snprintf(buf, sizeof buf, "divergent barrier: threads wait at __syncthreads on line %d "
                  "and on line %d", line, other_line->barrier_line);
    throw KernelError(where(*other_line) + ": " + buf);
  }
  if (at_warp > 0) {
    std::snprintf(buf, sizeof buf, "deadlock: %d threads wait at __syncthreads (line %d) while %d "
                  "wait in a warp collective", waiting, line, at_warp);
    fail(buf);
  }
  if (done > 0) {
    std::snprintf(buf, sizeof buf, "divergent barrier: %d threads wait at __syncthreads on line %d "
                  "but this thread has exited", waiting, line);
    throw KernelError(where(*exited) + ": " + buf);
  }
  for (auto& t : r.threads) {
    t.sync_result = count;
    t.state = State::Runnable;
  }
}

// ---- warp collectives ----------------------------------------------------------------------
inline uint32_t existing_lanes(int warp) {
  int n = std::min(kWarp, rt().nthreads - warp * kWarp);
  return n >= kWarp ? 0xffffffffu : ((1u << n) - 1u);
}

inline int lane_of(const Thread& t) { return t.linear % kWarp; }

inline void warp_collective(uint32_t mask, int line, void* data, WarpFn fn) {
  Runtime& r = rt();
  Thread* self = r.cur;
  int w = self->linear / kWarp, lane = lane_of(*self);
  Warp& warp = r.warps[w];
  uint32_t group = mask & existing_lanes(w);
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
  for (int l = 0; l < kWarp; ++l) {
    if (!(group & (1u << l))) continue;
    const Thread& t = r.threads[w * kWarp + l];
    if (t.state == State::Done) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "warp collective on line %d: lane %d of mask 0x%08x has exited",
                    line, l, mask);
      fail(buf);
    }
  }
  if ((warp.arrived & group) != group) {
    self->state = State::AtWarp;
    yield();
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

inline size_t dynamic_smem_limit(const void* fn) {
  for (auto& [f, bytes] : rt().smem_optin)
    if (f == fn) return size_t(bytes);
  return kDefaultDynamicSmem;
}

inline void run_block() {
  Runtime& r = rt();
  std::vector<int> order(r.nthreads);
  for (int i = 0; i < r.nthreads; ++i) {
    Thread& t = r.threads[i];
    t.state = State::Runnable;
    t.ctx.start(r.stacks[i]->top(), &fiber_main, &t);
  }
  for (auto& w : r.warps) w.arrived = 0;
  int remaining = r.nthreads;
  while (remaining > 0) {
    for (int i = 0; i < r.nthreads; ++i) order[i] = r.order == Order::Reverse ? r.nthreads - 1 - i : i;
    if (r.order == Order::Shuffle) std::shuffle(order.begin(), order.end(), r.rng);
    bool ran = false;
    for (int i : order) {
      Thread& t = r.threads[i];
      if (t.state != State::Runnable) continue;
      ran = true;
      Context::jump(r.scheduler, t.ctx);
      if (!r.error.empty()) throw KernelError(r.error);
      if (t.state == State::Done) --remaining;
    }
    if (!ran && remaining > 0) {
      try {
        release_or_diagnose();
      } catch (const KernelError& e) {
        std::string m = e.what();
        if (m.rfind("kernel '", 0) != 0) {
          char buf[160];
          std::snprintf(buf, sizeof buf, "kernel '%s', block (%u,%u,%u): ", r.kernel, r.block_idx.x,
                        r.block_idx.y, r.block_idx.z);
          m = buf + m;
        }
        throw KernelError(m);
      }
    }
  }
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
      static void call(void* self) {
        auto* c = static_cast<Closure*>(self);
        std::apply(c->k, *c->p);   // each thread gets its own copy of the parameters
      }
    } closure{kernel, &params};
    run(&Closure::call, &closure);
  }

  void run(void (*body)(void*), void* arg) {
    Runtime& r = rt();
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
    uint64_t seed;
    r.order = order_from_env(seed);
    r.rng.seed(seed);
    r.kernel = name;
    r.grid = grid;
    r.block = block;
    r.nthreads = int(n);
    r.body = body;
    r.body_arg = arg;
    r.error.clear();
    r.threads.assign(n, Thread{});
    r.warps.assign((n + kWarp - 1) / kWarp, Warp{});
    while (r.stacks.size() < size_t(n)) r.stacks.push_back(new Stack());
    for (int i = 0; i < n; ++i) {
      Thread& t = r.threads[i];
      t.linear = i;
      t.tid = {unsigned(i % block.x), unsigned(i / block.x % block.y), unsigned(i / (block.x * block.y))};
    }
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          r.block_idx = {x, y, z};
          ++r.block_epoch;
          std::memset(r.dynamic_smem, 0xff, smem);   // NaN as float, half and bf16; -1 as int
          run_block();
        }
    r.cur = nullptr;
    std::fflush(stdout);
  }
};

template <class... P>
Launch<P...> launch_of(void (*kernel)(P...), const char* name) {
  Launch<P...> l;
  l.kernel = kernel;
  l.name = name;
  return l;
}

// Static __shared__ variables are function statics, shared by the block's fibers. The source
// transform calls this right after each declaration; the first thread of each block to pass it
// fills the variable with NaN, so a read of shared memory nobody wrote shows up.
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
