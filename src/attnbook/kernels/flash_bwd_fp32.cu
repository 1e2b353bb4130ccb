// The backward pass of attention in fp32 (FlashAttention-2's Algorithm 2), in three
// kernels, none of which stores anything of size Sq x Sk. The forward left o and the
// log-sum-exp L; each kernel recomputes the probabilities it needs,
// p_ij = exp(s_ij − L_i) with s_ij = scale·q_i·k_j (+ the mask).
//
// 1. delta: D_i = Σ_d dO_id·O_id (minus dL_i when the lse has a gradient), by both
//    steps.
// 2. dK, dV: a block per Bc keys of one (batch, kv head), one thread per key. The
//    thread accumulates its rows of dK and dV in registers over every query tile (Q_i,
//    dO_i through shared memory) of every query head of its group: for GQA, the sum
//    over the group happens in registers, with no atomics.
//      dv_j += p_ij dO_i      ds_ij = p_ij (dO_i·v_j − D_i)      dk_j += ds_ij q_i
// 3. dQ: a block per Br query rows, one thread per row, streaming K and V tiles, as the
//    forward does:  dq_i += ds_ij k_j.
// Those are step 1. Step 2 (flash_bwd_fp32_2_lane_groups.cuh) gives each row or key
// eight lanes instead of one, so that no thread holds more than it has registers for.
// Every element of dQ, dK and dV is written by one thread that adds its terms in a
// fixed order: the result is the same bit for bit on every run. (Accumulating dQ in the
// dK/dV kernel instead would save a pass over K and V, but needs atomic adds from many
// blocks into each dq_i, whose order, and so whose rounding, changes from run to run.)
#include <algorithm>
#include <cmath>

#include "flash_bwd_fp32.h"
#include "flash_bwd_fp32_2_lane_groups.cuh"   // step 2, and recompute_p
#include "mask.cuh"

// rows: B·H·Sq; o, dout: contiguous [rows, D]; dlse: [rows] or null. Eight lanes per
// row (kBwdGroup), lane t on columns t, t + 8, …: a warp reads 32-byte runs of 4 rows,
// every sector whole.
__global__ void flash_bwd_delta_kernel(const float* __restrict__ o,
                                       const float* __restrict__ dout,
                                       const float* __restrict__ dlse,
                                       float* __restrict__ delta, long long rows,
                                       int D) {
  const long long r = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / kBwdGroup;
  const int t = threadIdx.x % kBwdGroup;
  float acc = 0.f;
  for (int d = t; r < rows && d < D; d += kBwdGroup)
    acc += o[r * D + d] * dout[r * D + d];
  acc = group_sum(acc, 0xffu << (threadIdx.x % 32 / kBwdGroup * kBwdGroup));
  if (r < rows && t == 0) delta[r] = dlse ? acc - dlse[r] : acc;
}

// Grid: (ceil(Sk / Bc), B·Hkv) from (batch, kv head) bh0 on; Bc threads. q, dout:
// [B, H, Sq, D]; k, v, dk, dv: [B, Hkv, Sk, D]; lse, delta: [B, H, Sq]; contiguous.
template <int D, int Br, int Bc>
__global__ void flash_bwd_dkdv_kernel(const float* __restrict__ q,
                                      const float* __restrict__ k,
                                      const float* __restrict__ v,
                                      const float* __restrict__ dout,
                                      const float* __restrict__ lse,
                                      const float* __restrict__ delta,
                                      float* __restrict__ dk, float* __restrict__ dv,
                                      int bh0, int H, int Hkv, int Sq, int Sk,
                                      float scale, MaskParams mask) {
  // K and V rows padded to D + 1 floats: thread jj reads row jj, and rows D + 1 words
  // apart fall in different banks (D words apart, all 32 threads would hit one bank).
  __shared__ float Ks[Bc][D + 1], Vs[Bc][D + 1], Qs[Br][D], dOs[Br][D];
  const int bkv = bh0 + blockIdx.y, b = bkv / Hkv, hk = bkv % Hkv, group = H / Hkv;
  const int j0 = blockIdx.x * Bc, jj = threadIdx.x, j = j0 + jj;
  const bool active = j < Sk;
  const size_t kv_row = (size_t(bkv) * Sk + j) * D;
  for (int d = 0; d < D; ++d) {
    Ks[jj][d] = active ? k[kv_row + d] : 0.f;
    Vs[jj][d] = active ? v[kv_row + d] : 0.f;
  }
  float dk_acc[D], dv_acc[D];
  for (int d = 0; d < D; ++d) dk_acc[d] = dv_acc[d] = 0.f;

  int i_begin, i_end;   // the same for the whole block: the barriers match
  admitted_query_range(mask, b, j0, min(Sk, j0 + Bc), Sq, Sk, &i_begin, &i_end);
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    const size_t bh = size_t(b) * H + h;
    for (int i0 = i_begin; i0 < i_end; i0 += Br) {
      __syncthreads();   // everyone is done with the previous Q and dO tiles
      for (int idx = threadIdx.x; idx < Br * D; idx += Bc) {   // coalesced
        const int r = idx / D, d = idx % D, i = i0 + r;
        Qs[r][d] = i < Sq ? q[(bh * Sq + i) * D + d] : 0.f;
        dOs[r][d] = i < Sq ? dout[(bh * Sq + i) * D + d] : 0.f;
      }
      __syncthreads();   // the tiles (and, the first time, K and V) are complete
      if (!active) continue;
      for (int r = 0; r < Br && i0 + r < Sq; ++r) {
        const int i = i0 + r;
        float s = 0.f, dp = 0.f;
        for (int d = 0; d < D; ++d) {   // Qs[r], dOs[r]: one address for all: broadcast
          s += Qs[r][d] * Ks[jj][d];
          dp += dOs[r][d] * Vs[jj][d];
        }
        s = masked_score(mask, s * scale, b, h, i, j, Sq, Sk);
        const float p = recompute_p(s, lse[bh * Sq + i]);
        if (p == 0.f) continue;   // a masked key: no term (its v and k never used)
        const float ds = p * (dp - delta[bh * Sq + i]);
        for (int d = 0; d < D; ++d) {
          dv_acc[d] += p * dOs[r][d];
          dk_acc[d] += ds * Qs[r][d];
        }
      }
    }
  }
  if (active)
    for (int d = 0; d < D; ++d) {
      dk[kv_row + d] = dk_acc[d] * scale;
      dv[kv_row + d] = dv_acc[d];
    }
}

// Grid: (ceil(Sq / Br), B·H) from (batch, head) bh0 on; Br threads. Layouts as above;
// dq: [B, H, Sq, D].
template <int D, int Br, int Bc>
__global__ void flash_bwd_dq_kernel(const float* __restrict__ q,
                                    const float* __restrict__ k,
                                    const float* __restrict__ v,
                                    const float* __restrict__ dout,
                                    const float* __restrict__ lse,
                                    const float* __restrict__ delta,
                                    float* __restrict__ dq, int bh0, int H, int Hkv,
                                    int Sq, int Sk, float scale, MaskParams mask) {
  __shared__ float Ks[Bc][D], Vs[Bc][D];
  const int bh = bh0 + blockIdx.y, b = bh / H, h = bh % H, hk = h / (H / Hkv);
  const int row_lo = blockIdx.x * Br, row_hi = min(Sq, row_lo + Br) - 1;
  const int i = row_lo + threadIdx.x;
  const bool active = i < Sq;
  const size_t row = (size_t(bh) * Sq + i) * D;
  const float* kb = k + size_t(b * Hkv + hk) * Sk * D;
  const float* vb = v + size_t(b * Hkv + hk) * Sk * D;
  float qi[D], doi[D], acc[D];
  for (int d = 0; d < D; ++d) {
    qi[d] = active ? q[row + d] : 0.f;
    doi[d] = active ? dout[row + d] : 0.f;
    acc[d] = 0.f;
  }
  const float L = active ? lse[size_t(bh) * Sq + i] : -INFINITY;
  const float Di = active ? delta[size_t(bh) * Sq + i] : 0.f;

  int kv_begin, kv_end;   // the same for the whole block: the barriers match
  admitted_key_range(mask, b, row_lo, row_hi, Sq, Sk, &kv_begin, &kv_end);
  for (int j0 = kv_begin; j0 < kv_end; j0 += Bc) {
    for (int idx = threadIdx.x; idx < Bc * D; idx += Br) {   // coalesced
      const int r = idx / D, d = idx % D, j = j0 + r;
      Ks[r][d] = j < Sk ? kb[size_t(j) * D + d] : 0.f;
      Vs[r][d] = j < Sk ? vb[size_t(j) * D + d] : 0.f;
    }
    __syncthreads();   // the tile is complete before anyone reads it
    for (int jj = 0; active && jj < Bc && j0 + jj < kv_end; ++jj) {
      float s = 0.f, dp = 0.f;
      for (int d = 0; d < D; ++d) {
        s += qi[d] * Ks[jj][d];
        dp += doi[d] * Vs[jj][d];
      }
      s = masked_score(mask, s * scale, b, h, i, j0 + jj, Sq, Sk);
      const float p = recompute_p(s, L);
      if (p == 0.f) continue;
      const float ds = p * (dp - Di);
      for (int d = 0; d < D; ++d) acc[d] += ds * Ks[jj][d];
    }
    __syncthreads();   // all are done with the tile before the next load overwrites it
  }
  if (active)
    for (int d = 0; d < D; ++d) dq[row + d] = acc[d] * scale;
}

// The launches: the delta kernel (both steps), then a step's two passes.
static void launch_delta(const float* o, const float* dout, const float* dlse,
                         float* delta, long long rows, int D, cudaStream_t stream) {
  const long long threads = rows * kBwdGroup;
  flash_bwd_delta_kernel<<<unsigned((threads + 255) / 256), 256, 0, stream>>>(
      o, dout, dlse, delta, rows, D);
}

// A step's two passes: its dK/dV kernel over blocks of `keys` keys (B·Hkv heads), then
// its dQ kernel over blocks of `rows` query rows (B·H heads), in launches of at most
// 65535 heads (gridDim.y's limit).
using DkDvKernel = void (*)(const float*, const float*, const float*, const float*,
                            const float*, const float*, float*, float*, int, int, int,
                            int, int, float, MaskParams);
using DqKernel = void (*)(const float*, const float*, const float*, const float*,
                          const float*, const float*, float*, int, int, int, int, int,
                          float, MaskParams);
static void launch_passes(DkDvKernel dkdv, int keys, int kv_threads, DqKernel dq_pass,
                          int rows, int q_threads, const float* q, const float* k,
                          const float* v, const float* dout, const float* lse,
                          const float* delta, float* dq, float* dk, float* dv, int B,
                          int H, int Hkv, int Sq, int Sk, float scale,
                          const MaskParams& mask, cudaStream_t stream) {
  const long long BHkv = (long long)B * Hkv, BH = (long long)B * H;
  for (long long bh0 = 0; bh0 < BHkv; bh0 += 65535) {
    const dim3 grid((Sk + keys - 1) / keys, unsigned(std::min(BHkv - bh0, 65535ll)));
    dkdv<<<grid, kv_threads, 0, stream>>>(q, k, v, dout, lse, delta, dk, dv, int(bh0),
                                          H, Hkv, Sq, Sk, scale, mask);
  }
  for (long long bh0 = 0; bh0 < BH; bh0 += 65535) {
    const dim3 grid((Sq + rows - 1) / rows, unsigned(std::min(BH - bh0, 65535ll)));
    dq_pass<<<grid, q_threads, 0, stream>>>(q, k, v, dout, lse, delta, dq, int(bh0),
                                            H, Hkv, Sq, Sk, scale, mask);
  }
}

// Returns false if head_dim D or the step is not compiled. delta: a [B, H, Sq]
// workspace.
bool flash_bwd_fp32(const float* q, const float* k, const float* v, const float* o,
                    const float* dout, const float* lse, const float* dlse,
                    float* delta, float* dq, float* dk, float* dv, int B, int H,
                    int Hkv, int Sq, int Sk, int D, int step, float scale,
                    const MaskParams& mask, cudaStream_t stream) {
  if ((step != 1 && step != 2) || (D != 32 && D != 64 && D != 96 && D != 128))
    return false;
  launch_delta(o, dout, dlse, delta, (long long)B * H * Sq, D, stream);
  // Step 1, per D: the query rows of a dK/dV tile, so that its shared memory,
  // 8·Bc·(D + 1) + 8·Br·D bytes, stays under 48 KB. dQ blocks take 64 rows; key tiles
  // are 32 keys.
#define ATTNBOOK_BWD_CONFIG(d, brkv)                                                 \
  if (D == d && step == 1)                                                           \
    launch_passes(flash_bwd_dkdv_kernel<d, brkv, 32>, 32, 32,                        \
                  flash_bwd_dq_kernel<d, 64, 32>, 64, 64, q, k, v, dout, lse, delta, \
                  dq, dk, dv, B, H, Hkv, Sq, Sk, scale, mask, stream);               \
  if (D == d && step == 2)                                                           \
    launch_passes(flash_bwd_dkdv_lanes_kernel<d>, kBwdKeys, kBwdKVThreads,           \
                  flash_bwd_dq_lanes_kernel<d>, kBwdRows, kBwdQThreads, q, k, v,     \
                  dout, lse, delta, dq, dk, dv, B, H, Hkv, Sq, Sk, scale, mask,      \
                  stream);
  ATTNBOOK_BWD_CONFIG(32, 32)
  ATTNBOOK_BWD_CONFIG(64, 16)
  ATTNBOOK_BWD_CONFIG(96, 8)
  ATTNBOOK_BWD_CONFIG(128, 8)
#undef ATTNBOOK_BWD_CONFIG
  return true;
}
