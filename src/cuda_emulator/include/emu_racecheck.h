// Racecheck: shared-memory hazards between two barriers. For every 4-byte word of
// shared memory (Shadow and Sites), who wrote it and who read it since the last
// __syncthreads (an interval number, so nothing is cleared at a barrier); reported:
// read-after-write, write-after-read and write-after-write between two threads that no
// barrier puts in order: neither __syncthreads, nor a named barrier (bar.sync id) both
// took part in, nor within a warp a collective taken by both.
//
// Part of the emulator's checked build, on its state (emu_check_state.h: CheckState);
// see emu_checked.h for the whole design.
#pragma once

#include "emu_check_state.h"

namespace attnbook_emu {

// ---- racecheck ---------------------------------------------------------------------
// Whether thread a's access, made when its warp's collective count was gen and the
// block's named-barrier count bar, comes before thread b's access now: both lanes of
// one warp have since taken part in a collective, or both threads in a named barrier.
// (Two different ones count too: a hazard can go unseen, never one be made up.)
ATTNBOOK_UNCHECKED inline bool ordered(const CheckState& c, int a, uint32_t gen,
                                       uint32_t bar, int b) {
  return (a / kWarp == b / kWarp && c.sync[a] > gen && c.sync[b] > gen) ||
         (c.bar_sync[a] > bar && c.bar_sync[b] > bar);
}

// The block's report is its first read-after-write or write-after-read hazard, or,
// if it has none, its first write-after-write (often two threads storing one value,
// which a reader of the report would otherwise see ahead of the hazard that matters).
ATTNBOOK_COLD inline void hazard(Runtime& r, CheckState& c, const char* kind,
                                 int first, uint32_t first_pc, const char* did,
                                 uintptr_t pc, const char* does, uintptr_t a,
                                 size_t var, size_t offset) {
  const int rank = std::strcmp(kind, "write-after-write") ? 2 : 1;
  ++c.races;
  if (rank <= c.race_rank) return;
  c.race_rank = rank;
  bool was = r.in_kernel;   // what follows is instrumented: not the kernel's accesses
  r.in_kernel = false;
  char region[64];   // var: the __shared__ variable's size, 0 for dynamic shared memory
  if (var) std::snprintf(region, sizeof region, "a %zu-byte __shared__ variable", var);
  else std::snprintf(region, sizeof region, "dynamic shared memory");
  const Thread& t0 = r.threads[first];
  const Thread& t1 = *r.cur;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "racecheck: %s hazard on shared memory in kernel '%s', block "
                "(%u,%u,%u): thread (%u,%u,%u) %s address 0x%llx (byte %zu of %s) at "
                "@pc(0x%x), then thread (%u,%u,%u) %s it at @pc(0x%llx), with no "
                "barrier between them", kind, r.kernel, r.block_idx.x, r.block_idx.y,
                r.block_idx.z, t0.tid.x, t0.tid.y, t0.tid.z, did, (unsigned long long)a,
                offset, region, first_pc, t1.tid.x, t1.tid.y, t1.tid.z, does,
                (unsigned long long)(pc - session().module_base));
  c.race = buf;
  r.in_kernel = was;
}

// Whether a read of 4 bytes at a (in the region of sh, from base) leaves the records
// as they are: the common case of a tile read by every thread, a word two other
// threads have read since the barrier and none has written (a third reader is not
// kept). Inlined in every access; race_access does the rest.
ATTNBOOK_HOT inline bool race_unchanged(const Runtime& r, const CheckState& c,
                                        Shadows sh, uintptr_t base, uintptr_t a,
                                        size_t n, bool write) {
  if (write || n != 4 || ((a - base) & 3)) return false;
  const Shadow& e = sh.words[(a - base) / 4];
  int t = r.cur->linear;
  return e.interval == uint16_t(c.interval) && e.writer < 0 && e.reader[1] >= 0 &&
         e.reader[0] != t && e.reader[1] != t;
}

// A hazard if thread `who`'s recorded access x, which `did` ("wrote", "read"), touched
// bytes m of the word and no barrier orders it before thread t's access now.
ATTNBOOK_HOT inline void against(Runtime& r, CheckState& c, int who, const Site& x,
                                 const char* did, int t, uint8_t m, bool write,
                                 uintptr_t pc, uintptr_t lo, size_t var, size_t at) {
  if (who < 0 || who == t || !(x.mask & m) || ordered(c, who, x.gen, x.bar, t)) return;
  const char* kind = *did == 'r' ? "write-after-read"
                     : write     ? "write-after-write"
                                 : "read-after-write";
  hazard(r, c, kind, who, x.pc, did, pc, write ? "writes" : "reads", lo, var, at);
}

// An access to [a, a + n) of shared memory whose first word, at `base`, has the records
// sh; `var` and `offset` only name the place in a report.
__attribute__((noinline)) ATTNBOOK_UNCHECKED inline void race_access(
    Runtime& r, CheckState& c, Shadows sh, uintptr_t base, uintptr_t a, size_t n,
    bool write, uintptr_t pc, size_t var, size_t offset) {
  int t = r.cur->linear;
  auto interval = uint16_t(c.interval);
  Site now{0, c.gen[t / kWarp], c.bar_gen, uint32_t(pc - c.module_base)};
  for (uintptr_t w = (a - base) / 4; w <= (a + n - 1 - base) / 4; ++w) {
    // std::min and max would be calls (instrumented ones): see the top of the file.
    uintptr_t lo = a > base + 4 * w ? a : base + 4 * w;
    uintptr_t hi = a + n < base + 4 * w + 4 ? a + n : base + 4 * w + 4;
    now.mask = uint8_t(((1u << (hi - lo)) - 1) << (lo - base - 4 * w));
    size_t at = offset + (lo - a);
    Shadow& e = sh.words[w];
    Sites& s = sh.sites[w];
    if (e.interval != interval) {
      e.interval = interval;
      e.writer = e.reader[0] = e.reader[1] = s.writer2 = -1;
    }
    against(r, c, e.writer, s.w, "wrote", t, now.mask, write, pc, lo, var, at);
    against(r, c, s.writer2, s.w2, "wrote", t, now.mask, write, pc, lo, var, at);
    if (write) {
      for (int k = 0; k < 2; ++k)
        against(r, c, e.reader[k], s.r[k], "read", t, now.mask, write, pc, lo, var, at);
      Site rec = now;
      if (e.writer == t) {
        rec.mask |= s.w.mask;
      } else if (e.writer >= 0 && !(s.w.mask & now.mask)) {
        s.writer2 = e.writer;   // another thread's bytes of the word: kept
        s.w2 = s.w;
      }
      e.writer = int16_t(t);
      s.w = rec;
    } else {
      int k = e.reader[0] < 0 || e.reader[0] == t ? 0 : 1;
      if (k == 1 && e.reader[1] >= 0 && e.reader[1] != t) continue;   // two kept
      Site rec = now;
      if (e.reader[k] == t) rec.mask |= s.r[k].mask;
      e.reader[k] = int16_t(t);
      s.r[k] = rec;
    }
  }
}

// Lanes `group` of a warp took part in a collective: they are now in order.
ATTNBOOK_UNCHECKED inline void on_warp_sync(Runtime& r, int warp, uint32_t group) {
  CheckState* c = r.check;
  if (!c) return;
  uint32_t g = ++c->gen[warp];
  for (int l = 0; l < kWarp; ++l)
    if (group & (1u << l)) c->sync[warp * kWarp + l] = g;
}

// A named barrier (bar.sync / bar.arrive with an id) completed for these threads.
ATTNBOOK_UNCHECKED inline void on_named_barrier(Runtime& r,
                                                const std::vector<int>& threads) {
  CheckState* c = r.check;
  if (!c) return;
  uint32_t g = ++c->bar_gen;
  for (size_t i = 0; i < threads.size(); ++i) c->bar_sync[threads[i]] = g;
}

// An mbarrier's phase completed with these threads' arrivals (and the asynchronous
// copies it counted, whose writes are the issuing thread's): they are in order with
// every thread that later sees the phase complete (on_mbarrier_observed with the
// returned generation), as at a named barrier. So are the lanes that took part in an
// arriving lane's last warp collective (one lane arrives for its warp after
// __syncwarp).
ATTNBOOK_UNCHECKED inline uint32_t on_mbarrier_phase(Runtime& r,
                                                     const std::vector<int>& threads) {
  CheckState* c = r.check;
  if (!c) return 0;
  uint32_t g = ++c->bar_gen;
  for (int t : threads) {
    c->bar_sync[t] = g;
    const int first = t / kWarp * kWarp;
    for (int l = first; l < first + kWarp && l < r.nthreads; ++l)
      if (c->sync[t] && c->sync[l] == c->sync[t]) c->bar_sync[l] = g;
  }
  return g;
}
ATTNBOOK_UNCHECKED inline void on_mbarrier_observed(Runtime& r, uint32_t g) {
  CheckState* c = r.check;
  if (!c) return;
  uint32_t& mine = c->bar_sync[r.cur->linear];
  if (mine < g) mine = g;
}

}  // namespace attnbook_emu
