__global__ void key_padding(const float* s, const int* lengths, float* out, int Sq,
                            int Sk) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y, b = blockIdx.z;
  if (j >= Sk) return;
  const size_t at = ((size_t)b * Sq + i) * Sk + j;
  out[at] = j < lengths[b] ? s[at] : -INFINITY;
}
