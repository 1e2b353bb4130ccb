__global__ void fragment_row_max(const float* x, float* out) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const float* tile = x + blockIdx.x * 128;
  float c[4];
  for (int i = 0; i < 4; ++i) c[i] = tile[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
  for (int r = 0; r < 2; ++r) {
    float m = fmaxf(c[2 * r], c[2 * r + 1]);
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    if (t == 0) out[blockIdx.x * 16 + g + 8 * r] = m;
  }
}
