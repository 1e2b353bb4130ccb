#include "attnbook_torch.h"

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
