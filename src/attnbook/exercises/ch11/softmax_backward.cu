// The gradient of the scores through softmax, one thread per row: for probabilities
// p [R, n] (a softmax of each row) and the gradient dp [R, n] of the probabilities,
// ds[r][j] = p[r][j] · (dp[r][j] − Σ_k p[r][k] dp[r][k]).
__global__ void softmax_backward(const float* p, const float* dp, float* ds, int R,
                                 int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  // TODO
}
