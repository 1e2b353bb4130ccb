__global__ void causal_tiles(float* range, int Sq, int Sk, int Br, int Bc) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t * Br >= Sq) return;
  const int last_row = min(Sq, (t + 1) * Br) - 1;
  const int keys = max(0, min(Sk, last_row + Sk - Sq + 1));   // keys 0 .. its position
  range[t] = float((keys + Bc - 1) / Bc);
}
