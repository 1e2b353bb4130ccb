// cg::memcpy_async and cg::wait on the CPU emulator: each thread of the group copies
// its share at once; only cg::wait, the group's barrier, promises the whole copy to
// every thread (a read before it depends on the thread order, as a race does).
#pragma once
#include <algorithm>
#include "../cooperative_groups.h"

namespace cooperative_groups {
template <class Group>
inline void memcpy_async(const Group& g, void* dst, const void* src, size_t bytes) {
  const size_t n = g.size(), chunk = (bytes + n - 1) / n;
  const size_t lo = std::min(bytes, size_t(g.thread_rank()) * chunk);
  const size_t hi = std::min(bytes, lo + chunk);
  std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo,
              hi - lo);
}
template <class Group> inline void wait(const Group& g) { g.sync(); }
template <unsigned N, class Group> inline void wait_prior(const Group& g) { g.sync(); }
}  // namespace cooperative_groups
