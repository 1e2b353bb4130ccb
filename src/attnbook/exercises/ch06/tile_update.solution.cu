__global__ void tile_update(const float* s, const float* v, float* m, float* l,
                            float* acc, int R, int Bc, int D) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  float m_new = m[r];
  for (int j = 0; j < Bc; ++j) m_new = fmaxf(m_new, s[r * Bc + j]);
  if (m_new == -INFINITY) return;   // no admissible key yet: nothing changes
  const float alpha = expf(m[r] - m_new);
  float sum = 0.f;
  for (int d = 0; d < D; ++d) acc[r * D + d] *= alpha;
  for (int j = 0; j < Bc; ++j) {
    const float p = expf(s[r * Bc + j] - m_new);
    sum += p;
    for (int d = 0; d < D; ++d) acc[r * D + d] += p * v[j * D + d];
  }
  l[r] = l[r] * alpha + sum;
  m[r] = m_new;
}
