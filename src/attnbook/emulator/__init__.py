"""The CPU emulator: CUDA kernel text run thread by thread on the CPU. Its source
transform (:mod:`.emulate`: launches, shared memory, headers pasted in, thread orders,
workers, time budgets, faults), inline PTX (:mod:`.ptx`), the guard pages around a
call's tensors (:mod:`.guard`), checked mode (:mod:`.sanitizer`: sanitize, profile),
the extension cache every build goes through (:mod:`.cache`) and the headers that stand
in for the CUDA toolkit's (``include/``: the runtime, cooperative groups, cuBLAS, ATen's
CUDA parts).

The package's bottom layer: it imports nothing of attnbook's. The toolchain above it
(:func:`~attnbook.compile`, :func:`~attnbook.load_extension`, programs with their own
``main()``: ``python -m attnbook.toolchain.program run``) builds kernel text with it."""
from .emulate import (INCLUDE_DIR, ORDERS, KernelFault, KernelInterrupted,
                      KernelTimeout, thread_order, time_budget, workers)
from .sanitizer import (InitcheckError, MemcheckError, ProfileReport, RaceError,
                        SanitizerError, profile, sanitize)
