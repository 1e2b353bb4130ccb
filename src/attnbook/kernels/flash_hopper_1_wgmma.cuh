// Chapter 12's Hopper forward, step 1: chapter 8's step 5 (cp.async double buffering
// of K and V, P in registers, exp2) with wgmma in place of mma.sync. One warpgroup (4
// warps, 128 threads) owns Br = 64 query rows: S = Q Kᵀ is one m64nBc wgmma chain
// over the D / 16 slices of the head dimension, both operands read from shared memory
// through matrix descriptors; O += P V takes P from registers (S's accumulators,
// packed) and V through a descriptor that reads it N-major. fp16 or bf16, D 64 or 128.
//
// Shared memory: every tile is stored as panels of 64 columns, [rows][64] 16-bit
// elements with 128-byte rows, on 1 KiB, swizzled as wgmma's 128-byte swizzle reads
// them (chunk c of row r at chunk c XOR r % 8: chapter 8's tile_offset<64, true>).
// Q: [D/64][64][64]; K and V: [2][D/64][Bc][64] each.
#pragma once
#include "flash_tc.cuh"

// The 64-bit descriptor of a K-major operand tile of 128-byte swizzled rows, 8-row
// groups 1024 bytes apart, starting at shared address `addr` (PTX ISA, "Matrix
// Descriptor Format": start >> 4 in bits 0-13, LBO 16-29, SBO 32-45, swizzle 62-63).
__device__ __forceinline__ uint64_t k_major_desc(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | uint64_t(1) << 16 |
         uint64_t(1024 >> 4) << 32 | uint64_t(1) << 62;
}
// The same for an N-major operand: 64-element rows (N), 8-row (K) groups 1024 bytes
// apart (SBO), the next 64 columns of N `panel` bytes on (LBO).
__device__ __forceinline__ uint64_t n_major_desc(uint32_t addr, uint32_t panel) {
  return uint64_t((addr & 0x3FFFF) >> 4) | uint64_t(panel >> 4) << 16 |
         uint64_t(1024 >> 4) << 32 | uint64_t(1) << 62;
}

// (On other targets these are empty, and the kernel traps: see flash_hopper.cu.)
__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit_and_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}

// d (64 x 64, the accumulator fragment) (+)= A B, A and B through descriptors, K-major.
// The fp16 and bf16 forms differ in the instruction's types alone, written out twice:
// inline PTX is a string literal, which neither nvcc nor the emulator parameterizes.
template <class T>
__device__ __forceinline__ void wgmma_64x64_ss(float (&d)[8][4], uint64_t a, uint64_t b,
                                               int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (std::is_same_v<T, __half>)
    asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
          "%30, %31}"
          ", %32, %33, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
            "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
            "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
            "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
            "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
            "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
            "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
            "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
          : "l"(a), "l"(b), "r"(accumulate));
  else
    asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
          "%30, %31}"
          ", %32, %33, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
            "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
            "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
            "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
            "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
            "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
            "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
            "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
          : "l"(a), "l"(b), "r"(accumulate));
#endif
}

// d (64 x N) (+)= A B, A from registers (a fragment of P), B N-major through a
// descriptor.
template <class T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4],
                                         uint64_t b, int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (N == 64 && std::is_same_v<T, __half>)
    asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
          "%30, %31}"
          ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
          : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
            "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
            "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
            "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
            "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
            "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
            "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
            "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
  else if constexpr (N == 64)
    asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
          "%30, %31}"
          ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
          : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
            "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
            "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
            "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
            "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
            "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
            "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
            "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
  else if constexpr (std::is_same_v<T, __half>)
    asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
          "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
          "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
          "%58, %59, %60, %61, %62, %63}"
          ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
          : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
            "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
            "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
            "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
            "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
            "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
            "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
            "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
            "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
            "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
            "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
            "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
            "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
            "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
            "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
            "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
  else
    asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
          "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
          "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
          "%58, %59, %60, %61, %62, %63}"
          ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
          : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
            "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
            "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
            "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
            "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
            "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
            "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
            "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
            "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
            "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
            "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
            "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
            "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
            "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
            "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
            "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
#endif
}

// Dynamic shared memory, with a kilobyte to put Q on 1 KiB whatever the base.
template <int D, int Bc>
constexpr int hopper_bytes() {
  return 2 * (64 * D + 4 * Bc * D) + 1024;
}

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

  int kv_begin, kv_end;
  admitted_key_range(mask, b, row_lo, row_hi, Sq, Sk, &kv_begin, &kv_end);
  for (int p = 0; p < Panels; ++p)
    load_tile<Br, 64, true, Threads, true>(Qs + p * q_panel, qb + 64 * p, lq.s,
                                           Sq - row_lo);
  if (kv_begin < kv_end) load_kv(0, kv_begin, kv_end - kv_begin);
  cp_async_commit();

  float acc[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  for (int j0 = kv_begin, it = 0; j0 < kv_end; j0 += Bc, ++it) {
    const int buf = it % 2, next = j0 + Bc;
    if (next < kv_end) load_kv(1 - buf, next, kv_end - next);
    cp_async_commit();
    cp_async_wait<1>();
    // cp.async wrote through the generic proxy; wgmma reads through the async one
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();

    // S = Q Kᵀ: slice kk of the head dimension is 32 bytes into a panel's rows
    float s[Bc / 8][4];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t at = 32 * (kk % 4);
      wgmma_64x64_ss<T>(s, k_major_desc(q_addr + 2 * (kk / 4) * q_panel + at),
                        k_major_desc(k_addr + 2 * (buf * tile + (kk / 4) * kv_panel) +
                                     at),
                        kk > 0);
    }
    wgmma_commit_and_wait();
    const bool unmasked = tile_unmasked(mask, b, row_lo, row_hi, j0, j0 + Bc, Sq, Sk);
    scale_and_mask<Bc / 8, true>(s, unmasked, mask, b, h, row_lo + 16 * warp, j0, Sq,
                                 Sk, scale, lane);
    online_softmax<Bc / 8, D / 8, true>(s, acc, m, l);

    // O += P V: P's slice j is S's accumulators of keys 16j..16j+15, packed as A
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < Bc / 16; ++j) {
      const uint32_t a[4] = {pack2<T>(s[2 * j][0], s[2 * j][1]),
                             pack2<T>(s[2 * j][2], s[2 * j][3]),
                             pack2<T>(s[2 * j + 1][0], s[2 * j + 1][1]),
                             pack2<T>(s[2 * j + 1][2], s[2 * j + 1][3])};
      wgmma_rs<T, D>(acc, a, n_major_desc(v_addr + 2 * buf * tile + 16 * 128 * j,
                                          2 * kv_panel),
                     1);
    }
    wgmma_commit_and_wait();
    __syncthreads();   // every warp is done with buf before it is refilled
  }
  cp_async_wait<0>();
  store_rows<T, D / 8, true>(acc, m, l, o + size_t(bh) * Sq * D, lse + size_t(bh) * Sq,
                             row_lo + 16 * warp, Sq, lane);
#else
  __trap();   // built without sm_90a's instructions
#endif
}
