#include "attnbook_torch.h"

void launch_tile_update(const float*, const float*, float*, float*, float*, int, int,
                        int, cudaStream_t);
// Runs the reader's kernel over the tiles of s [R, n] and v [n, D], Bc keys at a time,
// from the initial state, and returns [acc | m | l] as one [R, D + 2] tensor.
at::Tensor tile_update_of(at::Tensor s, at::Tensor v, int64_t Bc) {
  attnbook::check_tensor(s, "s", at::kFloat);
  attnbook::check_tensor(v, "v", at::kFloat);
  TORCH_CHECK(s.dim() == 2 && v.dim() == 2 && v.size(0) == s.size(1) && v.size(1) <= 64,
              "s must be [R, n] and v [n, D] with D <= 64");
  const int64_t R = s.size(0), n = s.size(1), D = v.size(1);
  at::Tensor m = s.new_full({R}, -INFINITY), l = s.new_zeros({R});
  at::Tensor acc = s.new_zeros({R, D});
  for (int64_t j0 = 0; j0 < n; j0 += Bc) {
    const int64_t w = std::min(Bc, n - j0);
    at::Tensor st = s.narrow(1, j0, w).contiguous();
    at::Tensor vt = v.narrow(0, j0, w).contiguous();
    launch_tile_update(st.data_ptr<float>(), vt.data_ptr<float>(), m.data_ptr<float>(),
                       l.data_ptr<float>(), acc.data_ptr<float>(), int(R), int(w),
                       int(D), attnbook::stream());
    attnbook::check_launch();
  }
  at::Tensor out = s.new_empty({R, D + 2});
  out.narrow(1, 0, D).copy_(acc);
  out.narrow(1, D, 1).copy_(m.unsqueeze(1));
  out.narrow(1, D + 1, 1).copy_(l.unsqueeze(1));
  return out;
}
