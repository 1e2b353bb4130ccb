"""CUDA run thread by thread on the CPU: kernel text, whole torch extensions and
programs with their own ``main()``, unmodified, built by the host compiler against
headers that stand in for the CUDA toolkit's, where no GPU is at hand.

* :class:`Build` (:mod:`.build`): the one way CUDA text becomes C++ for the CPU (its
  source transform, :mod:`.emulate`, and inline PTX, :mod:`.ptx`), its flags, its key
  in the extension cache (:mod:`.cache`), its checked twin; a module of functions, an
  extension or an executable.
* :func:`load_extension` (:mod:`.extension`): a torch extension as
  ``torch.utils.cpp_extension.load`` takes it; ``python -m cuda_emulator.program run
  prog.cu ARGS`` (:mod:`.program`): a program, as ``nvcc prog.cu -o prog && ./prog
  ARGS`` would run it.
* Launches: thread orders, workers, time budgets, faults (:class:`KernelFault`), guard
  pages around a call's tensors (:mod:`.guard`); checked mode (:mod:`.sanitizer`:
  :func:`sanitize` for memcheck, racecheck and initcheck, :func:`profile` for counts).

It imports nothing of the book's package (``attnbook``), which builds its kernels with
it where there is no GPU."""
from .build import Build, CompileError, Twin
from .emulate import (INCLUDE_DIR, ORDERS, KernelFault, KernelInterrupted,
                      KernelTimeout, thread_order, time_budget, workers)
from .extension import load_extension
from .sanitizer import (InitcheckError, MemcheckError, ProfileReport, RaceError,
                        SanitizerError, profile, sanitize)
