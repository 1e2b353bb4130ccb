// lse[r] = log Σ_j exp(x[r][j]) for x [R, n], in one pass per row (one thread per row):
// keep the running max m and the running sum l of exp(x − m), rescaling l when the max
// grows. A row of -inf (no admissible key) has lse = -inf, not NaN.
__global__ void row_logsumexp(const float* x, float* lse, int R, int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  // TODO
}
