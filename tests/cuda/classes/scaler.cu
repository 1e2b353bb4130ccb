// An extension as torch's loader takes it, with what a binding holds besides
// functions: a class whose methods launch a kernel, a static method, a read-write
// field, an enum, a module attribute and a submodule.
#include <torch/extension.h>

// y[i] = s * x[i]; thread 0 also writes 1 at y[poke] when poke >= 0 (a wrong index,
// for the tests).
__global__ void scale_kernel(const float* x, float* y, float s, int n, int poke) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = s * x[i];
  if (i == 0 && poke >= 0) y[poke] = 1.f;
}

struct Scaler {
  float s;
  explicit Scaler(float s) : s(s) {}
  torch::Tensor run(torch::Tensor x, int64_t poke) const {
    TORCH_CHECK(x.is_cuda() && x.dtype() == torch::kFloat32, "x: float32 on the GPU");
    auto y = torch::empty_like(x);
    const int n = int(x.numel());
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                           s, n, int(poke));
    return y;
  }
  static int64_t block() { return 256; }
};

enum class Rounding { nearest, toward_zero };

int64_t rounding_number(Rounding r) { return int64_t(r); }
torch::Tensor twice(torch::Tensor x) { return Scaler(2.f).run(x, -1); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.attr("BLOCK") = 256;
  py::class_<Scaler>(m, "Scaler")
      .def(py::init<float>())
      .def("run", &Scaler::run, py::arg("x"), py::arg("poke") = -1)
      .def_readwrite("s", &Scaler::s)
      .def_static("block", &Scaler::block);
  py::enum_<Rounding>(m, "Rounding")
      .value("nearest", Rounding::nearest)
      .value("toward_zero", Rounding::toward_zero);
  m.def("rounding_number", &rounding_number);
  auto helpers = m.def_submodule("helpers", "functions of the scaler");
  helpers.def("twice", &twice);
}
