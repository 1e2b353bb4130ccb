"""A solution and a planted wrong answer for every exercise (the notebooks show the same
solutions in collapsed cells)."""

SOLUTIONS = {
    "relu_grid_stride": r"""
__global__ void relu(const float* x, float* y, int n) {
  const int step = gridDim.x * blockDim.x;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
    y[i] = fmaxf(x[i], 0.f);
}
""",
    "row_max": r"""
__global__ void row_max(const float* x, float* out, int n) {
  __shared__ float buf[256];
  const int t = threadIdx.x;
  const float* xr = x + (size_t)blockIdx.x * n;
  float m = -INFINITY;
  for (int j = t; j < n; j += 256) m = fmaxf(m, xr[j]);
  buf[t] = m;
  __syncthreads();
  for (int half = 128; half > 0; half /= 2) {
    if (t < half) buf[t] = fmaxf(buf[t], buf[t + half]);
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}
""",
    "transpose_tile": r"""
__global__ void transpose(const float* x, float* y, int M, int N) {
  __shared__ float tile[32][33];
  const int c = blockIdx.x * 32 + threadIdx.x, r = blockIdx.y * 32 + threadIdx.y;
  if (r < M && c < N) tile[threadIdx.y][threadIdx.x] = x[(size_t)r * N + c];
  __syncthreads();
  const int yr = blockIdx.x * 32 + threadIdx.y, yc = blockIdx.y * 32 + threadIdx.x;
  if (yr < N && yc < M) y[(size_t)yr * M + yc] = tile[threadIdx.x][threadIdx.y];
}
""",
    "causal_window": r"""
__global__ void window_bias(float* bias, int Sq, int Sk, int w) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
  if (j >= Sk) return;
  const int pos = i + Sk - Sq;
  bias[i * Sk + j] = j <= pos && pos - j < w ? 0.f : -INFINITY;
}
""",
    "online_row": r"""
__global__ void online_row(const float* s, const float* v, float* o, int R, int n,
                           int D) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  float acc[64];
  const float* sr = s + (size_t)r * n;
  float m = -INFINITY, l = 0.f;
  for (int d = 0; d < D; ++d) acc[d] = 0.f;
  for (int j = 0; j < n; ++j) {
    const float m_new = fmaxf(m, sr[j]);
    const float alpha = expf(m - m_new), p = expf(sr[j] - m_new);
    l = l * alpha + p;
    for (int d = 0; d < D; ++d) acc[d] = acc[d] * alpha + p * v[j * D + d];
    m = m_new;
  }
  for (int d = 0; d < D; ++d) o[(size_t)r * D + d] = acc[d] / l;
}
""",
    "row_logsumexp": r"""
__global__ void row_logsumexp(const float* x, float* lse, int R, int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  const float* xr = x + (size_t)r * n;
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j < n; ++j) {
    if (xr[j] == -INFINITY) continue;   // exp(-inf - m) = 0, even when m = -inf
    const float m_new = fmaxf(m, xr[j]);
    l = l * expf(m - m_new) + expf(xr[j] - m_new);
    m = m_new;
  }
  lse[r] = l == 0.f ? -INFINITY : m + logf(l);
}
""",
    "combine_splits": r"""
__global__ void combine_splits(const float* o, const float* lse, float* out, int S,
                               int D) {
  const int r = blockIdx.x, d = threadIdx.x;
  const float* lr = lse + (size_t)r * S;
  float m = -INFINITY;
  for (int s = 0; s < S; ++s) m = fmaxf(m, lr[s]);
  float l = 0.f, acc = 0.f;
  if (m != -INFINITY)
    for (int s = 0; s < S; ++s) {
      const float w = expf(lr[s] - m);
      l += w;
      acc += w * o[((size_t)r * S + s) * D + d];
    }
  out[(size_t)r * D + d] = l == 0.f ? 0.f : acc / l;
}
""",
    "softmax_backward": r"""
__global__ void softmax_backward(const float* p, const float* dp, float* ds, int R,
                                 int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  const float* pr = p + (size_t)r * n;
  const float* dpr = dp + (size_t)r * n;
  float dot = 0.f;
  for (int j = 0; j < n; ++j) dot += pr[j] * dpr[j];
  for (int j = 0; j < n; ++j) ds[(size_t)r * n + j] = pr[j] * (dpr[j] - dot);
}
""",
    "qk_scores": r"""
__global__ void qk_scores(const float* q, const float* k, float* s, int Sq, int Sk,
                          int D, float scale) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= Sq || j >= Sk) return;
  float dot = 0.f;
  for (int d = 0; d < D; ++d) dot += q[i * D + d] * k[j * D + d];
  s[i * Sk + j] = dot * scale;
}
""",
    "warp_sum": r"""
__global__ void warp_sum(const float* x, float* out, int n) {
  const int lane = threadIdx.x;
  const float* xr = x + (size_t)blockIdx.x * n;
  float sum = 0.f;
  for (int j = lane; j < n; j += 32) sum += xr[j];
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (lane == 0) out[blockIdx.x] = sum;
}
""",
    "tiled_matmul": r"""
__global__ void tiled_matmul(const float* a, const float* b, float* c, int M, int N,
                             int K) {
  __shared__ float As[16][16], Bs[16][16];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += 16) {
    As[ty][tx] = row < M && k0 + tx < K ? a[row * K + k0 + tx] : 0.f;
    Bs[ty][tx] = k0 + ty < K && col < N ? b[(k0 + ty) * N + col] : 0.f;
    __syncthreads();
    for (int kk = 0; kk < 16; ++kk) acc += As[ty][kk] * Bs[kk][tx];
    __syncthreads();
  }
  if (row < M && col < N) c[row * N + col] = acc;
}
""",
    "key_padding": r"""
__global__ void key_padding(const float* s, const int* lengths, float* out, int Sq,
                            int Sk) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y, b = blockIdx.z;
  if (j >= Sk) return;
  const size_t at = ((size_t)b * Sq + i) * Sk + j;
  out[at] = j < lengths[b] ? s[at] : -INFINITY;
}
""",
    "tile_update": r"""
__global__ void tile_update(const float* s, const float* v, float* m, float* l,
                            float* acc, int R, int Bc, int D) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  float m_new = m[r];
  for (int j = 0; j < Bc; ++j) m_new = fmaxf(m_new, s[r * Bc + j]);
  if (m_new == -INFINITY) return;   // no admissible key yet: nothing changes
  const float alpha = expf(m[r] - m_new);
  float sum = 0.f;
  for (int d = 0; d < D; ++d) acc[r * D + d] *= alpha;
  for (int j = 0; j < Bc; ++j) {
    const float p = expf(s[r * Bc + j] - m_new);
    sum += p;
    for (int d = 0; d < D; ++d) acc[r * D + d] += p * v[j * D + d];
  }
  l[r] = l[r] * alpha + sum;
  m[r] = m_new;
}
""",
    "causal_tiles": r"""
__global__ void causal_tiles(float* range, int Sq, int Sk, int Br, int Bc) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t * Br >= Sq) return;
  const int last_row = min(Sq, (t + 1) * Br) - 1;
  const int keys = max(0, min(Sk, last_row + Sk - Sq + 1));   // keys 0 .. its position
  range[t] = float((keys + Bc - 1) / Bc);
}
""",
    "swizzled_offsets": r"""
__global__ void swizzled_offsets(float* out, int rows) {
  const int col = threadIdx.x, row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  const int chunk = (col / 8) ^ (row % 8);
  out[row * 64 + col] = float(row * 64 + chunk * 8 + col % 8);
}
""",
    "paged_slots": r"""
__global__ void paged_slots(const int* block_table, const int* lengths, float* slot,
                            int max_blocks, int bs, int max_len) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (p >= max_len) return;
  const int page = block_table[b * max_blocks + p / bs];
  slot[b * max_len + p] = p < lengths[b] ? float(page * bs + p % bs) : -1.f;
}
""",
    "recompute_p": r"""
__global__ void recompute_p(const float* s, const float* lse, float* p, int n) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
  if (j >= n) return;
  const float x = s[r * n + j], L = lse[r];
  p[r * n + j] = x == -INFINITY || L == -INFINITY ? 0.f : expf(x - L);
}
""",
    "fragment_row_max": r"""
__global__ void fragment_row_max(const float* x, float* out) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const float* tile = x + blockIdx.x * 128;
  float c[4];
  for (int i = 0; i < 4; ++i) c[i] = tile[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
  for (int r = 0; r < 2; ++r) {
    float m = fmaxf(c[2 * r], c[2 * r + 1]);
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    if (t == 0) out[blockIdx.x * 16 + g + 8 * r] = m;
  }
}
""",
    "greedy_argmax": r"""
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
""",
    "decode_embed": r"""
__global__ void decode_embed(const int* tokens, const int* positions, const float* E,
                             const float* P, float* x, int D) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (d >= D) return;
  x[(size_t)b * D + d] = E[(size_t)tokens[b] * D + d] + P[(size_t)positions[b] * D + d];
}
""",
}

# (what is wrong, the text change that plants it, what the report must say)
PLANTED = {
    "relu_grid_stride": ("no grid-stride loop",
                         ("for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; "
                          "i += step)",
                          "int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n)"),
                         "case n = 257"),
    "row_max": ("no barrier between the halving steps",
                ("    if (t < half) buf[t] = fmaxf(buf[t], buf[t + half]);\n"
                 "    __syncthreads();",
                 "    if (t < half) buf[t] = fmaxf(buf[t], buf[t + half]);"),
                "under thread order"),
    "transpose_tile": ("no barrier between loading the tile and reading it",
                       ("  __syncthreads();\n", ""), "under thread order"),
    "causal_window": ("positions aligned top-left",
                      ("const int pos = i + Sk - Sq;", "const int pos = i;"),
                      "Sq = 3, Sk = 10"),
    "online_row": ("the paper's inverted rescaling", ("expf(m - m_new), p",
                                                       "expf(m_new - m), p"), "R = 1"),
    "row_logsumexp": ("no guard for a row of -inf",
                      ("    if (xr[j] == -INFINITY) continue;   "
                       "// exp(-inf - m) = 0, even when m = -inf\n", ""), "n = 1"),
    "combine_splits": ("empty splits not guarded",
                       ("  if (m != -INFINITY)\n", ""), "R = 2, S = 1"),
    "softmax_backward": ("the Jacobian's diagonal term only",
                         ("pr[j] * (dpr[j] - dot)", "pr[j] * dpr[j]"), "R = 1, n = 1"),
    "qk_scores": ("query and key indices swapped",
                  ("q[i * D + d] * k[j * D + d]", "q[j * D + d] * k[i * D + d]"),
                  "Sq = 5, Sk = 17"),
    "warp_sum": ("the reduction starts at offset 8",
                 ("int offset = 16;", "int offset = 8;"), "n = 31"),
    "tiled_matmul": ("no barrier before the next tile overwrites the shared tiles",
                     ("acc += As[ty][kk] * Bs[kk][tx];\n    __syncthreads();\n",
                      "acc += As[ty][kk] * Bs[kk][tx];\n"),
                     "under thread order"),
    "key_padding": ("the last real key masked too",
                    ("j < lengths[b]", "j < lengths[b] - 1"), "Sq = 1, Sk = 1"),
    "tile_update": ("the paper's inverted rescaling",
                    ("const float alpha = expf(m[r] - m_new);",
                     "const float alpha = expf(m_new - m[r]);"), "R = 4"),
    "causal_tiles": ("causal aligned top-left",
                     ("last_row + Sk - Sq + 1", "last_row + 1"), "Sq = 10, Sk = 200"),
    "swizzled_offsets": ("XOR with the row modulo 4",
                         ("(col / 8) ^ (row % 8)", "(col / 8) ^ (row % 4)"),
                         "rows = 8"),
    "paged_slots": ("the page indexed by the position, not the page number",
                    ("block_table[b * max_blocks + p / bs]",
                     "block_table[b * max_blocks + p % bs]"), "lengths [5, 16, 0]"),
    "recompute_p": ("no guard for masked scores or empty rows",
                    ("x == -INFINITY || L == -INFINITY ? 0.f : ", ""), "R = 1"),
    "fragment_row_max": ("the second shuffle crosses into the next row group",
                         ("__shfl_xor_sync(0xffffffffu, m, 2)",
                          "__shfl_xor_sync(0xffffffffu, m, 4)"), "T = 1"),
    "greedy_argmax": ("ties across threads keep the lower thread, not the lower column",
                      (" || (o == best[t] && oj < where[t])", ""), "B = 3, V = 97"),
    "decode_embed": ("every sequence at position b",
                     ("P[(size_t)positions[b] * D + d]", "P[(size_t)b * D + d]"),
                     "positions [12, 0, 39]"),
}
