#include "hopper.cuh"

__global__ void ring_sum(const float* x, float* out, int tiles) {
  __shared__ float slot[2][32];
  __shared__ uint64_t full[2], empty[2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0)
    for (int s = 0; s < 2; ++s) {
      mbarrier_init(&full[s], 32);
      mbarrier_init(&empty[s], 32);
    }
  __syncthreads();
  if (warp == 0) {                                // the producer
    for (int i = 0; i < tiles; ++i) {
      const int s = i % 2, u = i / 2;
      // fill u waits for read u - 1; fill 0 waits for the phase before phase 0,
      // which counts as complete: parity 1 passes at once
      mbarrier_wait(&empty[s], (u + 1) % 2);
      slot[s][lane] = x[i * 32 + lane];
      mbarrier_arrive(&full[s]);
    }
  } else {                                        // the consumer
    float sum = 0.f;
    for (int i = 0; i < tiles; ++i) {
      const int s = i % 2, u = i / 2;
      mbarrier_wait(&full[s], u % 2);             // fill u has landed
      sum += slot[s][lane];
      mbarrier_arrive(&empty[s]);
    }
    out[lane] = sum;
  }
}
