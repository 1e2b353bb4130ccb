#include "attnbook_torch.h"

void launch_causal_tiles(float*, int, int, int, int, cudaStream_t);
at::Tensor causal_tiles_of(at::Tensor like, int64_t Sq, int64_t Sk, int64_t Br,
                           int64_t Bc) {
  at::Tensor range = like.new_full({(Sq + Br - 1) / Br}, NAN);
  launch_causal_tiles(range.data_ptr<float>(), int(Sq), int(Sk), int(Br), int(Bc),
                      attnbook::stream());
  attnbook::check_launch();
  return range;
}
