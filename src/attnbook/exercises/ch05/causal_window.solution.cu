__global__ void window_bias(float* bias, int Sq, int Sk, int w) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
  if (j >= Sk) return;
  const int pos = i + Sk - Sq;
  bias[i * Sk + j] = j <= pos && pos - j < w ? 0.f : -INFINITY;
}
