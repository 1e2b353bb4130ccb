void launch_paged_slots(const int* table, const int* lengths, float* slot, int B,
                        int max_blocks, int bs, int max_len, cudaStream_t stream) {
  paged_slots<<<dim3((max_len + 63) / 64, B), 64, 0, stream>>>(table, lengths, slot,
                                                               max_blocks, bs, max_len);
}
