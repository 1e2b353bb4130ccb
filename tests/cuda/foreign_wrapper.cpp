#include <string>
int host_scale_sum(const float*, float*, int, float*);
int host_launch_kernel(float*, int);
void launch(const std::string&, void*, void*, void*, int);

// run("kernel", [tensors], int): tensors are passed as raw pointers; returns the host
// code's status where it has one.
int64_t run(std::string which, std::vector<at::Tensor> t, int64_t a0) {
  void* p[3] = {nullptr, nullptr, nullptr};
  for (size_t k = 0; k < t.size() && k < 3; ++k) p[k] = t[k].data_ptr();
  int64_t status = 0;
  if (which == "scale_sum")
    status = host_scale_sum(static_cast<float*>(p[0]), static_cast<float*>(p[1]),
                            int(t[0].numel()), static_cast<float*>(p[2]));
  else if (which == "launch_kernel")
    status = host_launch_kernel(static_cast<float*>(p[0]), int(t[0].numel()));
  else
    launch(which, p[0], p[1], p[2], int(a0));
  attnbook::check_launch();
  return status;
}
