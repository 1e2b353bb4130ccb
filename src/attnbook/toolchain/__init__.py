"""How kernel text becomes a Python callable: :func:`compile` (nvcc on a GPU, the CPU
emulator without one), the extension cache, ptxas reports, the emulator's source
transform, thread orders and checked mode (sanitize, profile), and the description of
the machine."""
from .compile import (CompileError, INCLUDE_DIR, KERNEL_DIR, compile, default_backend,
                      kernel_source)
from .extension import load_extension
from .emulator import (KernelFault, KernelInterrupted, KernelTimeout, thread_order,
                       time_budget, workers)
from .machine import describe_machine, has_gpu
from .occupancy import occupancy
from .ptxas import find_nvcc, ptxas_report
from .sanitizer import (MemcheckError, ProfileReport, RaceError, SanitizerError,
                        profile, sanitize)
from .text import WIDTH, wrap
