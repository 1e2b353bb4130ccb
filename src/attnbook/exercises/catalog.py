"""The exercises of chapters 2–11 (two in each chapter): what the reader
writes, and how it is called and checked. Outputs start as NaN, so a value the kernel
never writes shows as wrong."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..reference import masks

__all__ = ["Exercise", "EXERCISES"]


@dataclass
class Exercise:
    chapter: str
    skeleton: str      # the kernel the reader completes
    launcher: str      # CUDA host code appended to the reader's text
    wrapper: str       # the torch-facing C++ (see attnbook.compile)
    function: str      # the wrapper's function
    cases: Callable    # () -> [(description, [inputs])]
    reference: Callable
    rtol: float = 1e-5
    atol: float = 1e-6


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ---- chapter 2: a grid-stride loop ---------------------------------------------------
RELU = Exercise(
    chapter="02",
    skeleton=r"""
// y = max(x, 0) for n elements. The launch has a fixed grid of 4 blocks of 64 threads,
// whatever n is: walk the array with a grid-stride loop.
__global__ void relu(const float* x, float* y, int n) {
  // TODO
}
""",
    launcher=r"""
void launch_relu(const float* x, float* y, int n, cudaStream_t stream) {
  relu<<<4, 64, 0, stream>>>(x, y, n);
}
""",
    wrapper=r"""
void launch_relu(const float*, float*, int, cudaStream_t);
at::Tensor relu_of(at::Tensor x) {
  attnbook::check_tensor(x, "x", at::kFloat);
  at::Tensor y = x.new_full(x.sizes(), NAN);
  launch_relu(x.data_ptr<float>(), y.data_ptr<float>(), int(x.numel()),
              attnbook::stream());
  attnbook::check_launch();
  return y;
}
""",
    function="relu_of",
    cases=lambda: [(f"n = {n}", [_randn(n, seed=n)]) for n in (1, 255, 256, 257, 1000)],
    reference=lambda x: x.clamp(min=0),
)

# ---- chapter 3: a block reduction in shared memory -----------------------------------
ROW_MAX = Exercise(
    chapter="03",
    skeleton=r"""
// out[r] = max of row r of x ([rows, n]). One block of 256 threads per row: each
// thread folds x[r][t], x[r][t + 256], ... into one value, then the block halves the
// 256 values in shared memory until one is left.
__global__ void row_max(const float* x, float* out, int n) {
  __shared__ float buf[256];
  // TODO
}
""",
    launcher=r"""
void launch_row_max(const float* x, float* out, int rows, int n, cudaStream_t stream) {
  row_max<<<rows, 256, 0, stream>>>(x, out, n);
}
""",
    wrapper=r"""
void launch_row_max(const float*, float*, int, int, cudaStream_t);
at::Tensor row_max_of(at::Tensor x) {
  attnbook::check_tensor(x, "x", at::kFloat);
  TORCH_CHECK(x.dim() == 2, "x must be [rows, n]");
  at::Tensor out = x.new_full({x.size(0)}, NAN);
  launch_row_max(x.data_ptr<float>(), out.data_ptr<float>(), int(x.size(0)),
                 int(x.size(1)), attnbook::stream());
  attnbook::check_launch();
  return out;
}
""",
    function="row_max_of",
    cases=lambda: [(f"[{r}, {n}]", [_randn(r, n, seed=n)])
                   for r, n in ((1, 1), (3, 100), (2, 256), (2, 700))],
    reference=lambda x: x.amax(-1),
)

# ---- chapter 4: a transpose through a shared-memory tile -----------------------------
TRANSPOSE = Exercise(
    chapter="04",
    skeleton=r"""
// y = xᵀ for x [M, N] row-major. A block of 32 × 32 threads moves one 32 × 32 tile:
// it reads the tile row by row (coalesced), and writes it back transposed, also row by
// row, through a shared tile. Pad the tile to 33 columns to avoid bank conflicts.
__global__ void transpose(const float* x, float* y, int M, int N) {
  __shared__ float tile[32][33];
  // TODO
}
""",
    launcher=r"""
void launch_transpose(const float* x, float* y, int M, int N, cudaStream_t stream) {
  const dim3 grid((N + 31) / 32, (M + 31) / 32);
  transpose<<<grid, dim3(32, 32), 0, stream>>>(x, y, M, N);
}
""",
    wrapper=r"""
void launch_transpose(const float*, float*, int, int, cudaStream_t);
at::Tensor transpose_of(at::Tensor x) {
  attnbook::check_tensor(x, "x", at::kFloat);
  TORCH_CHECK(x.dim() == 2, "x must be [M, N]");
  at::Tensor y = x.new_full({x.size(1), x.size(0)}, NAN);
  launch_transpose(x.data_ptr<float>(), y.data_ptr<float>(), int(x.size(0)),
                   int(x.size(1)), attnbook::stream());
  attnbook::check_launch();
  return y;
}
""",
    function="transpose_of",
    cases=lambda: [(f"[{m}, {n}]", [_randn(m, n, seed=m)])
                   for m, n in ((1, 1), (32, 32), (33, 70), (64, 5))],
    reference=lambda x: x.t().contiguous(),
    rtol=0.0, atol=0.0,
)

# ---- chapter 5: a mask rule ----------------------------------------------------------
WINDOW = Exercise(
    chapter="05",
    skeleton=r"""
// The causal sliding window: query i (of Sq) may attend key j (of Sk) when j is at
// most its position and fewer than w keys back. Positions are aligned bottom-right:
// query i stands at position i + Sk - Sq. Write 0 where attention is allowed, -INFINITY
// elsewhere.
__global__ void window_bias(float* bias, int Sq, int Sk, int w) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
  if (j >= Sk) return;
  // TODO: bias[i * Sk + j] = ...
}
""",
    launcher=r"""
void launch_window(float* bias, int Sq, int Sk, int w, cudaStream_t stream) {
  window_bias<<<dim3((Sk + 63) / 64, Sq), 64, 0, stream>>>(bias, Sq, Sk, w);
}
""",
    wrapper=r"""
void launch_window(float*, int, int, int, cudaStream_t);
at::Tensor window_bias_of(at::Tensor like, int64_t Sq, int64_t Sk, int64_t w) {
  at::Tensor bias = like.new_full({Sq, Sk}, NAN);
  launch_window(bias.data_ptr<float>(), int(Sq), int(Sk), int(w), attnbook::stream());
  attnbook::check_launch();
  return bias;
}
""",
    function="window_bias_of",
    cases=lambda: [(f"Sq = {sq}, Sk = {sk}, w = {w}", [torch.empty(0), sq, sk, w])
                   for sq, sk, w in ((5, 5, 2), (3, 10, 4), (10, 4, 3), (1, 70, 65))],
    reference=lambda like, sq, sk, w: masks.bias(1, 1, sq, sk, causal=True, window=w,
                                                 device=like.device)[0, 0],
    rtol=0.0, atol=0.0,
)

# ---- chapter 7: the online softmax of one row, with its values -----------------------
ONLINE_ROW = Exercise(
    chapter="07",
    skeleton=r"""
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
""",
    launcher=r"""
void launch_online_row(const float* s, const float* v, float* o, int R, int n, int D,
                       cudaStream_t stream) {
  online_row<<<(R + 63) / 64, 64, 0, stream>>>(s, v, o, R, n, D);
}
""",
    wrapper=r"""
void launch_online_row(const float*, const float*, float*, int, int, int, cudaStream_t);
at::Tensor online_row_of(at::Tensor s, at::Tensor v) {
  attnbook::check_tensor(s, "s", at::kFloat);
  attnbook::check_tensor(v, "v", at::kFloat);
  TORCH_CHECK(s.dim() == 2 && v.dim() == 2 && v.size(0) == s.size(1) && v.size(1) <= 64,
              "s must be [R, n] and v [n, D] with D <= 64");
  at::Tensor o = s.new_full({s.size(0), v.size(1)}, NAN);
  launch_online_row(s.data_ptr<float>(), v.data_ptr<float>(), o.data_ptr<float>(),
                    int(s.size(0)), int(s.size(1)), int(v.size(1)), attnbook::stream());
  attnbook::check_launch();
  return o;
}
""",
    function="online_row_of",
    cases=lambda: [(f"R = {r}, n = {n}, D = {d}",
                    [_randn(r, n, seed=n) * scale, _randn(n, d, seed=d)])
                   for r, n, d, scale in ((1, 1, 1, 1.0), (3, 17, 8, 1.0),
                                          (70, 40, 64, 30.0))],
    reference=lambda s, v: torch.softmax(s.double(), -1).float() @ v,
    rtol=1e-4, atol=1e-5,
)

# ---- chapter 8: a row reduction on an mma.sync accumulator fragment ----------------
FRAGMENT_ROW_MAX = Exercise(
    chapter="08",
    skeleton=r"""
// x holds T tiles of 16 x 8 floats; one warp per tile. Lane (g = lane / 4,
// t = lane % 4) holds the accumulator fragment of mma.sync:
// c[i] = tile[g + 8·(i / 2)][2t + i % 2].
// Write out[tile][row], the max of each of the 16 rows, from the fragments and warp
// shuffles alone (no shared memory); the lanes with t == 0 write.
__global__ void fragment_row_max(const float* x, float* out) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const float* tile = x + blockIdx.x * 128;
  float c[4];
  for (int i = 0; i < 4; ++i) c[i] = tile[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
  // TODO: the max of rows g and g + 8 over the four lanes that hold them
}
""",
    launcher=r"""
void launch_fragment_row_max(const float* x, float* out, int tiles,
                             cudaStream_t stream) {
  fragment_row_max<<<tiles, 32, 0, stream>>>(x, out);
}
""",
    wrapper=r"""
void launch_fragment_row_max(const float*, float*, int, cudaStream_t);
at::Tensor fragment_row_max_of(at::Tensor x) {
  attnbook::check_tensor(x, "x", at::kFloat);
  TORCH_CHECK(x.dim() == 3 && x.size(1) == 16 && x.size(2) == 8,
              "x must be [T, 16, 8]");
  at::Tensor out = x.new_full({x.size(0), 16}, NAN);
  launch_fragment_row_max(x.data_ptr<float>(), out.data_ptr<float>(), int(x.size(0)),
                          attnbook::stream());
  attnbook::check_launch();
  return out;
}
""",
    function="fragment_row_max_of",
    cases=lambda: [(f"T = {n}", [_randn(n, 16, 8, seed=n) * 10]) for n in (1, 3, 40)],
    reference=lambda x: x.amax(-1),
)

# ---- chapter 6: the log-sum-exp, online ---------------------------------------------
def _lse_rows(n, seed):
    x = _randn(4, n, seed=seed) * 20
    x[1] = float("-inf")                    # a row with no admissible key
    x[2, ::2] = float("-inf")               # masked keys among the others
    return x


ROW_LOGSUMEXP = Exercise(
    chapter="06",
    skeleton=r"""
// lse[r] = log Σ_j exp(x[r][j]) for x [R, n], in one pass per row (one thread per row):
// keep the running max m and the running sum l of exp(x − m), rescaling l when the max
// grows. A row of -inf (no admissible key) has lse = -inf, not NaN.
__global__ void row_logsumexp(const float* x, float* lse, int R, int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  // TODO
}
""",
    launcher=r"""
void launch_row_logsumexp(const float* x, float* lse, int R, int n,
                          cudaStream_t stream) {
  row_logsumexp<<<(R + 63) / 64, 64, 0, stream>>>(x, lse, R, n);
}
""",
    wrapper=r"""
void launch_row_logsumexp(const float*, float*, int, int, cudaStream_t);
at::Tensor row_logsumexp_of(at::Tensor x) {
  attnbook::check_tensor(x, "x", at::kFloat);
  TORCH_CHECK(x.dim() == 2, "x must be [R, n]");
  at::Tensor lse = x.new_full({x.size(0)}, NAN);
  launch_row_logsumexp(x.data_ptr<float>(), lse.data_ptr<float>(), int(x.size(0)),
                       int(x.size(1)), attnbook::stream());
  attnbook::check_launch();
  return lse;
}
""",
    function="row_logsumexp_of",
    cases=lambda: [(f"n = {n}", [_lse_rows(n, n)]) for n in (1, 7, 300)],
    reference=lambda x: torch.logsumexp(x.double(), -1).float(),
    rtol=1e-5, atol=1e-5,
)


# ---- chapter 9: merging the partial results of split-K -------------------------------
def _splits(rows, splits, d, seed):
    o = _randn(rows, splits, d, seed=seed)
    lse = _randn(rows, splits, seed=seed + 1) * 10
    lse[0, 1:] = float("-inf")              # splits that saw no key
    lse[1] = float("-inf")                  # a row with no key at all
    return [o, lse]


def _merge_reference(o, lse):
    total = torch.logsumexp(lse.double(), -1, keepdim=True)
    w = torch.exp(lse.double() - total).nan_to_num(0.0)
    return (w[..., None] * o.double()).sum(1).float()


COMBINE_SPLITS = Exercise(
    chapter="09",
    skeleton=r"""
// Row r's keys were split into S parts; part s gave o[r][s] (D values, normalised
// within the part) and its log-sum-exp lse[r][s] (-inf: the part had no admissible
// key). Write out[r] = Σ_s exp(lse[r][s] − L) o[r][s] with L = log Σ_s exp(lse[r][s]);
// a row whose parts are all empty is 0. One thread per (row, d): threadIdx.x = d,
// blockIdx.x = r.
__global__ void combine_splits(const float* o, const float* lse, float* out, int S,
                               int D) {
  const int r = blockIdx.x, d = threadIdx.x;
  // TODO
}
""",
    launcher=r"""
void launch_combine_splits(const float* o, const float* lse, float* out, int R, int S,
                           int D, cudaStream_t stream) {
  combine_splits<<<R, D, 0, stream>>>(o, lse, out, S, D);
}
""",
    wrapper=r"""
void launch_combine_splits(const float*, const float*, float*, int, int, int,
                           cudaStream_t);
at::Tensor combine_splits_of(at::Tensor o, at::Tensor lse) {
  attnbook::check_tensor(o, "o", at::kFloat);
  attnbook::check_tensor(lse, "lse", at::kFloat);
  TORCH_CHECK(o.dim() == 3 && lse.dim() == 2 && lse.size(0) == o.size(0) &&
                  lse.size(1) == o.size(1) && o.size(2) <= 1024,
              "o must be [R, S, D] (D <= 1024) and lse [R, S]");
  at::Tensor out = o.new_full({o.size(0), o.size(2)}, NAN);
  launch_combine_splits(o.data_ptr<float>(), lse.data_ptr<float>(),
                        out.data_ptr<float>(), int(o.size(0)), int(o.size(1)),
                        int(o.size(2)), attnbook::stream());
  attnbook::check_launch();
  return out;
}
""",
    function="combine_splits_of",
    cases=lambda: [(f"R = {r}, S = {sp}, D = {d}", _splits(r, sp, d, seed=sp))
                   for r, sp, d in ((2, 1, 1), (3, 4, 32), (9, 16, 128))],
    reference=_merge_reference,
    rtol=1e-5, atol=1e-5,
)

# ---- chapter 11: the backward of softmax ---------------------------------------------
def _softmax_rows(r, n, seed):
    p = torch.softmax(_randn(r, n, seed=seed) * 3, -1)
    return [p, _randn(r, n, seed=seed + 1)]


SOFTMAX_BACKWARD = Exercise(
    chapter="11",
    skeleton=r"""
// The gradient of the scores through softmax, one thread per row: for probabilities
// p [R, n] (a softmax of each row) and the gradient dp [R, n] of the probabilities,
// ds[r][j] = p[r][j] · (dp[r][j] − Σ_k p[r][k] dp[r][k]).
__global__ void softmax_backward(const float* p, const float* dp, float* ds, int R,
                                 int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  // TODO
}
""",
    launcher=r"""
void launch_softmax_backward(const float* p, const float* dp, float* ds, int R, int n,
                             cudaStream_t stream) {
  softmax_backward<<<(R + 63) / 64, 64, 0, stream>>>(p, dp, ds, R, n);
}
""",
    wrapper=r"""
void launch_softmax_backward(const float*, const float*, float*, int, int,
                             cudaStream_t);
at::Tensor softmax_backward_of(at::Tensor p, at::Tensor dp) {
  attnbook::check_tensor(p, "p", at::kFloat);
  attnbook::check_tensor(dp, "dp", at::kFloat);
  TORCH_CHECK(p.dim() == 2 && p.sizes() == dp.sizes(), "p and dp must be [R, n]");
  at::Tensor ds = p.new_full(p.sizes(), NAN);
  launch_softmax_backward(p.data_ptr<float>(), dp.data_ptr<float>(),
                          ds.data_ptr<float>(), int(p.size(0)), int(p.size(1)),
                          attnbook::stream());
  attnbook::check_launch();
  return ds;
}
""",
    function="softmax_backward_of",
    cases=lambda: [(f"R = {r}, n = {n}", _softmax_rows(r, n, seed=n))
                   for r, n in ((1, 1), (3, 17), (70, 200))],
    reference=lambda p, dp: (p.double() * (dp.double() - (p.double() * dp.double())
                                           .sum(-1, keepdim=True))).float(),
    rtol=1e-4, atol=1e-6,
)


def _tile_scores(r, n, seed):
    s = _randn(r, n, seed=seed) * 20
    s[0, : min(n, 4)] = float("-inf")      # a first tile with no admissible key
    return s


def _tile_reference(s, v, bc):
    """[acc | m | l] after every tile of Algorithm 1, in float64."""
    s, v = s.double(), v.double()
    m = s.amax(-1)
    shift = torch.where(torch.isneginf(m), 0.0, m)
    p = torch.exp(s - shift[:, None])
    return torch.cat([p @ v, m[:, None], p.sum(-1, keepdim=True)], 1).float()


def _causal_tiles_reference(like, sq, sk, br, bc):
    """One past the last key tile that a query tile's last row may attend."""
    last_rows = torch.tensor([min(sq, t + br) - 1 for t in range(0, sq, br)])
    keys = (last_rows + sk - sq + 1).clamp(0, sk)       # keys 0 .. pos admitted
    return ((keys + bc - 1) // bc).float().to(like.device)


# ---- second exercises of chapters 2–7 ------------------------------------------------
QK_SCORES = Exercise(
    chapter="02",
    skeleton=r"""
// s[i][j] = scale · q_i · k_j for q [Sq, D] and k [Sk, D]: one thread per score, x for
// the key j and y for the query i, on a 2-D grid of 16 x 16 blocks that may overhang
// both edges.
__global__ void qk_scores(const float* q, const float* k, float* s, int Sq, int Sk,
                          int D, float scale) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  // TODO
}
""",
    launcher=r"""
void launch_qk_scores(const float* q, const float* k, float* s, int Sq, int Sk, int D,
                      float scale, cudaStream_t stream) {
  const dim3 block(16, 16), grid((Sk + 15) / 16, (Sq + 15) / 16);
  qk_scores<<<grid, block, 0, stream>>>(q, k, s, Sq, Sk, D, scale);
}
""",
    wrapper=r"""
void launch_qk_scores(const float*, const float*, float*, int, int, int, float,
                      cudaStream_t);
at::Tensor qk_scores_of(at::Tensor q, at::Tensor k) {
  attnbook::check_tensor(q, "q", at::kFloat);
  attnbook::check_tensor(k, "k", at::kFloat);
  TORCH_CHECK(q.dim() == 2 && k.dim() == 2 && q.size(1) == k.size(1),
              "q must be [Sq, D] and k [Sk, D]");
  at::Tensor s = q.new_full({q.size(0), k.size(0)}, NAN);
  launch_qk_scores(q.data_ptr<float>(), k.data_ptr<float>(), s.data_ptr<float>(),
                   int(q.size(0)), int(k.size(0)), int(q.size(1)),
                   1.f / std::sqrt(float(q.size(1))), attnbook::stream());
  attnbook::check_launch();
  return s;
}
""",
    function="qk_scores_of",
    cases=lambda: [(f"Sq = {sq}, Sk = {sk}, D = {d}",
                    [_randn(sq, d, seed=sq), _randn(sk, d, seed=sk + 1)])
                   for sq, sk, d in ((1, 1, 1), (5, 17, 8), (40, 33, 64))],
    reference=lambda q, k: (q.double() @ k.double().T / q.shape[1] ** 0.5).float(),
    rtol=1e-5, atol=1e-5,
)

WARP_SUM = Exercise(
    chapter="03",
    skeleton=r"""
// out[r] = the sum of row r of x ([rows, n]), one warp (32 threads) per row: each
// lane adds the elements j = lane, lane + 32, ..., then the 32 partial sums are
// combined with __shfl_down_sync (no shared memory). Lane 0 writes.
__global__ void warp_sum(const float* x, float* out, int n) {
  const int lane = threadIdx.x;
  const float* xr = x + (size_t)blockIdx.x * n;
  // TODO
}
""",
    launcher=r"""
void launch_warp_sum(const float* x, float* out, int rows, int n, cudaStream_t stream) {
  warp_sum<<<rows, 32, 0, stream>>>(x, out, n);
}
""",
    wrapper=r"""
void launch_warp_sum(const float*, float*, int, int, cudaStream_t);
at::Tensor warp_sum_of(at::Tensor x) {
  attnbook::check_tensor(x, "x", at::kFloat);
  TORCH_CHECK(x.dim() == 2, "x must be [rows, n]");
  at::Tensor out = x.new_full({x.size(0)}, NAN);
  launch_warp_sum(x.data_ptr<float>(), out.data_ptr<float>(), int(x.size(0)),
                  int(x.size(1)), attnbook::stream());
  attnbook::check_launch();
  return out;
}
""",
    function="warp_sum_of",
    cases=lambda: [(f"n = {n}", [_randn(3, n, seed=n)]) for n in (1, 31, 32, 1000)],
    reference=lambda x: x.double().sum(-1).float(),
    rtol=1e-5, atol=1e-5,
)

TILED_MATMUL = Exercise(
    chapter="04",
    skeleton=r"""
// c = a b for a [M, K] and b [K, N], with 16 x 16 tiles of a and b staged in shared
// memory: thread (tx, ty) of block (bx, by) computes c[16 by + ty][16 bx + tx]. Sizes
// need not be multiples of 16: load zeros past the edges, write only inside.
__global__ void tiled_matmul(const float* a, const float* b, float* c, int M, int N,
                             int K) {
  __shared__ float As[16][16], Bs[16][16];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
  float acc = 0.f;
  // TODO: for each tile along K: load As and Bs, synchronise, accumulate, synchronise
}
""",
    launcher=r"""
void launch_tiled_matmul(const float* a, const float* b, float* c, int M, int N, int K,
                         cudaStream_t stream) {
  tiled_matmul<<<dim3((N + 15) / 16, (M + 15) / 16), dim3(16, 16), 0, stream>>>(
      a, b, c, M, N, K);
}
""",
    wrapper=r"""
void launch_tiled_matmul(const float*, const float*, float*, int, int, int,
                         cudaStream_t);
at::Tensor tiled_matmul_of(at::Tensor a, at::Tensor b) {
  attnbook::check_tensor(a, "a", at::kFloat);
  attnbook::check_tensor(b, "b", at::kFloat);
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
              "a must be [M, K] and b [K, N]");
  at::Tensor c = a.new_full({a.size(0), b.size(1)}, NAN);
  launch_tiled_matmul(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(),
                      int(a.size(0)), int(b.size(1)), int(a.size(1)),
                      attnbook::stream());
  attnbook::check_launch();
  return c;
}
""",
    function="tiled_matmul_of",
    cases=lambda: [(f"M = {m}, N = {n}, K = {k}",
                    [_randn(m, k, seed=m), _randn(k, n, seed=n + 1)])
                   for m, n, k in ((1, 1, 1), (17, 5, 33), (40, 48, 64))],
    reference=lambda a, b: (a.double() @ b.double()).float(),
    rtol=1e-4, atol=1e-5,
)

PADDING_MASK = Exercise(
    chapter="05",
    skeleton=r"""
// Key padding: sequence b has lengths[b] real keys, the rest of its Sk are padding.
// For scores s [B, Sq, Sk], write out = s where key j is real and -INFINITY where it is
// padding. One thread per score: x over j, y over i, z over b.
__global__ void key_padding(const float* s, const int* lengths, float* out, int Sq,
                            int Sk) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y, b = blockIdx.z;
  if (j >= Sk) return;
  // TODO
}
""",
    launcher=r"""
void launch_key_padding(const float* s, const int* lengths, float* out, int B, int Sq,
                        int Sk, cudaStream_t stream) {
  key_padding<<<dim3((Sk + 63) / 64, Sq, B), 64, 0, stream>>>(s, lengths, out, Sq, Sk);
}
""",
    wrapper=r"""
void launch_key_padding(const float*, const int*, float*, int, int, int, cudaStream_t);
at::Tensor key_padding_of(at::Tensor s, at::Tensor lengths) {
  attnbook::check_tensor(s, "s", at::kFloat);
  attnbook::check_tensor(lengths, "lengths", at::kInt);
  TORCH_CHECK(s.dim() == 3 && lengths.dim() == 1 && lengths.size(0) == s.size(0),
              "s must be [B, Sq, Sk] and lengths [B]");
  at::Tensor out = s.new_full(s.sizes(), NAN);
  launch_key_padding(s.data_ptr<float>(), lengths.data_ptr<int>(),
                     out.data_ptr<float>(), int(s.size(0)), int(s.size(1)),
                     int(s.size(2)), attnbook::stream());
  attnbook::check_launch();
  return out;
}
""",
    function="key_padding_of",
    cases=lambda: [(f"B = {len(ls)}, Sq = {sq}, Sk = {sk}, lengths {ls}",
                    [_randn(len(ls), sq, sk, seed=sk),
                     torch.tensor(ls, dtype=torch.int32)])
                   for sq, sk, ls in ((1, 1, [1]), (3, 10, [10, 4, 0]),
                                      (5, 70, [65, 70]))],
    reference=lambda s, lengths: s.masked_fill(
        torch.arange(s.shape[2], device=s.device) >= lengths.view(-1, 1, 1).long(),
        float("-inf")),
    rtol=0.0, atol=0.0,
)

TILE_UPDATE = Exercise(
    chapter="06",
    skeleton=r"""
// One step of Algorithm 1 for one row, one thread per row: the row's running max m[r],
// sum l[r] and unnormalised output acc[r] (D ≤ 64 values) meet a new tile of Bc scores
// s[r] and its values v [Bc, D]. Update all three in place, as the chapter's loop does.
// Rows start with m = -inf, l = 0 and acc = 0; a tile may be entirely -inf.
__global__ void tile_update(const float* s, const float* v, float* m, float* l,
                            float* acc, int R, int Bc, int D) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  // TODO
}
""",
    launcher=r"""
void launch_tile_update(const float* s, const float* v, float* m, float* l, float* acc,
                        int R, int Bc, int D, cudaStream_t stream) {
  tile_update<<<(R + 63) / 64, 64, 0, stream>>>(s, v, m, l, acc, R, Bc, D);
}
""",
    wrapper=r"""
void launch_tile_update(const float*, const float*, float*, float*, float*, int, int,
                        int, cudaStream_t);
// Runs the reader's kernel over the tiles of s [R, n] and v [n, D], Bc keys at a time,
// from the initial state, and returns [acc | m | l] as one [R, D + 2] tensor.
at::Tensor tile_update_of(at::Tensor s, at::Tensor v, int64_t Bc) {
  attnbook::check_tensor(s, "s", at::kFloat);
  attnbook::check_tensor(v, "v", at::kFloat);
  TORCH_CHECK(s.dim() == 2 && v.dim() == 2 && v.size(0) == s.size(1) && v.size(1) <= 64,
              "s must be [R, n] and v [n, D] with D <= 64");
  const int64_t R = s.size(0), n = s.size(1), D = v.size(1);
  at::Tensor m = s.new_full({R}, -INFINITY), l = s.new_zeros({R});
  at::Tensor acc = s.new_zeros({R, D});
  for (int64_t j0 = 0; j0 < n; j0 += Bc) {
    const int64_t w = std::min(Bc, n - j0);
    at::Tensor st = s.narrow(1, j0, w).contiguous();
    at::Tensor vt = v.narrow(0, j0, w).contiguous();
    launch_tile_update(st.data_ptr<float>(), vt.data_ptr<float>(), m.data_ptr<float>(),
                       l.data_ptr<float>(), acc.data_ptr<float>(), int(R), int(w),
                       int(D), attnbook::stream());
    attnbook::check_launch();
  }
  at::Tensor out = s.new_empty({R, D + 2});
  out.narrow(1, 0, D).copy_(acc);
  out.narrow(1, D, 1).copy_(m.unsqueeze(1));
  out.narrow(1, D + 1, 1).copy_(l.unsqueeze(1));
  return out;
}
""",
    function="tile_update_of",
    cases=lambda: [(f"R = {r}, n = {n}, D = {d}, Bc = {bc}",
                    [_tile_scores(r, n, seed=n), _randn(n, d, seed=d), bc])
                   for r, n, d, bc in ((1, 1, 1, 1), (4, 17, 8, 4), (70, 40, 64, 16))],
    reference=_tile_reference,
    rtol=1e-4, atol=1e-5,
)

TILE_RANGE = Exercise(
    chapter="07",
    skeleton=r"""
// Causal tile skipping: query tile t holds rows [t·Br, min((t + 1)·Br, Sq)); key tiles
// hold Bc keys each. Write range[t] = (the number of key tiles the block must visit,
// i.e. the index one past the last key tile holding a key some row of the tile may
// attend), with causal aligned bottom-right (query i stands at position i + Sk - Sq and
// attends keys j <= its position). A tile whose rows attend no key visits 0 tiles.
__global__ void causal_tiles(float* range, int Sq, int Sk, int Br, int Bc) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t * Br >= Sq) return;
  // TODO: range[t] = ...
}
""",
    launcher=r"""
void launch_causal_tiles(float* range, int Sq, int Sk, int Br, int Bc,
                         cudaStream_t stream) {
  const int tiles = (Sq + Br - 1) / Br;
  causal_tiles<<<(tiles + 63) / 64, 64, 0, stream>>>(range, Sq, Sk, Br, Bc);
}
""",
    wrapper=r"""
void launch_causal_tiles(float*, int, int, int, int, cudaStream_t);
at::Tensor causal_tiles_of(at::Tensor like, int64_t Sq, int64_t Sk, int64_t Br,
                           int64_t Bc) {
  at::Tensor range = like.new_full({(Sq + Br - 1) / Br}, NAN);
  launch_causal_tiles(range.data_ptr<float>(), int(Sq), int(Sk), int(Br), int(Bc),
                      attnbook::stream());
  attnbook::check_launch();
  return range;
}
""",
    function="causal_tiles_of",
    cases=lambda: [(f"Sq = {sq}, Sk = {sk}, Br = {br}, Bc = {bc}",
                    [torch.empty(0), sq, sk, br, bc])
                   for sq, sk, br, bc in ((1, 1, 64, 32), (100, 100, 64, 32),
                                          (10, 200, 4, 16), (200, 50, 32, 8))],
    reference=_causal_tiles_reference,
    rtol=0.0, atol=0.0,
)


def _swizzle_reference(like, rows):
    r = torch.arange(rows).view(-1, 1)
    c = torch.arange(64).view(1, -1)
    return (r * 64 + ((c // 8) ^ (r % 8)) * 8 + c % 8).float().to(like.device)


def _page_table(b, blocks, seed):
    """A block table whose pages are a shuffled slice of a pool of 2·b·blocks pages."""
    pool = torch.randperm(2 * b * blocks, generator=torch.Generator().manual_seed(seed))
    return pool[: b * blocks].view(b, blocks).int()


def _paged_reference(table, lengths, bs):
    b, blocks = table.shape
    p = torch.arange(blocks * bs, device=table.device)
    slot = table.long()[:, p // bs] * bs + p % bs
    return torch.where(p < lengths.long()[:, None], slot, -1).float()


def _masked_scores(r, n, seed):
    s = _randn(r, n, seed=seed) * 5
    s[:, ::3] = float("-inf")                  # masked keys
    s[0] = float("-inf")                       # a row with no admissible key
    return [s, torch.logsumexp(s, -1)]


# ---- second exercises of chapters 8, 9 and 11 ----------------------------------------
SWIZZLE = Exercise(
    chapter="08",
    skeleton=r"""
// Where element (row, col) of a [rows][64] tile of 16-bit values lives when its 16-byte
// chunks are swizzled: chunk c = col / 8 of row r is stored at chunk c ^ (r % 8), the
// element keeping its place (col % 8) inside the chunk. Write out[row][col], the
// element offset from the start of the tile, for every row and column. One thread per
// element: x over the 64 columns, y over the rows.
__global__ void swizzled_offsets(float* out, int rows) {
  const int col = threadIdx.x, row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;
  // TODO: out[row * 64 + col] = ...
}
""",
    launcher=r"""
void launch_swizzled_offsets(float* out, int rows, cudaStream_t stream) {
  swizzled_offsets<<<(rows + 3) / 4, dim3(64, 4), 0, stream>>>(out, rows);
}
""",
    wrapper=r"""
void launch_swizzled_offsets(float*, int, cudaStream_t);
at::Tensor swizzled_offsets_of(at::Tensor like, int64_t rows) {
  at::Tensor out = like.new_full({rows, 64}, NAN);
  launch_swizzled_offsets(out.data_ptr<float>(), int(rows), attnbook::stream());
  attnbook::check_launch();
  return out;
}
""",
    function="swizzled_offsets_of",
    cases=lambda: [(f"rows = {r}", [torch.empty(0), r]) for r in (1, 8, 70)],
    reference=_swizzle_reference,
    rtol=0.0, atol=0.0,
)

PAGED_SLOTS = Exercise(
    chapter="09",
    skeleton=r"""
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
""",
    launcher=r"""
void launch_paged_slots(const int* table, const int* lengths, float* slot, int B,
                        int max_blocks, int bs, int max_len, cudaStream_t stream) {
  paged_slots<<<dim3((max_len + 63) / 64, B), 64, 0, stream>>>(table, lengths, slot,
                                                               max_blocks, bs, max_len);
}
""",
    wrapper=r"""
void launch_paged_slots(const int*, const int*, float*, int, int, int, int,
                        cudaStream_t);
at::Tensor paged_slots_of(at::Tensor table, at::Tensor lengths, int64_t bs) {
  attnbook::check_tensor(table, "block_table", at::kInt);
  attnbook::check_tensor(lengths, "lengths", at::kInt);
  TORCH_CHECK(table.dim() == 2 && lengths.dim() == 1 &&
                  lengths.size(0) == table.size(0),
              "block_table must be [B, max_blocks] and lengths [B]");
  const int64_t max_len = table.size(1) * bs;
  at::Tensor slot = table.new_full({table.size(0), max_len}, NAN,
                                   table.options().dtype(at::kFloat));
  launch_paged_slots(table.data_ptr<int>(), lengths.data_ptr<int>(),
                     slot.data_ptr<float>(), int(table.size(0)), int(table.size(1)),
                     int(bs), int(max_len), attnbook::stream());
  attnbook::check_launch();
  return slot;
}
""",
    function="paged_slots_of",
    cases=lambda: [(f"B = {len(ls)}, pages of {bs}, lengths {ls}",
                    [_page_table(len(ls), blocks, seed=bs),
                     torch.tensor(ls, dtype=torch.int32), bs])
                   for ls, blocks, bs in (([1], 1, 1), ([5, 16, 0], 4, 4),
                                          ([33, 7], 3, 16))],
    reference=_paged_reference,
    rtol=0.0, atol=0.0,
)

RECOMPUTE_P = Exercise(
    chapter="11",
    skeleton=r"""
// The backward recomputes the probabilities from the scores and the forward's
// log-sum-exp: p[r][j] = exp(s[r][j] − lse[r]) for s [R, n] (masked scores are -inf)
// and lse [R]. A masked score gives 0, and so does every score of a row with no
// admissible key (lse = -inf), never NaN. One thread per score: x over j, y over r.
__global__ void recompute_p(const float* s, const float* lse, float* p, int n) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
  if (j >= n) return;
  // TODO
}
""",
    launcher=r"""
void launch_recompute_p(const float* s, const float* lse, float* p, int R, int n,
                        cudaStream_t stream) {
  recompute_p<<<dim3((n + 63) / 64, R), 64, 0, stream>>>(s, lse, p, n);
}
""",
    wrapper=r"""
void launch_recompute_p(const float*, const float*, float*, int, int, cudaStream_t);
at::Tensor recompute_p_of(at::Tensor s, at::Tensor lse) {
  attnbook::check_tensor(s, "s", at::kFloat);
  attnbook::check_tensor(lse, "lse", at::kFloat);
  TORCH_CHECK(s.dim() == 2 && lse.dim() == 1 && lse.size(0) == s.size(0),
              "s must be [R, n] and lse [R]");
  at::Tensor p = s.new_full(s.sizes(), NAN);
  launch_recompute_p(s.data_ptr<float>(), lse.data_ptr<float>(), p.data_ptr<float>(),
                     int(s.size(0)), int(s.size(1)), attnbook::stream());
  attnbook::check_launch();
  return p;
}
""",
    function="recompute_p_of",
    cases=lambda: [(f"R = {r}, n = {n}", _masked_scores(r, n, seed=n))
                   for r, n in ((1, 1), (4, 17), (30, 100))],
    reference=lambda s, lse: torch.where(
        torch.isneginf(lse)[:, None], 0.0,
        torch.exp(s.double() - lse.double()[:, None])).float(),
    rtol=1e-5, atol=1e-7,
)

# ---- chapter 10: what a decode step does outside attention --------------------------
def _tied_logits(B, V, seed):
    """Logits with the row maximum repeated at several columns that fall to different
    threads, the lowest of them in a higher-numbered thread."""
    x = _randn(B, V, seed=seed)
    for b in range(B):
        cols = [c for c in (5 + b, 130 + b, V - 1) if c < V]
        x[b, cols] = x[b].max() + 1.0
    return x


GREEDY_ARGMAX = Exercise(
    chapter="10",
    skeleton=r"""
// Greedy decoding takes, in each row b of logits [B, V], the column of the largest
// value; on a tie the smallest such column (as torch.argmax). One block of 128 threads
// per row: thread t scans columns t, t + 128, …, then the block combines the 128
// candidates in shared memory. Write the column as a float.
__global__ void greedy_argmax(const float* logits, float* out, int V) {
  __shared__ float best[128];
  __shared__ int where[128];
  const int b = blockIdx.x, t = threadIdx.x;
  // TODO
}
""",
    launcher=r"""
void launch_greedy_argmax(const float* logits, float* out, int B, int V,
                          cudaStream_t stream) {
  greedy_argmax<<<B, 128, 0, stream>>>(logits, out, V);
}
""",
    wrapper=r"""
void launch_greedy_argmax(const float*, float*, int, int, cudaStream_t);
at::Tensor greedy_argmax_of(at::Tensor logits) {
  attnbook::check_tensor(logits, "logits", at::kFloat);
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) > 0, "logits must be [B, V]");
  at::Tensor out = logits.new_full({logits.size(0)}, NAN);
  launch_greedy_argmax(logits.data_ptr<float>(), out.data_ptr<float>(),
                       int(logits.size(0)), int(logits.size(1)), attnbook::stream());
  attnbook::check_launch();
  return out;
}
""",
    function="greedy_argmax_of",
    cases=lambda: [(f"B = {b}, V = {v}", [_tied_logits(b, v, seed=v)])
                   for b, v in ((1, 1), (3, 97), (2, 300), (4, 5000))],
    reference=lambda x: x.argmax(-1).float(),
    rtol=0.0, atol=0.0,
)

DECODE_EMBED = Exercise(
    chapter="10",
    skeleton=r"""
// The input of a decode step: sequence b's new token tokens[b] sits at position
// positions[b] (each sequence has its own length). x[b][d] = E[tokens[b]][d] +
// P[positions[b]][d], with E [vocab, D] the token embedding and P [max_len, D] the
// position embedding. One thread per element: x over d, y over b.
__global__ void decode_embed(const int* tokens, const int* positions, const float* E,
                             const float* P, float* x, int D) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (d >= D) return;
  // TODO
}
""",
    launcher=r"""
void launch_decode_embed(const int* tokens, const int* positions, const float* E,
                         const float* P, float* x, int B, int D, cudaStream_t stream) {
  decode_embed<<<dim3((D + 63) / 64, B), 64, 0, stream>>>(tokens, positions, E, P, x,
                                                          D);
}
""",
    wrapper=r"""
void launch_decode_embed(const int*, const int*, const float*, const float*, float*,
                         int, int, cudaStream_t);
at::Tensor decode_embed_of(at::Tensor tokens, at::Tensor positions, at::Tensor E,
                           at::Tensor P) {
  attnbook::check_tensor(tokens, "tokens", at::kInt);
  attnbook::check_tensor(positions, "positions", at::kInt);
  attnbook::check_tensor(E, "E", at::kFloat);
  attnbook::check_tensor(P, "P", at::kFloat);
  TORCH_CHECK(tokens.dim() == 1 && positions.sizes() == tokens.sizes() &&
                  E.dim() == 2 && P.dim() == 2 && E.size(1) == P.size(1),
              "tokens, positions must be [B]; E [vocab, D], P [max_len, D]");
  at::Tensor x = E.new_full({tokens.size(0), E.size(1)}, NAN);
  launch_decode_embed(tokens.data_ptr<int>(), positions.data_ptr<int>(),
                      E.data_ptr<float>(), P.data_ptr<float>(), x.data_ptr<float>(),
                      int(tokens.size(0)), int(E.size(1)), attnbook::stream());
  attnbook::check_launch();
  return x;
}
""",
    function="decode_embed_of",
    cases=lambda: [(f"B = {len(pos)}, D = {d}, positions {pos}",
                    [torch.tensor(tok, dtype=torch.int32),
                     torch.tensor(pos, dtype=torch.int32),
                     _randn(50, d, seed=d), _randn(40, d, seed=d + 1)])
                   for tok, pos, d in (([7], [0], 1), ([3, 3, 49], [12, 0, 39], 70),
                                       ([0, 1], [5, 2], 128))],
    reference=lambda tok, pos, E, P: E[tok.long()] + P[pos.long()],
    rtol=0.0, atol=0.0,
)

EXERCISES = {"relu_grid_stride": RELU, "row_max": ROW_MAX, "transpose_tile": TRANSPOSE,
             "causal_window": WINDOW, "online_row": ONLINE_ROW,
             "row_logsumexp": ROW_LOGSUMEXP, "fragment_row_max": FRAGMENT_ROW_MAX,
             "combine_splits": COMBINE_SPLITS, "softmax_backward": SOFTMAX_BACKWARD,
             "qk_scores": QK_SCORES, "warp_sum": WARP_SUM, "tiled_matmul": TILED_MATMUL,
             "key_padding": PADDING_MASK, "tile_update": TILE_UPDATE,
             "causal_tiles": TILE_RANGE, "swizzled_offsets": SWIZZLE,
             "paged_slots": PAGED_SLOTS, "recompute_p": RECOMPUTE_P,
             "greedy_argmax": GREEDY_ARGMAX, "decode_embed": DECODE_EMBED}
