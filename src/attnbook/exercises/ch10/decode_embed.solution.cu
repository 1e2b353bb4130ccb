__global__ void decode_embed(const int* tokens, const int* positions, const float* E,
                             const float* P, float* x, int D) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (d >= D) return;
  x[(size_t)b * D + d] = E[(size_t)tokens[b] * D + d] + P[(size_t)positions[b] * D + d];
}
