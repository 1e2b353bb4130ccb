// Batched single-precision GEMM, C = A · op(B), in the steps of chapter 4. Row-major
// operands: A is M×K; B is N×K when B_T (C = A·Bᵀ, "NT": the layout of Q Kᵀ, both
// operands K-contiguous) or K×N otherwise (C = A·B, "NN": the layout of P V). Leading
// dimensions are separate from the sizes, so a kernel can read every stride-th row of K
// and V (chapter 5) without a copy.
//
// Batch z of C reads batch z of A and batch z / group of B: with z = b·H + h and group
// = H/Hkv that is head h / group of batch b, so grouped-query attention needs no copies
// either.
#pragma once
#include <algorithm>

struct Gemm {
  const float* a;
  const float* b;
  float* c;
  int M, N, K;
  int lda, ldb, ldc;                    // row pitch of each operand, in floats
  long long batch_a, batch_b, batch_c;  // distance between batches, in floats
  int group;                            // batches of A and C per batch of B
};

template <bool B_T>
__device__ __forceinline__ float b_at(const Gemm& g, const float* b, int k, int n) {
  return B_T ? b[size_t(n) * g.ldb + k] : b[size_t(k) * g.ldb + n];
}

// Step 1. One thread per element of C, operands straight from global memory: every
// element of A and B is read N (resp. M) times from DRAM or L2, 2 loads per
// multiply-add.
template <bool B_T>
__global__ void gemm_naive(Gemm g) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y * blockDim.y + threadIdx.y;
  if (m >= g.M || n >= g.N) return;
  const float* a = g.a + blockIdx.z * g.batch_a + size_t(m) * g.lda;
  const float* b = g.b + (blockIdx.z / g.group) * g.batch_b;
  float acc = 0.f;
  for (int k = 0; k < g.K; ++k) acc += a[k] * b_at<B_T>(g, b, k, n);
  g.c[blockIdx.z * g.batch_c + size_t(m) * g.ldc + n] = acc;
}

// Step 2. Shared-memory tiles: a T×T block of threads computes a T×T tile of C, loading
// the T×T tiles of A and B it needs into shared memory, one element per thread, then
// computing from there. Each global element is now loaded once per tile instead of once
// per use: T times less traffic. Loads are coalesced for both layouts (threadIdx.x runs
// along the contiguous index); Bs has a padding column so the transposed store of the
// B_T case avoids bank conflicts.
template <bool B_T, int T>
__global__ void gemm_smem(Gemm g) {
  __shared__ float As[T][T];
  __shared__ float Bs[T][T + 1];   // Bs[k][n]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m0 = blockIdx.y * T, n0 = blockIdx.x * T;
  const float* a = g.a + blockIdx.z * g.batch_a;
  const float* b = g.b + (blockIdx.z / g.group) * g.batch_b;
  float acc = 0.f;
  for (int k0 = 0; k0 < g.K; k0 += T) {
    As[ty][tx] = m0 + ty < g.M && k0 + tx < g.K ? a[size_t(m0 + ty) * g.lda + k0 + tx]
                                                : 0.f;
    if (B_T)   // row n0+ty of B, contiguous along k
      Bs[tx][ty] = n0 + ty < g.N && k0 + tx < g.K ? b_at<B_T>(g, b, k0 + tx, n0 + ty)
                                                  : 0.f;
    else       // row k0+ty of B, contiguous along n
      Bs[ty][tx] = k0 + ty < g.K && n0 + tx < g.N ? b_at<B_T>(g, b, k0 + ty, n0 + tx)
                                                  : 0.f;
    __syncthreads();   // both tiles are complete
    for (int k = 0; k < T; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();   // everyone is done with them before the next k0 overwrites them
  }
  if (m0 + ty < g.M && n0 + tx < g.N)
    g.c[blockIdx.z * g.batch_c + size_t(m0 + ty) * g.ldc + n0 + tx] = acc;
}

// Steps 3 and 4. Register blocking: 256 threads compute a 64×64 tile of C, each a 4×4
// sub-tile held in registers. Per k, a thread reads 4 values of A and 4 of B from
// shared memory and does 16 multiply-adds: 2 shared loads per FMA in step 2 become 0.5.
// A is stored transposed in shared memory (As[k][m]) so that both operands are read as
// 4 consecutive floats. VEC (step 4) loads global memory as float4: 4 times fewer load
// instructions. It needs K (and N when !B_T), every leading dimension and batch
// distance to be multiples of 4 and the pointers 16-byte aligned; the host checks and
// otherwise uses the scalar loads of step 3.
constexpr int RB_M = 64, RB_N = 64, RB_K = 16, RB_THREADS = 256;

template <bool B_T, bool VEC>
__global__ void gemm_regblock(Gemm g) {
  __shared__ __align__(16) float As[RB_K][RB_M];   // As[k][m]
  __shared__ __align__(16) float Bs[RB_K][RB_N];   // Bs[k][n]
  const int t = threadIdx.x, tm = t / 16, tn = t % 16;   // rows 4tm.., columns 4tn..
  const int m0 = blockIdx.y * RB_M, n0 = blockIdx.x * RB_N;
  const float* a = g.a + blockIdx.z * g.batch_a;
  const float* b = g.b + (blockIdx.z / g.group) * g.batch_b;
  float acc[4][4] = {};

  for (int k0 = 0; k0 < g.K; k0 += RB_K) {
    // A tile: 64 rows × 16 k. Either 4 scalar loads or one float4 per thread,
    // consecutive threads reading consecutive addresses of a row.
    if (VEC) {
      const int r = t / 4, k = (t % 4) * 4;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (m0 + r < g.M && k0 + k < g.K)
        v = *reinterpret_cast<const float4*>(a + size_t(m0 + r) * g.lda + k0 + k);
      As[k][r] = v.x; As[k + 1][r] = v.y; As[k + 2][r] = v.z; As[k + 3][r] = v.w;
    } else {
      for (int i = t; i < RB_M * RB_K; i += RB_THREADS) {
        const int r = i / RB_K, k = i % RB_K;
        As[k][r] = m0 + r < g.M && k0 + k < g.K ? a[size_t(m0 + r) * g.lda + k0 + k]
                                                : 0.f;
      }
    }
    // B tile: 16 k × 64 n, read along B's contiguous index.
    if (VEC && B_T) {
      const int n = t / 4, k = (t % 4) * 4;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (n0 + n < g.N && k0 + k < g.K)
        v = *reinterpret_cast<const float4*>(b + size_t(n0 + n) * g.ldb + k0 + k);
      Bs[k][n] = v.x; Bs[k + 1][n] = v.y; Bs[k + 2][n] = v.z; Bs[k + 3][n] = v.w;
    } else if (VEC) {
      const int k = t / 16, n = (t % 16) * 4;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (k0 + k < g.K && n0 + n < g.N)
        v = *reinterpret_cast<const float4*>(b + size_t(k0 + k) * g.ldb + n0 + n);
      *reinterpret_cast<float4*>(&Bs[k][n]) = v;
    } else {
      for (int i = t; i < RB_K * RB_N; i += RB_THREADS) {
        const int k = B_T ? i % RB_K : i / RB_N, n = B_T ? i / RB_K : i % RB_N;
        Bs[k][n] = k0 + k < g.K && n0 + n < g.N ? b_at<B_T>(g, b, k0 + k, n0 + n) : 0.f;
      }
    }
    __syncthreads();   // both tiles are complete
    for (int k = 0; k < RB_K; ++k) {
      const float4 av = *reinterpret_cast<const float4*>(&As[k][4 * tm]);
      const float4 bv = *reinterpret_cast<const float4*>(&Bs[k][4 * tn]);
      const float ar[4] = {av.x, av.y, av.z, av.w}, br[4] = {bv.x, bv.y, bv.z, bv.w};
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += ar[i] * br[j];
    }
    __syncthreads();   // everyone is done with the tiles before they are overwritten
  }
  float* c = g.c + blockIdx.z * g.batch_c;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int m = m0 + 4 * tm + i, n = n0 + 4 * tn + j;
      if (m < g.M && n < g.N) c[size_t(m) * g.ldc + n] = acc[i][j];
    }
}

// Whether step 4's float4 loads are legal for these operands.
template <bool B_T>
inline bool gemm_vectorisable(const Gemm& g) {
  const auto aligned = [](const void* p) {
    return reinterpret_cast<unsigned long long>(p) % 16 == 0;
  };
  return g.K % 4 == 0 && (B_T || g.N % 4 == 0) && g.lda % 4 == 0 && g.ldb % 4 == 0 &&
         g.batch_a % 4 == 0 && g.batch_b % 4 == 0 && aligned(g.a) && aligned(g.b);
}

// One launch of a problem within CUDA's grid limits (see gemm_launch).
template <bool B_T>
inline void gemm_launch_part(const Gemm& g, int batch, int step, cudaStream_t stream) {
  switch (step) {
    case 1: {
      const dim3 block(16, 16), grid((g.N + 15) / 16, (g.M + 15) / 16, batch);
      gemm_naive<B_T><<<grid, block, 0, stream>>>(g);
      return;
    }
    case 2: {
      constexpr int T = 16;
      const dim3 grid((g.N + T - 1) / T, (g.M + T - 1) / T, batch);
      gemm_smem<B_T, T><<<grid, dim3(T, T), 0, stream>>>(g);
      return;
    }
    case 3:
    case 4: {
      const dim3 grid((g.N + RB_N - 1) / RB_N, (g.M + RB_M - 1) / RB_M, batch);
      if (step == 4 && gemm_vectorisable<B_T>(g))
        gemm_regblock<B_T, true><<<grid, RB_THREADS, 0, stream>>>(g);
      else
        gemm_regblock<B_T, false><<<grid, RB_THREADS, 0, stream>>>(g);
      return;
    }
  }
}

// step: 1 naive, 2 shared-memory tiles, 3 register blocking, 4 register blocking +
// float4 loads (step 3's loads where float4 is not legal). Returns false for an unknown
// step. gridDim.y and gridDim.z are at most 65535, so a larger problem runs as several
// launches, each on a slice of rows and of batches; a slice holds whole groups of
// batches, so that batch z still reads batch z / group of B.
template <bool B_T>
inline bool gemm_launch(const Gemm& g, int batch, int step, cudaStream_t stream) {
  if (step < 1 || step > 4) return false;
  if (batch == 0 || g.M == 0 || g.N == 0) return true;
  const long long max_batch = 65535 - 65535 % g.group;
  const long long max_rows = 65535ll * (step <= 2 ? 16 : RB_M);
  for (long long z0 = 0; z0 < batch; z0 += max_batch)
    for (long long m0 = 0; m0 < g.M; m0 += max_rows) {
      Gemm part = g;
      part.a += z0 * g.batch_a + m0 * g.lda;
      part.b += z0 / g.group * g.batch_b;
      part.c += z0 * g.batch_c + m0 * g.ldc;
      part.M = int(std::min<long long>(g.M - m0, max_rows));
      gemm_launch_part<B_T>(part, int(std::min<long long>(batch - z0, max_batch)), step,
                            stream);
    }
  return true;
}
