// o[r] = softmax(s[r]) · v for scores s [R, n] and values v [n, D] (D ≤ 64): one
// thread per row, one pass over the keys, keeping the running max m, the running sum l
// and the unnormalised output acc, rescaled by e^(m_old - m_new) whenever the max
// grows. Divide by l at the end.
__global__ void online_row(const float* s, const float* v, float* o, int R, int n,
                           int D) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  float acc[64];
  // TODO
}
