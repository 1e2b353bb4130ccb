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
// The checked build's headers, each on the one before it: emu_check_session.h (the
// call's session), emu_profile.h, emu_check_state.h (CheckState), emu_racecheck.h, this
// file (where an address lies, barriers, every access, the Python side's handle) and
// emu_tsan_hooks.h (GCC's entry points), which emu_hooks.h includes in a checked build.
#pragma once

#include <string>

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
                                                 const std::string& detail,
                                                 const char* what =
                                                     "memcheck: invalid") {
  Thread* self = r.cur;
  char head[256];
  std::snprintf(head, sizeof head, "%s %s %s of size %zu bytes at "
                "@pc(0x%llx) in kernel '%s' by thread (%u,%u,%u) in block (%u,%u,%u): "
                "address 0x%llx ", what, space, kind, n,
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
enum Bad {
  kDynamicPastEnd, kStaticShared, kGuard, kAboveStack, kOtherStack, kGlobalMemory
};

[[noreturn]] ATTNBOOK_COLD inline void bad_access(Runtime& r, CheckState& c, Bad why,
                                                  uintptr_t a, size_t n,
                                                  const char* kind, uintptr_t pc,
                                                  uintptr_t top = 0) {
  std::string d;
  char buf[160];
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
    case kAboveStack:   // top: of this thread's stack
      std::snprintf(buf, sizeof buf, "is %zu bytes above the top of this thread's "
                    "stack (a local array indexed past its end)",
                    size_t(std::max(a, top) - top));
      stop(r, kind, "__local__", n, a, pc, buf);
    case kOtherStack:
      stop(r, kind, "__local__", n, a, pc, "is in the stack of another thread");
    default:
      for (auto f = session().freed.rbegin(); f != session().freed.rend(); ++f)
        if (a < f->hi && a + n > f->lo) {
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
                                        size_t var = 0, bool fresh = false) {
  c.ok_lo = lo;
  c.ok_len = hi - lo;
  c.ok_sh = sh;
  c.ok_base = base;
  c.ok_var = var;
  c.ok_fresh = fresh && (c.mode & kInitcheck);
}

// Initcheck of an access to [a, a + n) in the call's allocation [lo, hi) (see
// unwritten in emu_check_session.h): a read of a word that holds its pattern is
// reported; a write replaces the pattern by zeros first, with a compare-and-swap, as
// another block may write the word's other bytes meanwhile. The written bytes of a
// word stand for all four: a read of the bytes beside a 1- or 2-byte element written
// goes unreported, none is made up (unless a program writes that very NaN).
ATTNBOOK_UNCHECKED inline void check_written(Runtime& r, uintptr_t lo, uintptr_t hi,
                                             uintptr_t a, size_t n, bool reads,
                                             const char* kind, uintptr_t pc) {
  // no std::max: an instrumented call would count its own stack reads
  const uintptr_t first = (lo + 3) & ~uintptr_t(3), at = a & ~uintptr_t(3);
  uintptr_t w = first > at ? first : at;
  for (; w + 4 <= hi && w < a + n; w += 4) {
    auto* word = reinterpret_cast<uint32_t*>(w);
    uint32_t pattern = unwritten(w);
    if (__atomic_load_n(word, __ATOMIC_RELAXED) != pattern) continue;
    if (reads) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "is byte %zu of a %zu-byte allocation at 0x%llx "
                    "made during the call, whose bytes %zu-%zu nothing had written",
                    size_t(a - lo), size_t(hi - lo), (unsigned long long)lo,
                    size_t(w - lo), size_t(w - lo + 3));
      stop(r, kind, "__global__", n, a, pc, buf, "initcheck: uninitialized");
    }
    __atomic_compare_exchange_n(word, &pattern, 0u, false, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
  }
}

// An access that is not in the remembered region: find its region, check it.
__attribute__((noinline)) ATTNBOOK_UNCHECKED inline void classify(
    Runtime& r, CheckState& c, uintptr_t sp, uintptr_t a, size_t n, bool write,
    int atomic, uintptr_t pc) {
  const char* kind = atomic ? "atomic" : write ? "write" : "read";
  const bool reads = !write || atomic == kAtomicUpdate;
  bool check = c.mode & kMemcheck;
  auto base = reinterpret_cast<uintptr_t>(&r);
  c.ok_len = 0;
  if (a >= base && a < base + kArenaBytes) {
    if (a + kPageBytes >= c.dyn && a < c.dyn + kDynamicSmemBytes + kSmemGuardAbove) {
      if ((a < c.dyn || a + n > c.dyn + c.smem) && check)
        bad_access(r, c, kDynamicPastEnd, a, n, kind, pc);
      if (atomic) return;   // atomics never race
      if (c.mode & kRacecheck)
        race_access(r, c, c.dyn_sh, c.dyn, a, n, write, pc, 0, a - c.dyn);
      remember(c, c.dyn, c.dyn + c.smem, c.dyn_sh, c.dyn);
      return;
    }
    if (a < base + sizeof(Runtime)) return;   // the emulator's state (blockIdx, ...)
    // Local: the stack slot this fiber runs on, below the stack's top.
    uintptr_t first = base + kRuntimeSlots * kSlotBytes;
    uintptr_t mine = (sp - first) / kSlotBytes, its = (a - first) / kSlotBytes;
    uintptr_t lo = first + mine * kSlotBytes + kGuardBytes;
    auto top = reinterpret_cast<uintptr_t>(stack_top(r, int(mine)));
    if (a >= lo && a + n <= top) {
      c.stack_lo = lo;
      c.stack_len = top - lo;
      return;
    }
    if (check)
      bad_access(r, c, a + n > top && a >= lo ? kAboveStack
                       : its == mine          ? kGuard
                                              : kOtherStack,
                 a, n, kind, pc, top);
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
  if (const Span* g = allocation(c, a, n)) {
    remember(c, g->lo, g->hi, {}, 0, 0, g->fresh);
    if (c.ok_fresh) check_written(r, g->lo, g->hi, a, n, reads, kind, pc);
    return;
  }
  if (a >= c.threads_lo && a < c.threads_hi) return;   // threadIdx
  if (a >= c.warps_lo && a < c.warps_hi) return;       // __activemask, votes
  if (!write && a >= c.params && a + n <= c.params + c.params_bytes) return;
  for (const Span& d : session().module_data)
    if (a >= d.lo && a + n <= d.hi) return;
  // Nearer a static __shared__ variable of this block than any allocation, and within
  // 64 KiB of it: that variable overrun (the thread-local block may sit in the heap).
  auto gap = [&](const Span& s) {
    return a >= s.hi ? a - s.hi : a + n <= s.lo ? s.lo - a - n : 0;
  };
  uintptr_t to_static = UINTPTR_MAX, to_global = UINTPTR_MAX;
  for (int i = 0; i < c.nlive; ++i) to_static = std::min(to_static, gap(c.live[i]));
  for (const Span& g : session().allocations) to_global = std::min(to_global, gap(g));
  const bool shared = to_static < 64 * 1024 && to_static < to_global;
  if (check) bad_access(r, c, shared ? kStaticShared : kGlobalMemory, a, n, kind, pc);
}

// atomic: kAtomic (a load, a store, an exchange) or kAtomicUpdate (reads, then writes).
// A wgmma's accumulators are the ISA's undefined from its mma_async until the
// wgmma.wait_group that covers it: the kernel touching one is an error.
ATTNBOOK_COLD inline void in_flight_access(Runtime& r, CheckState& c, uintptr_t a,
                                           size_t n, bool write, uintptr_t pc) {
  for (const auto& [reg, line] : c.in_flight[size_t(r.cur->linear)])
    if (a < reg + 4 && reg < a + n) {
      char buf[240];
      std::snprintf(buf, sizeof buf, "is an accumulator of the wgmma.mma_async on "
                    "line %d, in flight: undefined until a wgmma.wait_group covers it "
                    "(PTX ISA)", line);
      stop(r, write ? "write" : "read", "__local__", n, a, pc, buf);
    }
}

// The emulator's wgmma: accumulators d[0..n) of the calling thread are in flight from
// mma_async (line) until its wait lands them.
ATTNBOOK_UNCHECKED inline void on_wgmma_issued(Runtime& r, void* const* d, int n,
                                               int line) {
  CheckState* c = r.check;
  if (!c) return;
  auto& mine = c->in_flight[size_t(r.cur->linear)];
  for (int i = 0; i < n; ++i)
    mine.emplace_back(reinterpret_cast<uintptr_t>(d[i]), line);
  c->in_flight_count += size_t(n);
}
ATTNBOOK_UNCHECKED inline void on_wgmma_landed(Runtime& r, void* const* d, int n) {
  CheckState* c = r.check;
  if (!c) return;
  auto& mine = c->in_flight[size_t(r.cur->linear)];
  for (int i = 0; i < n; ++i) {
    const auto reg = reinterpret_cast<uintptr_t>(d[i]);
    for (size_t k = 0; k < mine.size(); ++k)
      if (mine[k].first == reg) {
        mine.erase(mine.begin() + std::ptrdiff_t(k));
        --c->in_flight_count;
        break;
      }
  }
}

ATTNBOOK_HOT inline void access(const void* p, size_t n, bool write, void* ret,
                                int atomic = 0) {
  char here;
  auto sp = reinterpret_cast<uintptr_t>(&here);
  Runtime* r = kernel_runtime(sp);
  if (!r) return;
  CheckState& c = *r->check;
  auto a = reinterpret_cast<uintptr_t>(p);
  auto pc = reinterpret_cast<uintptr_t>(ret) - 1;   // inside the calling instruction
  if (c.in_flight_count) {   // (calls instrumented code: see the top of the file)
    r->in_kernel = false;
    in_flight_access(*r, c, a, n, write, pc);
    r->in_kernel = true;
  }
  // The thread's own stack, and the region of the last other access that passed,
  // take most accesses: checked, only racecheck's record is left to keep
  // (race_access calls nothing instrumented but hazard, which looks after itself).
  if (a - c.stack_lo < c.stack_len && n <= c.stack_lo + c.stack_len - a &&
      sp - c.stack_lo < c.stack_len && !(c.mode & kProfile))
    return;
  bool known = !atomic && a - c.ok_lo < c.ok_len && n <= c.ok_lo + c.ok_len - a;
  if (known) {
    if (c.ok_sh.words && (c.mode & kRacecheck) &&
        !race_unchanged(*r, c, c.ok_sh, c.ok_base, a, n, write))
      race_access(*r, c, c.ok_sh, c.ok_base, a, n, write, pc, c.ok_var, a - c.ok_lo);
    if (c.ok_fresh)
      check_written(*r, c.ok_lo, c.ok_lo + c.ok_len, a, n, !write,
                    write ? "write" : "read", pc);
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

// ---- the Python side's handle on a call (cuda_emulator.sanitizer) --------------
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
