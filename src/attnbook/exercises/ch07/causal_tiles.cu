// Causal tile skipping: query tile t holds rows [t·Br, min((t + 1)·Br, Sq)); key tiles
// hold Bc keys each. Write range[t] = (the number of key tiles the block must visit,
// i.e. the index one past the last key tile holding a key some row of the tile may
// attend), with causal aligned bottom-right (query i stands at position i + Sk - Sq and
// attends keys j <= its position). A tile whose rows attend no key visits 0 tiles.
__global__ void causal_tiles(float* range, int Sq, int Sk, int Br, int Bc) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t * Br >= Sq) return;
  // TODO: range[t] = ...
}
