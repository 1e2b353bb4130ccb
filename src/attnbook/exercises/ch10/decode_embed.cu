// The input of a decode step: sequence b's new token tokens[b] sits at position
// positions[b] (each sequence has its own length). x[b][d] = E[tokens[b]][d] +
// P[positions[b]][d], with E [vocab, D] the token embedding and P [max_len, D] the
// position embedding. One thread per element: x over d, y over b.
__global__ void decode_embed(const int* tokens, const int* positions, const float* E,
                             const float* P, float* x, int D) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (d >= D) return;
  // TODO
}
