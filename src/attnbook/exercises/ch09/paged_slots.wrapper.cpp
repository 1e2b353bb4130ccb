#include "attnbook_torch.h"

void launch_paged_slots(const int*, const int*, float*, int, int, int, int,
                        cudaStream_t);
at::Tensor paged_slots_of(at::Tensor table, at::Tensor lengths, int64_t bs) {
  attnbook::check_tensor(table, "block_table", at::kInt);
  attnbook::check_tensor(lengths, "lengths", at::kInt);
  TORCH_CHECK(table.dim() == 2 && lengths.dim() == 1 &&
                  lengths.size(0) == table.size(0),
              "block_table must be [B, max_blocks] and lengths [B]");
  const int64_t max_len = table.size(1) * bs;
  at::Tensor slot = table.new_full({table.size(0), max_len}, NAN,
                                   table.options().dtype(at::kFloat));
  launch_paged_slots(table.data_ptr<int>(), lengths.data_ptr<int>(),
                     slot.data_ptr<float>(), int(table.size(0)), int(table.size(1)),
                     int(bs), int(max_len), attnbook::stream());
  attnbook::check_launch();
  return slot;
}
