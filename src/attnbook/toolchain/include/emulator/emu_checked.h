// The checked build of the emulator: memcheck, racecheck and the profile.
// compile(..., checked=True) builds kernel text with -fsanitize=thread but links no
// ThreadSanitizer runtime: GCC then calls __tsan_read4(addr), __tsan_write8(addr), ...
// before every memory access, and __tsan_atomic32_fetch_add(...) etc. in place of every
// atomic builtin. This file defines those functions (uninstrumented). An access counts
// only while kernel code runs (Runtime::in_kernel, set by the fiber around the kernel
// and cleared by EmulatorCode in barriers and collectives); everything else (the
// wrapper, torch, pybind11) passes straight through. Functions here are uninstrumented,
// but what they call is not (GCC inlines no instrumented function into them: a
// std::vector's operator[] is a call that reports its own accesses), so access() marks
// the worker as out of kernel code while it works, and its hot path reads the raw
// pointers CheckState keeps.
//
// What kernel code may touch:
// * local: the stack slot of the fiber it runs on;
// * shared: [0, smem) of the worker's dynamic shared memory, and the static __shared__
//   variables this block has declared (thread-local statics, registered by
//   poison_static_shared);
// * global: the Session's allocations (the storages of the call's tensors, tensors
//   allocated while the call runs, cudaMalloc), the kernel's parameters, and this
//   extension's own data (__constant__ and other namespace-scope variables);
// * the emulator's state that its built-ins read (threadIdx reads Runtime::cur and the
//   Thread), silently.
// Anything else stops the thread with a message naming the access, its call site as
// "@pc(0x...)" (an offset in this extension, which Python maps to file:line), the
// block, the thread, and where the address lies.
//
// Racecheck (emu_racecheck.h) and the profile (emu_profile.h) work on the same
// accesses; GCC's entry points are in emu_tsan_hooks.h.
#pragma once

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#define ATTNBOOK_UNCHECKED __attribute__((no_sanitize("thread")))
#define ATTNBOOK_HOT __attribute__((no_sanitize("thread"), always_inline))
#define ATTNBOOK_COLD __attribute__((no_sanitize("thread"), noinline, cold))

namespace attnbook_emu {

enum Check : int { kMemcheck = 1, kRacecheck = 2, kProfile = 4 };
enum Space : int { kGlobal = 0, kShared = 1, kBarrier = 2 };   // kBarrier: counts

struct Span {
  uintptr_t lo, hi;
  bool operator<(const Span& o) const { return lo < o.lo; }
};

// Counts of one source instruction in one launch.
// units: sectors (global) or wavefronts (shared); ideal: wavefronts without conflicts.
struct Counts {
  int64_t requests = 0, units = 0, ideal = 0, bytes = 0;
};
// (launch, pc offset, space, is_write)
using CountKey = std::tuple<int64_t, uintptr_t, int, int>;

struct LaunchInfo {
  std::string kernel;
  dim3 grid, block;
  size_t smem;
  int64_t barriers = 0;   // __syncthreads passed, summed over blocks
};

// One call of a checked extension's function (Python's begin/end around it).
struct Session {
  int mode = 0;
  std::mutex m;
  std::vector<Span> allocations;   // sorted, disjoint
  std::vector<Span> freed;         // freed during the call, the latest last (a few)
  std::vector<Span> module_data;   // this extension's writable and read-only data
  uintptr_t module_base = 0;
  std::vector<LaunchInfo> launches;
  std::map<CountKey, Counts> counts;
  const Job* job = nullptr;        // the launch running
  // What attnbook_checked_end hands Python.
  std::vector<int64_t> out_launches, out_counts;
  std::string out_names;
};
ATTNBOOK_UNCHECKED inline Session& session() {
  static Session* s = new Session();   // never destroyed: workers outlive statics
  return *s;
}

ATTNBOOK_UNCHECKED inline void note_allocation(const void* p, size_t bytes) {
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.m);
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = std::lower_bound(s.allocations.begin(), s.allocations.end(), Span{a, a});
  if (it != s.allocations.end() && it->lo == a) {
    if (!bytes) {   // remembered, to name a use after free
      if (s.freed.size() == 1024) s.freed.erase(s.freed.begin());
      s.freed.push_back(*it);
    }
    s.allocations.erase(it);
  }
  if (!bytes) return;
  // memory used again is no longer freed memory
  s.freed.erase(std::remove_if(s.freed.begin(), s.freed.end(), [&](const Span& f) {
                  return f.lo < a + bytes && a < f.hi;
                }), s.freed.end());
  s.allocations.insert(
      std::lower_bound(s.allocations.begin(), s.allocations.end(), Span{a, a}),
      Span{a, a + bytes});
}

// Tensors the wrapper allocates during a call (outputs, workspaces) become allocations
// kernels may touch: torch's CPU allocator reports each allocation and free to the
// thread's memory profiler, which this stands in for during the call.
struct AllocationReporter : c10::MemoryReportingInfoBase {
  ATTNBOOK_UNCHECKED void reportMemoryUsage(void* p, int64_t bytes, size_t, size_t,
                                            c10::Device d) override {
    if (d.is_cpu()) note_allocation(p, bytes > 0 ? size_t(bytes) : 0);
  }
  bool memoryProfilingEnabled() const override { return true; }
};

}  // namespace attnbook_emu

// The profile's state and counting, which CheckState holds.
#include "emu_profile.h"

namespace attnbook_emu {

// Racecheck's record of one 4-byte word of shared memory in the current interval: its
// last writer and up to two readers. Every access reads it, so it is small (8 bytes: a
// tile's records stay in the L1 cache); the interval is its low 16 bits (0: no record).
struct Shadow {
  uint16_t interval = 0;
  int16_t writer, reader[2];
};

// One recorded access: the bytes of the word it touched (a mask), its warp's collective
// count and the block's named-barrier count then, its call site (an offset in this
// extension).
struct Site {
  uint8_t mask;
  uint32_t gen, bar, pc;
};

// What only a recorded access writes and a hazard reads, beside each Shadow: the sites
// of its writer and readers, and the writer before the last one if it wrote other bytes
// (two threads writing the two halves of a word: 16-bit elements). A third writer of
// other bytes takes the place of the older one: a hazard on its bytes can go unseen,
// never one be made up.
struct Sites {
  Site w, r[2], w2;
  int16_t writer2;
};

// A region's records, word by word, from the word at its base.
struct Shadows {
  Shadow* words = nullptr;   // nullptr: not shared memory
  Sites* sites = nullptr;
};

struct CheckState {
  int mode = 0;
  const Job* job = nullptr;
  // Raw copies for access(), set at the block's start.
  uintptr_t dyn = 0, smem = 0, params = 0, params_bytes = 0;
  uintptr_t threads_lo = 0, threads_hi = 0, warps_lo = 0, warps_hi = 0;
  const Span* allocs = nullptr;
  size_t nallocs = 0;
  Span live[64];   // the static __shared__ variables this block has declared
  int nlive = 0;
  Shadows dyn_sh, tls_sh;
  uint32_t* gen = nullptr;    // warp_gen
  uint32_t* sync = nullptr;   // lane_sync
  uint32_t bar_gen = 0;       // named barriers completed in this block
  uint32_t* bar_sync = nullptr;   // thread_bar
  // The region of the last access that passed (ok_len 0: none), its racecheck records
  // and, for a __shared__ variable, its size.
  uintptr_t ok_lo = 0, ok_len = 0;
  // The usable part of the last stack slot that passed (far from any user address
  // until then).
  uintptr_t stack_lo = uintptr_t(1) << 63;
  Shadows ok_sh;   // from the word at ok_base
  uintptr_t ok_base = 0;
  size_t ok_var = 0;
  int64_t launch = 0;
  uintptr_t module_base = 0;
  uintptr_t barrier_pc = 0;   // of the __syncthreads the last thread to arrive called
  uintptr_t tls_lo = 0, tls_hi = 0;   // this worker's thread-local block: static shared
  uint64_t interval = 0;              // barrier interval, unique across blocks
  std::vector<uint32_t> warp_gen, lane_sync, thread_bar;
  std::vector<Shadow> dyn_shadow, tls_shadow;
  std::vector<Sites> dyn_sites, tls_sites;
  std::string race;
  int races = 0;
  ProfileState profile;
};

// The next barrier interval. Records keep its low 16 bits, 0 meaning none: at every
// wrap they are all cleared.
ATTNBOOK_UNCHECKED inline void next_interval(CheckState& c) {
  if (uint16_t(++c.interval)) return;
  ++c.interval;
  for (auto* v : {&c.dyn_shadow, &c.tls_shadow})
    for (size_t i = 0; i < v->size(); ++i) (*v)[i].interval = 0;
}

ATTNBOOK_UNCHECKED inline void find_module(Session& s) {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&find_module), &info)) return;
  s.module_base = reinterpret_cast<uintptr_t>(info.dli_fbase);
  dl_iterate_phdr([](dl_phdr_info* i, size_t, void* p) -> int {
    auto* s = static_cast<Session*>(p);
    if (i->dlpi_addr != s->module_base) return 0;
    for (int k = 0; k < i->dlpi_phnum; ++k) {
      const auto& h = i->dlpi_phdr[k];
      if (h.p_type == PT_LOAD && !(h.p_flags & PF_X))
        s->module_data.push_back({i->dlpi_addr + h.p_vaddr,
                                  i->dlpi_addr + h.p_vaddr + h.p_memsz});
    }
    return 0;
  }, &s);
}

ATTNBOOK_UNCHECKED inline void find_tls(CheckState& c, uintptr_t base) {
  struct Ctx { uintptr_t base; CheckState* c; } ctx{base, &c};
  dl_iterate_phdr([](dl_phdr_info* i, size_t, void* p) -> int {
    auto* x = static_cast<Ctx*>(p);
    if (i->dlpi_addr != x->base || !i->dlpi_tls_data) return 0;
    for (int k = 0; k < i->dlpi_phnum; ++k)
      if (i->dlpi_phdr[k].p_type == PT_TLS) {
        x->c->tls_lo = reinterpret_cast<uintptr_t>(i->dlpi_tls_data);
        x->c->tls_hi = x->c->tls_lo + i->dlpi_phdr[k].p_memsz;
      }
    return 0;
  }, &ctx);
}

ATTNBOOK_UNCHECKED inline void on_launch(const Job& job) {
  Session& s = session();
  s.job = &job;
  if (s.mode & kProfile)
    s.launches.push_back({job.kernel, job.grid, job.block, job.smem, 0});
}

ATTNBOOK_UNCHECKED inline void on_block_start(Runtime& r, const Job& job) {
  Session& s = session();
  if (!r.check) {
    r.check = new CheckState();   // kept for the worker's life, like its Runtime
    find_tls(*r.check, s.module_base);
  }
  CheckState& c = *r.check;
  c.mode = s.mode;
  c.module_base = c.profile.module_base = s.module_base;
  c.job = &job;
  c.launch = int64_t(s.launches.size()) - 1;
  next_interval(c);
  c.warp_gen.assign(r.warps.size(), 0);
  c.lane_sync.assign(r.nthreads, 0);
  c.thread_bar.assign(r.nthreads, 0);
  c.bar_gen = 0;
  c.race.clear();
  c.races = 0;
  if (c.mode & kRacecheck) {
    size_t dyn_words = job.smem / 4 + 1, tls_words = (c.tls_hi - c.tls_lo) / 4 + 1;
    if (c.dyn_shadow.size() < dyn_words) {
      c.dyn_shadow.resize(dyn_words);
      c.dyn_sites.resize(dyn_words);
    }
    if (c.tls_shadow.size() < tls_words) {
      c.tls_shadow.resize(tls_words);
      c.tls_sites.resize(tls_words);
    }
  }
  if ((c.mode & kProfile) && c.profile.nlogs < size_t(r.nthreads)) {
    size_t bytes = r.nthreads * sizeof(Buffer<Access>);
    c.profile.logs = static_cast<Buffer<Access>*>(std::realloc(c.profile.logs, bytes));
    for (size_t t = c.profile.nlogs; t < size_t(r.nthreads); ++t)
      c.profile.logs[t] = Buffer<Access>();
    c.profile.nlogs = r.nthreads;
  }
  c.dyn = reinterpret_cast<uintptr_t>(r.dynamic_smem);
  c.smem = job.smem;
  c.params = reinterpret_cast<uintptr_t>(job.params);
  c.params_bytes = job.params_bytes;
  c.threads_lo = reinterpret_cast<uintptr_t>(r.threads.data());
  c.threads_hi = c.threads_lo + r.threads.size() * sizeof(Thread);
  c.warps_lo = reinterpret_cast<uintptr_t>(r.warps.data());
  c.warps_hi = c.warps_lo + r.warps.size() * sizeof(Warp);
  c.allocs = s.allocations.data();
  c.nallocs = s.allocations.size();
  c.nlive = 0;
  c.ok_len = 0;
  c.stack_lo = uintptr_t(1) << 63;
  c.dyn_sh = {c.dyn_shadow.data(), c.dyn_sites.data()};
  c.tls_sh = {c.tls_shadow.data(), c.tls_sites.data()};
  c.gen = c.warp_gen.data();
  c.sync = c.lane_sync.data();
  c.bar_sync = c.thread_bar.data();
}

ATTNBOOK_UNCHECKED inline void on_static_shared(Runtime& r, void* p, size_t bytes) {
  CheckState* c = r.check;
  if (!c || c->nlive == 64) return;   // more than 64 variables: the rest go unchecked
  auto a = reinterpret_cast<uintptr_t>(p);
  c->live[c->nlive++] = {a, a + bytes};
}

// The allocation holding [a, a + n), or nullptr (a binary search).
ATTNBOOK_UNCHECKED inline const Span* allocation(const CheckState& c, uintptr_t a,
                                                 size_t n) {
  size_t lo = 0, hi = c.nallocs;   // the first span starting after a is allocs[lo]
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c.allocs[mid].lo <= a) lo = mid + 1;
    else hi = mid;
  }
  return lo > 0 && a + n <= c.allocs[lo - 1].hi ? &c.allocs[lo - 1] : nullptr;
}

}  // namespace attnbook_emu

// Racecheck, on the state above.
#include "emu_racecheck.h"

namespace attnbook_emu {

// ---- where an address lies ---------------------------------------------------------
// `what` names [lo, hi) with a %zu for its size: "a %zu-byte allocation".
ATTNBOOK_UNCHECKED inline std::string describe(uintptr_t a, size_t n, uintptr_t lo,
                                               uintptr_t hi, const char* what) {
  char name[160], buf[256];
  std::snprintf(name, sizeof name, what, size_t(hi - lo));
  if (a >= hi)
    std::snprintf(buf, sizeof buf, "%zu bytes past the end of %s", size_t(a - hi),
                  name);
  else if (a < lo)
    std::snprintf(buf, sizeof buf, "%zu bytes before the start of %s",
                  size_t(lo - a), name);
  else   // starts inside, ends outside
    std::snprintf(buf, sizeof buf, "at byte %zu of %s, its last %zu bytes past the end",
                  size_t(a - lo), name, size_t(a + n - hi));
  return buf;
}

// The allocation nearest to [a, a + n), described; "" when there is none.
ATTNBOOK_UNCHECKED inline std::string nearest(const std::vector<Span>& spans,
                                              uintptr_t a, size_t n, const char* what) {
  const Span* best = nullptr;
  uintptr_t gap = UINTPTR_MAX;
  for (const Span& s : spans) {
    uintptr_t d = a >= s.hi ? a - s.hi : (a + n <= s.lo ? s.lo - a - n : 0);
    if (d < gap) { gap = d; best = &s; }
  }
  if (!best) return "";
  char at[48];
  std::snprintf(at, sizeof at, " at 0x%llx", (unsigned long long)best->lo);
  return describe(a, n, best->lo, best->hi, (what + std::string(at)).c_str());
}

[[noreturn]] ATTNBOOK_COLD inline void stop(Runtime& r, const char* kind,
                                                 const char* space, size_t n,
                                                 uintptr_t a, uintptr_t pc,
                                                 const std::string& detail) {
  Thread* self = r.cur;
  char head[256];
  std::snprintf(head, sizeof head, "memcheck: invalid %s %s of size %zu bytes at "
                "@pc(0x%llx) in kernel '%s' by thread (%u,%u,%u) in block (%u,%u,%u): "
                "address 0x%llx ", space, kind, n,
                (unsigned long long)(pc - session().module_base), r.kernel,
                self->tid.x, self->tid.y, self->tid.z, r.block_idx.x, r.block_idx.y,
                r.block_idx.z, (unsigned long long)a);
  r.error = head + detail;
  r.in_kernel = false;
  r.cur = nullptr;
  // As the hang guard does: abandon the fiber (its frames are never unwound; throwing
  // through the instrumented call, which GCC takes for nothrow, would terminate).
  Context::jump(self->ctx, r.scheduler);
  __builtin_unreachable();
}

ATTNBOOK_UNCHECKED inline void on_barrier(Runtime& r) {
  CheckState* c = r.check;
  if (!c) return;
  next_interval(*c);
  ++c->profile.barriers;
  if (c->mode & kProfile) {
    flush_profile(r, c->profile);
    count_barrier(c->profile, uint32_t(c->barrier_pc - c->module_base));
  }
}

ATTNBOOK_UNCHECKED inline void on_block_end(Runtime& r) {
  CheckState* c = r.check;
  if (!c) return;
  ProfileState& f = c->profile;
  if (c->mode & kProfile) {
    flush_profile(r, f);
    Session& s = session();
    std::lock_guard<std::mutex> lock(s.m);
    for (size_t i = 0; i < f.counts.n; ++i) {
      const LineCount& k = f.counts.data[i];
      Counts& t = s.counts[{c->launch, k.pc, k.space, k.write}];
      t.requests += k.counts.requests;
      t.units += k.counts.units;
      t.ideal += k.counts.ideal;
      t.bytes += k.counts.bytes;
    }
    if (c->launch >= 0) s.launches[c->launch].barriers += f.barriers;
  }
  f.counts.n = 0;
  f.barriers = 0;
  if (c->races) {
    std::string msg = c->race;
    if (c->races > 1)
      msg += " (and " + std::to_string(c->races - 1) + " more hazards in this block)";
    throw KernelError(msg);
  }
}

// The running fiber's Runtime if kernel code runs on this OS thread, else nullptr.
ATTNBOOK_HOT inline Runtime* kernel_runtime(uintptr_t sp) {
  Runtime* r = arena_of(sp);
  return r && r->in_kernel && r->check ? r : nullptr;
}

// An error path of kernel code (assert, __trap): what follows is the emulator's.
ATTNBOOK_UNCHECKED inline void leave_kernel() {
  char here;
  if (Runtime* r = kernel_runtime(reinterpret_cast<uintptr_t>(&here)))
    r->in_kernel = false;
}

// ---- every access ------------------------------------------------------------------
// The profile's log: global and shared accesses (not atomics, not local memory).
ATTNBOOK_UNCHECKED inline void log_access(Runtime& r, CheckState& c, uintptr_t a,
                                          size_t n, bool write, bool atomic,
                                          uintptr_t pc) {
  if (atomic || n > 16) return;
  int space;
  if ((a >= c.dyn && a < c.dyn + c.smem) || (a >= c.tls_lo && a < c.tls_hi))
    space = kShared;
  else if (allocation(c, a, n))
    space = kGlobal;
  else
    return;
  c.profile.logs[r.cur->linear].push() = {pc, a, uint8_t(n), uint8_t(space), write};
}

// Why an access is out of bounds; the message's detail is made only when it is.
enum Bad { kDynamicPastEnd, kStaticShared, kGuard, kOtherStack, kGlobalMemory };

[[noreturn]] ATTNBOOK_COLD inline void bad_access(Runtime& r, CheckState& c, Bad why,
                                                  uintptr_t a, size_t n,
                                                  const char* kind, uintptr_t pc) {
  std::string d;
  switch (why) {
    case kDynamicPastEnd:
      stop(r, kind, "__shared__", n, a, pc,
           "is " + describe(a, n, c.dyn, c.dyn + c.smem,
                            "the block's %zu bytes of dynamic shared memory"));
    case kStaticShared:
      d = nearest(std::vector<Span>(c.live, c.live + c.nlive), a, n,
                  "a %zu-byte __shared__ variable");
      stop(r, kind, "__shared__", n, a, pc,
           d.empty() ? "is not in any __shared__ variable of this block" : "is " + d);
    case kGuard:
      stop(r, kind, "__local__", n, a, pc,
           "is in the guard below this thread's stack (a stack overflow)");
    case kOtherStack:
      stop(r, kind, "__local__", n, a, pc, "is in the stack of another thread");
    default:
      for (auto f = session().freed.rbegin(); f != session().freed.rend(); ++f)
        if (a < f->hi && a + n > f->lo) {
          char buf[160];
          std::snprintf(buf, sizeof buf, "is in a %zu-byte allocation at 0x%llx that "
                        "was freed before this access (a use after free)",
                        size_t(f->hi - f->lo), (unsigned long long)f->lo);
          stop(r, kind, "__global__", n, a, pc, buf);
        }
      d = nearest(session().allocations, a, n, "a %zu-byte allocation");
      stop(r, kind, "__global__", n, a, pc,
           d.empty() ? "is not in any allocation" : "is out of bounds: " + d);
  }
}

// Remember [lo, hi) as the region of the last access, for the next one (see access).
ATTNBOOK_UNCHECKED inline void remember(CheckState& c, uintptr_t lo, uintptr_t hi,
                                        Shadows sh = {}, uintptr_t base = 0,
                                        size_t var = 0) {
  c.ok_lo = lo;
  c.ok_len = hi - lo;
  c.ok_sh = sh;
  c.ok_base = base;
  c.ok_var = var;
}

// An access that is not in the remembered region: find its region, check it.
__attribute__((noinline)) ATTNBOOK_UNCHECKED inline void classify(
    Runtime& r, CheckState& c, uintptr_t sp, uintptr_t a, size_t n, bool write,
    bool atomic, uintptr_t pc) {
  const char* kind = atomic ? "atomic" : write ? "write" : "read";
  bool check = c.mode & kMemcheck;
  auto base = reinterpret_cast<uintptr_t>(&r);
  c.ok_len = 0;
  if (a >= base && a < base + kArenaBytes) {
    if (a >= c.dyn && a < c.dyn + kDynamicSmemBytes) {
      if (a + n > c.dyn + c.smem && check)
        bad_access(r, c, kDynamicPastEnd, a, n, kind, pc);
      if (atomic) return;   // atomics never race
      if (c.mode & kRacecheck)
        race_access(r, c, c.dyn_sh, c.dyn, a, n, write, pc, 0, a - c.dyn);
      remember(c, c.dyn, c.dyn + c.smem, c.dyn_sh, c.dyn);
      return;
    }
    if (a < base + sizeof(Runtime)) return;   // the emulator's state (blockIdx, ...)
    // Local: the stack slot this fiber runs on.
    uintptr_t first = base + kRuntimeSlots * kSlotBytes;
    uintptr_t mine = (sp - first) / kSlotBytes, its = (a - first) / kSlotBytes;
    uintptr_t lo = first + its * kSlotBytes + kGuardBytes;
    if (its == mine && a >= lo && a + n <= lo + kSlotBytes - kGuardBytes) {
      c.stack_lo = lo;
      return;
    }
    if (check) bad_access(r, c, its == mine ? kGuard : kOtherStack, a, n, kind, pc);
    return;
  }
  if (a >= c.tls_lo && a < c.tls_hi) {   // static __shared__ variables
    for (int i = 0; i < c.nlive; ++i) {
      const Span& v = c.live[i];
      if (a < v.lo || a + n > v.hi) continue;
      if (atomic) return;
      if (c.mode & kRacecheck)
        race_access(r, c, c.tls_sh, c.tls_lo, a, n, write, pc, v.hi - v.lo, a - v.lo);
      return remember(c, v.lo, v.hi, c.tls_sh, c.tls_lo, v.hi - v.lo);
    }
    if (check) bad_access(r, c, kStaticShared, a, n, kind, pc);
    return;
  }
  if (const Span* g = allocation(c, a, n)) return remember(c, g->lo, g->hi);
  if (a >= c.threads_lo && a < c.threads_hi) return;   // threadIdx
  if (a >= c.warps_lo && a < c.warps_hi) return;       // __activemask, votes
  if (!write && a >= c.params && a + n <= c.params + c.params_bytes) return;
  for (const Span& d : session().module_data)
    if (a >= d.lo && a + n <= d.hi) return;
  if (check) bad_access(r, c, kGlobalMemory, a, n, kind, pc);
}

ATTNBOOK_HOT inline void access(const void* p, size_t n, bool write, void* ret,
                                      bool atomic = false) {
  char here;
  auto sp = reinterpret_cast<uintptr_t>(&here);
  Runtime* r = kernel_runtime(sp);
  if (!r) return;
  CheckState& c = *r->check;
  auto a = reinterpret_cast<uintptr_t>(p);
  auto pc = reinterpret_cast<uintptr_t>(ret) - 1;   // inside the calling instruction
  // The thread's own stack, and the region of the last other access that passed,
  // take most accesses: checked, only racecheck's record is left to keep
  // (race_access calls nothing instrumented but hazard, which looks after itself).
  constexpr uintptr_t kStack = kSlotBytes - kGuardBytes;
  if (a - c.stack_lo < kStack && n <= c.stack_lo + kStack - a &&
      sp - c.stack_lo < kStack && !(c.mode & kProfile))
    return;
  bool known = !atomic && a - c.ok_lo < c.ok_len && n <= c.ok_lo + c.ok_len - a;
  if (known) {
    if (c.ok_sh.words && (c.mode & kRacecheck) &&
        !race_unchanged(*r, c, c.ok_sh, c.ok_base, a, n, write))
      race_access(*r, c, c.ok_sh, c.ok_base, a, n, write, pc, c.ok_var, a - c.ok_lo);
    if (!(c.mode & kProfile)) return;
  }
  // What follows calls instrumented code: its accesses must not count, nor recurse.
  r->in_kernel = false;
  if (!known) classify(*r, c, sp, a, n, write, atomic, pc);
  if (c.mode & kProfile) log_access(*r, c, a, n, write, atomic, pc);
  r->in_kernel = true;
}

// A thread calls __syncthreads (before the barrier's own code runs).
__attribute__((noinline)) ATTNBOOK_UNCHECKED inline void note_barrier() {
  char here;
  if (Runtime* r = kernel_runtime(reinterpret_cast<uintptr_t>(&here)))
    r->check->barrier_pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0)) - 1;
}

// An access that emulator code makes for the calling lane (ldmatrix's rows, cp.async's
// copy): checked and counted at the kernel's call site.
__attribute__((noinline)) ATTNBOOK_UNCHECKED inline void note_access(const void* p,
                                                                     size_t bytes,
                                                                     bool write) {
  if (bytes) access(p, bytes, write, __builtin_return_address(0));
}

}  // namespace attnbook_emu

// ---- the Python side's handle on a call (attnbook.toolchain.sanitizer) -------------
// Plain C functions that Python calls through ctypes, so that every checked build has
// them whatever module definition it brings (ab.compile's, or a whole extension's own
// PYBIND11_MODULE); `used`: emitted by every file that includes this one, merged into
// one by the linker.
#define ATTNBOOK_ENTRY \
  extern "C" inline __attribute__((used, visibility("default"), no_sanitize("thread")))

// begin: the checks to make and the storages of the call's tensors (address, bytes,
// ... : n numbers); from then on, tensors torch allocates on this thread are added,
// freed ones removed.
ATTNBOOK_ENTRY void attnbook_checked_begin(int64_t mode, const int64_t* spans,
                                           int64_t n) {
  auto& s = ::attnbook_emu::session();
  if (s.module_data.empty()) ::attnbook_emu::find_module(s);
  {
    std::lock_guard<std::mutex> lock(s.m);
    s.mode = int(mode);
    s.allocations.clear();
    s.freed.clear();
    s.launches.clear();
    s.counts.clear();
  }
  for (int64_t i = 0; i + 1 < n; i += 2)
    if (spans[i + 1] > 0)
      ::attnbook_emu::note_allocation(reinterpret_cast<void*>(spans[i]),
                                      size_t(spans[i + 1]));
  c10::ThreadLocalDebugInfo::_push(
      c10::DebugInfoKind::PROFILER_STATE,
      std::make_shared<::attnbook_emu::AllocationReporter>());
}

// end: the launches profiled, 8 numbers each (grid xyz, block xyz, dynamic smem,
// barriers), their kernels' names (each ending in '\0'), and their counts, 8 numbers
// each (launch, pc offset, space, is_write, requests, units, ideal, bytes). The
// buffers are the session's, valid until the next call.
ATTNBOOK_ENTRY void attnbook_checked_end(const int64_t** launches, int64_t* nlaunches,
                                         const char** names, int64_t* name_bytes,
                                         const int64_t** counts, int64_t* ncounts) {
  c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
  auto& s = ::attnbook_emu::session();
  std::lock_guard<std::mutex> lock(s.m);
  s.out_launches.clear();
  s.out_names.clear();
  s.out_counts.clear();
  for (const auto& l : s.launches) {
    s.out_names += l.kernel;
    s.out_names += '\0';
    s.out_launches.insert(s.out_launches.end(),
                          {l.grid.x, l.grid.y, l.grid.z, l.block.x, l.block.y,
                           l.block.z, int64_t(l.smem), l.barriers});
  }
  for (const auto& [key, k] : s.counts) {
    auto [launch, pc, space, write] = key;
    s.out_counts.insert(s.out_counts.end(), {launch, int64_t(pc), space, write,
                                             k.requests, k.units, k.ideal, k.bytes});
  }
  s.mode = 0;
  s.allocations.clear();
  *launches = s.out_launches.data();
  *nlaunches = int64_t(s.launches.size());
  *names = s.out_names.data();
  *name_bytes = int64_t(s.out_names.size());
  *counts = s.out_counts.data();
  *ncounts = int64_t(s.out_counts.size() / 8);
}

#include "emu_tsan_hooks.h"
