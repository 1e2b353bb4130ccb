// Hopper's asynchronous instructions on the CPU emulator, as the PTX ISA defines them:
// mbarrier (arrivals, transaction bytes, phases), elect.sync, setmaxnreg, the bulk and
// tensor copies of the Tensor Memory Accelerator (TMA) and wgmma. Part of
// cuda_emulator.h; the source transform (emulator/ptx.py) calls these.
//
// What is asynchronous lands at a time the thread order picks, within what the ISA
// allows: a TMA load lands when issued (forward order), or only when a thread first
// waits on its mbarrier (reverse order; a coin per copy when shuffled); a wgmma reads
// its shared operands when issued (forward) or at its wait_group (otherwise), and its
// accumulators read NaN until that wait. A kernel that reads too early thus gets
// another answer in some order, and the tests that run all three catch it.
#pragma once

#include <deque>
#include <optional>

#include "emu_ptx.h"

// ---- tensor maps: what cuTensorMapEncodeTiled encodes, as the driver API names it --
typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;
enum CUresult { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1 };
enum CUtensorMapDataType {
  CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0, CU_TENSOR_MAP_DATA_TYPE_UINT16,
  CU_TENSOR_MAP_DATA_TYPE_UINT32, CU_TENSOR_MAP_DATA_TYPE_INT32,
  CU_TENSOR_MAP_DATA_TYPE_UINT64, CU_TENSOR_MAP_DATA_TYPE_INT64,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT16, CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT64, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ, CU_TENSOR_MAP_DATA_TYPE_TFLOAT32,
  CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ
};
enum CUtensorMapInterleave {
  CU_TENSOR_MAP_INTERLEAVE_NONE = 0, CU_TENSOR_MAP_INTERLEAVE_16B,
  CU_TENSOR_MAP_INTERLEAVE_32B
};
enum CUtensorMapSwizzle {
  CU_TENSOR_MAP_SWIZZLE_NONE = 0, CU_TENSOR_MAP_SWIZZLE_32B,
  CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_SWIZZLE_128B
};
enum CUtensorMapL2promotion {
  CU_TENSOR_MAP_L2_PROMOTION_NONE = 0, CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
  CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B
};
enum CUtensorMapFloatOOBfill {
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0,
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
};
// Opaque to kernels, 128 bytes on 64 as the driver's; the emulator's fields inside.
typedef struct CUtensorMap_st {
  alignas(64) unsigned long long opaque[16];
} CUtensorMap;

namespace attnbook_emu {
struct TensorMap {
  uint32_t magic;
  uint8_t type, rank, swizzle, nan_fill;
  uint64_t address;
  uint64_t dim[5];
  uint64_t stride[4];    // bytes between consecutive indices of dimensions 1..rank-1
  uint32_t box[5], element_stride[5];
};
static_assert(sizeof(TensorMap) <= sizeof(CUtensorMap), "a tensor map fits");
constexpr uint32_t kTensorMapMagic = 0x7e45a9b1u;
inline int element_bytes(int type) {
  static const int bytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  return bytes[type];
}
// The bytes of the swizzle's span: 0 without one.
inline int swizzle_bytes(int swizzle) { return swizzle ? 16 << swizzle : 0; }
}  // namespace attnbook_emu


namespace attnbook_emu {
namespace ptx {

// Whether an asynchronous operation issued now lands now (else at its wait).
inline bool lands_now() {
  Runtime& r = rt();
  return r.mode == Order::Forward || (r.mode == Order::Shuffle && r.rng.below(2));
}

[[noreturn]] inline void fail_at(const char* what, int line, const char* why) {
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s on line %d: %s", what, line, why);
  fail(buf);
}

// ---- mbarrier: a phase completes when its arrivals and transaction bytes are in ----
// The 8-byte object in shared memory is the emulator's record below (the bytes are
// zero, as the ISA leaves them opaque). A phase completes when `pending` arrivals have
// come and the transaction count (raised by expect_tx, lowered by the bytes of copies
// that complete on it) is zero; then the phase number rises and `pending` is `count`
// again. try_wait.parity p returns once the phase of parity p has completed: the
// current phase's parity is not p.
struct Landing { void* dst; std::vector<unsigned char> bytes; };
struct Mbarrier {
  const void* addr = nullptr;
  uint32_t count = 0, pending = 0, phase = 0;
  int64_t tx = 0;
  uint32_t generation = 0;              // racecheck's, of the last completed phase
  std::vector<int> arrived;             // this phase's arriving threads
  std::vector<Thread*> waiting;
  std::vector<Landing> landings;        // copies counted on it, not landed yet
};
struct Mbarriers {
  std::deque<Mbarrier> all;   // a waiting thread keeps its barrier's address
  void resize(size_t) {}
};
inline Mbarrier* find_mbarrier(const void* p) {
  for (Mbarrier& b : per_block<Mbarriers>().all)
    if (b.addr == p) return &b;
  return nullptr;
}
inline Mbarrier& mbarrier_at(int line, const void* p, const char* what) {
  Mbarrier* b = find_mbarrier(p);
  if (!b || !b->count)
    fail_at(what, line, "the mbarrier was not initialized (mbarrier.init) in this "
                        "block");
  return *b;
}

inline void complete_if_done(Mbarrier& b) {
  if (b.pending || b.tx) return;
  Runtime& r = rt();
  b.generation = on_mbarrier_phase(r, b.arrived);
  b.arrived.clear();
  ++b.phase;
  b.pending = b.count;
  for (Thread* t : b.waiting) t->state = State::Runnable;
  b.waiting.clear();
}

inline void mbarrier_init(int line, void* p, uint32_t count) {
  check_aligned(line, p, 8);
  if (count < 1 || count > (1u << 20) - 1)
    fail_at("mbarrier.init", line, "the count must be in [1, 2^20 - 1]");
  const uint64_t zero = 0;
  std::memcpy(p, &zero, 8);   // a write, for the checked build
  EmulatorCode guard(rt());
  Mbarrier* b = find_mbarrier(p);
  if (!b) b = &per_block<Mbarriers>().all.emplace_back();
  *b = Mbarrier{};
  b->addr = p;
  b->count = b->pending = count;
}

inline void mbarrier_inval(int line, void* p) {
  EmulatorCode guard(rt());
  Mbarrier& b = mbarrier_at(line, p, "mbarrier.inval");
  if (!b.waiting.empty())
    fail_at("mbarrier.inval", line, "threads still wait on the mbarrier");
  b.count = 0;
}

inline void expect_tx(Mbarrier& b, int line, int64_t bytes) {
  b.tx += bytes;
  if (b.tx > (int64_t(1) << 20) - 1 || b.tx < -((int64_t(1) << 20) - 1))
    fail_at("mbarrier", line, "the transaction count left [-(2^20 - 1), 2^20 - 1]");
}

// The copies counted on b land: their bytes are written and complete the transaction.
inline void land(Mbarrier& b, int line) {
  if (b.landings.empty()) return;
  for (Landing& l : b.landings) {
    std::memcpy(l.dst, l.bytes.data(), l.bytes.size());
    expect_tx(b, line, -int64_t(l.bytes.size()));
  }
  b.landings.clear();
  complete_if_done(b);
}

// arrive (count arrivals; drop: also lowers the count of later phases), with
// expect_tx's bytes first. Returns the state: the phase the arrival belongs to.
inline uint64_t mbarrier_arrive(int line, void* p, uint32_t count, int64_t tx_bytes,
                                bool drop) {
  Runtime& r = rt();
  EmulatorCode guard(r);
  Mbarrier& b = mbarrier_at(line, p, "mbarrier.arrive");
  expect_tx(b, line, tx_bytes);
  if (count == 0 || count > b.pending) {
    char why[160];
    std::snprintf(why, sizeof why, "%u arrivals on a phase that awaits %u more (the "
                  "ISA leaves this undefined)", count, b.pending);
    fail_at("mbarrier.arrive", line, why);
  }
  const uint64_t state = b.phase;
  if (drop) b.count -= count;
  b.pending -= count;
  b.arrived.push_back(r.cur->linear);
  complete_if_done(b);
  return state;
}

inline void mbarrier_expect_tx(int line, void* p, uint32_t bytes) {
  EmulatorCode guard(rt());
  Mbarrier& b = mbarrier_at(line, p, "mbarrier.expect_tx");
  expect_tx(b, line, bytes);
}

inline void mbarrier_complete_tx(int line, void* p, uint32_t bytes) {
  EmulatorCode guard(rt());
  Mbarrier& b = mbarrier_at(line, p, "mbarrier.complete_tx");
  expect_tx(b, line, -int64_t(bytes));
  complete_if_done(b);
}

// try_wait (block = true) returns once the phase has completed, as a GPU may suspend
// the thread until then; test_wait only looks, and a thread it finds waiting lets the
// others run (a loop around it makes progress). With `parity`, the phase awaited is
// the last one of that parity; otherwise `state` names it (arrive's result).
inline bool mbarrier_wait(int line, void* p, uint64_t phase_or_parity, bool parity,
                          bool block) {
  Runtime& r = rt();
  EmulatorCode guard(r);
  Mbarrier& b =
      mbarrier_at(line, p, block ? "mbarrier.try_wait" : "mbarrier.test_wait");
  land(b, line);
  auto done = [&] {
    return parity ? (b.phase & 1) != (phase_or_parity & 1) : b.phase != phase_or_parity;
  };
  if (!parity && phase_or_parity > b.phase)
    fail_at("mbarrier.try_wait", line, "the state names a phase not begun yet");
  Thread* self = r.cur;
  if (!done()) {
    self->barrier_line = line;
    if (!block) {   // the thread stays runnable; the others go first
      Thread* next = pick(r);
      if (next == self) {   // nobody else can run: it would spin for ever
        self->state = State::AtMbarrier;
        diagnose(r);
      }
      switch_to(r, self, next);
      return false;
    }
    b.waiting.push_back(self);
    self->state = State::AtMbarrier;
    switch_to(r, self, pick(r));
  }
  on_mbarrier_observed(r, b.generation);
  return true;
}

// A copy whose bytes count on mbarrier p: it lands now or at the first wait on
// the barrier (lands_now); either way its bytes complete the transaction when it lands.
inline void copy_on_mbarrier(int line, void* p, void* dst,
                             std::vector<unsigned char> bytes) {
  Mbarrier& b = mbarrier_at(line, p, "cp.async.bulk");
  b.arrived.push_back(rt().cur->linear);   // racecheck: its writes are the issuer's
  b.landings.push_back({dst, std::move(bytes)});
  if (lands_now() || !b.waiting.empty()) land(b, line);
}

// ---- elect.sync: the lowest lane of the member mask leads ---------------------------
struct ElectLane { uint32_t leader; };
inline uint32_t elect(int line, uint32_t mask) {
  ElectLane d{0};
  warp_collective(mask, line, &d, [](void* const* data, uint32_t group) {
    const uint32_t leader = uint32_t(__builtin_ctz(group));
    for (int l = 0; l < kWarp; ++l)
      if (group & (1u << l)) static_cast<ElectLane*>(data[l])->leader = leader;
  });
  return d.leader;
}

// ---- setmaxnreg: a warpgroup's register budget; nothing to move on the emulator ----
struct MaxnregLane { uint32_t count; bool same; };
inline void setmaxnreg(int line, uint32_t count) {
  if (count < 24 || count > 256 || count % 8)
    fail_at("setmaxnreg", line, "the register count must be a multiple of 8 in "
                                "[24, 256]");
  MaxnregLane d{count, true};
  warp_collective(0xffffffffu, line, &d, [](void* const* data, uint32_t group) {
    const uint32_t first = static_cast<MaxnregLane*>(data[__builtin_ctz(group)])->count;
    for (int l = 0; l < kWarp; ++l)
      if (group & (1u << l))
        static_cast<MaxnregLane*>(data[l])->same =
            static_cast<MaxnregLane*>(data[l])->count == first;
  });
  if (!d.same)
    fail_at("setmaxnreg", line, "the lanes of a warp asked for different counts");
}

// ---- the Tensor Memory Accelerator: bulk copies and tensor tiles ------------------
// The swizzle of a shared address: with a span of 32, 64 or 128 bytes (swizzle 1-3),
// address bits [4, 4 + swizzle) are XORed with bits [7, 7 + swizzle) - the 16-byte
// chunk within a row of the span with the row's number in a pattern of 8 rows.
inline uint32_t swizzle_address(uint32_t a, int swizzle) {
  const uint32_t mask = (1u << swizzle) - 1;
  return a ^ (((a >> 7) & mask) << 4);
}

inline const TensorMap& tensor_map(int line, const void* p) {
  const auto* t = static_cast<const TensorMap*>(p);
  if (reinterpret_cast<uintptr_t>(p) % 64 || t->magic != kTensorMapMagic)
    fail_at("cp.async.bulk.tensor", line, "the operand is not a tensor map made by "
                                          "cuTensorMapEncodeTiled");
  return *t;
}

// A box takes every stride-th element along a dimension (not the innermost one: the
// driver ignores its stride), ceil(box / stride) of them.
inline uint32_t stride(const TensorMap& t, int i) {
  return i ? t.element_stride[i] : 1;
}
inline uint32_t box_extent(const TensorMap& t, int i) {
  return (t.box[i] + stride(t, i) - 1) / stride(t, i);
}

// Visit a tile's box: f(global element or nullptr when out of bounds, the element's
// shared address). The box is dense in shared memory, dimension 0 innermost,
// swizzled; out-of-bounds coordinates (negative or past the dimension) have no global
// element.
template <class F>
inline void for_box(int line, const TensorMap& t, const int32_t* coord, uint32_t smem,
                    F f) {
  const int e = element_bytes(t.type);
  if (smem % 128)
    fail_at("cp.async.bulk.tensor", line, "the shared memory address is not on 128 "
                                          "bytes");
  uint32_t n[5] = {1, 1, 1, 1, 1};
  for (int i = 0; i < t.rank; ++i) n[i] = box_extent(t, i);
  uint32_t offset = 0;
  for (uint32_t j4 = 0; j4 < n[4]; ++j4)
    for (uint32_t j3 = 0; j3 < n[3]; ++j3)
      for (uint32_t j2 = 0; j2 < n[2]; ++j2)
        for (uint32_t j1 = 0; j1 < n[1]; ++j1)
          for (uint32_t j0 = 0; j0 < n[0]; ++j0, offset += uint32_t(e)) {
            const uint32_t j[5] = {j0, j1, j2, j3, j4};
            bool inside = true;
            uint64_t at = t.address;
            for (int i = 0; i < t.rank; ++i) {
              const int64_t x = int64_t(coord[i]) + int64_t(j[i]) * stride(t, i);
              inside = inside && x >= 0 && uint64_t(x) < t.dim[i];
              at += uint64_t(x) * (i ? t.stride[i - 1] : uint64_t(e));
            }
            f(inside ? reinterpret_cast<char*>(at) : nullptr,
              swizzle_address(smem + offset, t.swizzle));
          }
}

inline uint32_t box_bytes(const TensorMap& t) {
  uint32_t n = uint32_t(element_bytes(t.type));
  for (int i = 0; i < t.rank; ++i) n *= box_extent(t, i);
  return n;
}

// cp.async.bulk.tensor global -> shared: the box at `coord`, its bytes completing on
// the mbarrier; out of bounds, zeros (NaN with the map's NaN fill).
inline void tma_load(int line, uint32_t smem, const void* map, const int32_t* coord,
                     int rank, void* mbar) {
  const TensorMap& t = tensor_map(line, map);
  if (rank != t.rank)
    fail_at("cp.async.bulk.tensor", line, "the instruction's dimensions are not the "
                                          "tensor map's rank");
  const int e = element_bytes(t.type);
  const uint32_t bytes = box_bytes(t);
  char* dst = static_cast<char*>(from_shared(smem));
  // The checked build sees the copy where it is issued: the box's bytes (swizzled
  // within it) and each global element in bounds.
  note_access(dst, bytes, true);
  for_box(line, t, coord, smem, [&](const char* g, uint32_t) {
    if (g) note_access(g, size_t(e), false);
  });
  EmulatorCode guard(rt());
  std::vector<unsigned char> box(bytes);
  for_box(line, t, coord, smem, [&](const char* g, uint32_t s) {
    unsigned char* out = box.data() + (s - smem);
    if (g) std::memcpy(out, g, size_t(e));
    else std::memset(out, t.nan_fill ? 0xff : 0, size_t(e));
  });
  copy_on_mbarrier(line, mbar, dst, std::move(box));
}

// cp.async.bulk global -> shared of `bytes` (a multiple of 16, both ends on 16).
inline void bulk_load(int line, void* dst, const void* src, uint32_t bytes,
                      void* mbar) {
  if (bytes % 16 || reinterpret_cast<uintptr_t>(dst) % 16 ||
      reinterpret_cast<uintptr_t>(src) % 16)
    fail_at("cp.async.bulk", line, "the size and both addresses must be multiples of "
                                   "16");
  note_access(src, bytes, false);
  note_access(dst, bytes, true);
  EmulatorCode guard(rt());
  const auto* s = static_cast<const unsigned char*>(src);
  std::vector<unsigned char> copy(s, s + bytes);
  copy_on_mbarrier(line, mbar, dst, std::move(copy));
}

// cp.async.bulk.tensor shared -> global in bulk groups: each thread's stores wait in
// its open group until cp.async.bulk.commit_group; wait_group N performs all but the N
// most recent groups. A store reads shared memory when issued (lands_now) or at that
// wait; the in-bounds elements of the box are written.
struct TmaStore { const TensorMap* map; int32_t coord[5]; uint32_t smem; int line; };
// The store's copies; `note`: the checked build sees them (where they are issued).
inline void perform(const TmaStore& s, bool note) {
  const int e = element_bytes(s.map->type);
  for_box(s.line, *s.map, s.coord, s.smem, [&](char* g, uint32_t a) {
    if (!g) return;
    const void* src = from_shared(a);
    if (note) {
      note_access(src, size_t(e), false);
      note_access(g, size_t(e), true);
    } else {
      std::memcpy(g, src, size_t(e));
    }
  });
}
inline void tma_store(int line, const void* map, const int32_t* coord, int rank,
                      uint32_t smem) {
  const TensorMap& t = tensor_map(line, map);
  if (rank != t.rank)
    fail_at("cp.async.bulk.tensor", line, "the instruction's dimensions are not the "
                                          "tensor map's rank");
  TmaStore s{&t, {}, smem, line};
  std::memcpy(s.coord, coord, sizeof(int32_t) * size_t(rank));
  perform(s, true);
  EmulatorCode guard(rt());
  if (lands_now()) perform(s, false);
  else thread_groups<TmaStore>().open.push_back(s);
}
inline void bulk_commit() {
  EmulatorCode guard(rt());
  thread_groups<TmaStore>().commit();
}
inline void bulk_wait(uint64_t pending) {
  EmulatorCode guard(rt());
  thread_groups<TmaStore>().complete(pending,
                                     [](const TmaStore& s) { perform(s, false); });
}

// ---- wgmma: a warpgroup's asynchronous matrix multiply-accumulate -------------------
// wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}: D(64xN) = A(64x16) B(16xN) + D
// over the 128 threads of a warpgroup (warps 4g..4g+3). Thread t = 32w + l of the
// warpgroup holds, in d[i], row 16w + l/4 + 8((i/2)%2), column 8(i/4) + 2(l%4) + i%2
// (mma.sync's C fragment, once per 8 columns). A from registers: warp w's rows
// 16w..16w+15 as mma.sync's m16n8k16 A fragment. A or B in shared memory: a matrix
// descriptor (MatrixDescriptor) and a transpose flag (0: K-major, 1: MN-major).
//
// Asynchronous as on a GPU: from mma_async until the wait_group that covers it, the
// accumulators read NaN (the ISA leaves them undefined); the result lands at that
// wait, read from shared memory when issued or at the wait (lands_now).
struct MatrixDescriptor {
  uint32_t start, lbo, sbo, base_offset, swizzle;   // bytes; swizzle 0-3: none, 32-128
  explicit MatrixDescriptor(uint64_t d)
      : start(uint32_t(d & 0x3fff) << 4), lbo(uint32_t(d >> 16 & 0x3fff) << 4),
        sbo(uint32_t(d >> 32 & 0x3fff) << 4), base_offset(uint32_t(d >> 49 & 7)),
        swizzle(uint32_t(4 - (d >> 62 & 3)) % 4) {}
  // The shared address of element (mn, k), 16-bit elements, in the canonical layouts
  // (PTX ISA, "Shared Memory Matrix Layout"): 8-row core matrices of 16 bytes; rows of
  // the swizzle's span W bytes (16 without one); LBO and SBO the strides between them.
  uint32_t address(uint32_t mn, uint32_t k, bool mn_major) const {
    const uint32_t w = swizzle ? 16u << swizzle : 16u;
    uint32_t a;
    if (!mn_major) {
      a = start + mn % 8 * w + mn / 8 * sbo + k % 8 * 2 +
          (swizzle ? k / 8 * 16 : k / 8 * lbo);
    } else if (!swizzle) {
      a = start + mn % 8 * 2 + mn / 8 * sbo + k % 8 * 16 + k / 8 * lbo;
    } else {
      a = start + mn % 8 * 2 + mn / 8 % (w / 16) * 16 + mn / (w / 2) * lbo +
          k % 8 * w + k / 8 * sbo;
    }
    return swizzle ? swizzle_address(a, int(swizzle)) : a;
  }
};

struct WgmmaOp {
  int line, n;
  bool bf16, a_in_smem, a_mn_major, b_mn_major, scale_d, landed = false;
  float neg_a, neg_b;
  uint64_t a_desc, b_desc;
  float a[2][16];               // from registers: this thread's rows of A
  std::vector<void*> d;         // the accumulators, 4-byte registers of the kernel
  std::vector<float> acc;       // D's input, then its result once computed
};
struct WgmmaThread {
  bool fenced = false;
  AsyncGroups<WgmmaOp> ops;
};
inline WgmmaThread& wgmma_thread() {
  return per_block<std::vector<WgmmaThread>>()[size_t(rt().cur->linear)];
}

inline float element16(bool bf16, const void* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return bf16 ? to_float<__nv_bfloat16>(bits) : to_float<__half>(bits);
}

// A descriptor's matrix, read for one wgmma: the shared object of its first element,
// found once, holds (nearly) all the others, whose host addresses are then arithmetic.
struct SharedMatrix {
  MatrixDescriptor m;
  bool mn_major;
  int line;
  Window object;
  SharedMatrix(int line_, uint64_t desc, bool mn_major_)
      : m(desc), mn_major(mn_major_), line(line_) {
    if (m.base_offset)
      fail_at("wgmma.mma_async", line, "a descriptor's base offset other than 0 (the "
                                       "emulator takes tiles on their swizzle "
                                       "pattern's boundary)");
    object = window_of(line, m.address(0, 0, mn_major), "wgmma.mma_async");
  }
  // The element at (mn, k).
  const void* at(uint32_t mn, uint32_t k) const {
    const uint32_t a = m.address(mn, k, mn_major);
    if (a - object.low < object.bytes)
      return reinterpret_cast<const void*>(object.host + (a - object.low));
    return from_descriptor(line, a, "wgmma.mma_async");
  }
  // `count` elements from (mn, k) along the matrix's contiguous direction (k where
  // K-major, mn where MN-major) as floats: within a core matrix's 16-byte row, which
  // the swizzle moves whole, they are consecutive. `count` divides 8 and the first
  // index (k or mn) is a multiple of it.
  void read(uint32_t mn, uint32_t k, bool bf16, int count, float* out) const {
    const uint32_t a = m.address(mn, k, mn_major);
    if (a - object.low + 2 * count > object.bytes) {   // another object: one by one
      for (int i = 0; i < count; ++i)
        out[i] = element16(bf16, mn_major ? at(mn + i, k) : at(mn, k + i));
      return;
    }
    const char* bytes = reinterpret_cast<const char*>(object.host + (a - object.low));
    for (int i = 0; i < count; i += 2) {
      uint32_t pair;
      std::memcpy(&pair, bytes + 2 * i, 4);
      bf16 ? to_float2<__nv_bfloat16>(pair, out + i) : to_float2<__half>(pair, out + i);
    }
  }
};

// This thread's rows (2) and columns (n / 4) of the product, computed into op.acc.
inline void compute(WgmmaOp& op) {
  const int t = rt().cur->linear % 128, w = t / 32, l = t % 32;
  const uint32_t rows[2] = {uint32_t(16 * w + l / 4), uint32_t(16 * w + l / 4 + 8)};
  EmulatorCode guard(rt());
  float a[2][16];
  if (op.a_in_smem) {
    const SharedMatrix m(op.line, op.a_desc, op.a_mn_major);
    for (int r = 0; r < 2; ++r)
      if (op.a_mn_major)
        for (uint32_t k = 0; k < 16; ++k)
          a[r][k] = element16(op.bf16, m.at(rows[r], k));
      else
        for (uint32_t k = 0; k < 16; k += 8) m.read(rows[r], k, op.bf16, 8, a[r] + k);
  } else {
    std::memcpy(a, op.a, sizeof a);
  }
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 16; ++k) a[r][k] *= op.neg_a;
  // This thread's two columns 8j + 2(l % 4) + {0, 1} of B, for each j
  const SharedMatrix b_matrix(op.line, op.b_desc, op.b_mn_major);
  for (int j = 0; j < op.n / 8; ++j) {
    const uint32_t col = uint32_t(8 * j + 2 * (l % 4));
    float b[2][16];
    if (op.b_mn_major) {
      for (uint32_t k = 0; k < 16; ++k) {
        float pair[2];
        b_matrix.read(col, k, op.bf16, 2, pair);
        b[0][k] = pair[0], b[1][k] = pair[1];
      }
    } else {
      for (uint32_t c = 0; c < 2; ++c)
        for (uint32_t k = 0; k < 16; k += 8)
          b_matrix.read(col + c, k, op.bf16, 8, b[c] + k);
    }
    for (int c = 0; c < 2; ++c)
      for (int k = 0; k < 16; ++k) b[c][k] *= op.neg_b;
    for (int c = 0; c < 2; ++c)
      for (int r = 0; r < 2; ++r) {
        float& acc = op.acc[size_t(4 * j + 2 * r + c)];
        float sum = op.scale_d ? acc : 0.f;
        for (int k = 0; k < 16; ++k) sum += a[r][k] * b[c][k];
        acc = sum;
      }
  }
  op.landed = true;
}

inline void note_operands(const WgmmaOp& op) {
  if (!kChecked) return;
  const int t = rt().cur->linear % 128, w = t / 32, l = t % 32;
  std::optional<SharedMatrix> a;
  if (op.a_in_smem) a.emplace(op.line, op.a_desc, op.a_mn_major);
  const SharedMatrix b(op.line, op.b_desc, op.b_mn_major);
  for (uint32_t k = 0; k < 16; ++k) {
    if (a)
      for (int r = 0; r < 2; ++r)
        note_access(a->at(uint32_t(16 * w + l / 4 + 8 * r), k), 2, false);
    for (int j = 0; j < op.n / 8; ++j)
      for (int c = 0; c < 2; ++c)
        note_access(b.at(uint32_t(8 * j + 2 * (l % 4) + c), k), 2, false);
  }
}

struct WgmmaALane { const uint32_t* regs; float (*rows)[16]; bool bf16; };
inline void gather_a(const uint32_t* regs, float (*rows)[16], bool bf16, int line) {
  WgmmaALane lane{regs, rows, bf16};
  warp_collective(0xffffffffu, line, &lane, [](void* const* data, uint32_t) {
    for (int l = 0; l < kWarp; ++l) {
      auto* me = static_cast<WgmmaALane*>(data[l]);
      for (int src = 4 * (l / 4); src < 4 * (l / 4) + 4; ++src) {   // the row's lanes
        const auto* from = static_cast<WgmmaALane*>(data[src]);
        const int t = src % 4;
        for (int r = 0; r < 4; ++r)
          for (int i = 0; i < 2; ++i) {
            const uint16_t bits = half_of(from->regs[r], i);
            me->rows[r % 2][2 * t + 8 * (r / 2) + i] =
                me->bf16 ? to_float<__nv_bfloat16>(bits) : to_float<__half>(bits);
          }
      }
    }
  });
}

// The latest pending wgmma of thread `t` whose accumulator i is at `d`.
inline WgmmaOp* last_writer(WgmmaThread& t, const void* d, size_t i) {
  auto in = [&](std::vector<WgmmaOp>& ops) -> WgmmaOp* {
    for (auto op = ops.rbegin(); op != ops.rend(); ++op)
      if (i < op->d.size() && op->d[i] == d) return &*op;
    return nullptr;
  };
  if (WgmmaOp* op = in(t.ops.open)) return op;
  for (auto g = t.ops.committed.rbegin(); g != t.ops.committed.rend(); ++g)
    if (WgmmaOp* op = in(*g)) return op;
  return nullptr;
}

// mma_async: `d` the n / 2 accumulators' addresses (their values are D's input),
// `a_regs` A's four registers or nullptr with `a_desc`.
inline void wgmma_issue(int line, int n, bool bf16, void* const* d,
                        const uint32_t* a_regs, uint64_t a_desc, uint64_t b_desc,
                        bool scale_d, int scale_a, int scale_b, int trans_a,
                        int trans_b) {
  Runtime& r = rt();
  const int warpgroup = r.cur->linear / 128;
  if (r.nthreads < 128 * (warpgroup + 1))
    fail_at("wgmma.mma_async", line, "the thread's warpgroup (128 threads) is not "
                                     "whole in this block");
  bool fenced;
  {
    EmulatorCode guard(r);
    fenced = wgmma_thread().fenced;
  }
  if (!fenced)
    fail_at("wgmma.mma_async", line, "no wgmma.fence since the warpgroup last "
                                     "touched its registers (the kernel's start or "
                                     "a wgmma.wait_group): the PTX ISA requires one");
  if ((scale_a != 1 && scale_a != -1) || (scale_b != 1 && scale_b != -1) ||
      trans_a < 0 || trans_a > 1 || trans_b < 0 || trans_b > 1)
    fail_at("wgmma.mma_async", line, "imm-scale must be 1 or -1, imm-trans 0 or 1");
  WgmmaOp op{line, n, bf16, !a_regs, trans_a == 1, trans_b == 1, scale_d};
  op.neg_a = float(scale_a);
  op.neg_b = float(scale_b);
  op.a_desc = a_desc;
  op.b_desc = b_desc;
  if (a_regs) gather_a(a_regs, op.a, bf16, line);
  note_operands(op);
  EmulatorCode guard(r);
  op.d.assign(d, d + n / 2);
  op.acc.resize(size_t(n / 2));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  WgmmaThread& mine = wgmma_thread();
  for (int i = 0; i < n / 2; ++i) {
    // An accumulator a pending wgmma writes is that one's result (the ISA orders the
    // accumulator accesses of wgmmas of one shape); any other, the register's value.
    if (WgmmaOp* last = last_writer(mine, d[i], size_t(i))) {
      if (!last->landed) compute(*last);
      op.acc[size_t(i)] = last->acc[size_t(i)];
      continue;
    }
    std::memcpy(&op.acc[size_t(i)], d[i], 4);
    std::memcpy(d[i], &nan, 4);   // undefined until the wait: NaN shows a read
  }
  if (lands_now()) compute(op);
  on_wgmma_issued(r, d, n / 2, line);
  mine.ops.open.push_back(std::move(op));
}
inline void wgmma_fence() {
  EmulatorCode guard(rt());
  wgmma_thread().fenced = true;
}
inline void wgmma_commit() {
  EmulatorCode guard(rt());
  wgmma_thread().ops.commit();
}
inline void wgmma_wait(uint64_t pending) {
  EmulatorCode guard(rt());
  WgmmaThread& t = wgmma_thread();
  t.ops.complete(pending, [](WgmmaOp& op) {
    if (!op.landed) compute(op);
    for (size_t i = 0; i < op.d.size(); ++i) std::memcpy(op.d[i], &op.acc[i], 4);
    on_wgmma_landed(rt(), op.d.data(), int(op.d.size()));
  });
  t.fenced = false;
}

}  // namespace ptx
}  // namespace attnbook_emu

// The driver's checks on a tiled map (CUDA Driver API, cuTensorMapEncodeTiled); a
// failed one returns CUDA_ERROR_INVALID_VALUE, as the driver does, and says why on
// stderr.
inline CUresult cuTensorMapEncodeTiled(
    CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
    const cuuint64_t* dim, const cuuint64_t* strides, const cuuint32_t* box,
    const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill fill) {
  using namespace attnbook_emu;
  auto bad = [](const char* why) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled: %s\n", why);
    return CUDA_ERROR_INVALID_VALUE;
  };
  if (!map || reinterpret_cast<uintptr_t>(map) % 64) return bad("map not on 64 bytes");
  if (unsigned(type) > CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ) return bad("data type");
  if (rank < 1 || rank > 5) return bad("rank must be 1 to 5");
  if (reinterpret_cast<uintptr_t>(address) % 16) return bad("address not on 16 bytes");
  if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE)
    return bad("the emulator encodes no interleaved layout");
  if (unsigned(swizzle) > CU_TENSOR_MAP_SWIZZLE_128B) return bad("swizzle");
  const int e = element_bytes(type);
  TensorMap t{};
  t.magic = kTensorMapMagic;
  t.type = uint8_t(type);
  t.rank = uint8_t(rank);
  t.swizzle = uint8_t(swizzle);
  t.nan_fill = fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
  t.address = reinterpret_cast<uintptr_t>(address);
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dim[i] < 1 || dim[i] > (uint64_t(1) << 32)) return bad("a dimension is 0 or "
                                                               "above 2^32");
    if (box[i] < 1 || box[i] > 256) return bad("a box dimension is 0 or above 256");
    if (element_strides[i] < 1 || element_strides[i] > 8)
      return bad("an element stride is 0 or above 8");
    t.dim[i] = dim[i];
    t.box[i] = box[i];
    t.element_stride[i] = element_strides[i];
    if (i > 0) {
      if (strides[i - 1] % 16 || strides[i - 1] >= (uint64_t(1) << 40))
        return bad("a stride is not a multiple of 16 or reaches 2^40");
      t.stride[i - 1] = strides[i - 1];
    }
  }
  if (box[0] * e % 16) return bad("the inner box dimension is not a multiple of 16 "
                                  "bytes");
  if (swizzle && box[0] * e > swizzle_bytes(swizzle))
    return bad("the inner box dimension is wider than the swizzle's span");
  std::memset(map, 0, sizeof *map);
  std::memcpy(map, &t, sizeof t);
  return CUDA_SUCCESS;
}

// The driver's entry points through the runtime, as code that links no libcuda gets
// cuTensorMapEncodeTiled: the one driver function the emulator has.
enum cudaDriverEntryPointFlags { cudaEnableDefault = 0 };
enum cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0, cudaDriverEntryPointSymbolNotFound = 1,
  cudaDriverEntryPointVersionNotSufficent = 2
};
inline cudaError_t cudaGetDriverEntryPointByVersion(
    const char* symbol, void** fn, unsigned int, unsigned long long,
    cudaDriverEntryPointQueryResult* status = nullptr) {
  const bool found = std::strcmp(symbol, "cuTensorMapEncodeTiled") == 0;
  *fn = found ? reinterpret_cast<void*>(&cuTensorMapEncodeTiled) : nullptr;
  if (status)
    *status = found ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
