"""The torch-facing entry points: one input check (:mod:`attnbook.args`), dispatch to a
kernel, and the registered ``torch.library`` ops behind them
(``torch.ops.attnbook.flash_forward``, ``flash_backward``, ``flash_tc_forward``,
``flash_tc_backward``, ``flash_hopper_forward``, ``three_kernel_forward``,
``softmax``, ``gemm``, ``kv_cache_append``, ``decode_attention``)."""
from . import backward   # makes flash_forward differentiable (register_autograd)
from . import backward_tc   # and flash_tc_forward
from .attention import IMPLS, Attention, attention, three_kernels
from .decode import attention_with_kvcache
from .flash import flash_attention_fp32
from .flash_hopper import HOPPER_STEPS, flash_attention_hopper
from .flash_tc import TC_FASTEST, TC_STEPS, flash_attention_tc
from .gemm import GEMM_STEPS, gemm
from .kv_cache import kv_cache_append
from .paged_kv_cache import PagedKVCache
from .registry import EXTENSIONS, Extension, extension
from .softmax import SOFTMAX_KERNELS, softmax
