// out[r] = the sum of row r of x ([rows, n]), one warp (32 threads) per row: each
// lane adds the elements j = lane, lane + 32, ..., then the 32 partial sums are
// combined with __shfl_down_sync (no shared memory). Lane 0 writes.
__global__ void warp_sum(const float* x, float* out, int n) {
  const int lane = threadIdx.x;
  const float* xr = x + (size_t)blockIdx.x * n;
  // TODO
}
