__global__ void softmax_backward(const float* p, const float* dp, float* ds, int R,
                                 int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  const float* pr = p + (size_t)r * n;
  const float* dpr = dp + (size_t)r * n;
  float dot = 0.f;
  for (int j = 0; j < n; ++j) dot += pr[j] * dpr[j];
  for (int j = 0; j < n; ++j) ds[(size_t)r * n + j] = pr[j] * (dpr[j] - dot);
}
