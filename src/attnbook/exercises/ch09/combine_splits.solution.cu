__global__ void combine_splits(const float* o, const float* lse, float* out, int S,
                               int D) {
  const int r = blockIdx.x, d = threadIdx.x;
  const float* lr = lse + (size_t)r * S;
  float m = -INFINITY;
  for (int s = 0; s < S; ++s) m = fmaxf(m, lr[s]);
  float l = 0.f, acc = 0.f;
  if (m != -INFINITY)
    for (int s = 0; s < S; ++s) {
      const float w = expf(lr[s] - m);
      l += w;
      acc += w * o[((size_t)r * S + s) * D + d];
    }
  out[(size_t)r * D + d] = l == 0.f ? 0.f : acc / l;
}
