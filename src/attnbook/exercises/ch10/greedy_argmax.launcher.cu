void launch_greedy_argmax(const float* logits, float* out, int B, int V,
                          cudaStream_t stream) {
  greedy_argmax<<<B, 128, 0, stream>>>(logits, out, V);
}
