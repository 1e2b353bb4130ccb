"""The torch-facing entry points: input checks, dispatch to a kernel, and the registered
``torch.library`` ops (namespace ``attnbook``) behind them."""
from .attention import IMPLS, Attention, attention
from .flash import flash_attention_fp32
from .gemm import GEMM_STEPS, gemm
from .softmax import SOFTMAX_KERNELS, softmax
