// Racecheck: shared-memory hazards between two barriers. For every 4-byte word of
// shared memory (Shadow), who wrote it and who read it since the last barrier (an
// interval number, so nothing is cleared at a barrier); reported: read-after-write,
// write-after-read and write-after-write between two threads that no barrier, and
// within a warp no collective taken by both, puts in order.
//
// Part of the emulator's checked build, included by emu_checked.h after its state
// (CheckState); see there for the whole design.
#pragma once

namespace attnbook_emu {

// ---- racecheck ---------------------------------------------------------------------
ATTNBOOK_UNCHECKED inline bool ordered(const CheckState& c, int a, uint32_t gen,
                                       int b) {
  // Same warp, and both lanes have since taken part in a collective.
  return a / kWarp == b / kWarp && c.sync[a] > gen && c.sync[b] > gen;
}

ATTNBOOK_COLD inline void hazard(Runtime& r, CheckState& c, const char* kind,
                                 int first, uint32_t first_pc, const char* did,
                                 uintptr_t pc, const char* does, uintptr_t a,
                                 size_t var, size_t offset) {
  if (c.races++) return;
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

// An access to [a, a + n) of shared memory whose first word, at `base`, has the record
// words[0]; `var` and `offset` only name the place in a report.
ATTNBOOK_HOT inline void race_access(Runtime& r, CheckState& c, Shadow* words,
                                           uintptr_t base, uintptr_t a, size_t n,
                                           bool write, uintptr_t pc, size_t var,
                                           size_t offset) {
  int t = r.cur->linear;
  uint32_t gen = c.gen[t / kWarp], here = uint32_t(pc - c.module_base);
  auto interval = uint32_t(c.interval);
  for (uintptr_t w = (a - base) / 4; w <= (a + n - 1 - base) / 4; ++w) {
    // std::min and max would be calls (instrumented ones): see the top of the file.
    uintptr_t lo = a > base + 4 * w ? a : base + 4 * w;
    uintptr_t hi = a + n < base + 4 * w + 4 ? a + n : base + 4 * w + 4;
    auto m = uint8_t(((1u << (hi - lo)) - 1) << (lo - base - 4 * w));
    size_t at = offset + (lo - a);
    Shadow& e = words[w];
    if (e.interval != interval) {
      e.interval = interval;
      e.writer = e.reader[0] = e.reader[1] = -1;
    }
    if (e.writer >= 0 && e.writer != t && (e.wmask & m) &&
        !ordered(c, e.writer, e.wgen, t))
      hazard(r, c, write ? "write-after-write" : "read-after-write", e.writer, e.wpc,
             "wrote", pc, write ? "writes" : "reads", lo, var, at);
    if (write) {
      for (int k = 0; k < 2; ++k)
        if (e.reader[k] >= 0 && e.reader[k] != t && (e.rmask[k] & m) &&
            !ordered(c, e.reader[k], e.rgen[k], t))
          hazard(r, c, "write-after-read", e.reader[k], e.rpc[k], "read", pc, "writes",
                 lo, var, at);
      e.wmask = e.writer == t ? uint8_t(e.wmask | m) : m;
      e.writer = int16_t(t);
      e.wgen = gen;
      e.wpc = here;
    } else {
      int k = e.reader[0] < 0 || e.reader[0] == t ? 0 : 1;
      if (k == 1 && e.reader[1] >= 0 && e.reader[1] != t) continue;   // two kept
      e.rmask[k] = e.reader[k] == t ? uint8_t(e.rmask[k] | m) : m;
      e.reader[k] = int16_t(t);
      e.rgen[k] = gen;
      e.rpc[k] = here;
    }
  }
}

ATTNBOOK_UNCHECKED inline void on_warp_sync(Runtime& r, int warp, uint32_t group) {
  CheckState* c = r.check;
  if (!c) return;
  uint32_t g = ++c->gen[warp];
  for (int l = 0; l < kWarp; ++l)
    if (group & (1u << l)) c->sync[warp * kWarp + l] = g;
}

}  // namespace attnbook_emu
