"""attnbook: the package behind the book *Attention Kernels in CUDA*.

One import gives a chapter everything it uses::

    import attnbook as ab
"""
from . import masks
from .machine import describe_machine, has_gpu
from .reference import attention_reference, expand_kv

__version__ = "0.1.0"
from .memory import peak_memory
from . import plots
