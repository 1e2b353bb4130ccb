__global__ void relu(const float* x, float* y, int n) {
  const int step = gridDim.x * blockDim.x;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
    y[i] = fmaxf(x[i], 0.f);
}
