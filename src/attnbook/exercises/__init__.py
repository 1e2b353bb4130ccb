"""Exercises: a kernel skeleton the reader completes, and one call that grades it.

    print(ab.exercises.grade("relu_grid_stride", MY_KERNEL))

The reader writes the ``__global__`` kernel (and any ``__device__`` helpers); the
exercise adds a fixed host launcher and torch wrapper, compiles the text with
:func:`attnbook.compile` and runs it on inputs chosen to catch the usual mistakes
(sizes off the block size, one element, long rows). Without a GPU every case runs on the
emulator under the forward, reverse and shuffled thread orders, so a missing barrier
shows; on a GPU each case runs once and the report adds the kernel's time next to
PyTorch's. The report says which case failed, under which order, and by how much.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch

from cuda_emulator.build import arch_number

from ..toolchain import CompileError, compile, has_gpu, thread_order, wrap
from ..toolchain.compile import device_arch
from .catalog import EXERCISES

__all__ = ["grade", "skeleton", "solution", "runs_here", "GradeReport", "EXERCISES"]

ORDERS = (("forward", 0), ("reverse", 0), ("shuffle", 3))


@dataclass
class GradeReport:
    exercise: str
    passed: bool
    lines: list = field(default_factory=list)

    def __str__(self):
        head = f"{self.exercise}: {'passed' if self.passed else 'not yet'}"
        return wrap("\n".join([head] + [f"  {line}" for line in self.lines]))


def skeleton(name: str) -> str:
    """The kernel text the reader starts from (``exercises/chNN/<name>.cu``)."""
    return _exercise(name).skeleton


def solution(name: str) -> str:
    """A kernel text that passes (``exercises/chNN/<name>.solution.cu``)."""
    return _exercise(name).solution


def runs_here(ex) -> bool:
    """This machine's GPU can run exercise ``ex``'s build: any GPU where it names no
    architecture; one of that compute capability for an ``a`` build (sm_90a: 9.0
    only), of that one or later otherwise."""
    if ex.arch is None:
        return True
    want, have = arch_number(ex.arch), arch_number(device_arch())
    return have == want if ex.arch.endswith("a") else have >= want


def _exercise(name):
    if name not in EXERCISES:
        raise ValueError(f"no exercise {name!r}; there are {sorted(EXERCISES)}")
    return EXERCISES[name]


def _first_difference(got, want, rtol, atol):
    """Where ``got`` and ``want`` first differ, a phrase a line, or [] if they agree:
    how many values are wrong, the first, how many are NaN or infinite where the
    answer is not (and the reverse), and the largest error among the finite ones."""
    if got.shape != want.shape:
        return [f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"]
    g, w = got.double(), want.double()
    bad = ~torch.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return []

    def first(mask):
        return tuple(int(i) for i in mask.nonzero()[0])

    where = first(bad)
    parts = [f"{int(bad.sum())} of {bad.numel()} values wrong; first at index {where}: "
             f"{got[where].item():.6g}, expected {want[where].item():.6g}"]
    for mask, what in ((g.isnan() & ~w.isnan(), "NaN where the answer is a number"),
                       (g.isinf() & w.isfinite(), "±inf where the answer is finite"),
                       (w.isnan() & ~g.isnan(), "a number where the answer is NaN")):
        if mask.any():
            parts.append(f"{int(mask.sum())} {what} (first at {first(mask)})")
    finite = bad & g.isfinite() & w.isfinite()
    if finite.any():
        parts.append(f"max error {(g - w).abs()[finite].max().item():.3g} "
                     "among the finite ones")
    return parts


def grade(name: str, source: str, *, backend: str | None = None) -> GradeReport:
    """Compile the reader's ``source`` for exercise ``name`` and check it on every
    case."""
    ex = _exercise(name)
    backend = backend or ("cuda" if has_gpu() and runs_here(ex) else "emulator")
    device = "cuda" if backend == "cuda" else "cpu"
    tag = hashlib.sha256(source.encode()).hexdigest()[:8]
    try:
        module = compile(f"exercise_{name}_{tag}", source + "\n" + ex.launcher,
                         ex.wrapper, [ex.function], backend=backend, arch=ex.arch)
    except CompileError as e:
        return GradeReport(name, False, ["does not compile:", *str(e).splitlines()[1:]])
    fn = getattr(module, ex.function)
    orders = ORDERS if backend == "emulator" else (None,)
    for case, inputs in ex.cases():
        inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]
        want = ex.reference(*inputs)
        for order in orders:
            try:
                if order is None:
                    got = fn(*inputs)
                else:
                    with thread_order(*order):
                        got = fn(*inputs)
            except RuntimeError as e:
                return GradeReport(name, False,
                                   [f"case {case}: the kernel failed: {e}"])
            wrong = _first_difference(got, want, ex.rtol, ex.atol)
            if wrong:
                under = f" under thread order '{order[0]}'" if order else ""
                return GradeReport(name, False, [f"case {case}{under}:",
                                                 *(f"  {part}" for part in wrong)])
    checked = f"{len(ex.cases())} cases" + (f" × {len(orders)} thread orders"
                                            if backend == "emulator" else "")
    lines = [f"correct on {checked}"]
    if backend == "cuda":
        lines.append(_timing(fn, ex, device))
    return GradeReport(name, True, lines)


def _timing(fn, ex, device):
    from ..bench.harness import time_cuda
    case, inputs = ex.cases()[-1]
    inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]
    mine = time_cuda(lambda: fn(*inputs))["median_ms"]
    torch_ms = time_cuda(lambda: ex.reference(*inputs))["median_ms"]
    return f"case {case}: {mine:.3f} ms, PyTorch {torch_ms:.3f} ms"
