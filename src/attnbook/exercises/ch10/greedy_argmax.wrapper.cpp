#include "attnbook_torch.h"

void launch_greedy_argmax(const float*, float*, int, int, cudaStream_t);
at::Tensor greedy_argmax_of(at::Tensor logits) {
  attnbook::check_tensor(logits, "logits", at::kFloat);
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) > 0, "logits must be [B, V]");
  at::Tensor out = logits.new_full({logits.size(0)}, NAN);
  launch_greedy_argmax(logits.data_ptr<float>(), out.data_ptr<float>(),
                       int(logits.size(0)), int(logits.size(1)), attnbook::stream());
  attnbook::check_launch();
  return out;
}
