// Key padding: sequence b has lengths[b] real keys, the rest of its Sk are padding.
// For scores s [B, Sq, Sk], write out = s where key j is real and -INFINITY where it is
// padding. One thread per score: x over j, y over i, z over b.
__global__ void key_padding(const float* s, const int* lengths, float* out, int Sq,
                            int Sk) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y, b = blockIdx.z;
  if (j >= Sk) return;
  // TODO
}
