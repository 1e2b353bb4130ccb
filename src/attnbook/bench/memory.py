"""How much memory a computation needs at its peak, measured with torch.

On a GPU this is the caching allocator's own statistic.  On the CPU, torch keeps no
such statistic, so we count it ourselves: a dispatch mode sees every tensor an
operator creates and a finalizer sees it freed.  Either way the number is bytes
allocated above what was live before the call.
"""
from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["peak_memory"]


_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


class _AllocationTracker(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live = {}          # storage address -> [bytes, tensors that use it]
        self.current = self.peak = 0

    def _release(self, key):
        entry = self.live[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "attnbook":
            # A registered op of the book is one opaque call here; its workspaces are
            # allocated inside it. Run its CPU implementation with this mode active
            # again, so every tensor it allocates is counted too.
            with self:
                return func.redispatch(_CPU, *args, **(kwargs or {}))
        out = func(*args, **(kwargs or {}))
        if func.is_view:  # no new memory (and perhaps a view of a tensor made before)
            return out
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                key = t.untyped_storage().data_ptr()
                if not key:
                    continue
                # a new allocation, not a view of a tracked one
                if key not in self.live:
                    self.live[key] = [t.untyped_storage().nbytes(), 0]
                    self.current += self.live[key][0]
                    self.peak = max(self.peak, self.current)
                self.live[key][1] += 1
                weakref.finalize(t, self._release, key)
        return out


def peak_memory(fn, device) -> tuple[int, object]:
    """Run ``fn()`` and return
    ``(peak bytes allocated during the call, fn's result)``.

    On a GPU ``fn`` runs twice and the second call is measured: a first call may
    allocate what then stays allocated (cuBLAS's workspace at a stream's first matrix
    product, 32 MiB on an H200), which is no part of the computation's own peak."""
    device = torch.device(device)
    if device.type == "cuda":
        fn()
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before, result
    tracker = _AllocationTracker()
    with tracker:
        result = fn()
    return tracker.peak, result
