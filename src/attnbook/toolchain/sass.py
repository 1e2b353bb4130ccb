"""What a kernel issues in its hottest loop, read from the machine code (SASS) of an
nvcc build without a GPU: the instruction mix that decided the book's kernels' speed on
the H200, where the bytes they move did not.

For each kernel of a cubin (disassembled by nvdisasm), every loop is the range from a
backward branch's target to the branch. A tensor-core kernel's work is its HMMA; of the
loops with at least ``min_hmma`` of them, the hot loop is the one with the fewest other
instructions per HMMA: a kernel that runs its unmasked tiles in a loop of their own is
measured on that loop, the path that matters. Counted there: HMMA, the other
instructions (NOP left out), LDSM, BAR, MUFU, FMNMX, WARPSYNC and local-memory accesses
(LDL/STL: spills in the loop). An fp32 kernel's work is its FFMA (:func:`fma_loops`):
the same reading, FFMAs per other instruction.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

from .ptxas import cached_report, demangle, kept_cubin, nvcc_compile

__all__ = ["LoopMix", "find_nvdisasm", "hot_loops", "fma_loops", "load_loops",
           "memory_forms", "sass_report", "fma_report", "load_report", "forms_report"]

_TENSOR = ("HMMA", "HGMMA")
_READER = 3   # the reading's version, in the cached reports' folder names
_FMA = ("FFMA",)


@dataclasses.dataclass(frozen=True)
class LoopMix:
    """The instructions of one kernel's hot loop, by opcode (without modifiers):
    ``hmma`` its tensor-core work in HMMA.16816s per warp (an HGMMA.64xNx16 is N / 8
    of them; of an fp32 kernel's loop, :func:`fma_loops`: FFMAs) and ``other``
    instructions besides the tensor-core ones."""
    hmma: int
    other: int
    opcodes: dict
    # instructions between waiting for all but the newest wgmma group (WARPGROUP.DEPBAR
    # .LE gsb0, 0x1) and waiting for all (0x0): what runs beside the newest group
    beside_last_group: int = 0

    def count(self, opcode: str) -> int:
        return self.opcodes.get(opcode, 0)

    @property
    def other_per_hmma(self) -> float:
        return self.other / self.hmma

    @property
    def ldsm_per_hmma(self) -> float:
        return self.count("LDSM") / self.hmma

    @property
    def barriers_per_256_hmma(self) -> float:
        return 256 * self.count("BAR") / self.hmma

    @property
    def local(self) -> int:
        return self.count("LDL") + self.count("STL")

    @property
    def ffma_per_other(self) -> float:
        """Of an fp32 loop: FFMAs per other instruction (the work per overhead)."""
        return self.count("FFMA") / max(self.other, 1)

    @property
    def lds_per_ffma(self) -> float:
        return self.count("LDS") / max(self.count("FFMA"), 1)


def find_nvdisasm() -> str | None:
    """nvdisasm: on PATH, beside nvcc, or from PyPI's nvidia-cuda-nvdisasm (also the
    copy in triton); None where there is none."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    roots = [pathlib.Path(p) for p in sys.path if p and os.path.isdir(p)]
    for root in roots:
        for pattern in ("nvidia/*/bin/nvdisasm", "nvidia/cuda_nvdisasm/bin/nvdisasm",
                        "triton/backends/nvidia/bin/nvdisasm"):
            for cand in sorted(root.glob(pattern)):
                if os.access(cand, os.X_OK):
                    return str(cand)
    return None


_FUNCTION = re.compile(r"\s*\.text\.(\S+):")
_LABEL = re.compile(r"(\.L_x_\d+):")
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"\bBRA\b.*?`?\(?(\.L_x_\d+)")


def _opcode(text: str) -> str:
    text = re.sub(r"^@!?U?P[T\d]+\s+", "", text)   # the predicate guard
    return text.split()[0].split(".")[0] if text else ""


_HGMMA = re.compile(r"\bHGMMA\.64x(\d+)x16\b")


def _work(text: str) -> int:
    """An instruction's tensor-core work in HMMA.16816s per warp: one, or for a
    warpgroup's HGMMA.64xNx16 (each warp's share a 16 x N x 16 product) N / 8."""
    m = _HGMMA.search(text)
    return int(m.group(1)) // 8 if m else 1


def hot_loops(sass: str, min_hmma: int = 64) -> dict:
    """{kernel symbol: LoopMix} for nvdisasm's text of a cubin; kernels without a
    loop of ``min_hmma`` tensor-core instructions are left out. ``hmma`` counts
    HMMA.16816s per warp: an HGMMA.64xNx16 counts N / 8 (:func:`_work`), so that
    other instructions per HMMA compare across mma.sync and wgmma kernels."""
    return _loops(sass, _TENSOR, min_hmma)


def fma_loops(sass: str, min_ffma: int = 64) -> dict:
    """{kernel symbol: LoopMix} of the loops with at least ``min_ffma`` FFMAs, each
    kernel's with the fewest other instructions per FFMA (``hmma`` counts the FFMAs)."""
    return _loops(sass, _FMA, min_ffma)


def _functions(sass: str) -> dict:
    """{kernel symbol: ([(address, instruction text)], {label: address})} of
    nvdisasm's text of a cubin."""
    functions: dict = {}
    name = None
    for line in sass.splitlines():
        if m := _FUNCTION.match(line):
            name = m.group(1)
            functions[name] = ([], {}, [])   # instructions, labels, pending labels
            continue
        if name is None:
            continue
        code, labels, pending = functions[name]
        if m := _LABEL.match(line.strip()):
            pending.append(m.group(1))
        elif m := _INSTRUCTION.search(line):
            address = int(m.group(1), 16)
            labels.update((label, address) for label in pending)
            pending.clear()
            code.append((address, m.group(2)))
    return {name: (code, labels) for name, (code, labels, _) in functions.items()}


def _loop_bodies(sass: str):
    """(kernel symbol, [instruction text]) of every loop of nvdisasm's text of a
    cubin: the range from a backward branch's target to the branch, in the order of
    the branches."""
    for name, (code, labels) in _functions(sass).items():
        for address, text in code:
            m = _BRANCH.search(text)
            target = labels.get(m.group(1)) if m else None
            if target is not None and target <= address:
                yield name, [t for a, t in code if target <= a <= address]


def _mix(body: list, work: tuple) -> LoopMix:
    ops = collections.Counter(_opcode(t) for t in body)
    other = sum(ops.values()) - sum(ops[o] for o in work) - ops["NOP"]
    return LoopMix(sum(_work(t) for t in body if _opcode(t) in work), other, dict(ops),
                   _beside_last_group(body))


def _loops(sass: str, work: tuple, min_work: int) -> dict:
    loops = {}
    for name, body in _loop_bodies(sass):
        mix = _mix(body, work)
        best = loops.get(name)
        if mix.hmma >= min_work and (best is None or
                                     mix.other * best.hmma < best.other * mix.hmma):
            loops[name] = mix
    return loops


def load_loops(sass: str, min_loads: int = 4) -> dict:
    """{kernel symbol: [LoopMix]} of the loops that load at least ``min_loads``
    elements from global memory per iteration (LDG; ``hmma`` counts them): a
    memory-bound kernel's unrolled passes over its input, in program order, whose
    instructions per element are ``other / hmma + 1``."""
    loops: dict = {}
    for name, body in _loop_bodies(sass):
        mix = _mix(body, ("LDG",))
        if mix.hmma >= min_loads:
            loops.setdefault(name, []).append(mix)
    return loops


_REGISTER = re.compile(r"\b(U?R|U?P)\d+\b")
_OFFSET = re.compile(r"[+-]0x[0-9a-f]+\]")
_DESCRIPTOR = re.compile(r"desc\[[^]]*\]")


def memory_forms(sass: str, opcodes=("LDS", "STS", "LDSM", "LDGSTS")) -> dict:
    """{kernel symbol: {form: count}} of every instruction of ``opcodes`` in each
    kernel's code (each written once, whether it runs once or in a loop), its form
    the text with numbered registers and predicates as R, UR, P, UP, address
    offsets and descriptors dropped: ``@!PT LDS RZ, [RZ]`` (a load under a predicate
    that is never true) and ``@P STS.128 [R], RZ`` (a predicated store of zeros) are
    two forms."""
    def form(text):
        text = _OFFSET.sub("]", _DESCRIPTOR.sub("", text))
        return " ".join(_REGISTER.sub(r"\1", text).split())
    forms = {}
    for name, (code, _) in _functions(sass).items():
        counts = collections.Counter(form(t) for _, t in code if _opcode(t) in opcodes)
        if counts:
            forms[name] = dict(counts)
    return forms


def _beside_last_group(body: list) -> int:
    """The instructions (NOPs aside) between a loop's first wait for all but the
    newest wgmma group and its next wait for all of them; 0 where it has no such
    pair."""
    waits = [n for n, t in enumerate(body) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in t]
    for n in waits[:1]:
        for k in range(n + 1, len(body)):
            if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in body[k]:
                return sum(_opcode(t) != "NOP" for t in body[n + 1:k])
    return 0


def _sass(nvcc: str, cuda: str, arch: str, loops=hot_loops) -> dict:
    nvdisasm = find_nvdisasm()
    if nvdisasm is None:
        raise RuntimeError("the SASS card needs nvdisasm: pip install "
                           "nvidia-cuda-nvdisasm")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = kept_cubin(cuda, arch)   # ptxas_report's compile, or a new one
        if cubin is None:
            cubin = os.path.join(tmp, "kernels.cubin")
            nvcc_compile(nvcc, cuda, arch, cubin, "-cubin")
        text = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True,
                              check=True).stdout
    def plain(value):   # a LoopMix, a list of them or a dict of counts, as JSON
        if isinstance(value, list):
            return [plain(v) for v in value]
        return dataclasses.asdict(value) if isinstance(value, LoopMix) else value
    return {demangle(name): plain(value) for name, value in loops(text).items()}


def sass_report(cuda: str, arch: str = "sm_80") -> dict:
    """{kernel: LoopMix} of the hot loop of every tensor-core kernel in ``cuda``
    compiled by nvcc for ``arch`` (no GPU needed; nvdisasm reads the cubin), cached
    as ptxas reports are."""
    report = cached_report(f"sass_reports_{_READER}", cuda, arch, _sass)
    return {name: LoopMix(**mix) for name, mix in report.items()}


def load_report(cuda: str, arch: str = "sm_90", min_loads: int = 4) -> dict:
    """{kernel: [LoopMix]} of :func:`load_loops` for every kernel in ``cuda`` compiled
    by nvcc for ``arch``, cached as :func:`sass_report`'s."""
    def make(nvcc, cuda, arch):
        return _sass(nvcc, cuda, arch, lambda text: load_loops(text, min_loads))
    report = cached_report(f"load_reports_{min_loads}_{_READER}", cuda, arch, make)
    return {name: [LoopMix(**mix) for mix in mixes] for name, mixes in report.items()}


def forms_report(cuda: str, arch: str = "sm_90") -> dict:
    """{kernel: {form: count}} of :func:`memory_forms` (the shared-memory
    instructions) for every kernel in ``cuda`` compiled by nvcc for ``arch``, cached as
    :func:`sass_report`'s."""
    return cached_report(f"forms_reports_{_READER}", cuda, arch,
                         lambda nvcc, cuda, arch: _sass(nvcc, cuda, arch, memory_forms))


def fma_report(cuda: str, arch: str = "sm_80", min_ffma: int = 64) -> dict:
    """{kernel: LoopMix} of the FFMA hot loop (of at least ``min_ffma`` FFMAs) of every
    fp32 kernel in ``cuda``, as :func:`sass_report` for tensor cores."""
    def make(nvcc, cuda, arch):
        return _sass(nvcc, cuda, arch, lambda text: fma_loops(text, min_ffma))
    report = cached_report(f"fma_reports_{min_ffma}_{_READER}", cuda, arch, make)
    return {name: LoopMix(**mix) for name, mix in report.items()}
