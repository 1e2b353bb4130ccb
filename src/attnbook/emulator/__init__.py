"""The CPU emulator: CUDA kernel text run thread by thread on the CPU. Its source
transform (:mod:`.emulate`: launches, shared memory, headers pasted in, thread orders,
workers, time budgets, faults), inline PTX (:mod:`.ptx`), the guard pages around a
call's tensors (:mod:`.guard`), checked mode (:mod:`.sanitizer`: sanitize, profile),
programs with their own ``main()`` (:mod:`.program`,
``python -m attnbook.emulator.program run``) and the headers that stand in for the CUDA
toolkit's (``include/``: the runtime, cooperative groups, cuBLAS, ATen's CUDA parts).

It shares a layer with :mod:`attnbook.toolchain`, whose :func:`~attnbook.compile` and
:func:`~attnbook.load_extension` build kernel text with it; it builds through the
toolchain's extension cache (:mod:`attnbook.toolchain.cache`)."""
from .emulate import (INCLUDE_DIR, ORDERS, KernelFault, KernelInterrupted,
                      KernelTimeout, thread_order, time_budget, workers)
from .sanitizer import (MemcheckError, ProfileReport, RaceError, SanitizerError,
                        profile, sanitize)
