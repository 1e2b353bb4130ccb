// The causal sliding window: query i (of Sq) may attend key j (of Sk) when j is at
// most its position and fewer than w keys back. Positions are aligned bottom-right:
// query i stands at position i + Sk - Sq. Write 0 where attention is allowed, -INFINITY
// elsewhere.
__global__ void window_bias(float* bias, int Sq, int Sk, int w) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
  if (j >= Sk) return;
  // TODO: bias[i * Sk + j] = ...
}
