__global__ void transpose(const float* x, float* y, int M, int N) {
  __shared__ float tile[32][33];
  const int c = blockIdx.x * 32 + threadIdx.x, r = blockIdx.y * 32 + threadIdx.y;
  if (r < M && c < N) tile[threadIdx.y][threadIdx.x] = x[(size_t)r * N + c];
  __syncthreads();
  const int yr = blockIdx.x * 32 + threadIdx.y, yc = blockIdx.y * 32 + threadIdx.x;
  if (yr < N && yc < M) y[(size_t)yr * M + yc] = tile[threadIdx.x][threadIdx.y];
}
