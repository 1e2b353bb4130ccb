// The hooks the emulator's runtime calls at each launch, block, barrier, allocation and
// access (declared in emu_runtime.h): in the checked build, memcheck's, racecheck's
// and the profile's (emu_checked.h, with GCC's -fsanitize=thread entry points); in the
// plain build, none.
#pragma once

#include "emu_blocks.h"
#ifdef ATTNBOOK_CHECKED
#include "emu_tsan_hooks.h"
#else
namespace attnbook_emu {
inline void on_launch(const Job&) {}
inline void on_block_start(Runtime&, const Job&) {}
inline void on_block_end(Runtime&) {}
inline void on_barrier(Runtime&) {}
inline void on_warp_sync(Runtime&, int, uint32_t) {}
inline void on_named_barrier(Runtime&, const std::vector<int>&) {}
inline uint32_t on_mbarrier_phase(Runtime&, const std::vector<int>&) { return 0; }
inline void on_mbarrier_observed(Runtime&, uint32_t) {}
inline void on_wgmma_issued(Runtime&, void* const*, int, int) {}
inline void on_wgmma_landed(Runtime&, void* const*, int) {}
inline void note_allocation(const void*, size_t, bool = false) {}
inline void leave_kernel() {}
inline void note_barrier() {}
inline void note_access(const void*, size_t, bool) {}
inline void on_static_shared(Runtime&, void*, size_t) {}
}  // namespace attnbook_emu
#endif
