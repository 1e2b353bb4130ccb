void launch_transpose(const float* x, float* y, int M, int N, cudaStream_t stream) {
  const dim3 grid((N + 31) / 32, (M + 31) / 32);
  transpose<<<grid, dim3(32, 32), 0, stream>>>(x, y, M, N);
}
