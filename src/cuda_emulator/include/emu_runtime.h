// The CPU emulator's runtime: each thread of a block is a fiber with its own stack; a
// block's fibers run cooperatively, one at a time, switching only at synchronisation
// points (__syncthreads, warp collectives). Between two such points every thread runs
// to the next one before the following thread starts, in an order chosen per phase
// (forward, reverse or a shuffle seeded by the launch's seed and the block's index), so
// a missing barrier changes the answer under some order. Blocks are independent:
// workers, one OS thread per core by default (ATTNBOOK_EMU_WORKERS), each run one block
// at a time, so a block's schedule does not depend on how many workers there are.
// Included once per extension, by cuda_emulator.h (through emu_builtins.h). Its
// parts: emu_blocks.h (the state), emu_hooks.h, emu_schedule.h, emu_hang_guard.h
// and emu_faults.h; here, launching.
#pragma once

#include "emu_blocks.h"
#include "emu_faults.h"
#include "emu_hang_guard.h"
#include "emu_hooks.h"
#include "emu_schedule.h"

namespace attnbook_emu {

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

// The dynamic shared memory kernel `fn` may ask for; for a kernel whose address is not
// known (nullptr), the largest any kernel was given.
inline size_t dynamic_smem_limit(const void* fn) {
  std::lock_guard<std::mutex> lock(host().m);
  size_t largest = kDefaultDynamicSmem;
  for (auto& [f, bytes] : host().smem_optin) {
    if (f == fn) return size_t(bytes);
    largest = std::max(largest, size_t(bytes));
  }
  return fn ? kDefaultDynamicSmem : largest;
}

// Get this worker ready for the job's block shape.
inline void prepare(Runtime& r, Job& job) {
  r.kernel = job.kernel;
  r.grid = job.grid;
  r.block = job.block;
  r.fiber = job.fiber;
  r.closure = job.closure;
  r.mode = job.order;
  r.cancel = &job.cancel;
  r.progress = &job.progress;
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
  job.progress.fetch_add(1, std::memory_order_relaxed);
}

inline Runtime& own_runtime() {
  Runtime*& r = worker_runtime();
  if (!r) {   // never destroyed: an abandoned fiber may still point into it
    char* a = reserve_arena();
    commit(a, sizeof(Runtime));   // the guard above dynamic_smem stays unmapped
    r = new (a) Runtime();
    if (mprotect(r->smem_below, kPageBytes, PROT_NONE))
      throw std::runtime_error("emulator: cannot guard dynamic shared memory");
    auto base = reinterpret_cast<uintptr_t>(a);
    __atomic_store_n(&arenas[(base / kArenaBytes) % kArenaTable], r, __ATOMIC_RELEASE);
    use_signal_stack(*r);
  }
  return *r;
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
// do while a GPU works: a launch touches no Python object. In the checked build too:
// its allocation records change only on the calling thread (torch reports to that
// thread's profiler), and another thread's checked call waits for this one
// (sanitizer.py). Python's API is looked up at run time (the emulator does not include
// Python's headers), once.
struct GilReleased {
  void* state = nullptr;
  GilReleased() {
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
  // The GIL goes before a launch waits for another: a thread holding it while waiting
  // here would keep the running launch from taking it back (two Python threads
  // calling kernels would wait for each other for ever).
  GilReleased released;
  std::lock_guard<std::mutex> one_launch(p.launching);
  int helpers = int(std::min<uint64_t>(uint64_t(workers_from_env()), job.nblocks)) - 1;
  limits_from_env(job);
  job.max_tids = std::max(helpers, 0) + 1;
  job.tids.reset(new std::atomic<pthread_t>[job.max_tids]);
  for (int i = 0; i < job.max_tids; ++i) job.tids[i].store(pthread_t());
  job.start = job.progressed = std::chrono::steady_clock::now();
  Watched watched(job);
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

// A launch's configuration and its checks; Launch and DeducedLaunch give it the
// kernel's arguments.
struct LaunchConfig {
  const void* key = nullptr;   // the kernel's address (nullptr: not known)
  const char* name = "";
  dim3 grid{1}, block{1};
  size_t smem = 0;

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
    size_t limit = dynamic_smem_limit(key);
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

  // Run `call` on every thread, each with its own copy of `params` (a tuple). The
  // closure holds `call` itself: each thread copies it onto its own stack (fiber_main),
  // where the checked build lets kernel code read it.
  template <class Call, class Params>
  void run_call(const Call& call, Params& params) {
    struct Closure {
      Call c;
      Params* p;
      void operator()() const { std::apply(c, *p); }
    } closure{call, &params};
    run(&fiber_main<Closure>, &closure, &params, sizeof params);
  }
};

// `kernel<<<grid, block, smem, stream>>>(args)` becomes
// launch_of(kernel, "kernel").cfg(grid, block, smem, stream)(args): the arguments are
// converted to the kernel's parameters once, and each thread copies them.
template <class Self>
struct Configurable : LaunchConfig {
  Self& cfg(dim3 g, dim3 b, size_t shared = 0, cudaStream_t = nullptr) {
    grid = g;
    block = b;
    smem = shared;
    return static_cast<Self&>(*this);
  }
};

// An argument as the kernel's parameter P. A launch is a call on a GPU, where NULL or 0
// is a null pointer constant; forwarded here, it is an integer (NULL is a long): it
// becomes the null pointer, and any other integer for a pointer is an error.
template <class P, class A>
P parameter(A&& a) {
  if constexpr (std::is_pointer_v<P> && std::is_integral_v<std::decay_t<A>> &&
                !std::is_convertible_v<A&&, P>) {
    if (a != 0) throw KernelError("an integer other than 0 passed for a pointer "
                                  "parameter of a kernel");
    return nullptr;
  } else {
    return std::forward<A>(a);
  }
}

template <class... P>
struct Launch : Configurable<Launch<P...>> {
  void (*kernel)(P...);

  template <class... A>
  void operator()(A&&... args) {
    static_assert(sizeof...(A) == sizeof...(P), "wrong number of kernel arguments");
    std::tuple<P...> params(parameter<P>(std::forward<A>(args))...);
    this->run_call(kernel, params);
  }
};

template <class... P>
Launch<P...> launch_of(void (*kernel)(P...), const char* name) {
  Launch<P...> l;
  l.kernel = kernel;
  l.key = reinterpret_cast<const void*>(kernel);
  l.name = name;
  return l;
}

// A kernel that is no single function until its arguments choose: an overloaded name,
// a template whose arguments are deduced (`scale<<<g, b>>>(x, n)` with
// `template <class T> __global__ void scale(T*, int)`). `call` makes the call the
// source writes, `kernel(args...)`, so overload resolution picks what nvcc's would;
// the arguments are kept as they are passed (decayed), and each thread converts its
// copy. The function chosen has no address here: cudaFuncSetAttribute's limits are
// looked up by any kernel's largest (what the device allows at most, once opted in).
template <class Call>
struct DeducedLaunch : Configurable<DeducedLaunch<Call>> {
  Call call;
  explicit DeducedLaunch(Call c) : call(std::move(c)) {}

  template <class... A>
  void operator()(A&&... args) {
    std::tuple<std::decay_t<A>...> params(std::forward<A>(args)...);
    this->run_call(call, params);
  }
};

// The source transform writes
//   launch_of([&](auto t) -> decltype(kernel_address<decltype(t)>(K)) {...},
//             [&](auto&... a) { K(a...); }, "K")
// for a launch of K: the first names K's address where K is one function (a function,
// a template with its arguments given, a pointer), and fails to substitute otherwise.
struct Probe {};
template <class Tag, class... P>
auto kernel_address(void (*kernel)(P...)) { return kernel; }

template <class Address, class Call>
auto launch_of(Address address, Call call, const char* name) {
  if constexpr (std::is_invocable_v<Address, Probe>) {
    return launch_of(address(Probe{}), name);
  } else {
    DeducedLaunch<Call> l(std::move(call));
    l.name = name;
    return l;
  }
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
