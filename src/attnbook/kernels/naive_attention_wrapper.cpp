// The naive path (naive_attention.cu) as the extension's function forward.
#include "three_kernels_wrapper.h"

constexpr auto& forward = three_kernel_forward<attention_naive>;
