// Kernels written the way kernels found online are: tensor-core and copy instructions
// as raw inline PTX behind __CUDA_ARCH__ guards, no helpers of this package.
#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <string>

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  unsigned addr;
  asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }\n"
               : "=r"(addr) : "l"(p));
  return addr;
}

// kind 0: m16n8k16 f16 -> f32; 1: bf16 -> f32; 2: m16n8k8 f16 -> f32;
// 3: m16n8k16 f16 -> f16 (C and D packed halves, passed here as floats).
__global__ void mma_probe(const uint32_t* a, const uint32_t* b, const float* c,
                          float* d, int kind) {
  const int lane = threadIdx.x;
  a += 4 * lane; b += 4 * lane; c += 4 * lane; d += 4 * lane;
  float acc[4] = {c[0], c[1], c[2], c[3]};
  if (kind == 0) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    // Turing: the two halves of K, one m16n8k8 each
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(b[0]));
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[2]), "r"(a[3]), "r"(b[1]));
#endif
  } else if (kind == 1) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(acc[0]), "=f"(acc[1]), "=f"(acc[2]), "=f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
  } else if (kind == 2) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(b[0]));
  } else {
#if __CUDA_ARCH__ >= 800
    __half2 c01 = __floats2half2_rn(c[0], c[1]), c23 = __floats2half2_rn(c[2], c[3]);
    uint32_t d01, d23;
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
        "{%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%8,%9};\n"
        : "=r"(d01), "=r"(d23)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "r"(*reinterpret_cast<uint32_t*>(&c01)),
          "r"(*reinterpret_cast<uint32_t*>(&c23)));
    float2 lo = __half22float2(*reinterpret_cast<__half2*>(&d01));
    float2 hi = __half22float2(*reinterpret_cast<__half2*>(&d23));
    acc[0] = lo.x; acc[1] = lo.y; acc[2] = hi.x; acc[3] = hi.y;
#endif
  }
  for (int i = 0; i < 4; ++i) d[i] = acc[i];
}

// Four 8x8 matrices of 16-bit values, loaded with ldmatrix .xN (.trans).
template <int N, bool Trans>
__global__ void ldmatrix_probe(const unsigned short* m, uint32_t* out) {
  __shared__ __align__(16) unsigned short s[4 * 64];
  const int lane = threadIdx.x;
  for (int i = lane; i < 4 * 64; i += 32) s[i] = m[i];
  __syncwarp();
  const unsigned row = smem_u32(&s[(lane % (8 * N)) * 8]);
  uint32_t r[4] = {0, 0, 0, 0};
  if constexpr (N == 1 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0]) : "r"(row));
  else if constexpr (N == 1)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0]) : "r"(row));
  else if constexpr (N == 2 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(row));
  else if constexpr (N == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(row));
  else if constexpr (!Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row));
  else   // literals joined with no space between opcode and operands, as ptxas takes
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
                 "{%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row));
  for (int i = 0; i < 4; ++i) out[4 * lane + i] = r[i];
}

// 32 threads stage 128 floats through shared memory with cp.async: 16-byte .cg copies
// whose source is cut to `src_bytes` (the rest zero-filled), in two commit groups;
// out[0:128] is read after wait_group 1 (the first group only has landed), out[128:256]
// after wait_all.
__global__ void cp_async_probe(const float* src, float* out, int src_bytes) {
#if __CUDA_ARCH__ >= 800   // ptxas refuses cp.async for older GPUs
  __shared__ __align__(16) float s[2 * 128];
  const int t = threadIdx.x;
  const unsigned dst = smem_u32(&s[4 * t]);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(dst), "l"(src + 4 * t), "r"(src_bytes));
  asm volatile("cp.async.commit_group;\n" ::);
  // the second group: 4-byte and 8-byte .ca copies of the same data, 128 floats on
  asm volatile("cp.async.ca.shared.global [%0+512], [%1], 8;\n"
               :: "r"(dst), "l"(src + 4 * t));
  asm volatile("cp.async.ca.shared.global [%0+520], [%1], 4;\n"
               :: "r"(dst), "l"(src + 4 * t + 2));
  asm volatile("cp.async.ca.shared.global [%0+524], [%1], 4;\n"
               :: "r"(dst), "l"(src + 4 * t + 3));
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.wait_group %0;\n" :: "n"(1));
  __syncthreads();
  for (int i = 0; i < 4; ++i) out[4 * t + i] = s[4 * t + i];
  for (int i = 0; i < 4; ++i) out[256 + 4 * t + i] = s[128 + 4 * t + i];  // not yet
  asm volatile("cp.async.wait_all;\n" ::);
  __syncthreads();
  for (int i = 0; i < 4; ++i) out[128 + 4 * t + i] = s[128 + 4 * t + i];
#endif
}

// One warp: the small instructions. out[lane * 8 + k] for k =
// 0 %laneid, 1 ex2.approx(lane / 8), 2 shfl.sync.bfly 5 of lane, 3 shfl.sync.idx from
// lane 7, 4..5 a vector round trip through shared (ld/st .v4, .v2), 6 f16x2 pack and
// unpack (cvt.rn.f16x2.f32, mov.b32), 7 a predicated move (setp, @p).
__global__ void misc_probe(const float* in, float* out) {
  __shared__ __align__(16) float s[32 * 4];
  float* o = out + 8 * threadIdx.x;
  unsigned lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  o[0] = float(lane);
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(float(lane / 8)));
  o[1] = e;
  unsigned v = lane * 10, x, y;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, %3, %4;"
               : "=r"(x) : "r"(v), "r"(5), "r"(0x1f), "r"(0xffffffffu));
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, %3, %4;"
               : "=r"(y) : "r"(v), "r"(7), "r"(0x1f), "r"(0xffffffffu));
  o[2] = float(x);
  o[3] = float(y);
  float4 g;
  asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(g.x), "=f"(g.y), "=f"(g.z), "=f"(g.w) : "l"(in + 4 * lane));
  const unsigned a = smem_u32(&s[4 * lane]);
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};"
               :: "r"(a), "f"(g.x), "f"(g.y), "f"(g.z), "f"(g.w) : "memory");
  asm volatile("bar.sync 0;" ::: "memory");
  float2 h;
  const unsigned b = smem_u32(&s[4 * ((lane + 1) % 32)]);
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2+8];" : "=f"(h.x), "=f"(h.y) : "r"(b));
  o[4] = h.x;
  o[5] = h.y;
  uint32_t packed;
  unsigned short lo, hi;
#if __CUDA_ARCH__ >= 800
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(2.f * lane), "f"(0.5f));
#else
  const __half2 pair = __floats2half2_rn(0.5f, 2.f * lane);
  packed = *reinterpret_cast<const uint32_t*>(&pair);
#endif
  asm("mov.b32 {%0, %1}, %2;" : "=h"(lo), "=h"(hi) : "r"(packed));
  o[6] = __half2float(__ushort_as_half(lo)) + __half2float(__ushort_as_half(hi));
  float p = -1.f;
  asm("{ .reg .pred q; setp.lt.u32 q, %1, 16; @q mov.f32 %0, %2; }"
      : "+f"(p) : "r"(lane), "f"(1.f));
  o[7] = p;
}

// Scalar arithmetic in PTX, one result per slot (see test_scalar_arithmetic).
__global__ void arith_probe(const int* in, int* out) {
  const int a = in[0], b = in[1], c = in[2];
  const float x = __int_as_float(in[3]), y = __int_as_float(in[4]);
  unsigned lo, hi;
  float f, m;
  asm("add.s32 %0, %1, %2;" : "=r"(out[0]) : "r"(a), "r"(b));
  asm("mul.hi.u32 %0, %1, %2;" : "=r"(out[1]) : "r"(a), "r"(b));
  asm("{ .reg .u64 w; mul.wide.u32 w, %2, %3; mov.b64 {%0, %1}, w; }"
      : "=r"(lo), "=r"(hi) : "r"(a), "r"(b));
  out[2] = int(lo);
  out[3] = int(hi);
  asm("mad.lo.s32 %0, %1, %2, %3;" : "=r"(out[4]) : "r"(a), "r"(b), "r"(c));
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(f) : "f"(x), "f"(y), "f"(1.f));
  asm("max.f32 %0, %1, %2;" : "=f"(m) : "f"(x), "f"(__int_as_float(0x7fc00000)));
  out[5] = __float_as_int(f);
  out[6] = __float_as_int(m);
  asm("lop3.b32 %0, %1, %2, %3, 0x96;" : "=r"(out[7]) : "r"(a), "r"(b), "r"(c));
  asm("prmt.b32 %0, %1, %2, 0x5140;" : "=r"(out[8]) : "r"(a), "r"(b));
  asm("shr.s32 %0, %1, 4;" : "=r"(out[9]) : "r"(-c));
}

// Warp specialisation with named barriers: warp 0 produces a tile into shared memory
// and signals barrier 1 (bar.arrive); warps 1 and 2 wait on it (bar.sync), consume, and
// signal barrier 2, on which the producer waits before overwriting the tile.
__global__ void named_barriers(const float* in, float* out, int tiles) {
  __shared__ float tile[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int k = 0; k < tiles; ++k) {
    if (warp == 0) {
      if (k > 0) asm volatile("bar.sync 2, 96;" ::: "memory");   // tile consumed
      tile[lane] = in[32 * k + lane];
      asm volatile("bar.arrive 1, 96;" ::: "memory");            // tile full
    } else {
      asm volatile("bar.sync 1, 96;" ::: "memory");
      out[64 * k + 32 * (warp - 1) + lane] = tile[(lane + warp) % 32];
      asm volatile("bar.arrive 2, 96;" ::: "memory");
    }
  }
}

// Barrier 1 orders warp 0's write before warp 1's reads; warp 2 reads with no barrier.
__global__ void named_barrier_race(const float* in, float* out) {
  __shared__ float tile[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 0) {
    tile[lane] = in[lane];  // @tile-write
    asm volatile("bar.arrive 1, 64;" ::: "memory");
  } else if (warp == 1) {
    asm volatile("bar.sync 1, 64;" ::: "memory");
    out[lane] = tile[(lane + 1) % 32];
  } else {
    out[32 + lane] = tile[lane];  // @unordered-read
  }
}

// 128-bit registers: each lane loads 16 bytes with ld.global.b128, unpacks them into
// two 64-bit halves with mov.b128, swaps the halves, packs them again and stores them
// with st.global.b128 (PTX ISA 8.3, sm_70).
__global__ void b128_probe(const uint64_t* in, uint64_t* out) {
  const uint64_t* src = in + 2 * threadIdx.x;
  uint64_t* dst = out + 2 * threadIdx.x;
  asm volatile("{ .reg .b128 t; .reg .b64 lo, hi;\n"
               "  ld.global.b128 t, [%0];\n"
               "  mov.b128 {lo, hi}, t;\n"
               "  mov.b128 t, {hi, lo};\n"
               "  st.global.b128 [%1], t; }\n" :: "l"(src), "l"(dst) : "memory");
}

// Shared addresses are the object's, whatever was converted first: one thread converts
// a pointer `first` bytes into the dynamic shared memory, then its start and a point
// 16 KiB in; then writes through an address XOR-ed as a swizzle would (the start's
// address is aligned, so (start + 1024) ^ 64 is byte 1024 ^ 64 of the memory) and
// reads the word back through a pointer. A static __shared__ array converted from its
// middle first keeps its start (on 1 KiB) in its own window too.
__global__ void shared_address_probe(uint32_t* out, int first) {
  extern __shared__ __align__(1024) unsigned char dyn[];
  __shared__ uint32_t words[64];
  if (threadIdx.x != 0) return;
  out[0] = uint32_t(__cvta_generic_to_shared(dyn + first));
  out[1] = uint32_t(__cvta_generic_to_shared(dyn));
  out[2] = uint32_t(__cvta_generic_to_shared(dyn + 16384));
  const uint32_t swizzled = (out[1] + 1024) ^ 64;
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(swizzled), "r"(12345u) : "memory");
  out[3] = *reinterpret_cast<uint32_t*>(dyn + (1024 ^ 64));
  out[4] = uint32_t(__cvta_generic_to_shared(words + first % 64));
  out[5] = uint32_t(__cvta_generic_to_shared(words));
}

// kind 0: m16n8k32 s8 x s8; 1: m16n8k32 u8 x s8, .satfinite; 2: m16n8k16 s8 x s8.
__global__ void mma_int8_probe(const uint32_t* a, const uint32_t* b, const int* c,
                               int* d, int kind) {
  const int lane = threadIdx.x;
  a += 4 * lane; b += 4 * lane; c += 4 * lane; d += 4 * lane;
  int acc[4] = {c[0], c[1], c[2], c[3]};
#if __CUDA_ARCH__ >= 800
  if (kind == 0)
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else if (kind == 1)
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.u8.s8.s32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 "
        "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(b[0]));
#endif
  for (int i = 0; i < 4; ++i) d[i] = acc[i];
}

// a·b + c as a learner writes it: nvcc contracts it into one FFMA (one rounding).
__global__ void fma_probe(const float* a, const float* b, const float* c, float* out) {
  out[threadIdx.x] = a[threadIdx.x] * b[threadIdx.x] + c[threadIdx.x];
}

void launch(const char* w, void* p0, void* p1, void* p2, void* p3, int a0) {
  auto u = [](void* p) { return static_cast<uint32_t*>(p); };
  auto f = [](void* p) { return static_cast<float*>(p); };
  auto h = static_cast<unsigned short*>(p0);
  const std::string k = w;
  auto i = [](void* p) { return static_cast<int*>(p); };
  if (k == "mma") mma_probe<<<1, 32>>>(u(p0), u(p1), f(p2), f(p3), a0);
  else if (k == "mma_int8") mma_int8_probe<<<1, 32>>>(u(p0), u(p1), i(p2), i(p3), a0);
  else if (k == "ldmatrix_x1") ldmatrix_probe<1, false><<<1, 32>>>(h, u(p1));
  else if (k == "ldmatrix_x2") ldmatrix_probe<2, false><<<1, 32>>>(h, u(p1));
  else if (k == "ldmatrix_x4") ldmatrix_probe<4, false><<<1, 32>>>(h, u(p1));
  else if (k == "ldmatrix_x1_trans") ldmatrix_probe<1, true><<<1, 32>>>(h, u(p1));
  else if (k == "ldmatrix_x2_trans") ldmatrix_probe<2, true><<<1, 32>>>(h, u(p1));
  else if (k == "ldmatrix_x4_trans") ldmatrix_probe<4, true><<<1, 32>>>(h, u(p1));
  else if (k == "cp_async") cp_async_probe<<<1, 32>>>(f(p0), f(p1), a0);
  else if (k == "misc") misc_probe<<<1, 32>>>(f(p0), f(p1));
  else if (k == "arith") arith_probe<<<1, 1>>>(static_cast<int*>(p0),
                                              static_cast<int*>(p1));
  else if (k == "named_barriers") named_barriers<<<1, 96>>>(f(p0), f(p1), a0);
  else if (k == "named_barrier_race") named_barrier_race<<<1, 96>>>(f(p0), f(p1));
  else if (k == "fma") fma_probe<<<1, 32>>>(f(p0), f(p1), f(p2), f(p3));
  else if (k == "shared_addresses")
    shared_address_probe<<<1, 32, 32 * 1024>>>(u(p0), a0);
  else if (k == "b128") b128_probe<<<1, 32>>>(static_cast<const uint64_t*>(p0),
                                             static_cast<uint64_t*>(p1));
}
