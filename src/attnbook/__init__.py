"""attnbook: the package behind the book *Attention Kernels in CUDA*.

One import gives a chapter everything it uses::

    import attnbook as ab

The subpackages name the layers, each using only those listed before it:
``toolchain`` (kernel text to a Python callable; without a GPU it builds with the CPU
emulator, the package :mod:`cuda_emulator` beside this one, re-exported as
``attnbook.emulator``), ``kernels`` (the CUDA sources), ``args``
(the input checks), ``reference`` (exact PyTorch), ``ops`` (the registered torch ops),
``bench``, ``figures``, ``exercises``, ``models`` (small models on the kernels, Hugging
Face integration); ``gpu`` holds developer tools. The plots (matplotlib) and the
models (transformers) are imported on first use.
"""
import importlib

import cuda_emulator as emulator

from . import args, bench, exercises, ops, reference, toolchain
from .args.decode import KVCachePlan, plan_kvcache
from .bench import peak_memory
from .figures import show_kernel, show_profiled, show_source
from .ops import (GEMM_STEPS, HOPPER_STEPS, SOFTMAX_KERNELS, TC_STEPS, Attention,
                  PagedKVCache, attention, attention_with_kvcache,
                  flash_attention_fp32, flash_attention_hopper, flash_attention_tc,
                  gemm, kv_cache_append, softmax)
from .reference import attention_reference, expand_kv, flash_attention_tiles, masks
from .toolchain import (CompileError, InitcheckError, KernelFault, KernelInterrupted,
                        KernelTimeout, MemcheckError, RaceError, SanitizerError,
                        compile, default_backend, describe_machine, has_gpu,
                        kernel_source, load_extension, occupancy, profile,
                        ptxas_report, sanitize, thread_order, time_budget, workers)

__version__ = "0.1.0"

# name -> module, imported when first used
_LAZY = {"figures": "attnbook.figures", "models": "attnbook.models",
         "plots": "attnbook.figures.plots", "widgets": "attnbook.figures.widgets"}


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(_LAZY[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
