// Chapter 3's softmax kernels behind one launcher, selected by name.
#include <cstring>

#include "softmax.cuh"
#include "softmax.h"

// Returns false for an unknown kernel name.
bool softmax_forward(const char* kernel, const float* x, float* y, int rows, int n,
                     cudaStream_t stream) {
  if (rows == 0) return true;
  constexpr int BLOCK = 256, WARPS = 4;   // softmax_warp: 4 rows (a warp each) a block
  if (!strcmp(kernel, "naive"))
    softmax_rows_naive<<<(rows + 127) / 128, 128, 0, stream>>>(x, y, rows, n);
  else if (!strcmp(kernel, "block_tree"))
    softmax_block_tree<BLOCK><<<rows, BLOCK, 0, stream>>>(x, y, n);
  else if (!strcmp(kernel, "warp"))
    softmax_warp<<<(rows + WARPS - 1) / WARPS, dim3(32, WARPS), 0, stream>>>(x, y, rows,
                                                                              n);
  else if (!strcmp(kernel, "block_warps"))
    softmax_block_warps<BLOCK><<<rows, BLOCK, 0, stream>>>(x, y, n);
  else if (!strcmp(kernel, "online"))
    softmax_online<BLOCK><<<rows, BLOCK, 0, stream>>>(x, y, n);
  else if (!strcmp(kernel, "online_lean"))
    softmax_online_lean<BLOCK><<<rows, BLOCK, 0, stream>>>(x, y, n);
  else
    return false;
  return true;
}
