void launch_warp_sum(const float* x, float* out, int rows, int n, cudaStream_t stream) {
  warp_sum<<<rows, 32, 0, stream>>>(x, out, n);
}
