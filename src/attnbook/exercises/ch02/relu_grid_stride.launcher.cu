void launch_relu(const float* x, float* y, int n, cudaStream_t stream) {
  relu<<<4, 64, 0, stream>>>(x, y, n);
}
