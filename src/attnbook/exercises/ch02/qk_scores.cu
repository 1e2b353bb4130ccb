// s[i][j] = scale · q_i · k_j for q [Sq, D] and k [Sk, D]: one thread per score, x for
// the key j and y for the query i, on a 2-D grid of 16 x 16 blocks that may overhang
// both edges.
__global__ void qk_scores(const float* q, const float* k, float* s, int Sq, int Sk,
                          int D, float scale) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  // TODO
}
