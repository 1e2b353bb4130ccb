void launch_key_padding(const float* s, const int* lengths, float* out, int B, int Sq,
                        int Sk, cudaStream_t stream) {
  key_padding<<<dim3((Sk + 63) / 64, Sq, B), 64, 0, stream>>>(s, lengths, out, Sq, Sk);
}
