__global__ void qk_scores(const float* q, const float* k, float* s, int Sq, int Sk,
                          int D, float scale) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= Sq || j >= Sk) return;
  float dot = 0.f;
  for (int d = 0; d < D; ++d) dot += q[i * D + d] * k[j * D + d];
  s[i * Sk + j] = dot * scale;
}
