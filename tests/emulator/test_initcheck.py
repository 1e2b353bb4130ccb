"""Initcheck: a kernel's read of global memory that the call allocated and nothing
wrote (torch::empty, cudaMalloc) is an InitcheckError naming the read; memory that host
code filled (torch::zeros, a partial fill, a copy) or a kernel wrote, even 2 bytes at a
time from two blocks, passes."""
import pytest
import torch

import attnbook as ab

SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

__global__ void accumulate(const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += x[i];  // @accumulate
}
__global__ void fill(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = float(i);
}
__global__ void count(const int* keys, int* counts, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&counts[keys[i]], 1);  // @count
}
// One thread per half: blocks of 33 threads, so two blocks write the halves of a word.
__global__ void copy_halves(const __half* x, __half* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}
__global__ void sum_pairs(const __half2* y, float* out, int pairs) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < pairs) out[i] = __low2float(y[i]) + __high2float(y[i]);  // @pairs
}
// Releases lock n: an atomic as the kernel's last act.
__global__ void release(int* locks, int n) {
  atomicExch(&locks[n], 0);  // @release
}
// Each thread copies 4 floats of x to shared memory asynchronously, then writes them.
__global__ void async_copy(const float* x, float* out, int n) {
  __shared__ __align__(16) float tile[128];
  __pipeline_memcpy_async(&tile[4 * threadIdx.x], &x[4 * threadIdx.x], 16);  // @async
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  for (int k = 0; k < 4; ++k) out[4 * threadIdx.x + k] = tile[4 * threadIdx.x + k];
}

constexpr int kThreads = 64;
int blocks(int n) { return (n + kThreads - 1) / kThreads; }
void launch_fill(float* out, int n) { fill<<<blocks(n), kThreads>>>(out, n); }
void launch_accumulate(const float* x, float* out, int n) {
  accumulate<<<blocks(n), kThreads>>>(x, out, n);
}
void launch_count(const int* keys, int* counts, int n) {
  count<<<blocks(n), kThreads>>>(keys, counts, n);
}
void launch_pairs(const void* x, void* y, int copied, float* out, int pairs) {
  copy_halves<<<(copied + 32) / 33, 33>>>(static_cast<const __half*>(x),
                                          static_cast<__half*>(y), copied);
  sum_pairs<<<blocks(pairs), kThreads>>>(static_cast<const __half2*>(y), out, pairs);
}
void launch_async(const float* x, float* out) { async_copy<<<1, 32>>>(x, out, 128); }
void launch_release(int* locks, int n) { release<<<1, 1>>>(locks, n); }
"""

WRAPPER = r"""
void launch_fill(float* out, int n);
void launch_accumulate(const float* x, float* out, int n);
void launch_count(const int* keys, int* counts, int n);
void launch_pairs(const void* x, void* y, int copied, float* out, int pairs);
void launch_async(const float* x, float* out);
void launch_release(int* locks, int n);

// out = x + (at::empty, at::zeros, or at::empty with its first `filled` elements
// zeroed by host code, or written by a kernel first: how = 0, 1, 2, 3)
at::Tensor accumulate_into(at::Tensor x, int64_t how, int64_t filled) {
  auto out = how == 1 ? at::zeros_like(x) : at::empty_like(x);
  if (how == 2) out.narrow(0, 0, filled).zero_();
  if (how == 3) launch_fill(out.data_ptr<float>(), int(filled));
  launch_accumulate(x.data_ptr<float>(), out.data_ptr<float>(), int(x.numel()));
  return out;
}
// into: the caller's tensor, or none: counts made here with at::empty
at::Tensor histogram(at::Tensor keys, int64_t bins, c10::optional<at::Tensor> into) {
  auto counts = into ? *into : at::empty({bins}, keys.options());
  launch_count(keys.data_ptr<int>(), counts.data_ptr<int>(), int(keys.numel()));
  return counts;
}
// halves 0..copied-1 of x copied to an at::empty y, then y's pairs summed
at::Tensor pair_sums(at::Tensor x, int64_t copied) {
  auto y = at::empty_like(x);
  auto out = at::empty({x.numel() / 2}, x.options().dtype(at::kFloat));
  launch_pairs(x.data_ptr(), y.data_ptr(), int(copied), out.data_ptr<float>(),
               int(out.numel()));
  return out;
}
void release_lock(at::Tensor locks, int64_t n) {
  launch_release(locks.data_ptr<int>(), int(n));
}
at::Tensor async_from_empty(at::Tensor x) {
  auto staged = at::empty_like(x), out = at::empty_like(x);
  launch_async(staged.data_ptr<float>(), out.data_ptr<float>());
  return out;
}
"""


@pytest.fixture(scope="module")
def ext():
    return ab.compile("initcheck_cases", SOURCE, WRAPPER,
                      ["accumulate_into", "histogram", "pair_sums", "async_from_empty",
                       "release_lock"],
                      backend="emulator")


def line_of(marker: str) -> str:
    number = next(i for i, text in enumerate(SOURCE.splitlines(), 1)
                  if text.endswith(f"// @{marker}"))
    return f"cell.cu:{number}"


def test_accumulating_into_torch_empty_is_reported(ext):
    x = torch.arange(100, dtype=torch.float32)
    with ab.sanitize(), pytest.raises(ab.InitcheckError) as info:
        ext.accumulate_into(x, 0, 0)
    e = info.value
    assert isinstance(e, ab.MemcheckError)
    assert (e.kind, e.space, e.size, e.location) == ("read", "global", 4,
                                                     line_of("accumulate"))
    assert str(e).startswith("initcheck: uninitialized __global__ read of size 4 bytes "
                             f"at {line_of('accumulate')} in kernel 'accumulate' by "
                             "thread (")
    assert "of a 400-byte allocation at 0x" in e.detail
    assert "made during the call, whose bytes" in e.detail
    # outside sanitize(), or with initcheck off, it runs (garbage in, as on a GPU)
    assert ext.accumulate_into(x, 0, 0).shape == x.shape
    with ab.sanitize(initcheck=False):
        ext.accumulate_into(x, 0, 0)


@pytest.mark.parametrize("how", [1, 3])
def test_memory_written_by_host_code_or_a_kernel_passes(ext, how):
    x = torch.arange(100, dtype=torch.float32)
    with ab.sanitize():
        out = ext.accumulate_into(x, how, 100)
    expected = x if how == 1 else 2 * x
    assert torch.equal(out, expected)


@pytest.mark.parametrize("how", [2, 3])
def test_the_first_element_nothing_wrote_is_named(ext, how):
    # host code (how 2) or a kernel (how 3) wrote elements 0..36 only
    x = torch.ones(100)
    with ab.sanitize(), pytest.raises(ab.InitcheckError) as info:
        ext.accumulate_into(x, how, 37)
    byte = int(info.value.detail.split()[2])
    assert 37 * 4 <= byte < 400
    assert f"whose bytes {byte}-{byte + 3} nothing had written" in info.value.detail


def test_an_atomic_update_of_torch_empty_is_reported(ext):
    keys = torch.tensor([0, 3, 3, 1, 0, 3], dtype=torch.int32)
    with ab.sanitize(), pytest.raises(ab.InitcheckError) as info:
        ext.histogram(keys, 4, None)
    assert (info.value.kind, info.value.location) == ("atomic", line_of("count"))
    with ab.sanitize():   # the caller's tensor, zeroed: counts as written
        counts = ext.histogram(keys, 4, torch.zeros(4, dtype=torch.int32))
    assert counts.tolist() == [2, 1, 0, 3]


def test_halves_written_by_two_blocks_count_as_written(ext):
    x = torch.randn(130).half()
    with ab.sanitize():
        out = ext.pair_sums(x, 130)
    assert torch.allclose(out, x.float().view(65, 2).sum(1))
    with ab.sanitize(), pytest.raises(ab.InitcheckError) as info:
        ext.pair_sums(x, 100)   # the pairs of halves 100..129 were never written
    assert info.value.location == line_of("pairs")
    assert int(info.value.detail.split()[2]) >= 200


def test_an_asynchronous_copy_from_unwritten_memory_is_reported(ext):
    with ab.sanitize(), pytest.raises(ab.InitcheckError) as info:
        ext.async_from_empty(torch.ones(128))
    assert (info.value.kind, info.value.location) == ("read", line_of("async"))
    assert info.value.size == 16


def test_an_atomic_as_a_kernels_last_act_is_named_by_its_line(ext):
    # the hook was reached by a jump, and its return address was std::invoke's
    with ab.sanitize(), pytest.raises(ab.MemcheckError) as info:
        ext.release_lock(torch.ones(4, dtype=torch.int32), 4)
    assert (info.value.kind, info.value.location) == ("atomic", line_of("release"))
