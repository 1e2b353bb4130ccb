"""Models built on the book's kernels: a tiny character-level Transformer that trains
with ``ab.attention`` or with PyTorch's SDPA, for comparing the two from the same
seed."""
from .tiny import CharTransformer, corpus, train

__all__ = ["CharTransformer", "corpus", "train"]
