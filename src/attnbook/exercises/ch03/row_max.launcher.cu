void launch_row_max(const float* x, float* out, int rows, int n, cudaStream_t stream) {
  row_max<<<rows, 256, 0, stream>>>(x, out, n);
}
