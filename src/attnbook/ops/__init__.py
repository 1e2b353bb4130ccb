"""The torch-facing entry points: one input check (:mod:`.checks`), dispatch to a
kernel, and the registered ``torch.library`` ops behind them
(``torch.ops.attnbook.flash_forward``, ``flash_backward``, ``flash_tc_forward``,
``three_kernel_forward``, ``softmax``, ``gemm``, ``kv_cache_append``,
``decode_attention``)."""
from .attention import EXTENSIONS as _THREE_KERNELS
from .backward import EXTENSIONS as _BACKWARD
from .attention import IMPLS, Attention, attention, three_kernels
from .decode import EXTENSIONS as _DECODE
from .decode import attention_with_kvcache
from .flash import EXTENSIONS as _FLASH
from .flash import flash_attention_fp32
from .flash_tc import EXTENSIONS as _FLASH_TC
from .flash_tc import TC_STEPS, flash_attention_tc
from .gemm import EXTENSIONS as _GEMM
from .gemm import GEMM_STEPS, gemm
from .kv_cache import EXTENSIONS as _KV_CACHE
from .kv_cache import PagedKVCache, kv_cache_append
from .softmax import EXTENSIONS as _SOFTMAX
from .softmax import SOFTMAX_KERNELS, softmax

# Every extension the package builds: (name, kernel file, wrapper, functions).
EXTENSIONS = [*_FLASH, *_BACKWARD, *_FLASH_TC, *_THREE_KERNELS, *_SOFTMAX, *_GEMM,
              *_KV_CACHE, *_DECODE]
