// Where a kernel finds element (b, h, s, d) of a [B, H, S, D] tensor: at b·Layout::b +
// h·Layout::h + s·Layout::s + d. Only the head dimension must be contiguous, so the
// layout models produce, x.view(B, S, H, D).transpose(1, 2), needs no copy. Plain data:
// the C++ wrappers, compiled without CUDA, fill it in.
#pragma once

struct Layout {
  long long b = 0, h = 0, s = 0;   // element strides of batch, head and sequence
};
