// out[c] = Σ_i x[i][c] for x of [tiles, 32] floats, passed through a ring of two
// slots of 32 floats in shared memory. Warp 0, the producer, copies tile i into slot
// i % 2; warp 1, the consumer, adds slot i % 2 into its lanes' sums and writes out.
// full[s] completes a phase when the producer's 32 lanes have filled slot s (each
// calls mbarrier_arrive), empty[s] when the consumer's 32 lanes have read it. Wait
// with mbarrier_wait(bar, parity) from hopper.cuh: the u-th fill of a slot is phase u
// of its barriers, and a phase is named by its parity. One block of 64 threads.
#include "hopper.cuh"

__global__ void ring_sum(const float* x, float* out, int tiles) {
  __shared__ float slot[2][32];
  __shared__ uint64_t full[2], empty[2];
  // TODO: one thread initialises the four barriers (mbarrier_init(&bar, 32)), then a
  // block barrier; then warp 0's loop and warp 1's
}
