void launch_recompute_p(const float* s, const float* lse, float* p, int R, int n,
                        cudaStream_t stream) {
  recompute_p<<<dim3((n + 63) / 64, R), 64, 0, stream>>>(s, lse, p, n);
}
