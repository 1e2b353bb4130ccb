__global__ void recompute_p(const float* s, const float* lse, float* p, int n) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
  if (j >= n) return;
  const float x = s[r * n + j], L = lse[r];
  p[r * n + j] = x == -INFINITY || L == -INFINITY ? 0.f : expf(x - L);
}
