void launch_causal_tiles(float* range, int Sq, int Sk, int Br, int Bc,
                         cudaStream_t stream) {
  const int tiles = (Sq + Br - 1) / Br;
  causal_tiles<<<(tiles + 63) / 64, 64, 0, stream>>>(range, Sq, Sk, Br, Bc);
}
