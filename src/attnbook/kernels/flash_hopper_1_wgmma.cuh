// Chapter 12's Hopper forward, step 1: chapter 8's step 5 (cp.async double buffering
// of K and V, P in registers, exp2) with wgmma in place of mma.sync. One warpgroup (4
// warps, 128 threads) owns Br = 64 query rows: S = Q Kᵀ is one m64nBc wgmma chain
// over the D / 16 slices of the head dimension, both operands read from shared memory
// through matrix descriptors; O += P V takes P from registers (S's accumulators,
// packed) and V through a descriptor that reads it N-major (attend_tile,
// flash_hopper.cuh). The tiles that need no mask run in a loop of their own, without
// mask code, as in chapter 8's step 6 (for_each_tile). fp16 or bf16, D 64 or 128.
#pragma once
#include "flash_hopper.cuh"

template <class T, int D, int Bc>
__global__ void __launch_bounds__(128)
    flash_hopper_wgmma_kernel(const T* __restrict__ q, const T* __restrict__ k,
                              const T* __restrict__ v, T* __restrict__ o,
                              float* __restrict__ lse, Layout lq, Layout lk, Layout lv,
                              int bh0, int H, int Hkv, int Sq, int Sk, float scale,
                              MaskParams mask) {
  static_assert(D % 64 == 0 && Bc == 64, "64-column panels, 64-key tiles");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int Br = 64, Threads = 128, Panels = D / 64;
  constexpr int q_panel = Br * 64, kv_panel = Bc * 64, tile = Panels * kv_panel;
  extern __shared__ __align__(1024) uint16_t smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint16_t* Qs = smem_raw + ((1024 - raw % 1024) % 1024) / 2;
  uint16_t *Ks = Qs + Panels * q_panel, *Vs = Ks + 2 * tile;
  const uint32_t q_addr = static_cast<uint32_t>(__cvta_generic_to_shared(Qs));
  const uint32_t k_addr = q_addr + 2 * Panels * q_panel, v_addr = k_addr + 4 * tile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = bh0 + blockIdx.y, b = bh / H, h = bh % H, hk = h / (H / Hkv);
  const int row_lo = blockIdx.x * Br, row_hi = min(Sq, row_lo + Br) - 1;
  const T* qb = q + b * lq.b + h * lq.h + row_lo * lq.s;
  const T* kb = k + b * lk.b + hk * lk.h;
  const T* vb = v + b * lv.b + hk * lv.h;
  auto load_kv = [&](int buf, int j0, int valid) {
    for (int p = 0; p < Panels; ++p) {
      load_tile<Bc, 64, true, Threads, true>(Ks + buf * tile + p * kv_panel,
                                             kb + j0 * lk.s + 64 * p, lk.s, valid);
      load_tile<Bc, 64, true, Threads, true>(Vs + buf * tile + p * kv_panel,
                                             vb + j0 * lv.s + 64 * p, lv.s, valid);
    }
  };

  int kv_begin, kv_end, u_begin, u_end;
  admitted_key_range(mask, b, row_lo, row_hi, Sq, Sk, &kv_begin, &kv_end);
  exp2_unmasked_tiles(mask, b, row_lo, row_hi, Sq, Sk, kv_begin, kv_end, Bc, scale,
                      &u_begin, &u_end);
  for (int p = 0; p < Panels; ++p)
    load_tile<Br, 64, true, Threads, true>(Qs + p * q_panel, qb + 64 * p, lq.s,
                                           Sq - row_lo);
  if (kv_begin < kv_end) load_kv(0, kv_begin, kv_end - kv_begin);
  cp_async_commit();

  float acc[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  for_each_tile<Bc>(kv_begin, kv_end, u_begin, u_end, [&](int j0, int i, auto masked) {
    const int buf = i % 2, next = j0 + Bc;
    if (next < kv_end) load_kv(1 - buf, next, kv_end - next);
    cp_async_commit();
    cp_async_wait<1>();
    // cp.async wrote through the generic proxy; wgmma reads through the async one
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();

    attend_tile<T, D, Bc, decltype(masked)::value>(
        acc, m, l, q_addr, k_addr + 2 * buf * tile, v_addr + 2 * buf * tile, mask, b,
        h, row_lo, j0, Sq, Sk, scale, warp, lane);
    __syncthreads();   // every warp is done with buf before it is refilled
  });
  cp_async_wait<0>();
  store_rows<T, D / 8, true>(acc, m, l, o + size_t(bh) * Sq * D, lse + size_t(bh) * Sq,
                             row_lo + 16 * warp, Sq, lane);
#else
  __trap();   // built without sm_90a's instructions
#endif
}
