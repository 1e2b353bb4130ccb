// A paged KV cache: position p of sequence b lives in page block_table[b][p / bs], at
// row p % bs of that page; pages are bs rows each, numbered in one pool. Write
// slot[b][p] = the row of the pool that holds position p of sequence b (page · bs + row
// within the page), for p < lengths[b], and -1 past the length. One thread per
// position: x over p, y over b.
__global__ void paged_slots(const int* block_table, const int* lengths, float* slot,
                            int max_blocks, int bs, int max_len) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (p >= max_len) return;
  // TODO
}
