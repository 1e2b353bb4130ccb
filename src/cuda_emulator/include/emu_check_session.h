// The checked build's session (see emu_checked.h for the whole design): the checks a
// call asked for, the storages kernel code may touch (noted as torch allocates and
// frees them), and what the profile counted; and the attributes that keep the checker's
// own code out of the checks.
#pragma once

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include "emu_blocks.h"

#define ATTNBOOK_UNCHECKED __attribute__((no_sanitize("thread")))
#define ATTNBOOK_HOT __attribute__((no_sanitize("thread"), always_inline))
#define ATTNBOOK_COLD __attribute__((no_sanitize("thread"), noinline, cold))

namespace attnbook_emu {

enum Check : int { kMemcheck = 1, kRacecheck = 2, kProfile = 4, kInitcheck = 8 };
enum Atomic : int { kAtomic = 1, kAtomicUpdate = 2 };   // access()'s `atomic`
enum Space : int { kGlobal = 0, kShared = 1, kBarrier = 2 };   // kBarrier: counts

struct Span {
  uintptr_t lo, hi;
  bool fresh = false;   // allocated during the call: initcheck's pattern (below)
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

// ---- initcheck's pattern -----------------------------------------------------------
// Memory allocated while a checked call runs (torch::empty, cudaMalloc) starts out
// holding a pattern: each 4-byte word its own signalling NaN, 0x7fa00000 and 21 bits
// of a hash of its address. Host code that fills it (torch::zeros, cudaMemset, a copy)
// overwrites the pattern, and kernel code's first write to a word replaces it (see
// check_written in emu_checked.h), so a kernel's read of a word that still holds its
// pattern reads memory that nothing wrote.
ATTNBOOK_HOT inline uint32_t unwritten(uintptr_t word) {
  return 0x7fa00000u | (uint32_t(word >> 2) * 0x9e3779b1u) >> 11;
}

ATTNBOOK_UNCHECKED inline void fill_unwritten(uintptr_t lo, uintptr_t hi) {
  for (uintptr_t w = (lo + 3) & ~uintptr_t(3); w + 4 <= hi; w += 4)
    *reinterpret_cast<uint32_t*>(w) = unwritten(w);
}

// [p, p + bytes) becomes an allocation kernels may touch (bytes 0: p's is freed);
// `fresh`: allocated during the call, so under initcheck it starts unwritten.
ATTNBOOK_UNCHECKED inline void note_allocation(const void* p, size_t bytes,
                                               bool fresh = false) {
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
  fresh = fresh && (s.mode & kInitcheck);
  if (fresh) fill_unwritten(a, a + bytes);
  s.allocations.insert(
      std::lower_bound(s.allocations.begin(), s.allocations.end(), Span{a, a}),
      Span{a, a + bytes, fresh});
}

// Tensors the wrapper allocates during a call (outputs, workspaces) become allocations
// kernels may touch: torch's CPU allocator reports each allocation and free to the
// thread's memory profiler, which this stands in for during the call.
struct AllocationReporter : c10::MemoryReportingInfoBase {
  ATTNBOOK_UNCHECKED void reportMemoryUsage(void* p, int64_t bytes, size_t, size_t,
                                            c10::Device d) override {
    if (d.is_cpu()) note_allocation(p, bytes > 0 ? size_t(bytes) : 0, true);
  }
  bool memoryProfilingEnabled() const override { return true; }
};

}  // namespace attnbook_emu
