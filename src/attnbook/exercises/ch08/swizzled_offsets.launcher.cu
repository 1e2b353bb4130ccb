void launch_swizzled_offsets(float* out, int rows, cudaStream_t stream) {
  swizzled_offsets<<<(rows + 3) / 4, dim3(64, 4), 0, stream>>>(out, rows);
}
