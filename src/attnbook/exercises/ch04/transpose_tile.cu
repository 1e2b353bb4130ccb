// y = xᵀ for x [M, N] row-major. A block of 32 × 32 threads moves one 32 × 32 tile:
// it reads the tile row by row (coalesced), and writes it back transposed, also row by
// row, through a shared tile. Pad the tile to 33 columns to avoid bank conflicts.
__global__ void transpose(const float* x, float* y, int M, int N) {
  __shared__ float tile[32][33];
  // TODO
}
