// One step of Algorithm 1 for one row, one thread per row: the row's running max m[r],
// sum l[r] and unnormalised output acc[r] (D ≤ 64 values) meet a new tile of Bc scores
// s[r] and its values v [Bc, D]. Update all three in place, as the chapter's loop does.
// Rows start with m = -inf, l = 0 and acc = 0; a tile may be entirely -inf.
__global__ void tile_update(const float* s, const float* v, float* m, float* l,
                            float* acc, int R, int Bc, int D) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  // TODO
}
