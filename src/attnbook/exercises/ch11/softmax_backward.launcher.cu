void launch_softmax_backward(const float* p, const float* dp, float* ds, int R, int n,
                             cudaStream_t stream) {
  softmax_backward<<<(R + 63) / 64, 64, 0, stream>>>(p, dp, ds, R, n);
}
