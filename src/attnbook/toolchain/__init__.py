"""How kernel text becomes a Python callable: :func:`compile` (nvcc on a GPU, the CPU
emulator of :mod:`attnbook.emulator` without one), whole extensions, the extension
cache, ptxas reports, occupancy, the GPUs' facts and the description of the machine.
The emulator's thread orders and checked mode (sanitize, profile) are re-exported."""
from ..emulator import (InitcheckError, KernelFault, KernelInterrupted, KernelTimeout,
                        MemcheckError, ProfileReport, RaceError, SanitizerError,
                        profile, sanitize, thread_order, time_budget, workers)
from .compile import (CompileError, INCLUDE_DIR, KERNEL_DIR, compile, default_backend,
                      kernel_source)
from .extension import load_extension
from .machine import describe_machine, has_gpu
from .occupancy import occupancy
from .ptxas import find_nvcc, ptxas_report
from .text import WIDTH, wrap
