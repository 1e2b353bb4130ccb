"""The torch-facing entry points: one input check (:mod:`.checks`), dispatch to a kernel,
and the registered ``torch.library`` ops behind them (``torch.ops.attnbook.flash_forward``,
``three_kernel_forward``, ``softmax``, ``gemm``)."""
from .attention import IMPLS, Attention, attention, three_kernels
from .flash import flash_attention_fp32
from .gemm import GEMM_STEPS, gemm
from .softmax import SOFTMAX_KERNELS, softmax
