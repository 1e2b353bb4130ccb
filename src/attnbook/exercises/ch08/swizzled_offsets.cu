// Where element (row, col) of a [rows][64] tile of 16-bit values lives when its 16-byte
// chunks are swizzled: chunk c = col / 8 of row r is stored at chunk c ^ (r % 8), the
// element keeping its place (col % 8) inside the chunk. Write out[row][col], the
// element offset from the start of the tile, for every row and column. One thread per
// element: x over the 64 columns, y over the rows.
__global__ void swizzled_offsets(float* out, int rows) {
  const int col = threadIdx.x, row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  // TODO: out[row * 64 + col] = ...
}
