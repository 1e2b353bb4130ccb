// c = a b for a [M, K] and b [K, N], with 16 x 16 tiles of a and b staged in shared
// memory: thread (tx, ty) of block (bx, by) computes c[16 by + ty][16 bx + tx]. Sizes
// need not be multiples of 16: load zeros past the edges, write only inside.
__global__ void tiled_matmul(const float* a, const float* b, float* c, int M, int N,
                             int K) {
  __shared__ float As[16][16], Bs[16][16];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
  float acc = 0.f;
  // TODO: for each tile along K: load As and Bs, synchronise, accumulate, synchronise
}
