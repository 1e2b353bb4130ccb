// The checked build's state (see emu_checked.h for the whole design): each worker's
// CheckState (racecheck's shadow of shared memory, the profile's state, where the
// kernel's stacks and data lie) and the hooks at launches, blocks and static shared
// memory.
#pragma once

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
  // The usable part of the last stack slot that passed, [stack_lo, + stack_len): the
  // stack below its top (far from any user address until then).
  uintptr_t stack_lo = uintptr_t(1) << 63, stack_len = 0;
  Shadows ok_sh;   // from the word at ok_base
  uintptr_t ok_base = 0;
  size_t ok_var = 0;
  bool ok_fresh = false;   // an allocation of the call's that initcheck watches
  int64_t launch = 0;
  uintptr_t module_base = 0;
  uintptr_t barrier_pc = 0;   // of the __syncthreads the last thread to arrive called
  uintptr_t tls_lo = 0, tls_hi = 0;   // this worker's thread-local block: static shared
  uint64_t interval = 0;              // barrier interval, unique across blocks
  std::vector<uint32_t> warp_gen, lane_sync, thread_bar;
  std::vector<Shadow> dyn_shadow, tls_shadow;
  std::vector<Sites> dyn_sites, tls_sites;
  std::string race;
  int races = 0, race_rank = 0;   // race_rank: of the hazard `race` reports
  // Each thread's accumulators of wgmmas in flight (address, the wgmma's line), and
  // how many there are in the block: the kernel may not touch them until their wait.
  std::vector<std::vector<std::pair<uintptr_t, int>>> in_flight;
  size_t in_flight_count = 0;
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
  c.in_flight.assign(r.nthreads, {});
  c.in_flight_count = 0;
  c.race.clear();
  c.races = c.race_rank = 0;
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
  c.stack_len = 0;
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
