"""Exact PyTorch: the reference attention every kernel is checked against, the masks,
and the tile-by-tile algorithms the kernels implement."""
from . import masks
from .attention import attention_reference, expand_kv
from .decode import attention_with_kvcache_reference
from .flash_tiles import flash_attention_tiles
