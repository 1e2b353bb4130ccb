// Included after the text of a CUDA program with its own main(), built for the emulator
// (python -m cuda_emulator.program). An error the emulator raises in a launch (a
// thread's fault, a failed assert, memcheck's report) ends the program as an uncaught
// exception would, with exit status 1, but with its message alone on stderr. Built
// checked (ATTNBOOK_PROGRAM_CHECKS: memcheck 1, racecheck 2, initcheck 8), the checks
// start before main() runs; the program's cudaMalloc'ed buffers are what its kernels
// may touch.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "cuda_emulator.h"

namespace attnbook_emu {

struct Program {
  Program() {
    std::set_terminate(&on_terminate);
    // line by line into the runner's pipe, which shows each line as it comes
    std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
#ifdef ATTNBOOK_CHECKED
    attnbook_checked_begin(ATTNBOOK_PROGRAM_CHECKS, nullptr, 0);
#endif
  }
  [[noreturn]] static void on_terminate() {
    try {
      if (std::exception_ptr e = std::current_exception()) std::rethrow_exception(e);
      std::fputs("terminate called without an active exception\n", stderr);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
    } catch (...) {
      std::fputs("terminate called after throwing an unknown exception\n", stderr);
    }
    std::fflush(stdout);
    std::_Exit(1);
  }
};
inline Program program;

}  // namespace attnbook_emu
