// What inline PTX becomes on the CPU emulator. The source transform (emulator/ptx.py)
// turns each asm statement into calls of these functions, one per instruction, with the
// asm's operands as arguments; semantics follow the PTX ISA. Part of cuda_emulator.h.
#pragma once

#include "emu_builtins.h"

namespace attnbook_emu {
namespace ptx {

// ---- operands: a register is its bits; a C++ operand of another type is converted ---
template <class To, class T>
inline To bits(const T& v) {
  if constexpr (std::is_pointer_v<T>) {
    return To(reinterpret_cast<uintptr_t>(v));
  } else if constexpr (sizeof(T) == sizeof(To)) {
    To t;
    std::memcpy(&t, &v, sizeof t);
    return t;
  } else {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>,
                  "inline PTX: an operand's C++ type has the wrong size for its "
                  "register");
    return To(v);
  }
}
template <class T> inline uint16_t u16(const T& v) { return bits<uint16_t>(v); }
template <class T> inline uint32_t u32(const T& v) { return bits<uint32_t>(v); }
template <class T> inline uint64_t u64(const T& v) { return bits<uint64_t>(v); }
using b128 = unsigned __int128;   // a .b128 register
template <class T> inline b128 u128(const T& v) { return bits<b128>(v); }
template <class T> inline float f32(const T& v) { return bits<float>(v); }
template <class T> inline double f64(const T& v) { return bits<double>(v); }

// Store a register's value in the C++ output operand.
template <class T, class V>
inline void put(T& dst, V v) {
  if constexpr (std::is_pointer_v<T>) {
    dst = reinterpret_cast<T>(uintptr_t(v));
  } else if constexpr (sizeof(T) == sizeof(V)) {
    std::memcpy(static_cast<void*>(&dst), &v, sizeof v);
  } else {
    static_assert(std::is_arithmetic_v<T>,
                  "inline PTX: an output's C++ type has the wrong size for its "
                  "register");
    dst = T(v);
  }
}

// Per block, what the emulator keeps beside the kernel's threads (T: a vector, one
// entry per thread, or a type whose resize does nothing), made afresh by the first use
// in each block.
template <class T>
inline T& per_block() {
  static thread_local uint64_t epoch = ~uint64_t(0);
  static thread_local const void* block = nullptr;
  static thread_local T state;
  Runtime& r = rt();
  if (epoch != r.block_epoch || block != &r) {
    state = T{};
    state.resize(size_t(r.nthreads));
    epoch = r.block_epoch;
    block = &r;
  }
  return state;
}

// ---- the shared state space: 32-bit addresses ---------------------------------------
// A shared address is a window number (the high bits) and an offset (the low 18 bits).
// A window is a shared object of the running block: window 0 its dynamic shared memory,
// at offset 0 (so its address 0, like a GPU's, is aligned to any power of two a swizzle
// may XOR into), the next ones each static __shared__ variable converted, in order,
// placed from the top of the 256 KiB down, each on 1 KiB. The low 18 bits alone then
// name one object as long as the block's shared memory fits in 256 KiB (a GPU grants
// 227 KiB): what a wgmma matrix descriptor keeps of an address (from_descriptor).
// Windows are the object's, not the first pointer's: a pointer into the middle of an
// object converted first (a swizzled tile) yields the same addresses as its start
// would.
constexpr int kWindowBits = 18;
constexpr uint32_t kWindowMask = (1u << kWindowBits) - 1;
struct Window { uintptr_t host; uint32_t low, bytes; };   // bytes 0: not an object
struct Windows {
  std::vector<Window> all;
  uint32_t top = 1u << kWindowBits;
  void resize(size_t) {}
};
inline Windows& windows() {
  Windows& w = per_block<Windows>();
  if (w.all.empty()) {
    Runtime& r = rt();
    w.all.push_back({reinterpret_cast<uintptr_t>(r.dynamic_smem), 0,
                     uint32_t(r.smem_bytes)});
  }
  return w;
}
// Its bookkeeping is the emulator's own (EmulatorCode: not the kernel's accesses to
// its shared memory, in the checked build).
inline uint32_t to_shared(const void* p) {
  Runtime& r = rt();
  EmulatorCode guard(r);
  auto a = reinterpret_cast<uintptr_t>(p);
  Windows& w = windows();
  if (a - w.all[0].host < kDynamicSmemBytes) return uint32_t(a - w.all[0].host);
  uintptr_t base = 0;   // the static object p points into, if the emulator knows it
  uint32_t bytes = 0;
  for (auto& v : r.static_smem) {
    const auto start = reinterpret_cast<uintptr_t>(v.addr);
    if (!base && a - start < v.bytes) base = start, bytes = uint32_t(v.bytes);
  }
  for (size_t i = 1; i < w.all.size(); ++i) {
    const Window& v = w.all[i];
    if (base ? v.host == base : a - v.host < (uintptr_t(1) << kWindowBits) - v.low)
      return uint32_t(i << kWindowBits | (v.low + (a - v.host)));
  }
  if (w.all.size() >= (size_t(1) << (32 - kWindowBits)))
    fail("inline PTX: too many distinct shared-memory objects converted to addresses");
  uint32_t low = 0;
  if (base && bytes <= w.top) low = w.top = (w.top - bytes) & ~1023u;
  w.all.push_back({base ? base : a, low, low ? bytes : 0});
  return uint32_t((w.all.size() - 1) << kWindowBits | (low + (a - w.all.back().host)));
}
inline void* from_shared(uint64_t address) {
  EmulatorCode guard(rt());
  auto s = uint32_t(address);
  Windows& w = windows();
  size_t i = s >> kWindowBits;
  if (i >= w.all.size()) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "inline PTX: shared address 0x%x was not made by "
                  "cvta.to.shared or __cvta_generic_to_shared", s);
    fail(buf);
  }
  const Window& v = w.all[i];
  return reinterpret_cast<void*>(v.host + int64_t(s & kWindowMask) - v.low);
}
// The shared object at offset `low` (an address's low 18 bits, as a wgmma descriptor
// keeps it), for `what`.
inline Window window_of(int line, uint32_t low, const char* what) {
  EmulatorCode guard(rt());
  for (const Window& v : windows().all)
    if (low - v.low < v.bytes) return v;
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s on line %d: shared offset 0x%x is in no shared "
                "object of this block", what, line, low);
  fail(buf);
}
inline void* from_descriptor(int line, uint32_t low, const char* what) {
  const Window v = window_of(line, low, what);
  return reinterpret_cast<void*>(v.host + (low - v.low));
}
inline void* from_global(uint64_t address) { return reinterpret_cast<void*>(address); }

// ---- asynchronous operations in groups ---------------------------------------------
// A thread's asynchronous operations as cp.async, cp.async.bulk and wgmma group them:
// each waits in the open group until commit_group; wait_group N completes all but the
// N most recent committed groups, oldest first.
template <class Op>
struct AsyncGroups {
  std::vector<Op> open;
  std::vector<std::vector<Op>> committed;
  void commit() {
    committed.push_back(std::move(open));
    open.clear();
  }
  template <class F>
  void complete(uint64_t pending, F f) {
    const size_t n = committed.size() > pending ? committed.size() - pending : 0;
    for (size_t g = 0; g < n; ++g)
      for (Op& op : committed[g]) f(op);
    committed.erase(committed.begin(), committed.begin() + std::ptrdiff_t(n));
  }
};
template <class Op>
inline AsyncGroups<Op>& thread_groups() {
  return per_block<std::vector<AsyncGroups<Op>>>()[size_t(rt().cur->linear)];
}

// ---- cp.async: copies land when a wait_group covering them returns ------------------
// A read of the destination before the wait sees what was there before (NaN, for
// fresh shared memory), as a GPU may show.
struct Copy { void* dst; const void* src; int bytes, src_bytes; };
// A vector access must be aligned to its whole size (a GPU raises "misaligned
// address").
inline void check_aligned(int line, const void* p, size_t bytes) {
  if (reinterpret_cast<uintptr_t>(p) % bytes == 0) return;
  char buf[160];
  std::snprintf(buf, sizeof buf, "inline PTX on line %d: misaligned address %p for an "
                "access of %zu bytes", line, p, bytes);
  fail(buf);
}

// Inlined into the kernel: the checked build names the copy by the kernel's line.
__attribute__((always_inline)) inline void cp_async(int line, void* dst,
                                                    const void* src, int bytes,
                                                    int src_bytes, bool cg) {
  if ((cg && bytes != 16) || (bytes != 4 && bytes != 8 && bytes != 16)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "cp.async%s on line %d: a copy of %d bytes (%s)",
                  cg ? ".cg" : ".ca", line, bytes, cg ? "16" : "4, 8 or 16");
    fail(buf);
  }
  check_aligned(line, dst, size_t(bytes));
  check_aligned(line, src, size_t(bytes));
  if (src_bytes < 0 || src_bytes > bytes) src_bytes = bytes;
  // The checked build sees the copy here, where it is issued: memcheck checks both
  // ends, racecheck counts the shared write from now (it may land any time until the
  // wait), the profile counts a load and a store.
  note_access(src, size_t(src_bytes), false);
  note_access(dst, size_t(bytes), true);
  EmulatorCode guard(rt());
  thread_groups<Copy>().open.push_back({dst, src, bytes, src_bytes});
}
inline void cp_async_commit() {
  EmulatorCode guard(rt());
  thread_groups<Copy>().commit();
}
// The copies themselves are libc's memcpy, seen by the checked build where they were
// issued (cp_async).
inline void cp_async_wait(uint64_t pending) {
  EmulatorCode guard(rt());
  thread_groups<Copy>().complete(pending, [](const Copy& k) {
    std::memcpy(k.dst, k.src, size_t(k.src_bytes));
    std::memset(static_cast<char*>(k.dst) + k.src_bytes, 0,
                size_t(k.bytes - k.src_bytes));
  });
}
inline void cp_async_wait_all() {
  cp_async_commit();
  cp_async_wait(0);
}

// ---- tensor cores -------------------------------------------------------------------
// mma.sync with f16 accumulators: C and D are two registers of packed halves, in the
// same per-lane places as the f32 form's four floats.
template <int K>
inline void mma_f16_acc(int line, uint32_t* d, const uint32_t* a, const uint32_t* b,
                        const uint32_t* c) {
  float cf[4], df[4];
  for (int i = 0; i < 4; ++i) cf[i] = to_float<__half>(half_of(c[i / 2], i % 2));
  mma<__half, K>(line, df, a, b, cf);
  for (int r = 0; r < 2; ++r)
    d[r] = pack(__half(df[2 * r]).__x, __half(df[2 * r + 1]).__x);
}

// ---- shfl.sync: c packs the segment mask as (32 - width) << 8 -----------------------
template <Shfl kind>
inline uint32_t shfl(int line, uint32_t a, uint32_t b, uint32_t c, uint32_t mask) {
  int width = kWarp - int((c >> 8) & 0x1f);
  return ShflAt<kind>{line}(mask, a, int(b), width);
}

// lop3.b32: bit i of the result is bit (a_i b_i c_i, as a 3-bit number) of lut.
inline uint32_t lop3(uint32_t a, uint32_t b, uint32_t c, uint32_t lut) {
  uint32_t r = 0;
  for (int i = 0; i < 8; ++i)
    if (lut >> i & 1) r |= (i & 4 ? a : ~a) & (i & 2 ? b : ~b) & (i & 1 ? c : ~c);
  return r;
}

inline uint32_t laneid() { return uint32_t(rt().cur->linear % kWarp); }

// ---- named barriers: bar.sync / bar.arrive with an id (0-15) and a thread count -----
// bar.sync waits until `count` threads have arrived at barrier `id` (by bar.sync or
// bar.arrive); bar.arrive counts itself and goes on. Barrier 0 of the whole block is
// __syncthreads. A waiting thread shows as waiting at a barrier on the asm's line.
struct NamedBarrier {
  uint32_t expected = 0;
  std::vector<int> arrived;   // the threads, in the order they arrived
  std::vector<Thread*> waiting;
};
struct NamedBarriers {
  NamedBarrier all[16];
  void resize(size_t) {}
};
inline NamedBarrier& named_barrier_of(uint32_t id) {
  return per_block<NamedBarriers>().all[id];
}
inline void named_barrier(int line, uint32_t id, uint32_t count, bool wait) {
  Runtime& r = rt();
  EmulatorCode guard(r);
  const uint32_t n = uint32_t(r.nthreads);
  if (count == 0) count = n;
  char buf[200];
  if (id > 15 || count > n || (count % kWarp && count != n) ||
      (id == 0 && count != n)) {
    std::snprintf(buf, sizeof buf, "bar.%s on line %d: barrier %u for %u threads (ids "
                  "0-15, a multiple of 32 threads, barrier 0 only for the whole block)",
                  wait ? "sync" : "arrive", line, id, count);
    fail(buf);
  }
  if (id == 0 && wait) return void(syncthreads(line));
  NamedBarrier& b = named_barrier_of(id);
  if (b.arrived.empty()) b.expected = count;
  if (b.expected != count) {
    std::snprintf(buf, sizeof buf, "bar on line %d: barrier %u awaited by %u and by %u "
                  "threads at once", line, id, b.expected, count);
    fail(buf);
  }
  b.arrived.push_back(r.cur->linear);
  if (b.arrived.size() == b.expected) {
    for (Thread* t : b.waiting) t->state = State::Runnable;
    on_named_barrier(r, b.arrived);   // racecheck: these threads are now in order
    b.waiting.clear();
    b.arrived.clear();
    return;
  }
  if (!wait) return;
  Thread* self = r.cur;
  b.waiting.push_back(self);
  self->state = State::AtBarrier;
  self->barrier_line = line;
  switch_to(r, self, pick(r));
}

}  // namespace ptx
}  // namespace attnbook_emu

inline size_t __cvta_generic_to_shared(const void* p) {
  return ::attnbook_emu::ptx::to_shared(p);
}
inline void* __cvta_shared_to_generic(size_t a) {
  return ::attnbook_emu::ptx::from_shared(a);
}
inline size_t __cvta_generic_to_global(const void* p) {
  return reinterpret_cast<size_t>(p);
}
inline void* __cvta_global_to_generic(size_t a) { return reinterpret_cast<void*>(a); }
