// x holds T tiles of 16 x 8 floats; one warp per tile. Lane (g = lane / 4,
// t = lane % 4) holds the accumulator fragment of mma.sync:
// c[i] = tile[g + 8·(i / 2)][2t + i % 2].
// Write out[tile][row], the max of each of the 16 rows, from the fragments and warp
// shuffles alone (no shared memory); the lanes with t == 0 write.
__global__ void fragment_row_max(const float* x, float* out) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const float* tile = x + blockIdx.x * 128;
  float c[4];
  for (int i = 0; i < 4; ++i) c[i] = tile[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
  // TODO: the max of rows g and g + 8 over the four lanes that hold them
}
