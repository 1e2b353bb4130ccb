// CUDA's built-ins and host runtime for kernel source compiled as C++ and run on the
// CPU emulator. compile() includes this ahead of the (lightly transformed) kernel text;
// ATTNBOOK_EMULATOR is defined, and __CUDA_ARCH__ names the architecture the emulator
// behaves as (ATTNBOOK_EMU_ARCH).
#pragma once

#include "emu_builtins.h"
#include "emu_more_builtins.h"
#include "emu_ptx.h"
#include "emu_hopper.h"
#include "emu_host_api.h"

// A torch extension's plain build takes the guard pages' description of a faulting
// address (emulator/guard.py; a program has no torch tensors, and the checked build
// checks every access itself).
#if !defined(ATTNBOOK_PROGRAM) && !defined(ATTNBOOK_CHECKED)
extern "C" __attribute__((used, visibility("default"))) inline void
attnbook_set_describe_address(attnbook_emu::DescribeAddress f) {
  attnbook_emu::describe_address = f;
}
#endif
// Guards on __CUDA_ARCH__ pick the branch of this architecture. Defined last, after
// every host header has been read.
#define __CUDA_ARCH__ ATTNBOOK_EMU_ARCH
#if ATTNBOOK_EMU_ARCH == 900 && ATTNBOOK_EMU_ARCH_FEATURES
#define __CUDA_ARCH_FEAT_SM90_ALL 1
#endif
