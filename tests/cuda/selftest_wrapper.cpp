#include <string>
void launch(const char*, int, int, int, int, int, int, void*, void*, void*, void*,
            cudaStream_t);

// run("kernel", [tensors], grid, block, smem, ints): tensors are passed as raw
// pointers.
void run(std::string which, std::vector<at::Tensor> t, int grid, int block, int smem,
         std::vector<int64_t> a) {
  void* p[4] = {nullptr, nullptr, nullptr, nullptr};
  for (size_t k = 0; k < t.size() && k < 4; ++k) {
    TORCH_CHECK(t[k].is_contiguous(), "tensor ", k, " must be contiguous");
    p[k] = t[k].data_ptr();
  }
  a.resize(3, 0);
  launch(which.c_str(), grid, block, smem, int(a[0]), int(a[1]), int(a[2]), p[0], p[1],
         p[2], p[3], attnbook::stream());
  attnbook::check_launch();
}
