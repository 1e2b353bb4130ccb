__global__ void online_row(const float* s, const float* v, float* o, int R, int n,
                           int D) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  float acc[64];
  const float* sr = s + (size_t)r * n;
  float m = -INFINITY, l = 0.f;
  for (int d = 0; d < D; ++d) acc[d] = 0.f;
  for (int j = 0; j < n; ++j) {
    const float m_new = fmaxf(m, sr[j]);
    const float alpha = expf(m - m_new), p = expf(sr[j] - m_new);
    l = l * alpha + p;
    for (int d = 0; d < D; ++d) acc[d] = acc[d] * alpha + p * v[j * D + d];
    m = m_new;
  }
  for (int d = 0; d < D; ++d) o[(size_t)r * D + d] = acc[d] / l;
}
