"""The input checks every public entry point shares, below the references and the
kernels alike: :mod:`.attention` (attention and its masks) and :mod:`.decode`
(decoding with a KV cache). A reference and its kernel accept and refuse the same
arguments because both call the same check."""
