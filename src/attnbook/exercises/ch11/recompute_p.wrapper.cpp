#include "attnbook_torch.h"

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
