// An extension of operators alone, as torch's loader takes it with
// is_python_module=False: TORCH_LIBRARY defines the schema, TORCH_LIBRARY_IMPL gives
// the CUDA kernel; Python calls torch.ops.attnbook_test_ops.scale(x, s, poke).
#include <torch/extension.h>

// y[i] = s * x[i]; thread 0 also writes 1 at y[poke] when poke >= 0 (a wrong index,
// for the tests).
__global__ void scale_kernel(const float* x, float* y, float s, int n, int poke) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = s * x[i];
  if (i == 0 && poke >= 0) y[poke] = 1.f;
}

at::Tensor scale(const at::Tensor& x, double s, int64_t poke) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "x: float32 on the GPU");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const int n = int(xc.numel());
  scale_kernel<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(),
                                         float(s), n, int(poke));
  return y;
}

TORCH_LIBRARY(attnbook_test_ops, m) {
  m.def("scale(Tensor x, float s, int poke=-1) -> Tensor");
}

TORCH_LIBRARY_IMPL(attnbook_test_ops, CUDA, m) { m.impl("scale", &scale); }
