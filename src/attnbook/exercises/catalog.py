"""The exercises of chapters 2–9 and 11: what the reader writes, and how it is called and
checked. Outputs start as NaN, so a value the kernel never writes shows as wrong."""
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
void launch_fragment_row_max(const float* x, float* out, int tiles, cudaStream_t stream) {
  fragment_row_max<<<tiles, 32, 0, stream>>>(x, out);
}
""",
    wrapper=r"""
void launch_fragment_row_max(const float*, float*, int, cudaStream_t);
at::Tensor fragment_row_max_of(at::Tensor x) {
  attnbook::check_tensor(x, "x", at::kFloat);
  TORCH_CHECK(x.dim() == 3 && x.size(1) == 16 && x.size(2) == 8, "x must be [T, 16, 8]");
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
void launch_row_logsumexp(const float* x, float* lse, int R, int n, cudaStream_t stream) {
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
// Row r's keys were split into S parts; part s gave o[r][s] (D values, normalised within
// the part) and its log-sum-exp lse[r][s] (-inf: the part had no admissible key). Write
// out[r] = Σ_s exp(lse[r][s] − L) o[r][s] with L = log Σ_s exp(lse[r][s]); a row whose
// parts are all empty is 0. One thread per (row, d): threadIdx.x = d, blockIdx.x = r.
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

# ---- chapter 11: the backward of softmax ----------------------------------------------
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
void launch_softmax_backward(const float*, const float*, float*, int, int, cudaStream_t);
at::Tensor softmax_backward_of(at::Tensor p, at::Tensor dp) {
  attnbook::check_tensor(p, "p", at::kFloat);
  attnbook::check_tensor(dp, "dp", at::kFloat);
  TORCH_CHECK(p.dim() == 2 && p.sizes() == dp.sizes(), "p and dp must be [R, n]");
  at::Tensor ds = p.new_full(p.sizes(), NAN);
  launch_softmax_backward(p.data_ptr<float>(), dp.data_ptr<float>(), ds.data_ptr<float>(),
                          int(p.size(0)), int(p.size(1)), attnbook::stream());
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

EXERCISES = {"relu_grid_stride": RELU, "row_max": ROW_MAX, "transpose_tile": TRANSPOSE,
             "causal_window": WINDOW, "online_row": ONLINE_ROW,
             "row_logsumexp": ROW_LOGSUMEXP, "fragment_row_max": FRAGMENT_ROW_MAX,
             "combine_splits": COMBINE_SPLITS, "softmax_backward": SOFTMAX_BACKWARD}
