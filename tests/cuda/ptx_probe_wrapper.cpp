#include <string>
void launch(const char*, void*, void*, void*, void*, int);

// run("kernel", [tensors], int): tensors are passed as raw pointers.
void run(std::string which, std::vector<at::Tensor> t, int64_t a0) {
  void* p[4] = {nullptr, nullptr, nullptr, nullptr};
  for (size_t k = 0; k < t.size() && k < 4; ++k) p[k] = t[k].data_ptr();
  launch(which.c_str(), p[0], p[1], p[2], p[3], int(a0));
  attnbook::check_launch();
}
