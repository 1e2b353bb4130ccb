"""How kernel text becomes a Python callable: :func:`compile` (nvcc on a GPU, the CPU
emulator, the package :mod:`cuda_emulator`, without one), whole extensions, ptxas
reports, SASS, occupancy, the GPUs' facts and the description of the machine. The
emulator's thread orders and checked mode (sanitize, profile) are re-exported."""
from cuda_emulator import (CompileError, InitcheckError, KernelFault,
                           KernelInterrupted, KernelTimeout, MemcheckError,
                           ProfileReport, RaceError, SanitizerError, profile, sanitize,
                           thread_order, time_budget, workers)
from .compile import INCLUDE_DIR, KERNEL_DIR, compile, default_backend, kernel_source
from .extension import load_extension
from .machine import describe_machine, has_gpu
from .occupancy import occupancy
from .ptxas import find_nvcc, ptxas_report
from .text import WIDTH, wrap
