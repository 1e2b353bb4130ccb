"""Design cards: what decides a kernel's speed, measured without a GPU.

A card puts together, for one call of an op at one shape:

* for each kernel it launches, what ptxas reports for sm_75, sm_80 and sm_90
  (registers, spill stores and loads, stack, static shared memory) and the theoretical
  occupancy that follows with the launch's block and dynamic shared memory;
* what the emulator counts in that launch (:func:`attnbook.profile`): global bytes,
  requests, 32-byte sectors per request and bytes per request; shared-memory wavefronts
  per request and their ratio to the conflict-free count;
* for a tensor-core kernel, the instruction mix of its hot loop in the SASS of its
  sm_80 and sm_90 builds (:mod:`attnbook.toolchain.sass`): instructions beside each
  HMMA, ldmatrix per HMMA, barriers per 256 HMMA, MUFU, FMNMX, WARPSYNC and spills
  there. The H200 showed what this column predicts and the memory side did not
  (``bench/results/counters``): a kernel that issues 13 instructions per mma runs at
  a third of FlashAttention-2, which issues under 4;
* for the fp32 kernels of chapters 4, 7 and 11 the same reading with FFMA as the work:
  the loop that issues the most FFMAs per other instruction (at least 64 of them), its
  FFMAs per other instruction, shared loads per FFMA and spills there. A static count
  of the densest loop: the most FFMA share the kernel can reach, not its average;
* a **lower bound** on the call's time on a T4, an A100 and an H100:
  max(FLOPs / peak, bytes / bandwidth), once with the least traffic the operation needs
  and once with the global bytes the kernels request. A bound, never a measurement:
  caches, latency and occupancy only make a kernel slower than it.

Deterministic: the same kernels at the same shape give the same card anywhere.

    python -m attnbook.bench --cards        # every card of the package
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from typing import Callable

import torch

from ..ops.attention import three_kernels
from ..ops.backward import flash_backward
from ..ops.backward_tc import flash_tc_backward
from ..ops.decode import attention_with_kvcache
from ..ops.flash import flash_attention_fp32
from ..ops.flash_hopper import flash_attention_hopper
from ..ops.flash_tc import flash_attention_tc
from ..ops.gemm import gemm
from ..ops.kv_cache import kv_cache_append
from ..ops.softmax import SOFTMAX_KERNELS, softmax
from ..toolchain import occupancy, profile, ptxas_report, wrap
from ..toolchain.compile import kernel_source
from ..toolchain.sass import find_nvdisasm, fma_report, sass_report
from .harness import PEAKS, attention_bytes, attention_flops, markdown_table

__all__ = ["Spec", "Card", "design_card", "SPECS", "card", "ARCHS", "DEVICES",
           "measures", "over_budget", "budgets", "budget_toml", "BUDGETS",
           "lower_bound_us", "summary", "compact", "hot_loops", "fma_loops",
           "SASS_ARCHS", "FMA_CHAPTERS"]

ARCHS = ("sm_75", "sm_80", "sm_90")
# The architectures whose tensor-core SASS the card reads: sm_75 splits each m16n8k16
# into two m16n8k8, so its counts per HMMA are not comparable.
SASS_ARCHS = ("sm_80", "sm_90")
# The chapters whose fp32 kernels get the FFMA reading of their SASS: chapter 4's GEMM
# (its register-blocked loop, the reference), chapter 7's fused forward and chapter
# 11's backward.
FMA_CHAPTERS = ("4", "7", "11")
# The devices the bounds are for, with the harness's datasheet peaks (A100: 40 GB;
# H100: SXM5).
DEVICES = {name: dict(PEAKS)[name] for name in ("T4", "A100", "H100")}


@dataclasses.dataclass(frozen=True)
class Spec:
    """How to draw one card: ``run(*prepare())`` calls the op on CPU tensors (only
    ``run`` is profiled); ``source`` is the kernel file ptxas compiles; ``kernels``
    names, launch by launch, the instantiation ptxas compiled for it
    (``"flash_fwd_fp32_kernel<64, 64, 32>"``; "" where the kernel's name is enough);
    ``flops`` (FMA = 2) and ``min_bytes`` are the operation's own, ``tensor_cores``
    whether its FLOPs run on them, ``archs`` the architectures of :data:`ARCHS` that
    run it (ptxas's figures are drawn for those)."""
    name: str
    chapter: str
    shape: str
    source: str
    run: Callable
    flops: float
    min_bytes: float
    kernels: tuple = ()
    tensor_cores: bool = False
    prepare: Callable = tuple
    archs: tuple = ARCHS


@dataclasses.dataclass
class KernelCard:
    kernel: str        # as ptxas names it
    grid: tuple
    block: tuple
    dynamic_shared: int
    static: dict       # arch -> ptxas's numbers, occupancy and what bounds it
    memory: dict       # "global load" ... -> requests, bytes, per-request figures
    sass: dict = dataclasses.field(default_factory=dict)   # arch -> its hot LoopMix
    fma: dict = dataclasses.field(default_factory=dict)    # arch -> its FFMA LoopMix

    @property
    def short_name(self) -> str:
        """``flash_fwd_fp32_kernel<64, 64, 32>``: the name without return type and
        parameters."""
        return re.sub(r"^void ", "", self.kernel.split("(")[0])


@dataclasses.dataclass
class Card:
    spec: Spec
    kernels: list
    bounds_us: dict    # device -> (bound with the least bytes, with counted bytes)

    @property
    def counted_bytes(self) -> int:
        return sum(k.memory[f"global {op}"]["bytes"] for k in self.kernels
                   for op in ("load", "store"))

    @property
    def traffic(self) -> float:
        """Global bytes counted over the least the operation needs."""
        return self.counted_bytes / self.spec.min_bytes

    @property
    def fmas_per_shared_load(self):
        """The operation's FMAs (FLOPs / 2) per shared-memory load instruction of a
        thread (32 per warp-wide request), over every launch; None without shared
        loads. A CUDA core does one FMA per cycle, and an SM issues a fraction of that
        rate in shared loads: below a few FMAs per load, the loads set the pace."""
        loads = 32 * sum(k.memory["shared load"]["requests"] for k in self.kernels)
        return self.spec.flops / 2 / loads if loads else None

    def __str__(self):
        s = self.spec
        out = [f"{s.name} (chapter {s.chapter}, {s.shape}): {s.flops / 1e6:.1f} MFLOP, "
               f"least traffic {s.min_bytes / 1e6:.2f} MB, counted global "
               f"{self.counted_bytes / 1e6:.2f} MB"]
        if self.fmas_per_shared_load is not None:
            out[0] += f", {self.fmas_per_shared_load:.2f} FMAs per shared load"
        for k in self.kernels:
            out.append(f"  {k.short_name}  grid {k.grid} block {k.block} "
                       f"dyn. shared {k.dynamic_shared} B")
            for arch, st in k.static.items():
                out.append(f"    {arch}: {st['registers']} regs, spills "
                           f"{st['spill_stores']}/{st['spill_loads']} B, stack "
                           f"{st['stack_bytes']} B, shared {st['shared_bytes']} B, "
                           f"occupancy {st['occupancy']:.1%} "
                           f"({', '.join(st['bound_by'])})")
            for what, m in k.memory.items():
                if not m["requests"]:
                    continue
                per = (f"{m['sectors_per_request']:.2f} sectors/req"
                       if what.startswith("global")
                       else f"{m['wavefronts_per_request']:.2f} wavefronts/req, "
                            f"{m['conflict_ways']:.1f}x conflict-free")
                out.append(f"    {what}: {m['requests']} req, {m['bytes']} B, "
                           f"{m['bytes_per_request']:.0f} B/req, {per}")
            for arch, mix in k.sass.items():
                out.append(f"    {arch} hot loop: {mix.hmma} HMMA, "
                           f"{mix.other_per_hmma:.2f} other/HMMA, "
                           f"{mix.ldsm_per_hmma:.2f} LDSM/HMMA, "
                           f"{mix.barriers_per_256_hmma:.1f} BAR/256 HMMA, MUFU "
                           f"{mix.count('MUFU')}, FMNMX {mix.count('FMNMX')}, "
                           f"WARPSYNC {mix.count('WARPSYNC')}, local {mix.local}")
            for arch, mix in k.fma.items():
                out.append(f"    {arch} FFMA loop: {mix.hmma} FFMA, "
                           f"{mix.ffma_per_other:.2f} FFMA/other, "
                           f"{mix.lds_per_ffma:.3f} LDS/FFMA, BAR "
                           f"{mix.count('BAR')}, local {mix.local}")
        out.append("  lower bound (least bytes / counted bytes): " + ", ".join(
            f"{d} {a:.2f} / {b:.2f} µs" for d, (a, b) in self.bounds_us.items()))
        return wrap("\n".join(out))


def _base(name: str) -> str:
    """``flash_fwd_fp32_kernel`` of "void flash_fwd_fp32_kernel<64, 64, 32>(...)" and of
    the emulator's "flash_fwd_fp32_kernel<D, Br, Bc>"."""
    name = re.sub(r"^void ", "", name)
    return re.split(r"[<(]", name, maxsplit=1)[0].strip()


def _instance(report: dict, launched: str, compiled: str) -> str:
    """The ptxas name of the kernel a launch of ``launched`` ran: the one named
    ``compiled`` (its name and template arguments), else the only one of its name."""
    if compiled:
        found = [k for k in report
                 if re.sub(r"^void ", "", k).startswith(compiled + "(")]
    else:
        found = [k for k in report if _base(k) == _base(launched)]
    if len(found) != 1:
        raise LookupError(f"{len(found)} compiled kernels match the launch of "
                          f"{launched!r} ({found[:4]}): name the instantiation in "
                          "Spec.kernels")
    return found[0]


def _memory(launch) -> dict:
    out = {}
    for space in ("global", "shared"):
        for op in ("load", "store"):
            t = launch.total(space, op)
            row = dict(requests=t.requests, bytes=t.bytes,
                       bytes_per_request=t.bytes / t.requests if t.requests else 0.0)
            if space == "global":
                row["sectors_per_request"] = t.per_request
            else:
                row["wavefronts_per_request"] = t.per_request
                row["conflict_ways"] = t.conflict_ways
            out[f"{space} {op}"] = row
    return out


def design_card(spec: Spec) -> Card:
    """The card of ``spec``: its run under the emulator's profile and ptxas for every
    architecture of ``spec.archs`` (nvcc needed, no GPU); for a tensor-core kernel, its
    SASS for :data:`SASS_ARCHS` where nvdisasm is installed (for the fp32 kernels of
    :data:`FMA_CHAPTERS`, its FFMA loop)."""
    args = spec.prepare()
    with profile() as report:
        spec.run(*args)
    text = kernel_source(spec.source)
    static = {arch: ptxas_report(text, arch) for arch in spec.archs}
    # an architecture's own code ("sm_90a") is read where it is built
    sass_archs = [a for a in spec.archs if a in SASS_ARCHS or a.endswith("a")]
    loops = ({arch: sass_report(text, arch) for arch in sass_archs}
             if spec.tensor_cores and find_nvdisasm() else {})
    fmas = ({arch: fma_report(text, arch) for arch in SASS_ARCHS}
            if spec.chapter in FMA_CHAPTERS and not spec.tensor_cores
            and find_nvdisasm() else {})
    kernels = []
    names = spec.kernels or ("",) * len(report.launches)
    if len(names) != len(report.launches):
        raise LookupError(f"{spec.name}: {len(report.launches)} launches, "
                          f"{len(names)} names in Spec.kernels")
    for launch, compiled in zip(report.launches, names):
        name = _instance(static[spec.archs[0]], launch.kernel, compiled)
        threads = launch.block[0] * launch.block[1] * launch.block[2]
        per_arch = {}
        for arch in spec.archs:
            st = dict(static[arch][name])
            occ = occupancy(st["registers"], st["shared_bytes"] + launch.shared_bytes,
                            threads, arch.rstrip("a"))
            per_arch[arch] = dict(st, occupancy=occ["occupancy"], blocks=occ["blocks"],
                                  bound_by=occ["bound_by"])
        sass = {arch: loops[arch][name] for arch in loops if name in loops[arch]}
        fma = {arch: fmas[arch][name] for arch in fmas if name in fmas[arch]}
        kernels.append(KernelCard(name, launch.grid, launch.block, launch.shared_bytes,
                                  per_arch, _memory(launch), sass, fma))
    card = Card(spec, kernels, {})
    card.bounds_us = {device: tuple(lower_bound_us(spec.flops, nbytes, device,
                                                   spec.tensor_cores)
                                    for nbytes in (spec.min_bytes, card.counted_bytes))
                      for device in DEVICES}
    return card


def lower_bound_us(flops: float, nbytes: float, device: str,
                   tensor_cores: bool = False) -> float:
    """No kernel on ``device`` does ``flops`` and moves ``nbytes`` of DRAM traffic in
    less than max(flops / peak, bytes / bandwidth): microseconds."""
    p = DEVICES[device]
    peak = p["fp16_tflops" if tensor_cores else "fp32_tflops"] * 1e12
    return 1e6 * max(flops / peak, nbytes / (p["bandwidth_gbs"] * 1e9))


def summary(cards) -> str:
    """One Markdown row per kernel of ``cards`` (sm_80's ptxas figures; the worst
    sectors per global request; shared wavefronts over conflict-free; the card's
    FMAs per shared load; traffic over the least and its A100 bound)."""
    rows = ["| card | kernel | regs | spill B | stack B | occupancy | sectors/req "
            "| smem ways | FMAs/shared load | traffic | A100 bound µs |",
            "|" + " --- |" * 11]
    for c in cards:
        m = measures(c)
        for k, f in zip(c.kernels, m["kernels"]):
            st = k.static["sm_80"]
            rows.append(
                f"| {c.spec.name} | `{k.short_name}` | "
                f"{st['registers']} | {st['spill_stores'] + st['spill_loads']} | "
                f"{st['stack_bytes']} | {st['occupancy']:.1%} | "
                f"{max(f['load_sectors'], f['store_sectors']):.1f} | "
                f"{f['conflict_ways']:.1f} | "
                + (f"{m['fmas_per_shared_load']:.2f}" if "fmas_per_shared_load" in m
                   else "–") + " | "
                f"{m['traffic']:.2f}x | "
                f"{c.bounds_us['A100'][0]:.2f} |")
    return "\n".join(rows)


class TextTable(str):
    """A narrow text table, as printed (a terminal, in 88 columns), that a notebook
    displays as a Markdown table of the same cells."""

    def __new__(cls, header, rows, text: str):
        table = super().__new__(cls, text)   # headings that may wrap at their "/"
        table.markdown = markdown_table([h.replace("/", " / ") for h in header], rows)
        return table

    def _repr_markdown_(self):
        return self.markdown._repr_markdown_()

    def __repr__(self):
        return str(self)


def _labels(card) -> list[str]:
    """Its kernels' names without their common prefix (and without "_kernel")."""
    full = [k.short_name for k in card.kernels]
    prefix = os.path.commonprefix(full)
    prefix = prefix[:prefix.rfind("_") + 1]
    return [n[len(prefix):].replace("_kernel", "") for n in full]


def compact(cards, arch: str = "sm_80") -> TextTable:
    """A narrow table of ``cards``, a row per kernel: ``arch``'s registers, spill
    and stack bytes and occupancy, the kernel's sectors per global load request and
    its shared loads' wavefronts over the conflict-free count ("–": no shared load),
    and once per card, on its first line, the card's FMAs per shared load (what the
    chapters show, in 88 columns). A card of several kernels takes a line of its own,
    its kernels' rows named without their common prefix."""
    lines = []   # (name, FMAs per shared load, kernel or None)
    for c in cards:
        fmas = c.fmas_per_shared_load
        fmas = "–" if fmas is None else f"{fmas:.2f}"
        if len(c.kernels) == 1:
            lines.append((c.spec.name, fmas, c.kernels[0]))
            continue
        lines.append((c.spec.name, fmas, None))
        lines += [("  " + label, "", k) for label, k in zip(_labels(c), c.kernels)]
    header = [arch, "regs", "spill+stack B", "occupancy", "FMAs/ld", "sectors/ld",
              "smem ways"]
    cells = []
    for name, fmas, k in lines:
        if k is None:   # a card's own line: its FMAs per shared load alone
            cells.append([name, "", "", "", fmas, "", ""])
            continue
        st = k.static[arch]
        local = st["spill_stores"] + st["spill_loads"] + st["stack_bytes"]
        ways = k.memory["shared load"]["conflict_ways"]
        cells.append([name, f"{st['registers']:d}", f"{local:d}",
                      f"{st['occupancy']:.1%}", fmas,
                      f"{k.memory['global load']['sectors_per_request']:.1f}",
                      f"{ways:.1f}" if ways else "–"])
    width = max(24, *(len(row[0]) + 1 for row, (_, _, k) in zip(cells, lines)
                      if k is not None))
    widths = (5, 14, 10, 8, 11, 10)
    text = [f"{arch:{width}s}" +
            "".join(f"{h:>{w}}" for h, w in zip(header[1:], widths))]
    for row, (_, _, k) in zip(cells, lines):
        if k is None:   # its name may run into the empty columns
            text.append(f"{row[0]:{width + 29}s}{row[4]:>8}")
        else:
            text.append(f"{row[0]:{width}s}" +
                        "".join(f"{c:>{w}}" for c, w in zip(row[1:], widths)))
    # in Markdown, a card's kernels as code under its line ("<true>" is no HTML tag)
    shown = [[f"`{row[0].strip()}`" if row[0].startswith("  ") else row[0], *row[1:]]
             for row in cells]
    return TextTable(header, shown, "\n".join(text))


def _loop_table(cards, arch, field, columns) -> TextTable:
    """A row per kernel of ``cards`` with a loop in ``field`` (``sass`` or ``fma``) for
    ``arch``: its card's name (and the kernel's, after a colon, for a card of several
    kernels), then a cell per (heading, width, figure of the loop) of
    ``columns``."""
    named = []
    for c in cards:
        looped = [(label, k) for label, k in zip(_labels(c), c.kernels)
                  if arch in getattr(k, field)]
        named += [(c.spec.name + (f": {label.split('<')[0]}" if len(c.kernels) > 1
                                  else ""), getattr(k, field)[arch])
                  for label, k in looped]
    width = max([24] + [len(name) + 1 for name, _ in named])
    rows = [[name] + [text(m) for _, _, text in columns] for name, m in named]
    lines = [f"{arch:{width}s}" + "".join(f"{h:>{w}}" for h, w, _ in columns)]
    lines += [f"{row[0]:{width}s}" + "".join(f"{c:>{w}}" for c, (_, w, _) in
                                             zip(row[1:], columns)) for row in rows]
    return TextTable([arch] + [h for h, _, _ in columns], rows, "\n".join(lines))


# The columns of hot_loops: heading -> (width, the figure of a LoopMix as text).
HOT_LOOP_COLUMNS = {
    "HMMA": (5, lambda m: f"{m.hmma:d}"),
    "other/HMMA": (11, lambda m: f"{m.other_per_hmma:.2f}"),
    "LDSM/HMMA": (10, lambda m: f"{m.ldsm_per_hmma:.2f}"),
    "BAR/256": (8, lambda m: f"{m.barriers_per_256_hmma:.1f}"),
    "MUFU": (5, lambda m: f"{m.count('MUFU'):d}"),
    "FMNMX": (6, lambda m: f"{m.count('FMNMX'):d}"),
    "WARPSYNC": (9, lambda m: f"{m.count('WARPSYNC'):d}"),
    "local": (6, lambda m: f"{m.local:d}")}


def hot_loops(cards, arch: str = "sm_90",
              columns=tuple(HOT_LOOP_COLUMNS)) -> TextTable:
    """A narrow table of the tensor-core kernels of ``cards``: their hot loop in
    ``arch``'s SASS, a row per kernel (HMMA there, other instructions, ldmatrix and
    barriers per HMMA, MUFU, FMNMX and WARPSYNC counts, local-memory accesses; or the
    ``columns`` of :data:`HOT_LOOP_COLUMNS` named)."""
    return _loop_table(cards, arch, "sass",
                       [(name, *HOT_LOOP_COLUMNS[name]) for name in columns])


def fma_loops(cards, arch: str = "sm_90") -> TextTable:
    """A narrow table of the fp32 kernels of ``cards`` with an FFMA loop in ``arch``'s
    SASS: its FFMAs, FFMAs per other instruction, shared loads per FFMA, barriers and
    local-memory accesses."""
    return _loop_table(cards, arch, "fma", [
        ("FFMA", 5, lambda m: f"{m.hmma:d}"),
        ("FFMA/other", 11, lambda m: f"{m.ffma_per_other:.2f}"),
        ("LDS/FFMA", 9, lambda m: f"{m.lds_per_ffma:.3f}"),
        ("BAR", 4, lambda m: f"{m.count('BAR'):d}"),
        ("local", 6, lambda m: f"{m.local:d}")])


# ---- the package's kernels, each at a shape the emulator runs in seconds ------------
def _randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


B, H, S, D = 1, 2, 128, 64
_SHAPE = f"B={B} H={H} S={S} D={D}"


def _attention(dtype=torch.float32, d=D):
    return [_randn(B, H, S, d, dtype=dtype, seed=i) for i in range(3)]


def _softmax_spec(kernel):
    rows, n = 32, 1024
    # FLOPs: 5 per element (max, subtract, exp, sum, scale); bytes: read x, write y.
    return Spec(f"softmax {kernel}", "3", f"[{rows}, {n}]", "softmax.cu",
                lambda: softmax(_randn(rows, n), kernel), flops=5.0 * rows * n,
                min_bytes=8.0 * rows * n)


def _gemm_spec(step):
    n = 128
    a, b = _randn(n, n), _randn(n, n, seed=1)
    kernel = {1: "gemm_naive<false>", 2: "gemm_smem<false, 16>",
              3: "gemm_regblock<false, false>", 4: "gemm_regblock<false, true>"}[step]
    return Spec(f"gemm step {step}", "4", f"M=N=K={n}", "gemm.cu",
                lambda: gemm(a, b, step=step), flops=2.0 * n ** 3,
                min_bytes=12.0 * n * n, kernels=(kernel,))


def _decode_run(paged, dtype=torch.float16):
    """One step of two sequences (512 and 301 cached keys); paged: pages of 16
    positions in reversed order."""
    q = _randn(2, 8, 1, 128, dtype=dtype)
    cache = [_randn(2, 2, 512, 128, dtype=dtype, seed=s) for s in (1, 2)]
    lengths = torch.tensor([512, 301], dtype=torch.int32)
    table = None
    if paged:   # page p of sequence b is pool page 63 − (32 b + p)
        table = torch.arange(64, dtype=torch.int32).flip(0).view(2, 32)
        cache = [c.view(2, 2, 32, 16, 128).transpose(1, 2).reshape(64, 2, 16, 128)
                 .flip(0).contiguous() for c in cache]
    attention_with_kvcache(q, *cache, cache_seqlens=lengths, block_table=table,
                           num_splits=1)


def _append_run():
    caches = [torch.zeros(2, 2, 512, 128, dtype=torch.float16) for _ in range(2)]
    new = [_randn(2, 2, 1, 128, dtype=torch.float16, seed=s) for s in (1, 2)]
    kv_cache_append(*caches, *new, cache_seqlens=torch.tensor([7, 300],
                                                              dtype=torch.int32))


def _forward_for_backward(d, dtype=torch.float32):
    q, k, v = _attention(dtype, d)
    forward = flash_attention_fp32 if dtype == torch.float32 else flash_attention_tc
    o, lse = forward(q, k, v, return_lse=True)
    return q, k, v, o, lse


def _backward_run(step, q, k, v, o, lse):
    masks = (None, None, None, [0, 0, 0], q.shape[-1] ** -0.5)
    if isinstance(step, str):   # "tc 1", "tc 2"
        flash_tc_backward(torch.ones_like(o), q, k, v, o, lse, *masks, int(step[3:]))
    else:
        flash_backward(torch.ones_like(o), q, k, v, o, lse, *masks, step)


def _backward_spec(step, d):
    """Chapter 11's backward, step ``step`` at head dim ``d`` (steps "tc 1" and "tc 2":
    the tensor-core backward's, fp16). FLOPs: 2.5 times the forward's (FlashAttention's
    convention); bytes: read q, k, v, o, dO and the lse, write dq, dk, dv."""
    tc = isinstance(step, str)
    rows = 32 if d == 64 else 16   # step 1's dK/dV kernel's query tile
    delta = "flash_bwd_tc_delta_kernel<__half>"
    kernels = {1: ("", f"flash_bwd_dkdv_kernel<{d}, {16 if d == 64 else 8}, 32>",
                   f"flash_bwd_dq_kernel<{d}, 64, 32>"),
               2: ("", f"flash_bwd_dkdv_lanes_kernel<{d}>",
                   f"flash_bwd_dq_lanes_kernel<{d}>"),
               "tc 1": (delta, f"flash_bwd_tc_dkdv_kernel<__half, {d}, {rows}, 4>",
                        f"flash_bwd_tc_dq_kernel<__half, {d}, 32, 4>"),
               "tc 2": (delta, f"flash_bwd_tc_fa2_kernel<__half, {d}, 64, 8>",
                        "flash_bwd_tc_dq_sum_kernel<__half>")}
    name = (f"flash tc backward step {step[3:]}" if tc
            else f"flash fp32 backward step {step}")
    shape = _SHAPE.replace(f"D={D}", f"D={d}") + (" fp16" if tc else "")
    return Spec(f"{name}{'' if d == D else f' D={d}'}", "11", shape,
                "flash_bwd_tc.cu" if tc else "flash_bwd_fp32.cu",
                lambda *fwd: _backward_run(step, *fwd),
                flops=2.5 * attention_flops(B, H, S, S, d),
                min_bytes=(2 * attention_bytes(B, H, S, S, d, itemsize=2 if tc else 4)
                           + 4.0 * B * H * S),
                prepare=lambda: _forward_for_backward(
                    d, torch.float16 if tc else torch.float32),
                kernels=kernels[step], tensor_cores=tc,
                # step 2's tiles need sm_80's shared memory: sm_75 runs step 1
                archs=SASS_ARCHS if step == "tc 2" else ARCHS)


_TC_KERNELS = {
    1: "flash_tc_smem_p_kernel<__half, 64, 64, 4, LaneFragments>",
    2: "flash_tc_smem_p_kernel<__half, 64, 64, 4, LdmatrixFragments<false> >",
    3: "flash_tc_smem_p_kernel<__half, 64, 64, 4, LdmatrixFragments<true> >",
    4: "flash_tc_pipeline_kernel<__half, 64, 64, 4, false>",
    5: "flash_tc_pipeline_kernel<__half, 64, 64, 4, true>",
    6: "flash_tc_fa2_kernel<__half, 64, 128, 4>"}
_TILED = ("gemm_regblock<true, true>", "", "", "gemm_regblock<false, true>")
_FWD = dict(flops=attention_flops(B, H, S, S, D),
            min_bytes=attention_bytes(B, H, S, S, D))
SPECS = [
    *(_softmax_spec(k) for k in SOFTMAX_KERNELS),
    *(_gemm_spec(step) for step in (1, 2, 3, 4)),
    Spec("naive attention", "2", _SHAPE, "naive_attention.cu",
         lambda: three_kernels(*_attention(), impl="naive"), **_FWD),
    Spec("tiled attention", "4", _SHAPE, "tiled_attention.cu",
         lambda: three_kernels(*_attention(), impl="tiled"),
         kernels=_TILED, **_FWD),
    # Chapter 5's two paths to a stride of 4: the keys gathered, or every score masked.
    # Both are charged the strided work: a quarter of the keys.
    *(Spec(f"tiled attention, stride 4{' dense' if dense else ''}", "5",
           _SHAPE + ", stride 4", "tiled_attention.cu",
           lambda dense=dense: three_kernels(*_attention(), impl="tiled", stride=4,
                                             gather=not dense),
           kernels=_TILED, flops=attention_flops(B, H, S, S // 4, D),
           min_bytes=attention_bytes(B, H, S, S // 4, D))
      for dense in (False, True)),
    Spec("flash fp32 step 1", "7", _SHAPE, "flash_fp32.cu",
         lambda: flash_attention_fp32(*_attention(), step=1),
         kernels=("flash_fwd_fp32_kernel<64, 64, 32>",), **_FWD),
    *(Spec(f"flash fp32 step {step}{'' if d == D else f' D={d}'}", "7",
           _SHAPE.replace(f"D={D}", f"D={d}"), "flash_fp32.cu",
           lambda d=d, step=step: flash_attention_fp32(*_attention(d=d), step=step),
           kernels=(f"flash_fwd_fp32_{kernel}_kernel<{d}>",),
           flops=attention_flops(B, H, S, S, d),
           min_bytes=attention_bytes(B, H, S, S, d))
      for step, kernel in ((2, "regtile"), (3, "occupancy")) for d in (D, 128)),
    *(Spec(f"flash tc step {step}", "8", _SHAPE + " fp16", "flash_tc.cu",
           lambda step=step: flash_attention_tc(*_attention(torch.float16), step=step),
           flops=_FWD["flops"], min_bytes=_FWD["min_bytes"] / 2, tensor_cores=True,
           kernels=(_TC_KERNELS[step],))
      for step in (1, 2, 3, 4, 5, 6)),
    Spec("flash tc step 6 D=128", "8", _SHAPE.replace(f"D={D}", "D=128") + " fp16",
         "flash_tc.cu",
         lambda: flash_attention_tc(*_attention(torch.float16, 128), step=6),
         flops=attention_flops(B, H, S, S, 128),
         min_bytes=attention_bytes(B, H, S, S, 128, itemsize=2), tensor_cores=True,
         kernels=("flash_tc_fa2_kernel<__half, 128, 64, 4>",)),
    Spec("kv-cache append", "9", "B=2 Hkv=2 D=128 fp16, one token", "kv_cache.cu",
         _append_run, flops=0.0, min_bytes=2 * 2.0 * 2 * 2 * 128 * 2,
         kernels=("kv_cache_append_kernel<unsigned short>",)),
    # fp16 runs the tensor-core step, fp32 the step a lane per key
    *(Spec(f"decode{' paged' if paged else ''}{' fp32' if size == 4 else ''}", "9",
           f"B=2 H=8 Hkv=2 D=128 {'fp32' if size == 4 else 'fp16'}, 512 and 301 keys"
           + (", pages of 16" if paged else ""), "decode.cu",
           lambda paged=paged, dtype=dtype: _decode_run(paged, dtype),
           flops=4.0 * 8 * 128 * (512 + 301),
           min_bytes=size * (2.0 * 2 * 128 * (512 + 301) + 2 * 8 * 128 * 2),
           kernels=(kernel,))
      for paged in (False, True)
      for size, dtype, kernel in ((2, torch.float16, "decode_tc_kernel<__half, 128>"),
                                  (4, torch.float32, "decode_kernel<float, 128>"))),
    *(_backward_spec(step, d) for step in (1, 2, "tc 1", "tc 2") for d in (D, 128)),
    # chapter 12's: sm_90a code
    *(Spec(f"hopper step {step}{'' if d == D else f' D={d}'}", "12",
           _SHAPE.replace(f"D={D}", f"D={d}") + " fp16", "flash_hopper.cu",
           lambda d=d, step=step: flash_attention_hopper(*_attention(torch.float16, d),
                                                         step=step),
           flops=attention_flops(B, H, S, S, d),
           min_bytes=attention_bytes(B, H, S, S, d, itemsize=2), tensor_cores=True,
           kernels=(f"{kernel}<__half, {d}, 64{tail}>",), archs=("sm_90a",))
      for step, kernel, tail in ((1, "flash_hopper_wgmma_kernel", ""),
                                 (2, "flash_hopper_tma_kernel", ""),
                                 *((n, "flash_hopper_ws_kernel",
                                    f", {2 + (n == 5)}, {n}") for n in (3, 4, 5)))
      for d in (D, 128)),
]


def card(name: str) -> Card:
    """The card of the package spec named ``name`` (see :data:`SPECS`)."""
    for spec in SPECS:
        if spec.name == name:
            return design_card(spec)
    raise KeyError(f"no card {name!r}; there are {[s.name for s in SPECS]}")


# ---- budgets: what each card may not exceed (bench/budgets.toml) -------------------
BUDGETS = pathlib.Path(__file__).resolve().parent / "budgets.toml"
SASS_MEASURES = ("other_per_hmma", "ldsm_per_hmma", "barriers_per_256_hmma",
                 "hot_loop_local", "ffma_per_other")
FLOORS = ("occupancy", "ffma_per_other")   # figures a budget bounds from below
STATIC = ("registers", "spill_bytes", "stack_bytes", "occupancy", *SASS_MEASURES)


def measures(card: Card) -> dict:
    """The figures a budget bounds: the traffic ratio (counted global bytes over the
    least), the FMAs per shared load (where there are shared loads), and per kernel
    (launch order) the most registers, spill bytes (stores and loads) and stack over
    :data:`ARCHS`, the least occupancy, global sectors per load and store request, and
    shared wavefronts over the conflict-free count; for a kernel with a tensor-core hot
    loop, the most over :data:`SASS_ARCHS` of its other instructions, ldmatrix and
    barriers per HMMA and its local-memory accesses there; for one with an FFMA loop,
    the least FFMAs per other instruction there."""
    def per_kernel(k):
        st = k.static.values()
        loops = k.sass.values()
        sass = dict(other_per_hmma=max(m.other_per_hmma for m in loops),
                    ldsm_per_hmma=max(m.ldsm_per_hmma for m in loops),
                    barriers_per_256_hmma=max(m.barriers_per_256_hmma
                                              for m in loops),
                    hot_loop_local=max(m.local for m in loops)) if loops else {}
        if k.fma:
            sass["ffma_per_other"] = min(m.ffma_per_other for m in k.fma.values())
        return dict(
            registers=max(s["registers"] for s in st),
            spill_bytes=max(s["spill_stores"] + s["spill_loads"] for s in st),
            stack_bytes=max(s["stack_bytes"] for s in st),
            occupancy=min(s["occupancy"] for s in st),
            load_sectors=k.memory["global load"]["sectors_per_request"],
            store_sectors=k.memory["global store"]["sectors_per_request"],
            conflict_ways=max(k.memory[f"shared {op}"]["conflict_ways"]
                              for op in ("load", "store")), **sass)
    out = dict(traffic=card.traffic)
    if card.fmas_per_shared_load is not None:
        out["fmas_per_shared_load"] = card.fmas_per_shared_load
    return dict(out, kernels=[per_kernel(k) for k in card.kernels])


def over_budget(card: Card, budget: dict, static: bool = True) -> list[str]:
    """Each figure of ``card`` beyond ``budget`` (occupancy, FMAs per shared load and
    FFMAs per other instruction: below it), as a sentence naming the card, the kernel
    and both numbers; the ptxas and SASS figures only if ``static`` (the SASS only
    where nvdisasm is)."""
    have, out = measures(card), []
    name = card.spec.name
    if have["traffic"] > budget["traffic"] + 1e-9:
        out.append(f"{name}: counted global bytes are {have['traffic']:.3f}x the "
                   f"least, budget {budget['traffic']}")
    floor = budget.get("fmas_per_shared_load")
    if floor is not None and have.get("fmas_per_shared_load", 0.0) < floor - 1e-9:
        out.append(f"{name}: {have.get('fmas_per_shared_load', 0.0):.3f} FMAs per "
                   f"shared load, budget {floor}")
    sass = static and find_nvdisasm() is not None
    for kernel, got, want in zip(card.kernels, have["kernels"], budget["kernels"]):
        if sass and "other_per_hmma" in want and "other_per_hmma" not in got:
            out.append(f"{name}: {kernel.short_name} has no hot loop of tensor-core "
                       "instructions")
        for key, limit in want.items():
            if key in STATIC and not static or key not in got:
                continue
            worse = got[key] < limit - 1e-9 if key in FLOORS else \
                got[key] > limit + 1e-9
            if worse:
                out.append(f"{name}: {kernel.short_name} {key} "
                           f"{got[key]:g}, budget {limit:g}")
    return out


def budget_toml(cards) -> str:
    """Today's figures of ``cards`` as the budgets file's text (ceilings rounded up,
    the occupancy floor down, to 3 decimals)."""
    import math
    from .. import toolchain
    lines = ["# Design-card budgets (attnbook.bench.cards): per card, the most its "
             "kernels may", "# use at its shape; tests/test_cards.py fails when one "
             "exceeds them. Written by", "# python -m attnbook.bench --cards "
             "--write-budgets; the ptxas figures hold for", "# the nvcc release below.",
             f"nvcc = {_release(toolchain.find_nvcc())!r}", ""]
    for c in cards:
        m = measures(c)
        lines += [f'["{c.spec.name}"]',
                  f"traffic = {math.ceil(m['traffic'] * 1000) / 1000}"]
        if "fmas_per_shared_load" in m:
            lines.append("fmas_per_shared_load = "
                         f"{math.floor(m['fmas_per_shared_load'] * 1000) / 1000}")
        lines.append("")
        for kernel, k in zip(c.kernels, m["kernels"]):
            lines += [f'[["{c.spec.name}".kernels]]   # {kernel.short_name}']
            lines += [f"{key} = " + str(v if isinstance(v, int) else (
                math.floor if key in FLOORS else math.ceil)(v * 1000) / 1000)
                for key, v in k.items()]
            lines.append("")
    return "\n".join(lines)


def _release(nvcc) -> str:
    """"13.0" of nvcc's --version, or "" without nvcc."""
    if nvcc is None:
        return ""
    import subprocess
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    found = re.search(r"release (\d+\.\d+)", out)
    return found.group(1) if found else ""


def budgets() -> dict:
    import tomllib
    return tomllib.loads(BUDGETS.read_text())
