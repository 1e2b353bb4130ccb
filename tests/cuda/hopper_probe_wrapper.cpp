#include <string>
void launch(const char*, void*, void*, void*, void*, int, int, const int*);

// run("kernel", [tensors], a0, a1, geometry): tensors are passed as raw pointers.
void run(std::string which, std::vector<at::Tensor> t, int64_t a0, int64_t a1,
         std::vector<int64_t> geometry) {
  void* p[4] = {nullptr, nullptr, nullptr, nullptr};
  for (size_t k = 0; k < t.size() && k < 4; ++k) p[k] = t[k].data_ptr();
  std::vector<int> g(geometry.begin(), geometry.end());
  g.resize(10);
  launch(which.c_str(), p[0], p[1], p[2], p[3], int(a0), int(a1), g.data());
  attnbook::check_launch();
}
