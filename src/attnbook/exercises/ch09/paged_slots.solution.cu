__global__ void paged_slots(const int* block_table, const int* lengths, float* slot,
                            int max_blocks, int bs, int max_len) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (p >= max_len) return;
  const int page = block_table[b * max_blocks + p / bs];
  slot[b * max_len + p] = p < lengths[b] ? float(page * bs + p % bs) : -1.f;
}
