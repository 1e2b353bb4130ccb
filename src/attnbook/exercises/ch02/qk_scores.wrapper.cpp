#include "attnbook_torch.h"

void launch_qk_scores(const float*, const float*, float*, int, int, int, float,
                      cudaStream_t);
at::Tensor qk_scores_of(at::Tensor q, at::Tensor k) {
  attnbook::check_tensor(q, "q", at::kFloat);
  attnbook::check_tensor(k, "k", at::kFloat);
  TORCH_CHECK(q.dim() == 2 && k.dim() == 2 && q.size(1) == k.size(1),
              "q must be [Sq, D] and k [Sk, D]");
  at::Tensor s = q.new_full({q.size(0), k.size(0)}, NAN);
  launch_qk_scores(q.data_ptr<float>(), k.data_ptr<float>(), s.data_ptr<float>(),
                   int(q.size(0)), int(k.size(0)), int(q.size(1)),
                   1.f / std::sqrt(float(q.size(1))), attnbook::stream());
  attnbook::check_launch();
  return s;
}
