// Row softmax y = softmax(x) over the last dimension of a [rows, n] row-major matrix,
// in the order chapter 3 builds it up. Each version reads x from global memory and
// writes y once; they differ in how the two reductions of a row (its max m and its sum
// l = Σ exp(x − m)) are shared among threads, and in how many times x is read: three
// times by the first four kernels (max, sum, write), twice by the online ones (max
// and sum together, then write).
//
// A row whose entries are all −inf (a query with no admissible key) becomes all zeros;
// a row holding NaN or +inf becomes NaN, as in torch.softmax. x and y may be the same
// buffer: a thread writes y[j] only after the row's reductions and only for the j it
// has just read.
#pragma once
#include <cmath>

#include "max_nan.cuh"
#include "warp_reduce.cuh"

// y = e^(x - m) / l, with the empty row (l = 0, every x = -inf) as zeros. NaN in l or m
// (a NaN or +inf in the row) gives NaN.
__device__ __forceinline__ float normalized(float x, float m, float l) {
  return l == 0.f ? 0.f : expf(x - m) / l;
}

// One thread per row: simple, but a row is read by one thread only, so a block's
// neighbouring threads read addresses n floats apart (no coalescing) and rows < a few
// thousand leave the GPU mostly idle.
__global__ void softmax_rows_naive(const float* x, float* y, int rows, int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* xr = x + size_t(r) * n;
  float* yr = y + size_t(r) * n;
  float m = -INFINITY;
  for (int j = 0; j < n; ++j) m = max_nan(m, xr[j]);
  float l = 0.f;
  for (int j = 0; j < n; ++j) l += m == -INFINITY ? 0.f : expf(xr[j] - m);
  for (int j = 0; j < n; ++j) yr[j] = normalized(xr[j], m, l);
}

// One block per row, reductions as a tree in shared memory. Threads stride the row
// together (consecutive threads, consecutive addresses), each folds its elements into
// one value, then log2(BLOCK) halving steps combine the BLOCK partial values, a barrier
// after each step.
template <int BLOCK>
__global__ void softmax_block_tree(const float* x, float* y, int n) {
  __shared__ float buf[BLOCK];
  const float* xr = x + size_t(blockIdx.x) * n;
  float* yr = y + size_t(blockIdx.x) * n;
  const int t = threadIdx.x;

  float v = -INFINITY;
  for (int j = t; j < n; j += BLOCK) v = max_nan(v, xr[j]);
  buf[t] = v;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s /= 2) {
    if (t < s) buf[t] = max_nan(buf[t], buf[t + s]);
    __syncthreads();   // step s reads what step 2s wrote
  }
  const float m = buf[0];
  __syncthreads();     // everyone has read buf[0] before it is reused for the sum

  v = 0.f;
  if (m != -INFINITY)
    for (int j = t; j < n; j += BLOCK) v += expf(xr[j] - m);
  buf[t] = v;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s /= 2) {
    if (t < s) buf[t] += buf[t + s];
    __syncthreads();
  }
  const float l = buf[0];
  for (int j = t; j < n; j += BLOCK) yr[j] = normalized(xr[j], m, l);
}


// One warp per row, blockDim = (32, rows per block): fine for rows up to a few
// thousand.
__global__ void softmax_warp(const float* x, float* y, int rows, int n) {
  const int r = blockIdx.x * blockDim.y + threadIdx.y, lane = threadIdx.x;
  if (r >= rows) return;   // whole warps leave together, so the shuffles stay full-warp
  const float* xr = x + size_t(r) * n;
  float* yr = y + size_t(r) * n;
  float m = -INFINITY;
  for (int j = lane; j < n; j += 32) m = max_nan(m, xr[j]);
  m = warp_max(m);
  float l = 0.f;
  if (m != -INFINITY)
    for (int j = lane; j < n; j += 32) l += expf(xr[j] - m);
  l = warp_sum(l);
  for (int j = lane; j < n; j += 32) yr[j] = normalized(xr[j], m, l);
}

// A block-wide reduction built from warp reductions: each warp reduces its 32 values by
// shuffles, lane 0 of each warp leaves the result in `scratch`, and every thread then
// combines the BLOCK/32 partial results. Two barriers: scratch is complete before it is
// read, and read by all before the caller's next reduction overwrites it.
template <int BLOCK, class T, class Warp, class Op>
__device__ __forceinline__ T block_reduce(T v, T* scratch, Warp warp_op, Op op) {
  v = warp_op(v);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < BLOCK / 32; ++w) r = op(r, scratch[w]);
  __syncthreads();
  return r;
}

// One block of warps per row: the long-row version of softmax_warp.
template <int BLOCK>
__global__ void softmax_block_warps(const float* x, float* y, int n) {
  __shared__ float scratch[BLOCK / 32];
  const float* xr = x + size_t(blockIdx.x) * n;
  float* yr = y + size_t(blockIdx.x) * n;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < n; j += BLOCK) m = max_nan(m, xr[j]);
  m = block_reduce<BLOCK>(m, scratch, [](float v) { return warp_max(v); },
                          [](float a, float b) { return max_nan(a, b); });
  float l = 0.f;
  if (m != -INFINITY)
    for (int j = threadIdx.x; j < n; j += BLOCK) l += expf(xr[j] - m);
  l = block_reduce<BLOCK>(l, scratch, [](float v) { return warp_sum(v); },
                          [](float a, float b) { return a + b; });
  for (int j = threadIdx.x; j < n; j += BLOCK) yr[j] = normalized(xr[j], m, l);
}

// The online softmax state of a set of scores: m = their max, l = Σ exp(x − m).
struct MaxSum {
  float m, l;
};

// State of the union of two disjoint sets. Each sum is rescaled to the larger max; an
// empty side (m = −inf, l = 0) leaves the other unchanged. Associative and commutative,
// so partial states may be merged in any grouping: per thread, then across a warp, then
// across warps.
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = max_nan(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.l * expf(a.m - m) + b.l * expf(b.m - m)};
}
__device__ __forceinline__ MaxSum warp_merge(MaxSum s) {
  for (int offset = 16; offset > 0; offset /= 2)
    s = merge(s, {__shfl_xor_sync(0xffffffffu, s.m, offset),
                  __shfl_xor_sync(0xffffffffu, s.l, offset)});
  return s;
}

// One block of warps per row, online: one pass over x folds each element into (m, l),
// so x is read twice in all (once for the state, once to write y) instead of three
// times. fold(s, x) adds an element to a thread's state; the block merges the
// threads' states; write(x, s, r) is y, with r = 1 / l.
template <int BLOCK, class Fold, class Write>
__device__ __forceinline__ void online_row(const float* x, float* y, int n,
                                           MaxSum* scratch, Fold fold, Write write) {
  const float* xr = x + size_t(blockIdx.x) * n;
  float* yr = y + size_t(blockIdx.x) * n;
  MaxSum s{-INFINITY, 0.f};
  for (int j = threadIdx.x; j < n; j += BLOCK) s = fold(s, xr[j]);
  s = block_reduce<BLOCK>(s, scratch, [](MaxSum v) { return warp_merge(v); },
                          [](MaxSum a, MaxSum b) { return merge(a, b); });
  const float r = 1.f / s.l;   // l = 0 (the empty row): inf, which write leaves unused
  for (int j = threadIdx.x; j < n; j += BLOCK) yr[j] = write(xr[j], s, r);
}

// Each element folded as the state (x, 1) it is, by merge.
template <int BLOCK>
__global__ void softmax_online(const float* x, float* y, int n) {
  __shared__ MaxSum scratch[BLOCK / 32];
  online_row<BLOCK>(x, y, n, scratch,
                    [](MaxSum s, float v) { return merge(s, {v, 1.f}); },
                    [](float v, MaxSum s, float) { return normalized(v, s.m, s.l); });
}

// The online kernel, counted: what it issues per element, not only what it reads.
// merge(s, {x, 1}) takes two exponentials per element where one does: of x and the
// running max m, the larger stays the max and only the other side is scaled, by
// e^−|x − m| ≤ 1. A −inf element leaves the state as it is (−inf − (−inf) would be
// NaN); a NaN element becomes the max, as max_nan makes it in merge, and with it the
// row's l and every y.
__device__ __forceinline__ MaxSum fold(MaxSum s, float x) {
  const bool up = x > s.m || isnan(x);              // a new max: rescale the sum
  const float e = expf(up ? s.m - x : x - s.m);
  if (up) return {x, s.l * e + 1.f};
  return {s.m, x == -INFINITY ? s.l : s.l + e};
}

// softmax_online with one exponential per element in the first pass (fold), and in
// the second a multiply by r = 1 / l, taken once per row, where normalized divides
// (an IEEE division costs a dozen instructions and a check for its slow path). The
// same bytes in a little over half softmax_online's instructions per element.
template <int BLOCK>
__global__ void softmax_online_lean(const float* x, float* y, int n) {
  __shared__ MaxSum scratch[BLOCK / 32];
  online_row<BLOCK>(x, y, n, scratch, fold, [](float v, MaxSum s, float r) {
    return s.l == 0.f ? 0.f : expf(v - s.m) * r;
  });
}

// Host side: the kernel the book uses for attention (online, 256 threads per row).
inline void softmax_rows(const float* x, float* y, int rows, int n,
                         cudaStream_t stream) {
  if (rows > 0) softmax_online<256><<<rows, 256, 0, stream>>>(x, y, n);
}
