// out[r] = max of row r of x ([rows, n]). One block of 256 threads per row: each
// thread folds x[r][t], x[r][t + 256], ... into one value, then the block halves the
// 256 values in shared memory until one is left. A NaN in a row makes its maximum NaN,
// as in torch.amax: fold with max_nan (max_nan.cuh, above), not fmaxf, which drops it.
#include "max_nan.cuh"

__global__ void row_max(const float* x, float* out, int n) {
  __shared__ float buf[256];
  // TODO
}
