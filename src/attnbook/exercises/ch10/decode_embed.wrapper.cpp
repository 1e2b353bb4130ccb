#include "attnbook_torch.h"

void launch_decode_embed(const int*, const int*, const float*, const float*, float*,
                         int, int, cudaStream_t);
at::Tensor decode_embed_of(at::Tensor tokens, at::Tensor positions, at::Tensor E,
                           at::Tensor P) {
  attnbook::check_tensor(tokens, "tokens", at::kInt);
  attnbook::check_tensor(positions, "positions", at::kInt);
  attnbook::check_tensor(E, "E", at::kFloat);
  attnbook::check_tensor(P, "P", at::kFloat);
  TORCH_CHECK(tokens.dim() == 1 && positions.sizes() == tokens.sizes() &&
                  E.dim() == 2 && P.dim() == 2 && E.size(1) == P.size(1),
              "tokens, positions must be [B]; E [vocab, D], P [max_len, D]");
  at::Tensor x = E.new_full({tokens.size(0), E.size(1)}, NAN);
  launch_decode_embed(tokens.data_ptr<int>(), positions.data_ptr<int>(),
                      E.data_ptr<float>(), P.data_ptr<float>(), x.data_ptr<float>(),
                      int(tokens.size(0)), int(E.size(1)), attnbook::stream());
  attnbook::check_launch();
  return x;
}
