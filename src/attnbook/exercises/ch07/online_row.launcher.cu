void launch_online_row(const float* s, const float* v, float* o, int R, int n, int D,
                       cudaStream_t stream) {
  online_row<<<(R + 63) / 64, 64, 0, stream>>>(s, v, o, R, n, D);
}
