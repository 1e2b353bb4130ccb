__global__ void greedy_argmax(const float* logits, float* out, int V) {
  __shared__ float best[128];
  __shared__ int where[128];
  const int b = blockIdx.x, t = threadIdx.x;
  float m = -INFINITY;
  int at = V;   // no column yet: loses every comparison below
  for (int j = t; j < V; j += 128) {
    const float x = logits[(size_t)b * V + j];
    if (x > m) { m = x; at = j; }   // strict: a thread keeps its first maximum
  }
  best[t] = m;
  where[t] = at;
  __syncthreads();
  for (int half = 64; half > 0; half /= 2) {
    if (t < half) {
      const float o = best[t + half];
      const int oj = where[t + half];
      if (o > best[t] || (o == best[t] && oj < where[t])) {
        best[t] = o;
        where[t] = oj;
      }
    }
    __syncthreads();
  }
  if (t == 0) out[b] = float(where[0]);
}
