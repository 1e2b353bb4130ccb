void launch_decode_embed(const int* tokens, const int* positions, const float* E,
                         const float* P, float* x, int B, int D, cudaStream_t stream) {
  decode_embed<<<dim3((D + 63) / 64, B), 64, 0, stream>>>(tokens, positions, E, P, x,
                                                          D);
}
