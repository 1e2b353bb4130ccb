void launch_ring_sum(const float* x, float* out, int tiles, cudaStream_t stream) {
  ring_sum<<<1, 64, 0, stream>>>(x, out, tiles);
}
