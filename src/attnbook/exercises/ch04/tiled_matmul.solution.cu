__global__ void tiled_matmul(const float* a, const float* b, float* c, int M, int N,
                             int K) {
  __shared__ float As[16][16], Bs[16][16];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += 16) {
    As[ty][tx] = row < M && k0 + tx < K ? a[row * K + k0 + tx] : 0.f;
    Bs[ty][tx] = k0 + ty < K && col < N ? b[(k0 + ty) * N + col] : 0.f;
    __syncthreads();
    for (int kk = 0; kk < 16; ++kk) acc += As[ty][kk] * Bs[kk][tx];
    __syncthreads();
  }
  if (row < M && col < N) c[row * N + col] = acc;
}
