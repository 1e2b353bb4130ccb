// Kernels that exercise the emulator's built-ins, and kernels with planted bugs it must
// catch.
#include <cassert>
#include <string>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "tensor_core.cuh"

// ---- block reductions: one correct, one missing the barrier inside the tree ---------
template <bool kBarrier>
__global__ void block_sum(const float* x, float* out, int n) {
  __shared__ float s[256];
  int t = threadIdx.x;
  s[t] = t < n ? x[blockIdx.x * n + t] : 0.f;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) s[t] += s[t + half];
    if (kBarrier) __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// ---- rotate a shared array by one, twice: the write must wait until every read is
// done ----
template <bool kBarrier>
__global__ void rotate_twice(const float* x, float* out) {
  __shared__ float s[128];
  int t = threadIdx.x, n = blockDim.x;
  s[t] = x[t];
  __syncthreads();
  for (int it = 0; it < 2; ++it) {
    float v = s[(t + 1) % n];
    if (kBarrier) __syncthreads();   // write-after-read hazard without it
    s[t] = v;
    __syncthreads();
  }
  out[t] = s[t];
}

// ---- warp-synchronous reduction through shared memory: needs __syncwarp between steps
// -----
template <bool kSyncwarp>
__global__ void warp_sum_shared(const float* x, float* out) {
  __shared__ float s[32];
  int lane = threadIdx.x;
  s[lane] = x[lane];
  if (kSyncwarp) __syncwarp();
  for (int off = 16; off > 0; off /= 2) {
    float v = lane < off ? s[lane + off] : 0.f;
    if (kSyncwarp) __syncwarp();
    if (lane < off) s[lane] += v;
    if (kSyncwarp) __syncwarp();
  }
  if (lane == 0) out[0] = s[0];
}

// ---- warp intrinsics ----------------------------------------------------------------
__global__ void shuffles(const int* in, int* out, int mode, int arg, int width) {
  int t = threadIdx.x, v = in[t], r;
  if (mode == 0) r = __shfl_sync(0xffffffffu, v, arg, width);
  else if (mode == 1) r = __shfl_up_sync(0xffffffffu, v, arg, width);
  else if (mode == 2) r = __shfl_down_sync(0xffffffffu, v, arg, width);
  else r = __shfl_xor_sync(0xffffffffu, v, arg, width);
  out[t] = r;
}

__global__ void float_shuffle_sum(const float* in, float* out) {
  float v = in[threadIdx.x];
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  out[threadIdx.x] = v;
}

__global__ void votes(const int* pred, unsigned* out) {
  int t = threadIdx.x, p = pred[t];
  out[4 * t + 0] = __ballot_sync(0xffffffffu, p);
  out[4 * t + 1] = __any_sync(0xffffffffu, p);
  out[4 * t + 2] = __all_sync(0xffffffffu, p);
  out[4 * t + 3] =
      __syncthreads_count(p) * 100 + __syncthreads_and(p) * 10 + __syncthreads_or(p);
}

// ---- atomics, math, 16-bit floats, vectors, coordinates -----------------------------
__global__ void atomics(int* counters, float* fsum, unsigned long long* big) {
  int t = threadIdx.x + blockIdx.x * blockDim.x;
  atomicAdd(&counters[0], 1);
  atomicMax(&counters[1], t);
  atomicMin(&counters[2], -t);
  atomicCAS(&counters[3], 0, t + 1);   // only the first thread to arrive succeeds
  atomicExch(&counters[4], 7);
  atomicSub(&counters[5], 2);
  atomicAdd(fsum, 0.5f);
  atomicAdd(big, 1ull << 33);
}

__global__ void math_fns(const float* x, float* out, int n) {
  int i = threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  float* o = out + 8 * i;
  o[0] = __expf(v);
  o[1] = exp2f(v);
  o[2] = __fdividef(v, 3.f);
  o[3] = rsqrtf(fabsf(v) + 1.f);
  o[4] = fmaxf(v, 0.f);
  o[5] = max(v, -INFINITY);
  o[6] = __logf(fabsf(v) + 1.f);
  o[7] = float(min(i, 3)) + float(max(i, 2u));
}

__global__ void sixteen_bit(const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half h = __float2half(x[i]);
  __nv_bfloat16 b = __float2bfloat16(x[i]);
  __half2 h2 = __floats2half2_rn(x[i], 2.f * x[i]);
  float2 back = __half22float2(__hmul2(h2, __float2half2_rn(0.5f)));
  out[4 * i + 0] = __half2float(h);
  out[4 * i + 1] = __bfloat162float(b);
  out[4 * i + 2] = __half2float(__hadd(h, __float2half(1.f)));
  out[4 * i + 3] = back.y;
}

__global__ void float4_copy(const float4* in, float4* out, int n4) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n4) {
    float4 v = in[i];
    out[i] = make_float4(v.w, v.z, v.y, v.x);
  }
}

template <int kScale>
__global__ void coordinates(int* out) {
  int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  int nt = blockDim.x * blockDim.y * blockDim.z;
  out[b * nt + t] = kScale * (b * nt + t);
}

// ---- shared memory that nobody wrote reads as NaN -----------------------------------
__global__ void read_unwritten_shared(float* out) {
  extern __shared__ float dyn[];
  __shared__ float stat[4];
  int t = threadIdx.x;
  if (t == 0) dyn[0] = 1.f;                   // only element 0 of each is written
  if (t == 0) stat[0] = 2.f;
  __syncthreads();
  out[4 * blockIdx.x + 0] = dyn[0];
  out[4 * blockIdx.x + 1] = dyn[1];
  out[4 * blockIdx.x + 2] = stat[0];
  out[4 * blockIdx.x + 3] = stat[1];
}

__global__ void big_dynamic_shared(float* out) {
  extern __shared__ __align__(16) unsigned char raw[];
  float* s = reinterpret_cast<float*>(raw);
  s[threadIdx.x] = float(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}

// ---- failures that must become Python exceptions ------------------------------------
__global__ void failing(int mode, float* out) {
  int t = threadIdx.x;
  if (mode == 0 && blockIdx.x == 1 && t == 5) __trap();
  if (mode == 1) assert(t != 3);
  if (mode == 2) {                            // divergent barrier: half skip one
    if (t < 16) __syncthreads();
    __syncthreads();
  }
  if (mode == 3) {                            // some threads leave before the barrier
    if (t >= 8) return;
    __syncthreads();
  }
  if (mode == 4) {                            // a lane leaves before a shuffle
    if (t == 31) return;
    out[t] = __shfl_xor_sync(0xffffffffu, 1.f, 1);
  }
  if (mode == 5) printf("block %d thread %d says hello\n", blockIdx.x, t);
  if (t < 64) out[t] = 1.f;
}

// ---- tensor cores -------------------------------------------------------------------
// Fragments in, fragments out: the layout is decided entirely by the test.
__global__ void mma_fragments(const uint32_t* a, const uint32_t* b, const float* c,
                              float* d, int kind) {
  int lane = threadIdx.x;
  float acc[4];
  if (kind == 0) mma_m16n8k16_f16(acc, a + 4 * lane, b + 4 * lane, c + 4 * lane);
  else if (kind == 1) mma_m16n8k16_bf16(acc, a + 4 * lane, b + 4 * lane, c + 4 * lane);
  else mma_m16n8k8_f16(acc, a + 4 * lane, b + 4 * lane, c + 4 * lane);
  for (int i = 0; i < 4; ++i) d[4 * lane + i] = acc[i];
}

// Four 8x8 matrices of 16-bit values in shared memory, loaded with ldmatrix.
template <int N, bool Trans>
__global__ void ldmatrix_probe(const unsigned short* m, uint32_t* out) {
  __shared__ __align__(16) unsigned short s[4 * 64];
  int lane = threadIdx.x;
  for (int i = lane; i < 4 * 64; i += 32) s[i] = m[i];
  __syncwarp();
  uint32_t r[N];
  ldmatrix<N, Trans>(r, &s[(lane % (8 * N)) * 8]);
  for (int i = 0; i < N; ++i) out[4 * lane + i] = r[i];
}

// A 16x8 = (16x16)(16x8) product from row-major A and column-major B, loading fragments
// directly; kSwapRows plants the classic bug of exchanging rows g and g+8.
template <bool kSwapRows>
__global__ void mma_gemm(const __half* A, const __half* Bt, float* D) {
  int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  int lo = kSwapRows ? g + 8 : g, hi = kSwapRows ? g : g + 8;
  auto pair = [](const __half* p) {
    return uint32_t(__half_as_ushort(p[0])) | (uint32_t(__half_as_ushort(p[1])) << 16);
  };
  uint32_t a[4] = {pair(A + lo * 16 + 2 * t), pair(A + hi * 16 + 2 * t),
                   pair(A + lo * 16 + 2 * t + 8), pair(A + hi * 16 + 2 * t + 8)};
  uint32_t b[2] = {pair(Bt + g * 16 + 2 * t), pair(Bt + g * 16 + 2 * t + 8)};
  float c[4] = {0.f, 0.f, 0.f, 0.f}, d[4];
  mma_m16n8k16_f16(d, a, b, c);
  for (int i = 0; i < 4; ++i) D[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d[i];
}

// ---- host launchers -----------------------------------------------------------------
void launch(const char* which, int grid, int block, int smem, int a0, int a1, int a2,
            void* p0, void* p1, void* p2, void* p3, cudaStream_t st) {
  auto f = [](void* p) { return static_cast<float*>(p); };
  auto i = [](void* p) { return static_cast<int*>(p); };
  std::string w = which;
  if (w == "block_sum") block_sum<true><<<grid, block, 0, st>>>(f(p0), f(p1), a0);
  else if (w == "block_sum_bug")
    block_sum<false><<<grid, block, 0, st>>>(f(p0), f(p1), a0);
  else if (w == "rotate") rotate_twice<true><<<grid, block, 0, st>>>(f(p0), f(p1));
  else if (w == "rotate_bug") rotate_twice<false><<<grid, block, 0, st>>>(f(p0), f(p1));
  else if (w == "warp_sum") warp_sum_shared<true><<<1, 32, 0, st>>>(f(p0), f(p1));
  else if (w == "warp_sum_bug") warp_sum_shared<false><<<1, 32, 0, st>>>(f(p0), f(p1));
  else if (w == "shuffles") shuffles<<<1, 32, 0, st>>>(i(p0), i(p1), a0, a1, a2);
  else if (w == "float_shuffle_sum") float_shuffle_sum<<<1, 32, 0, st>>>(f(p0), f(p1));
  else if (w == "votes") votes<<<1, block, 0, st>>>(i(p0), static_cast<unsigned*>(p1));
  else if (w == "atomics")
    atomics<<<grid, block, 0, st>>>(i(p0), f(p1), static_cast<unsigned long long*>(p2));
  else if (w == "math") math_fns<<<1, block, 0, st>>>(f(p0), f(p1), a0);
  else if (w == "sixteen_bit") sixteen_bit<<<grid, block, 0, st>>>(f(p0), f(p1), a0);
  else if (w == "float4")
    float4_copy<<<grid, block, 0, st>>>(static_cast<float4*>(p0),
                                        static_cast<float4*>(p1), a0);
  else if (w == "coordinates")
    coordinates<3><<<dim3(a0, a1, a2), dim3(4, 3, 2), 0, st>>>(i(p0));
  else if (w == "unwritten") read_unwritten_shared<<<grid, block, smem, st>>>(f(p0));
  else if (w == "big_smem") {
    if (a0)
      cudaFuncSetAttribute(big_dynamic_shared,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    big_dynamic_shared<<<1, block, smem, st>>>(f(p0));
  }
  else if (w == "failing") failing<<<grid, block, 0, st>>>(a0, f(p0));
  else if (w == "mma")
    mma_fragments<<<1, 32, 0, st>>>(static_cast<uint32_t*>(p0),
                                    static_cast<uint32_t*>(p1), f(p2), f(p3), a0);
  else if (w == "ldmatrix_x1")
    ldmatrix_probe<1, false><<<1, 32, 0, st>>>(static_cast<unsigned short*>(p0),
                                               static_cast<uint32_t*>(p1));
  else if (w == "ldmatrix_x2")
    ldmatrix_probe<2, false><<<1, 32, 0, st>>>(static_cast<unsigned short*>(p0),
                                               static_cast<uint32_t*>(p1));
  else if (w == "ldmatrix_x4")
    ldmatrix_probe<4, false><<<1, 32, 0, st>>>(static_cast<unsigned short*>(p0),
                                               static_cast<uint32_t*>(p1));
  else if (w == "ldmatrix_x1_trans")
    ldmatrix_probe<1, true><<<1, 32, 0, st>>>(static_cast<unsigned short*>(p0),
                                              static_cast<uint32_t*>(p1));
  else if (w == "ldmatrix_x2_trans")
    ldmatrix_probe<2, true><<<1, 32, 0, st>>>(static_cast<unsigned short*>(p0),
                                              static_cast<uint32_t*>(p1));
  else if (w == "ldmatrix_x4_trans")
    ldmatrix_probe<4, true><<<1, 32, 0, st>>>(static_cast<unsigned short*>(p0),
                                              static_cast<uint32_t*>(p1));
  else if (w == "mma_gemm")
    mma_gemm<false><<<1, 32, 0, st>>>(static_cast<__half*>(p0),
                                      static_cast<__half*>(p1), f(p2));
  else if (w == "mma_gemm_bug")
    mma_gemm<true><<<1, 32, 0, st>>>(static_cast<__half*>(p0),
                                     static_cast<__half*>(p1), f(p2));
}
