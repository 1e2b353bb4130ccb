// cuda_pipeline.h's primitives on the CPU emulator, as cp.async (emu_ptx.h): copies
// land when __pipeline_wait_prior returns for their batch.
#pragma once

#include "cuda_emulator.h"

// Copy `size` bytes (4, 8 or 16), the last `zfill` of them zeros instead of source.
__attribute__((always_inline)) inline void __pipeline_memcpy_async(
    void* dst, const void* src, size_t size, size_t zfill = 0) {
  ::attnbook_emu::ptx::cp_async(__LINE__, dst, src, int(size), int(size - zfill),
                                false);
}
inline void __pipeline_commit() { ::attnbook_emu::ptx::cp_async_commit(); }
inline void __pipeline_wait_prior(size_t prior) {
  ::attnbook_emu::ptx::cp_async_wait(prior);
}
