// The profile: warp-wide requests, sectors and bank-conflict wavefronts per line.
// It logs each thread's global and shared accesses between two barriers; at
// the barrier, a warp's accesses are grouped by instruction (call site) and occurrence
// (the k-th execution of an instruction by each lane is one warp-wide request) and
// counted as a GPU would: 32-byte sectors for global memory, and for shared memory
// wavefronts over 32 banks of 4 bytes, a 64-bit access in two phases of 16 lanes and a
// 128-bit one in four phases of 8 (CUDA C++ Programming Guide, shared memory).
//
// Part of the emulator's checked build, on its session (emu_check_session.h) and
// before its state (emu_check_state.h: CheckState holds a ProfileState); see
// emu_checked.h for the whole design.
#pragma once

#include "emu_check_session.h"

namespace attnbook_emu {

// ---- the profile -------------------------------------------------------------------
// Everything here works on raw memory (libc's malloc): an STL container's members would
// be instrumented calls, each reporting its own accesses (see emu_checked.h).

// A map from 64-bit keys (never ~0) to 32-bit values, by open addressing.
struct Table {
  uint64_t* keys = nullptr;
  uint32_t* vals = nullptr;
  size_t cap = 0;

  // Empty, with room for `n` keys.
  ATTNBOOK_UNCHECKED void reset(size_t n) {
    size_t want = 16;
    while (want < 2 * n) want *= 2;
    if (want > cap) {
      std::free(keys);
      std::free(vals);
      keys = static_cast<uint64_t*>(std::malloc(want * sizeof *keys));
      vals = static_cast<uint32_t*>(std::malloc(want * sizeof *vals));
      cap = want;
    }
    std::memset(keys, 0xff, cap * sizeof *keys);
  }
  // The value of `k`, 0 when new.
  ATTNBOOK_UNCHECKED uint32_t& at(uint64_t k) {
    size_t i = (k * 0x9e3779b97f4a7c15ull) >> 20 & (cap - 1);
    while (keys[i] != k && keys[i] != ~uint64_t(0)) i = (i + 1) & (cap - 1);
    if (keys[i] != k) {
      keys[i] = k;
      vals[i] = 0;
    }
    return vals[i];
  }
};

// A growable array of trivially copyable T.
template <class T>
struct Buffer {
  T* data = nullptr;
  size_t n = 0, cap = 0;
  ATTNBOOK_UNCHECKED T& push() {
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      data = static_cast<T*>(std::realloc(data, cap * sizeof(T)));
    }
    return data[n++];
  }
};

// A kernel's access, as logged for the profile.
struct Access {
  uintptr_t pc, addr;
  uint8_t size, space, write;
};

// One warp-wide request: lane l accessed [addr[l], addr[l] + size[l]) if l is in mask.
struct Request {
  uint32_t pc, mask;
  uint8_t space, write;
  uint8_t size[kWarp];
  uintptr_t addr[kWarp];
};

// A source instruction's counts in a block.
struct LineCount {
  uint32_t pc;   // an offset in this extension
  uint8_t space, write;
  Counts counts;
};

// A worker's profile of the block it runs.
struct ProfileState {
  uintptr_t module_base = 0;
  Buffer<Access>* logs = nullptr;   // per thread, since the last barrier
  size_t nlogs = 0;
  Buffer<Request> requests;         // of the warp being counted
  Table request_of, seen, count_of;
  Buffer<LineCount> counts;
  int64_t barriers = 0;
};

// Sorts v[0..n) and keeps each value once, in v[0..d); returns d.
ATTNBOOK_UNCHECKED inline int distinct(uint64_t* v, int n) {
  for (int i = 1; i < n; ++i)   // insertion sort: n is at most a few hundred
    for (int j = i; j > 0 && v[j - 1] > v[j]; --j) {
      uint64_t t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  int d = 0;
  for (int i = 0; i < n; ++i)
    if (i == 0 || v[i] != v[d - 1]) v[d++] = v[i];
  return d;
}

ATTNBOOK_UNCHECKED inline void count(Counts& k, const Request& q) {
  uint64_t keys[kWarp * 5];   // a lane's 16 bytes span at most 2 sectors or 5 words
  int n = 0, widest = 1;
  ++k.requests;
  for (int l = 0; l < kWarp; ++l)
    if (q.mask & (1u << l)) {
      k.bytes += q.size[l];
      widest = q.size[l] > widest ? q.size[l] : widest;
    }
  if (q.space == kGlobal) {
    for (int l = 0; l < kWarp; ++l)
      if (q.mask & (1u << l))
        for (uintptr_t s = q.addr[l] / 32; s <= (q.addr[l] + q.size[l] - 1) / 32; ++s)
          keys[n++] = s;
    k.units += distinct(keys, n);
    return;
  }
  // Shared: lanes are split into phases (8-byte accesses: 2 of 16 lanes, 16-byte: 4 of
  // 8); a phase takes as many wavefronts as the most distinct 4-byte words any one bank
  // holds (lanes reading the same word share it).
  int lanes = widest <= 4 ? kWarp : kWarp * 4 / widest;
  for (int p = 0; p < kWarp; p += lanes) {
    n = 0;
    for (int l = p; l < p + lanes; ++l)
      if (q.mask & (1u << l))
        for (uintptr_t w = q.addr[l] / 4; w <= (q.addr[l] + q.size[l] - 1) / 4; ++w)
          keys[n++] = (uint64_t(w % 32) << 58) | (w & ((uint64_t(1) << 58) - 1));
    if (!n) continue;
    n = distinct(keys, n);   // sorted by bank: count the longest run of one bank
    int64_t most = 0, run = 0;
    for (int i = 0; i < n; ++i) {
      run = (i && keys[i] >> 58 == keys[i - 1] >> 58) ? run + 1 : 1;
      most = run > most ? run : most;
    }
    k.units += most;
    ++k.ideal;
  }
}

// Group each warp's logged accesses into requests, count them, and add the counts to
// the block's.
ATTNBOOK_UNCHECKED inline void flush_profile(Runtime& r, ProfileState& f) {
  for (int w = 0; w * kWarp < r.nthreads; ++w) {
    size_t total = 0;
    for (int l = 0; l < kWarp && w * kWarp + l < r.nthreads; ++l)
      total += f.logs[w * kWarp + l].n;
    if (!total) continue;
    f.requests.n = 0;
    f.request_of.reset(total);   // (pc, occurrence) -> request index + 1
    for (int l = 0; l < kWarp && w * kWarp + l < r.nthreads; ++l) {
      Buffer<Access>& log = f.logs[w * kWarp + l];
      f.seen.reset(log.n);       // pc -> how many times this lane ran it so far
      for (size_t i = 0; i < log.n; ++i) {
        const Access& e = log.data[i];
        auto pc = uint32_t(e.pc - f.module_base);
        uint32_t& index = f.request_of.at(uint64_t(pc) << 32 | f.seen.at(pc)++);
        if (!index) {
          Request& q = f.requests.push();
          q.pc = pc;
          q.mask = 0;
          q.space = e.space;
          q.write = e.write;
          index = uint32_t(f.requests.n);
        }
        Request& q = f.requests.data[index - 1];
        q.addr[l] = e.addr;
        q.size[l] = e.size;
        q.mask |= 1u << l;
      }
      log.n = 0;
    }
    f.count_of.reset(f.requests.n);   // (pc, space, write) -> f.counts index + 1
    for (size_t i = 0; i < f.requests.n; ++i) {
      const Request& q = f.requests.data[i];
      uint32_t& index = f.count_of.at(uint64_t(q.pc) << 2 | q.space << 1 | q.write);
      if (!index) {
        f.counts.push() = {q.pc, q.space, q.write, Counts()};
        index = uint32_t(f.counts.n);
      }
      count(f.counts.data[index - 1].counts, q);
    }
  }
}

// A barrier released: one more at its call site (a few per kernel: a linear search).
ATTNBOOK_UNCHECKED inline void count_barrier(ProfileState& f, uint32_t pc) {
  for (size_t i = 0; i < f.counts.n; ++i)
    if (f.counts.data[i].pc == pc && f.counts.data[i].space == kBarrier) {
      ++f.counts.data[i].counts.requests;
      return;
    }
  f.counts.push() = {pc, uint8_t(kBarrier), 0, Counts()};
  f.counts.data[f.counts.n - 1].counts.requests = 1;
}

}  // namespace attnbook_emu
