__global__ void row_logsumexp(const float* x, float* lse, int R, int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  const float* xr = x + (size_t)r * n;
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j < n; ++j) {
    if (xr[j] == -INFINITY) continue;   // exp(-inf - m) = 0, even when m = -inf
    const float m_new = fmaxf(m, xr[j]);
    l = l * expf(m - m_new) + expf(xr[j] - m_new);
    m = m_new;
  }
  lse[r] = l == 0.f ? -INFINITY : m + logf(l);
}
