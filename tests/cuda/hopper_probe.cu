// Hopper's asynchronous instructions as kernels found online write them: raw inline
// PTX (mbarrier, elect.sync, setmaxnreg, TMA, wgmma), no helpers of this package. Built
// for sm_90a by nvcc and by the emulator (tests/emulator/test_hopper.py).
#include <cstdint>
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <string>

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier -----------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(count));
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar))
               : "memory");
}
// The wait loop with a label, as CUTLASS's ClusterBarrier::wait writes it.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(smem_u32(bar)), "r"(parity) : "memory");
}

// A ring of 2 slots between one producer warp and `consumers` warps, over `rounds`
// rounds: the producer waits for a slot to be empty, fills it, arrives on its full
// barrier; each consumer warp waits for it full, adds it up, arrives on its empty one.
// skip_wait = 1: the consumers do not wait (they read what is there).
__global__ void mbarrier_ring(const float* in, float* out, int rounds, int skip_wait) {
  __shared__ float slot[2][32];
  __shared__ alignas(8) uint64_t full[2], empty[2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int consumers = blockDim.x / 32 - 1;
  if (threadIdx.x == 0)
    for (int s = 0; s < 2; ++s) {
      mbar_init(&full[s], 32);
      mbar_init(&empty[s], consumers);
    }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  float sum = 0.f;
  for (int r = 0; r < rounds; ++r) {
    const int s = r % 2;
    const uint32_t phase = (r / 2) % 2;
    if (warp == 0) {
      mbar_wait(&empty[s], phase ^ 1);   // passes at once in the first two rounds
      slot[s][lane] = in[r * 32 + lane];
      mbar_arrive(&full[s]);
    } else {
      if (!skip_wait) mbar_wait(&full[s], phase);
      sum += slot[s][lane];
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s]);
    }
  }
  if (warp > 0) out[(warp - 1) * 32 + lane] = sum;
}

// A consumer waits on a phase no arrival completes: a deadlock. too_many: thread 0
// arrives 100 times at once on the phase that awaits 64 (undefined: an error).
__global__ void mbarrier_stuck(float* out, int too_many) {
  __shared__ alignas(8) uint64_t bar;
  if (threadIdx.x == 0) mbar_init(&bar, 64);   // 64 arrivals, 32 threads
  __syncthreads();
  if (too_many && threadIdx.x == 0)
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n"
                 ::"r"(smem_u32(&bar)), "r"(100) : "memory");
  mbar_arrive(&bar);
  mbar_wait(&bar, 0);
  out[threadIdx.x] = 1.f;
}

// out[0..31]: the elected lane each lane saw; out[32..63]: whether it was elected;
// lanes >= active stay out (their mask bit is clear).
__global__ void elect_probe(uint32_t* out, uint32_t mask) {
  const uint32_t lane = threadIdx.x;
  if (!(mask >> lane & 1)) return;
  uint32_t leader = 99, elected = 0;
  asm volatile(
      "{\n"
      ".reg .b32 %%rx;\n"
      ".reg .pred %%px;\n"
      "elect.sync %%rx|%%px, %2;\n"
      "@%%px mov.s32 %1, 1;\n"
      "mov.s32 %0, %%rx;\n"
      "}\n"
      : "+r"(leader), "+r"(elected) : "r"(mask));
  out[lane] = leader;
  out[32 + lane] = elected;
}

// Warpgroup 0 gives up registers, warpgroup 1 takes them, as FlashAttention-3's
// producer and consumers do.
__global__ void setmaxnreg_probe(float* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (threadIdx.x / 128 == 0)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
  else
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  out[threadIdx.x] = float(threadIdx.x);
#endif
}

// One thread copies `bytes` (a multiple of 16) with cp.async.bulk on an mbarrier that
// also awaits the arrivals of every thread (arrive_drop for odd warps, which then leave
// the count); the threads spin on test_wait with the state their arrival returned, then
// copy the shared bytes out. A second phase with the dropped count checks the drop.
__global__ void bulk_copy_probe(const uint4* in, uint4* out, int bytes) {
  extern __shared__ __align__(128) uint4 buf[];
  __shared__ alignas(8) uint64_t bar;
  const uint32_t b = smem_u32(&bar);
  if (threadIdx.x == 0) mbar_init(&bar, blockDim.x);
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n"
                 ::"r"(b), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1], %2, [%3];\n"
                 ::"r"(smem_u32(buf)), "l"(in), "r"(bytes), "r"(b) : "memory");
  }
  uint64_t state;
  if ((threadIdx.x / 32) % 2)
    asm volatile("mbarrier.arrive_drop.shared::cta.b64 %0, [%1];\n"
                 : "=l"(state) : "r"(b) : "memory");
  else
    asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n"
                 : "=l"(state) : "r"(b) : "memory");
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.test_wait.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(b), "l"(state) : "memory");
  for (int i = threadIdx.x; i < bytes / 16; i += blockDim.x) out[i] = buf[i];
  if ((threadIdx.x / 32) % 2 == 0) {   // phase 1: only the even warps are counted now
    asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n"
                 : "=l"(state) : "r"(b) : "memory");
    mbar_wait(&bar, 1);
    if (threadIdx.x == 0) out[bytes / 16] = make_uint4(1, 2, 3, 4);
  }
}

// ---- wgmma ----------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

// D(64x8) (+)= A B: A and B through descriptors, imm-scale-a ScaleA, transposes.
template <int ScaleA, int TransA, int TransB>
__device__ __forceinline__ void wgmma_n8_ss(float (&d)[4], uint64_t a, uint64_t b,
                                            int scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 "
      "{%0, %1, %2, %3}, %4, %5, p, %7, 1, %8, %9;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(a), "l"(b), "r"(scale_d), "n"(ScaleA), "n"(TransA), "n"(TransB));
#endif
}
// D(64x64) (+)= A B, bf16: A and B through descriptors.
template <int TransA, int TransB>
__device__ __forceinline__ void wgmma_n64_ss_bf16(float (&d)[32], uint64_t a,
                                                  uint64_t b, int scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
      "%31}, %32, %33, p, 1, 1, %35, %36;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(scale_d), "n"(TransA), "n"(TransB));
#endif
}
// D(64x64) (+)= A B, f16: A from registers, B through a descriptor, imm-scale-b -1.
template <int TransB>
__device__ __forceinline__ void wgmma_n64_rs(float (&d)[32], const uint32_t (&a)[4],
                                             uint64_t b, int scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
      "%31}, {%32, %33, %34, %35}, %36, p, 1, -1, %38;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d),
        "n"(TransB));
#endif
}

// One warpgroup: `image` (bytes, on 1 KiB) is copied to shared memory as it is; the
// descriptors `desc` hold offsets into it as start addresses (the kernel adds the
// image's shared address): [A, B] for k 0..15, then [A, B] for k 16..31 when
// kind & 2. d: the accumulators' input c, then the result, per thread. kind: bit 0 A
// from registers `a` (4 per thread and slice), bit 1 two k slices in one group,
// bit 2 scale-d 0, bit 3 read an accumulator before the wait into `early`, bit 4 no
// wgmma.fence. Variant `v` picks the instruction: 0-3 n8 f16 with transposes
// (v & 1: A, v & 2: B) and imm-scale-a -1 for v = 3; 4-5 n64 bf16 (v = 5: both
// MN-major); 6-7 n64 f16 with A in registers (v = 7: B MN-major), imm-scale-b -1.
template <int N>
__device__ void wgmma_issue(int v, float (&d)[N / 2], uint64_t a_desc, uint64_t b_desc,
                            const uint32_t (&a)[4], int scale_d) {
  if constexpr (N == 8) {
    if (v == 0) wgmma_n8_ss<1, 0, 0>(d, a_desc, b_desc, scale_d);
    else if (v == 1) wgmma_n8_ss<1, 1, 0>(d, a_desc, b_desc, scale_d);
    else if (v == 2) wgmma_n8_ss<1, 0, 1>(d, a_desc, b_desc, scale_d);
    else wgmma_n8_ss<-1, 1, 1>(d, a_desc, b_desc, scale_d);
  } else {
    if (v == 4) wgmma_n64_ss_bf16<0, 0>(d, a_desc, b_desc, scale_d);
    else if (v == 5) wgmma_n64_ss_bf16<1, 1>(d, a_desc, b_desc, scale_d);
    else if (v == 6) wgmma_n64_rs<0>(d, a, b_desc, scale_d);
    else wgmma_n64_rs<1>(d, a, b_desc, scale_d);
  }
}

template <int N>
__global__ void wgmma_probe(const uint4* image, int image_bytes, const uint64_t* desc,
                            const uint32_t* a, float* d_io, float* early, int v,
                            int kind) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const int t = threadIdx.x;
  for (int i = t; i < image_bytes / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(smem)[i] = image[i];
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const uint64_t base = (smem_u32(smem) & 0x3FFFF) >> 4;
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = d_io[t * (N / 2) + i];
  uint32_t regs[2][4];
  for (int s = 0; s < 2; ++s)
    for (int r = 0; r < 4; ++r) regs[s][r] = a[(s * 128 + t) * 4 + r];
  if (!(kind & 16)) wgmma_fence();
  for (int s = 0; s < 1 + (kind >> 1 & 1); ++s)
    wgmma_issue<N>(v, d, desc[2 * s] + base, desc[2 * s + 1] + base, regs[s],
                   s > 0 || !(kind & 4));
  wgmma_commit();
  if (kind & 8) early[t] = d[0];
  wgmma_wait0();
  for (int i = 0; i < N / 2; ++i) d_io[t * (N / 2) + i] = d[i];
}

// ---- TMA ------------------------------------------------------------------------
// Thread 0 loads the box at (x, y) of a 2-D tensor into shared memory (on 1 KiB) on an
// mbarrier; every thread waits for it (unless `wait` is 0) and copies the box's bytes
// out as they lie.
__global__ void tma_load_probe(const __grid_constant__ CUtensorMap map, int x, int y,
                               int box_bytes, uint4* out, int wait) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ alignas(8) uint64_t bar;
  if (threadIdx.x == 0) {
    mbar_init(&bar, 1);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 ::"r"(smem_u32(&bar)), "r"(box_bytes) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile"
        ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(smem_u32(smem)), "l"(&map), "r"(x), "r"(y), "r"(smem_u32(&bar))
        : "memory");
  }
  if (wait) mbar_wait(&bar, 0);
  for (int i = threadIdx.x; i < box_bytes / 16; i += blockDim.x)
    out[i] = reinterpret_cast<const uint4*>(smem)[i];
}

// The box's bytes `in` copied into shared memory as they lie, then stored by TMA to
// the box at (x, y) of a 2-D tensor.
__global__ void tma_store_probe(const __grid_constant__ CUtensorMap map, int x, int y,
                                int box_bytes, const uint4* in) {
  extern __shared__ __align__(1024) unsigned char smem[];
  for (int i = threadIdx.x; i < box_bytes / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(smem)[i] = in[i];
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"
                 " [%0, {%1, %2}], [%3];\n"
                 ::"l"(&map), "r"(x), "r"(y), "r"(smem_u32(smem)) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  }
}

// A 2-D fp16 tensor map of `rows` x `cols` elements (row pitch `pitch` elements) with
// box `box_cols` x `box_rows` and swizzle 0-3 (none, 32, 64, 128 B); fill 1: NaN.
// Returns what cuTensorMapEncodeTiled returned.
int encode_2d(CUtensorMap* map, void* base, int rows, int cols, int pitch,
              int box_cols, int box_rows, int swizzle, int fill) {
  const cuuint64_t dim[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t stride[1] = {cuuint64_t(pitch) * 2};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  const cuuint32_t one[2] = {1, 1};
  // The driver's function through the runtime: the extension links no libcuda.
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                   cudaEnableDefault, &found);
  if (found != cudaDriverEntryPointSuccess) return -1;
  return int(reinterpret_cast<decltype(&cuTensorMapEncodeTiled)>(fn)(
      map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, base, dim, stride, box, one,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CUtensorMapSwizzle(swizzle),
      CU_TENSOR_MAP_L2_PROMOTION_NONE,
      fill ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
           : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
}

// geometry for TMA: {rows, cols, pitch, box_cols, box_rows, swizzle, fill, x, y,
// dynamic shared memory (0: the box's bytes)}.
void launch(const char* w, void* p0, void* p1, void* p2, void* p3, int a0, int a1,
            const int* g) {
  auto f = [](void* p) { return static_cast<float*>(p); };
  auto u = [](void* p) { return static_cast<uint32_t*>(p); };
  const std::string k = w;
  if (k == "mbarrier_ring") mbarrier_ring<<<1, 32 * (1 + a1)>>>(f(p0), f(p1), a0, 0);
  else if (k == "mbarrier_skip_wait")
    mbarrier_ring<<<1, 32 * (1 + a1)>>>(f(p0), f(p1), a0, 1);
  else if (k == "mbarrier_stuck") mbarrier_stuck<<<1, 32>>>(f(p0), a0);
  else if (k == "elect") elect_probe<<<1, 32>>>(u(p0), uint32_t(a0));
  else if (k == "setmaxnreg") setmaxnreg_probe<<<1, 256>>>(f(p0));
  else if (k == "bulk_copy")
    bulk_copy_probe<<<1, 128, a0>>>(static_cast<const uint4*>(p0),
                                    static_cast<uint4*>(p1), a0);
  else if (k == "wgmma_n8" || k == "wgmma_n64") {
    // p0: image (32 KiB), p1: [descriptors (4 x 8 bytes) | A registers], p2: d,
    // p3: early
    const auto* desc = static_cast<const uint64_t*>(p1);
    const auto* a = reinterpret_cast<const uint32_t*>(desc + 4);
    auto* image = static_cast<const uint4*>(p0);
    if (k == "wgmma_n8")
      wgmma_probe<8><<<1, 128, 32768>>>(image, 32768, desc, a, f(p2), f(p3), a0, a1);
    else
      wgmma_probe<64><<<1, 128, 32768>>>(image, 32768, desc, a, f(p2), f(p3), a0, a1);
  } else if (k == "tma_load" || k == "tma_store") {
    // p0: the tensor, p1: the box's bytes, p2: encode's result (int)
    CUtensorMap map;
    const int rc = encode_2d(&map, p0, g[0], g[1], g[2], g[3], g[4], g[5], g[6]);
    *static_cast<int*>(p2) = rc;
    if (rc) return;
    const int box_bytes = g[3] * g[4] * 2;
    const int smem = g[9] ? g[9] : box_bytes;   // g[9]: less than the box, for memcheck
    if (k == "tma_load")
      tma_load_probe<<<1, 64, smem>>>(map, g[7], g[8], box_bytes,
                                     static_cast<uint4*>(p1), a0);
    else
      tma_store_probe<<<1, 64, box_bytes>>>(map, g[7], g[8], box_bytes,
                                           static_cast<const uint4*>(p1));
  }
}
