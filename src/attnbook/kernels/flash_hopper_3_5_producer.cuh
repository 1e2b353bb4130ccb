// Chapter 12's Hopper forward, steps 3 to 5: warp specialization. A block is three
// warpgroups: the producer (warpgroup 0) only copies, the two consumers (warpgroups 1
// and 2) only compute, 64 query rows each (Br = 128). One producer thread issues Q
// and then every key tile's K and V by TMA into a ring of `Stages` buffers; the
// consumers never wait for a copy they could have overlapped, and never spend an
// instruction on one. Two mbarriers per buffer carry the hand-over:
//   full[s]   the producer's expect_tx and the TMA's bytes complete it: the tile is in
//   empty[s]  the 256 consumer threads arrive on it when their wgmmas have read the
//             tile: the producer may overwrite it
// Buffer s's u-th fill completes phase u of full[s] (parity u % 2), its u-th release
// phase u of empty[s]; the producer's (u + 1)-th fill of s waits for that release.
//
// The producer needs a few registers and the consumers many (64 rows of O in fp32 and
// the scores): setmaxnreg moves them within the block's allocation (384 threads x 168
// at launch = 64,512), 24 for each producer thread and 240 for each consumer thread:
// 128 x 24 + 256 x 240 = 64,512.
//
// Step 4: the consumers take turns to issue their wgmma chains (TakeTurns), so that
// the tensor cores run one consumer's matrix products while the other computes its
// softmax. Step 5: each consumer also pipelines its own tiles: it issues tile i's
// Q Kᵀ with tile i - 1's P V in one turn, and computes tile i's softmax while the
// P V runs (FlashAttention-3's intra-warpgroup overlap).
#pragma once
#include "flash_hopper.cuh"

// Step 4's turns: consumer c issues a chain only once the other has issued its own:
// named barrier `mine` (2 + c) counts 256 threads, its own 128 waiting and the other
// consumer's 128 arriving when they have committed their chain.
struct TakeTurns {
  int mine, other;
  __device__ __forceinline__ void acquire() const { named_barrier_sync(mine, 256); }
  __device__ __forceinline__ void release() const {
    named_barrier_arrive(other, 256);
  }
};

template <class T, int D, int Bc, int Stages, int Step>
__global__ void __launch_bounds__(384, 1)
    flash_hopper_ws_kernel(const __grid_constant__ CUtensorMap q_map,
                           const __grid_constant__ CUtensorMap k_map,
                           const __grid_constant__ CUtensorMap v_map,
                           T* __restrict__ o, float* __restrict__ lse, int bh0, int H,
                           int Hkv, int Sq, int Sk, float scale, MaskParams mask) {
  static_assert(D % 64 == 0 && Bc == 64, "64-column panels, 64-key tiles");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int Br = 128, Panels = D / 64, Consumers = 256;
  constexpr int q_panel = 64 * 64, kv_panel = Bc * 64, tile = Panels * kv_panel;
  extern __shared__ __align__(1024) uint16_t smem_raw[];
  __shared__ alignas(8) uint64_t q_full, full[Stages], empty[Stages];
  const uint32_t raw = shared_address(smem_raw);
  // Q: [2 consumers][Panels][64][64]; K, V: [Stages][Panels][Bc][64] each
  uint16_t* Qs = smem_raw + ((1024 - raw % 1024) % 1024) / 2;
  uint16_t *Ks = Qs + 2 * Panels * q_panel, *Vs = Ks + Stages * tile;
  const int bh = bh0 + blockIdx.y, b = bh / H, h = bh % H, hk = h / (H / Hkv);
  const int row_lo = blockIdx.x * Br, row_hi = min(Sq, row_lo + Br) - 1;
  // the key tiles of the block's 128 rows: both consumers take every one
  int kv_begin, kv_end, u_begin, u_end;
  admitted_key_range(mask, b, row_lo, row_hi, Sq, Sk, &kv_begin, &kv_end);
  exp2_unmasked_tiles(mask, b, row_lo, row_hi, Sq, Sk, kv_begin, kv_end, Bc, scale,
                      &u_begin, &u_end);
  if (threadIdx.x == 0) {
    mbarrier_init(&q_full, 1);
    for (int s = 0; s < Stages; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], Consumers);
    }
    mbarrier_init_fence();
  }
  __syncthreads();   // the barriers exist before anyone waits on them

  if (threadIdx.x < 128) {   // the producer
    setmaxnreg_dec<24>();
    if (threadIdx.x != 0) return;
    mbarrier_arrive_expect(&q_full, 2 * 2 * Panels * q_panel);
    for (int c = 0; c < 2; ++c)
      for (int p = 0; p < Panels; ++p)
        tma_load_4d(Qs + (c * Panels + p) * q_panel, &q_map, 64 * p, row_lo + 64 * c,
                    h, b, &q_full);
    for (int j0 = kv_begin, i = 0; j0 < kv_end; j0 += Bc, ++i) {
      const int s = i % Stages;
      if (i >= Stages) mbarrier_wait(&empty[s], (i / Stages - 1) % 2);
      mbarrier_arrive_expect(&full[s], 2 * 2 * tile);
      for (int p = 0; p < Panels; ++p) {
        tma_load_4d(Ks + s * tile + p * kv_panel, &k_map, 64 * p, j0, hk, b, &full[s]);
        tma_load_4d(Vs + s * tile + p * kv_panel, &v_map, 64 * p, j0, hk, b, &full[s]);
      }
    }
    return;
  }

  setmaxnreg_inc<240>();   // a consumer: warpgroup c of the two, rows c * 64..
  const int c = threadIdx.x / 128 - 1, warp = threadIdx.x / 32 % 4;
  const int lane = threadIdx.x % 32;
  const uint32_t q_addr = shared_address(Qs + c * Panels * q_panel);
  const uint32_t k_addr = shared_address(Ks), v_addr = shared_address(Vs);
  const int rows = row_lo + 64 * c;
  mbarrier_wait(&q_full, 0);
  float acc[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  // tile i has landed in buffer s; V's rows past kv_end become zeros, as in step 2:
  // both consumers read them, so the consumers' named barrier (1, 256 threads)
  // stands after the writes
  auto wait_tile = [&](int s, int i, int j0, bool masked) {
    mbarrier_wait(&full[s], (i / Stages) % 2);
    if (masked && kv_end - j0 < Bc) {
      zero_rows_from<Panels, Bc>(Vs + s * tile, kv_end - j0, threadIdx.x - 128,
                                 Consumers);
      named_barrier_sync(1, Consumers);
    }
  };
  // steps 3 and 4: one tile after the other
  auto consume = [&](const auto& turns) {
    for_each_tile<Bc>(kv_begin, kv_end, u_begin, u_end, [&](int j0, int i,
                                                             auto masked) {
      const int s = i % Stages;
      wait_tile(s, i, j0, decltype(masked)::value);
      attend_tile<T, D, Bc, decltype(masked)::value>(
          acc, m, l, q_addr, k_addr + 2 * s * tile, v_addr + 2 * s * tile, mask, b, h,
          rows, j0, Sq, Sk, scale, warp, lane, turns);
      mbarrier_arrive(&empty[s]);   // this thread's wgmmas have read buffer s
    });
  };
  // step 5: tile i's Q Kᵀ and tile i - 1's P V in one turn, two commit groups; tile
  // i's softmax while that P V runs; O rescaled once it has landed. O sees the same
  // products and factors in the same order as in steps 3-4: O = alpha_i (O + P_{i-1}
  // V_{i-1}). The first tile, with no P V before it, runs ahead of the loop, so that
  // the loop's waits are the same on every tile (ptxas serializes the wgmmas of a
  // loop whose commit groups differ by a branch). The register fences keep the
  // softmax's code between the two waits in the order nvcc emits it.
  auto consume_pipelined = [&](const auto& turns) {
    uint32_t p[Bc / 16][4];   // P of the tile before, packed
    int last = 0;             // its buffer
    float sc[Bc / 8][4], alpha[2];
    auto softmax = [&](int j0, auto masked) {
      fence_registers(sc);
      softmax_deferred<decltype(masked)::value>(sc, m, l, alpha, mask, b, h,
                                                rows + 16 * warp, j0, Sq, Sk, scale,
                                                lane);
      fence_registers(sc);
      fence_registers(alpha);
    };
    auto tile_scores = [&](int s, int i, int j0, auto masked) {
      wait_tile(s, i, j0, decltype(masked)::value);
      turns.acquire();
      wgmma_fence();
      issue_scores<T, D, Bc>(sc, q_addr, k_addr + 2 * s * tile);
      wgmma_commit();
    };
    auto first = [&](auto masked) {
      tile_scores(0, 0, kv_begin, masked);
      turns.release();
      wgmma_wait<0>();
      softmax(kv_begin, masked);
      rescale_rows<D / 8>(acc, alpha);
      pack_p<T, Bc>(sc, p);
    };
    if (kv_begin >= kv_end) return;
    if (kv_begin >= u_begin && kv_begin < u_end) first(std::false_type{});
    else first(std::true_type{});
    for_each_tile<Bc>(kv_begin + Bc, kv_end, u_begin, u_end, [&](int j0, int n,
                                                                  auto masked) {
      const int i = n + 1, s = i % Stages;
      tile_scores(s, i, j0, masked);
      issue_pv<T, D, Bc>(acc, p, v_addr + 2 * last * tile);
      wgmma_commit();
      turns.release();
      wgmma_wait<1>();   // S has landed; P V may still run
      softmax(j0, masked);
      wgmma_wait<0>();   // P V of the tile before has landed: its buffer is free
      fence_registers(acc);
      mbarrier_arrive(&empty[last]);
      rescale_rows<D / 8>(acc, alpha);
      pack_p<T, Bc>(sc, p);
      last = s;
    });
    turns.acquire();   // the last tile's P V
    wgmma_fence();
    issue_pv<T, D, Bc>(acc, p, v_addr + 2 * last * tile);
    wgmma_commit();
    turns.release();
    wgmma_wait<0>();
    fence_registers(acc);
    mbarrier_arrive(&empty[last]);
  };
  auto run = [&](const auto& turns) {
    if constexpr (Step == 5) consume_pipelined(turns);
    else consume(turns);
  };
  if constexpr (Step >= 4) {
    // consumer 0 goes first: consumer 1 arrives once ahead, and consumer 0 takes
    // that extra arrival back at the end, so both barriers finish empty
    if (c == 1) named_barrier_arrive(2, 256);
    run(TakeTurns{2 + c, 3 - c});
    if (c == 0) named_barrier_sync(2, 256);
  } else {
    run(AnyTime{});
  }
  store_rows<T, D / 8, true>(acc, m, l, o + size_t(bh) * Sq * D, lse + size_t(bh) * Sq,
                             rows + 16 * warp, Sq, lane);
#else
  __trap();   // built without sm_90a's instructions
#endif
}
