// The backward recomputes the probabilities from the scores and the forward's
// log-sum-exp: p[r][j] = exp(s[r][j] − lse[r]) for s [R, n] (masked scores are -inf)
// and lse [R]. A masked score gives 0, and so does every score of a row with no
// admissible key (lse = -inf), never NaN. One thread per score: x over j, y over r.
__global__ void recompute_p(const float* s, const float* lse, float* p, int n) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
  if (j >= n) return;
  // TODO
}
