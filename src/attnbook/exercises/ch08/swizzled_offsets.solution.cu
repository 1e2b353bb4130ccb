__global__ void swizzled_offsets(float* out, int rows) {
  const int col = threadIdx.x, row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const int chunk = (col / 8) ^ (row % 8);
  out[row * 64 + col] = float(row * 64 + chunk * 8 + col % 8);
}
