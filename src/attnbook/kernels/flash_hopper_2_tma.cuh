// Chapter 12's Hopper forward, step 2: step 1 with its tiles loaded by the Tensor
// Memory Accelerator. One thread issues each tile as 64 x 64 boxes (one per panel) of
// a 4-D tensor map [B][H][S][D] (flash_hopper.cu encodes it on the host); the TMA
// unit computes the addresses, writes the panels 128-byte swizzled as wgmma reads
// them, and fills rows past the sequence's end with zeros. Each buffer has an
// mbarrier: the issuing thread arrives on it saying how many bytes to expect, the
// copies count their bytes on it as they land, and the warpgroup waits for the phase
// to complete. The 128 threads no longer spend instructions on addresses and
// cp.async (step 1: D / 8 16-byte copies per thread and key tile); TMA and wgmma both
// act through the async proxy, so no proxy fence stands between them.
//
// Barriers: bar[0] Q's (one phase), bar[1 + buf] key/value buffer buf's; buffer buf's
// u-th fill completes phase u of its barrier, whose parity is u % 2.
#pragma once
#include "flash_hopper.cuh"

template <class T, int D, int Bc>
__global__ void __launch_bounds__(128)
    flash_hopper_tma_kernel(const __grid_constant__ CUtensorMap q_map,
                            const __grid_constant__ CUtensorMap k_map,
                            const __grid_constant__ CUtensorMap v_map,
                            T* __restrict__ o, float* __restrict__ lse, int bh0, int H,
                            int Hkv, int Sq, int Sk, float scale, MaskParams mask) {
  static_assert(D % 64 == 0 && Bc == 64, "64-column panels, 64-key tiles");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int Br = 64, Panels = D / 64;
  constexpr int q_panel = Br * 64, kv_panel = Bc * 64, tile = Panels * kv_panel;
  extern __shared__ __align__(1024) uint16_t smem_raw[];
  __shared__ alignas(8) uint64_t bar[3];
  const uint32_t raw = shared_address(smem_raw);
  uint16_t* Qs = smem_raw + ((1024 - raw % 1024) % 1024) / 2;
  uint16_t *Ks = Qs + Panels * q_panel, *Vs = Ks + 2 * tile;
  const uint32_t q_addr = shared_address(Qs);
  const uint32_t k_addr = q_addr + 2 * Panels * q_panel, v_addr = k_addr + 4 * tile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = bh0 + blockIdx.y, b = bh / H, h = bh % H, hk = h / (H / Hkv);
  const int row_lo = blockIdx.x * Br, row_hi = min(Sq, row_lo + Br) - 1;
  const bool issuer = threadIdx.x == 0;
  // key tile j0's K and V boxes into buffer buf: 2 x Panels boxes of Bc x 64
  auto load_kv = [&](int buf, int j0) {
    mbarrier_arrive_expect(&bar[1 + buf], 2 * 2 * tile);
    for (int p = 0; p < Panels; ++p) {
      tma_load_4d(Ks + buf * tile + p * kv_panel, &k_map, 64 * p, j0, hk, b,
                  &bar[1 + buf]);
      tma_load_4d(Vs + buf * tile + p * kv_panel, &v_map, 64 * p, j0, hk, b,
                  &bar[1 + buf]);
    }
  };

  int kv_begin, kv_end, u_begin, u_end;
  admitted_key_range(mask, b, row_lo, row_hi, Sq, Sk, &kv_begin, &kv_end);
  exp2_unmasked_tiles(mask, b, row_lo, row_hi, Sq, Sk, kv_begin, kv_end, Bc, scale,
                      &u_begin, &u_end);
  if (issuer) {
    for (int i = 0; i < 3; ++i) mbarrier_init(&bar[i], 1);
    mbarrier_init_fence();
  }
  __syncthreads();   // the barriers exist before anyone waits on them
  if (issuer) {
    mbarrier_arrive_expect(&bar[0], 2 * Panels * q_panel);
    for (int p = 0; p < Panels; ++p)
      tma_load_4d(Qs + p * q_panel, &q_map, 64 * p, row_lo, h, b, &bar[0]);
    if (kv_begin < kv_end) load_kv(0, kv_begin);
  }
  mbarrier_wait(&bar[0], 0);   // Q, even for a block with no key to read

  float acc[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  for_each_tile<Bc>(kv_begin, kv_end, u_begin, u_end, [&](int j0, int i, auto masked) {
    const int buf = i % 2;
    // the other buffer was released by every warp at the end of the last tile
    if (issuer && j0 + Bc < kv_end) load_kv(1 - buf, j0 + Bc);
    mbarrier_wait(&bar[1 + buf], (i / 2) % 2);
    if (decltype(masked)::value && kv_end - j0 < Bc) {   // V's rows past kv_end
      zero_rows_from<Panels, Bc>(Vs + buf * tile, kv_end - j0, threadIdx.x, 128);
      __syncthreads();
    }
    attend_tile<T, D, Bc, decltype(masked)::value>(
        acc, m, l, q_addr, k_addr + 2 * buf * tile, v_addr + 2 * buf * tile, mask, b,
        h, row_lo, j0, Sq, Sk, scale, warp, lane);
    __syncthreads();   // every warp is done with buf before it is refilled
  });
  store_rows<T, D / 8, true>(acc, m, l, o + size_t(bh) * Sq * D, lse + size_t(bh) * Sq,
                             row_lo + 16 * warp, Sq, lane);
#else
  __trap();   // built without sm_90a's instructions
#endif
}
