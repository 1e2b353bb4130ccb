"""attnbook: the package behind the book *Attention Kernels in CUDA*.

One import gives a chapter everything it uses::

    import attnbook as ab
"""
from . import bench, benchmarks, flash, masks, plots, widgets
from .attention import Attention, attention
from .build import CompileError, compile, default_backend, kernel_source, ptxas_report
from .emulator import thread_order
from .flash import flash_attention_fp32
from .flash_tiles import flash_attention_tiles
from .gemm import GEMM_STEPS, gemm
from .machine import describe_machine, has_gpu
from .memory import peak_memory
from .reference import attention_reference, expand_kv
from .show import show_kernel, show_source
from .softmax import SOFTMAX_KERNELS, softmax

__version__ = "0.1.0"
