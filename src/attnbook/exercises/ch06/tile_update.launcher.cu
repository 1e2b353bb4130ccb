void launch_tile_update(const float* s, const float* v, float* m, float* l, float* acc,
                        int R, int Bc, int D, cudaStream_t stream) {
  tile_update<<<(R + 63) / 64, 64, 0, stream>>>(s, v, m, l, acc, R, Bc, D);
}
