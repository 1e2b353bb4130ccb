// The profile: warp-wide requests, sectors and bank-conflict wavefronts per line.
// It logs each thread's global and shared accesses between two barriers; at
// the barrier, a warp's accesses are grouped by instruction (call site) and occurrence
// (the k-th execution of an instruction by each lane is one warp-wide request) and
// counted as a GPU would: 32-byte sectors for global memory, and for shared memory
// wavefronts over 32 banks of 4 bytes, a 64-bit access in two phases of 16 lanes and a
// 128-bit one in four phases of 8 (CUDA C++ Programming Guide, shared memory).
//
// Part of the emulator's checked build, included by emu_checked.h after its state
// (CheckState); see there for the whole design.
#pragma once

namespace attnbook_emu {

// ---- the profile -------------------------------------------------------------------
ATTNBOOK_UNCHECKED inline int64_t distinct(std::vector<uint64_t>& v) {
  std::sort(v.begin(), v.end());
  return std::unique(v.begin(), v.end()) - v.begin();
}

// One warp-wide request: lane l accessed [addr[l], addr[l] + size[l]) if l is in mask.
struct Request {
  uintptr_t addr[kWarp];
  uint8_t size[kWarp];
  uint32_t mask = 0;
};

ATTNBOOK_UNCHECKED inline void count(Counts& k, const Request& q, int space) {
  std::vector<uint64_t> keys;
  ++k.requests;
  int widest = 1;
  for (int l = 0; l < kWarp; ++l)
    if (q.mask & (1u << l)) {
      k.bytes += q.size[l];
      widest = std::max<int>(widest, q.size[l]);
    }
  if (space == kGlobal) {
    for (int l = 0; l < kWarp; ++l)
      if (q.mask & (1u << l))
        for (uintptr_t s = q.addr[l] / 32; s <= (q.addr[l] + q.size[l] - 1) / 32; ++s)
          keys.push_back(s);
    k.units += distinct(keys);
    return;
  }
  // Shared: lanes are split into phases (8-byte accesses: 2 of 16 lanes, 16-byte: 4 of
  // 8); a phase takes as many wavefronts as the most distinct 4-byte words any one bank
  // holds (lanes reading the same word share it).
  int lanes = widest <= 4 ? kWarp : kWarp * 4 / widest;
  for (int p = 0; p < kWarp; p += lanes) {
    keys.clear();
    for (int l = p; l < p + lanes; ++l)
      if (q.mask & (1u << l))
        for (uintptr_t w = q.addr[l] / 4; w <= (q.addr[l] + q.size[l] - 1) / 4; ++w)
          keys.push_back((uint64_t(w % 32) << 58) | (w & ((uint64_t(1) << 58) - 1)));
    if (keys.empty()) continue;
    keys.resize(distinct(keys));
    int64_t most = 0, run = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      run = (i && keys[i] >> 58 == keys[i - 1] >> 58) ? run + 1 : 1;
      most = std::max(most, run);
    }
    k.units += most;
    ++k.ideal;
  }
}

// Group each warp's logged accesses into requests and count them.
ATTNBOOK_UNCHECKED inline void flush_profile(Runtime& r, CheckState& c) {
  for (size_t w = 0; w < r.warps.size(); ++w) {
    std::map<std::tuple<uintptr_t, int, int>, std::vector<Request>> requests;
    for (int l = 0; l < kWarp && int(w) * kWarp + l < r.nthreads; ++l) {
      std::unordered_map<uintptr_t, size_t> seen;
      auto& log = c.log[w * kWarp + l];
      for (const Access& e : log) {
        auto& v = requests[{e.pc, e.space, e.write}];
        size_t k = seen[e.pc]++;
        if (k >= v.size()) v.resize(k + 1);
        v[k].addr[l] = e.addr;
        v[k].size[l] = e.size;
        v[k].mask |= 1u << l;
      }
      log.clear();
    }
    for (auto& [key, v] : requests) {
      auto [pc, space, write] = key;
      Counts& k = c.counts[{c.launch, pc - session().module_base, space, write}];
      for (const Request& q : v) count(k, q, space);
    }
  }
}

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
  c.log[r.cur->linear].push_back({pc, a, uint8_t(n), uint8_t(space), write});
}

}  // namespace attnbook_emu
