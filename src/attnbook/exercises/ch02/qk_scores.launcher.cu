void launch_qk_scores(const float* q, const float* k, float* s, int Sq, int Sk, int D,
                      float scale, cudaStream_t stream) {
  const dim3 block(16, 16), grid((Sk + 15) / 16, (Sq + 15) / 16);
  qk_scores<<<grid, block, 0, stream>>>(q, k, s, Sq, Sk, D, scale);
}
