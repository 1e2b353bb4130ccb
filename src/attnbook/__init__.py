"""attnbook: the package behind the book *Attention Kernels in CUDA*.

One import gives a chapter everything it uses::

    import attnbook as ab

The subpackages name the layers, each using only those listed before it:
``toolchain`` (kernel text to a Python callable), ``kernels`` (the CUDA sources),
``reference`` (exact PyTorch), ``ops`` (the registered torch ops), ``bench``,
``figures``, ``models`` (small models on the kernels, Hugging Face integration).
"""
from . import bench, exercises, figures, models, ops, reference, toolchain
from .bench import peak_memory
from .figures import plots, show_kernel, show_source, widgets
from .ops import (GEMM_STEPS, SOFTMAX_KERNELS, TC_STEPS, Attention, PagedKVCache,
                  attention, attention_with_kvcache, flash_attention_fp32,
                  flash_attention_tc, gemm, kv_cache_append, softmax)
from .reference import attention_reference, expand_kv, flash_attention_tiles, masks
from .toolchain import (CompileError, KernelFault, KernelInterrupted, KernelTimeout,
                        MemcheckError, RaceError, SanitizerError, compile,
                        default_backend, describe_machine, has_gpu, kernel_source,
                        load_extension, occupancy, profile, ptxas_report, sanitize,
                        thread_order, time_budget, workers)

__version__ = "0.1.0"
