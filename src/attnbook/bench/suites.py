"""Each chapter's benchmark: the workloads, the implementations timed side by side, and
the PyTorch baselines, as rows for :mod:`attnbook.bench`. Run on a GPU with::

    python -m attnbook.bench 02 03 04 05  # writes bench/results/<chapter>/<gpu>.json

or from a chapter's benchmark cell with
``ab.bench.run_or_load(chapter, SUITES[chapter])``.
"""
from __future__ import annotations

import itertools

import torch

from . import harness as bench
from ..ops.attention import attention, three_kernels
from ..ops.decode import choose_num_splits, decode_attention
from ..ops.flash import FLASH_FP32_STEPS, FLASH_FP32_SWEEP, flash_attention_fp32
from ..ops.flash_hopper import HOPPER_STEPS, flash_attention_hopper
from ..ops.flash_tc import TC_STEPS, TC_SWEEP, TC_TILES, flash_attention_tc
from ..ops.gemm import GEMM_STEPS, gemm
from ..ops.softmax import SOFTMAX_KERNELS, softmax
from .peers import flex_row

__all__ = ["SUITES", "PEER_SUITES", "HOPPER_SUITES", "attention_suite"]

B, H, D = 4, 8, 64   # the book's headline attention shape (fp32)


def _qkv(S, dtype=torch.float32, seed=0, d=D):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(B, H, S, d, device="cuda", dtype=dtype, generator=g)
            for _ in range(3)]


def attention_suite(impls, lengths=(256, 512, 1024, 2048), causal=False):
    """Every implementation in ``impls`` (names of ``attention(impl=...)``) and every
    PyTorch baseline, on [B, H, S, D] fp32 inputs for each S."""
    peaks, rows = bench.device_peaks(), []
    for S in lengths:
        q, k, v = _qkv(S)
        case = dict(S=S, B=B, H=H, D=D, causal=causal, dtype="float32")
        work = dict(flops=bench.attention_flops(B, H, S, S, D, causal),
                    bytes=bench.attention_bytes(B, H, S, S, D),
                    peaks=peaks)
        fns = {f"attnbook {impl}": (lambda impl=impl: attention(q, k, v,
                                                                is_causal=causal,
                                                                impl=impl))
               for impl in impls}
        fns.update({name: (lambda f=f: f(q, k, v))
                    for name, f in bench.pytorch_attention(causal).items()})
        rows += [bench.measure(name, fn, case, **work) for name, fn in fns.items()]
        del q, k, v
        torch.cuda.empty_cache()
    return rows


def chapter02():
    return attention_suite(["naive"])


def chapter03():
    """Row softmax of rows·n = 2²⁴ floats for several row lengths: bandwidth-bound, so
    the figure of merit is GB/s (8 bytes per element: one read, one write) against the
    peak, and against a plain copy of x, which moves the same bytes with no arithmetic:
    what this GPU sustains, short of its datasheet's peak."""
    peaks, rows = bench.device_peaks(), []
    for n in (128, 512, 2048, 8192, 32768):
        x = torch.randn(2**24 // n, n, device="cuda")
        case = dict(n=n, rows=x.shape[0])
        fns = {k: (lambda k=k: softmax(x, k)) for k in SOFTMAX_KERNELS}
        fns["torch.softmax"] = lambda: torch.softmax(x, -1)
        y = torch.empty_like(x)
        fns["copy"] = lambda: y.copy_(x)
        rows += [bench.measure(name, fn, case, flops=0, bytes=8.0 * x.numel(),
                               peaks=peaks)
                 for name, fn in fns.items()]
    return rows


def chapter04():
    """The GEMM progression on attention's two products (batch B·H; QKᵀ is S×S×D, PV is
    S×D×S), against torch.matmul in fp32 (TF32 off: the same arithmetic as ours); then
    the assembled tiled attention against the naive one and PyTorch."""
    peaks, rows = bench.device_peaks(), []
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for S in (1024, 2048):
            g = torch.Generator(device="cuda").manual_seed(0)
            q, k = (torch.randn(B * H, S, D, device="cuda", generator=g)
                    for _ in range(2))
            p = torch.randn(B * H, S, S, device="cuda", generator=g)
            for product, a, b, nt in (("QK^T", q, k, True), ("PV", p, k, False)):
                M, N, K = S, (S if nt else D), (D if nt else S)
                case = dict(S=S, product=product, M=M, N=N, K=K, batch=B * H)
                work = dict(flops=2.0 * B * H * M * N * K,
                            bytes=4.0 * B * H * (M * K + N * K + M * N), peaks=peaks)
                for step, what in GEMM_STEPS.items():
                    rows.append(bench.measure(f"{step}: {what}",
                                              lambda a=a, b=b, s=step, nt=nt:
                                                  gemm(a, b, transpose_b=nt, step=s),
                                              case, **work))
                rows.append(bench.measure("torch.matmul",
                                          lambda a=a, b=b, nt=nt:
                                              a @ (b.mT if nt else b),
                                          case, **work))
            del q, k, p
            torch.cuda.empty_cache()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return rows + attention_suite(["naive", "tiled"])


def chapter05():
    """Strided attention at S = 4096: gathering every stride-th key against computing
    all scores and masking, for several strides, with and without causal."""
    peaks, rows = bench.device_peaks(), []
    S = 4096
    q, k, v = _qkv(S)
    for causal in (False, True):
        for stride in (1, 2, 4, 8, 16, 32):
            case = dict(S=S, stride=stride, causal=causal)
            attended = S / stride
            work = dict(flops=bench.attention_flops(B, H, S, attended, D, causal),
                        bytes=bench.attention_bytes(B, H, S, S, D),
                        peaks=peaks)
            opts = dict(is_causal=causal, stride=stride)
            rows.append(bench.measure("tiled, gather",
                                      lambda o=opts: three_kernels(q, k, v, **o),
                                      case, **work))
            rows.append(bench.measure("tiled, dense + mask",
                                      lambda o=opts: three_kernels(q, k, v, **o,
                                                                   gather=False),
                                      case, **work))
    return rows


def chapter07():
    """The fused kernel's three steps against naive, tiled, eager and every SDPA backend
    at the headline shapes (B=4, H=8, D=64, fp32, S = 512 … 4096), without and with
    causal; then step 1's Br×Bc sweep at S = 2048."""
    lengths = (512, 1024, 2048, 4096)
    rows = (attention_suite(["tiled", "naive"], lengths)
            + attention_suite(["tiled"], lengths, causal=True))
    peaks, S = bench.device_peaks(), 2048
    for n in lengths:
        q, k, v = _qkv(n)
        for causal, step in itertools.product((False, True), FLASH_FP32_STEPS):
            rows.append(bench.measure(
                f"attnbook flash step {step}",
                lambda: flash_attention_fp32(q, k, v, is_causal=causal, step=step),
                dict(S=n, B=B, H=H, D=D, causal=causal, dtype="float32"),
                flops=bench.attention_flops(B, H, n, n, D, causal),
                bytes=bench.attention_bytes(B, H, n, n, D), peaks=peaks))
    q, k, v = _qkv(S)
    for causal in (False, True):
        work = dict(flops=bench.attention_flops(B, H, S, S, D, causal),
                    bytes=bench.attention_bytes(B, H, S, S, D),
                    peaks=peaks)
        for br, bc in FLASH_FP32_SWEEP:
            rows.append(bench.measure("flash sweep",
                                      lambda t=(br, bc): flash_attention_fp32(
                                          q, k, v, is_causal=causal, step=1, tiles=t),
                                      dict(S=S, Br=br, Bc=bc, causal=causal,
                                           sweep=True),
                                      **work))
    return rows


def _tc_case(dt, d, causal, S, peaks):
    """Chapter 8's inputs at one case, B·H = 16·2048 / S · 8 rows of work (the GPU
    stays full): q, k, v, the case's columns and its work for bench.measure."""
    b, h = max(1, 16 * 2048 // S), 16
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, h, S, d, device="cuda", dtype=dt, generator=g)
               for _ in range(3))
    case = dict(S=S, B=b, H=h, D=d, causal=causal, dtype=str(dt)[6:])
    work = dict(flops=bench.attention_flops(b, h, S, S, d, causal),
                bytes=bench.attention_bytes(b, h, S, S, d, itemsize=2),
                peaks=peaks, compute="fp16_tflops")
    return q, k, v, case, work


def _sdpa_backends(q, k, v, causal, names):
    """SDPA pinned to each backend of ``names`` ("flash", "efficient", "cudnn"), as
    calls named "sdpa <backend>"."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    def call(name):
        with sdpa_kernel(getattr(SDPBackend, f"{name.upper()}_ATTENTION")):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return {f"sdpa {n}": (lambda n=n: call(n)) for n in names}


def _tc_dtypes():
    """fp16, and bf16 where the GPU has it."""
    bf16 = torch.cuda.get_device_capability() >= (8, 0)
    return [torch.float16] + ([torch.bfloat16] if bf16 else [])


def chapter08():
    """Every step of the tensor-core kernel against SDPA's backends, side by side: fp16
    (and bf16 where the GPU has it), D = 64 and 128, causal and not, S = 512 … 16384
    with B·H = 16·2048 / S · 8 rows of work (the GPU stays full); then step 5's tile
    sweep."""
    peaks, rows = bench.device_peaks(), []
    for dt, d, causal, S in itertools.product(_tc_dtypes(), (64, 128), (False, True),
                                              (512, 1024, 2048, 4096, 8192, 16384)):
        q, k, v, case, work = _tc_case(dt, d, causal, S, peaks)
        fns = {f"step {n}": (lambda n=n: flash_attention_tc(q, k, v, is_causal=causal,
                                                             step=n)) for n in TC_STEPS}
        for tiles in TC_SWEEP[d]:
            fns[f"step 5 {tiles[0]}x{tiles[1]}"] = (
                lambda t=tiles: flash_attention_tc(q, k, v, is_causal=causal, step=5,
                                                   tiles=t))
        fns.update(_sdpa_backends(q, k, v, causal, ("flash", "efficient", "cudnn")))
        rows += [bench.measure(name, fn, case, **work) for name, fn in fns.items()]
        del q, k, v, fns
        torch.cuda.empty_cache()
    return rows


def chapter08_fa2():
    """The last step beside step 3 and SDPA's backends, side by side, at chapter 8's
    cases S = 1024, 4096 and 16384 (minutes on a GPU, where the whole suite takes
    longer than a short session)."""
    peaks, rows, last = bench.device_peaks(), [], max(TC_STEPS)
    for dt, d, causal, S in itertools.product(_tc_dtypes(), (64, 128), (False, True),
                                              (1024, 4096, 16384)):
        q, k, v, case, work = _tc_case(dt, d, causal, S, peaks)
        fns = {f"step {n}": (lambda n=n: flash_attention_tc(q, k, v, is_causal=causal,
                                                             step=n))
               for n in (3, last)}
        # the memory-efficient backend: the baseline where FlashAttention-2 cannot run
        fns.update(_sdpa_backends(q, k, v, causal, ("flash", "efficient", "cudnn")))
        rows += [bench.measure(name, fn, case, **work) for name, fn in fns.items()]
        del q, k, v, fns
        torch.cuda.empty_cache()
    return rows


def chapter12():
    """Chapter 12's Hopper steps beside chapter 8's last step and SDPA's flash and
    cuDNN backends, side by side, at chapter 8's cases (fp16 and bf16, D = 64 and 128,
    causal and not, S = 1024, 4096 and 16384): an H100 or H200 only (sm_90a code)."""
    if torch.cuda.get_device_capability() != (9, 0):
        raise SystemExit("chapter 12's suite needs an H100 or H200: its kernels are "
                         f"sm_90a code, not {torch.cuda.get_device_name()}'s")
    peaks, rows, last = bench.device_peaks(), [], max(TC_STEPS)
    dtypes = (torch.float16, torch.bfloat16)
    for dt, d, causal, S in itertools.product(dtypes, (64, 128), (False, True),
                                              (1024, 4096, 16384)):
        q, k, v, case, work = _tc_case(dt, d, causal, S, peaks)
        fns = {f"hopper step {n}": (lambda n=n: flash_attention_hopper(
            q, k, v, is_causal=causal, step=n)) for n in HOPPER_STEPS}
        fns[f"step {last}"] = lambda: flash_attention_tc(q, k, v, is_causal=causal,
                                                         step=last)
        fns.update(_sdpa_backends(q, k, v, causal, ("flash", "cudnn")))
        rows += [bench.measure(name, fn, case, **work) for name, fn in fns.items()]
        del q, k, v, fns
        torch.cuda.empty_cache()
    return rows


# Chapter 9's decode shape: Llama-style grouped heads (32 query heads, 8 kv heads),
# fp16.
DECODE_H, DECODE_HKV, DECODE_D = 32, 8, 128


def decode_bytes(B, L, H=DECODE_H, Hkv=DECODE_HKV, D=DECODE_D, itemsize=2) -> float:
    """The least traffic of one decode step: every cached key and value read once, the
    query read and the output written once."""
    return float(itemsize * (2 * B * Hkv * L * D + 2 * B * H * D))


def chapter09():
    """One decode step (Sq = 1, fp16, H = 32, Hkv = 8, D = 128) against caches of L keys
    for B sequences: achieved bandwidth as % of the GPU's peak, with the split
    heuristic, without splitting, through a paged cache (16-position pages in shuffled
    order), and PyTorch's SDPA on the same contiguous cache (grouped heads, every key
    valid, so no mask)."""
    import torch.nn.functional as F
    peaks, rows = bench.device_peaks(), []
    H, Hkv, D, dt = DECODE_H, DECODE_HKV, DECODE_D, torch.float16
    for B in (1, 4, 16, 64):
        for L in (512, 2048, 8192, 32768):
            if B * L > 2**19:   # at most 1 GiB per cache tensor (4 of them): fits a T4
                continue
            g = torch.Generator(device="cuda").manual_seed(0)
            q = torch.randn(B, H, 1, D, device="cuda", dtype=dt, generator=g)
            kc, vc = (torch.randn(B, Hkv, L, D, device="cuda", dtype=dt, generator=g)
                      for _ in range(2))
            lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
            pages = B * L // 16
            perm = torch.randperm(pages, device="cuda", generator=g).int()
            table = perm.view(B, L // 16)
            kp, vp = (torch.empty(pages, Hkv, 16, D, device="cuda", dtype=dt)
                      for _ in range(2))
            kp[table.flatten().long()] = kc.view(B, Hkv, L // 16, 16, D) \
                .transpose(1, 2).reshape(pages, Hkv, 16, D)
            vp[table.flatten().long()] = vc.view(B, Hkv, L // 16, 16, D) \
                .transpose(1, 2).reshape(pages, Hkv, 16, D)
            case = dict(B=B, L=L, H=H, Hkv=Hkv, D=D, dtype="float16")
            work = dict(flops=0, bytes=decode_bytes(B, L), peaks=peaks)
            # The registered op on inputs checked once: the public entry point also
            # reads the lengths and pages back to the host to check them, which a
            # serving loop does once per step for all layers.
            splits = choose_num_splits(B, Hkv, H // Hkv, L, "cuda")
            scale = D ** -0.5
            fns = {
                "attnbook split-K": lambda: decode_attention(q, kc, vc, lens, None, 0,
                                                             splits, True, scale),
                "attnbook no split": lambda: decode_attention(q, kc, vc, lens, None, 0,
                                                              1, True, scale),
                "attnbook paged": lambda: decode_attention(q, kp, vp, lens, table, 0,
                                                           splits, True, scale),
                "torch sdpa": lambda: F.scaled_dot_product_attention(q, kc, vc,
                                                                     enable_gqa=True),
            }
            used = {"attnbook split-K": splits, "attnbook no split": 1,
                    "attnbook paged": splits}   # SDPA splits as it chooses
            rows += [bench.measure(name, fn, dict(case, num_splits=used.get(name)),
                                   **work) for name, fn in fns.items()]
            del q, kc, vc, kp, vp
            torch.cuda.empty_cache()
    return rows


def _backward_rows(outs, backends, q, k, v, do, case, work):
    """Rows timing one backward pass (``do`` into q, k, v) of each output in ``outs``
    (name: the output of a forward whose graph is kept) and of SDPA's ``backends``
    (names of SDPBackend members, lower case) on the same inputs; a backend that
    refuses the case is a row with its error."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    rows, outs = [], dict(outs)
    for backend in backends:
        try:
            member = ("MATH" if backend == "math"
                      else f"{backend.upper()}_ATTENTION")
            with sdpa_kernel(getattr(SDPBackend, member)):
                outs[f"sdpa {backend}"] = F.scaled_dot_product_attention(
                    q, k, v, is_causal=case["causal"])
        except RuntimeError as e:
            rows.append(dict(case, impl=f"sdpa {backend}", ms=None,
                             error=str(e).splitlines()[0]))
    for name, o in outs.items():
        rows.append(bench.measure(
            name, lambda o=o: torch.autograd.grad(o, (q, k, v), do, retain_graph=True),
            case, **work))
    return rows


def chapter11():
    """One backward pass (the forward excluded: its graph is kept and reused) of the
    book's fp32 kernels (ab.attention's, then steps 1 and 2 by name) against SDPA's
    backends in fp32, B=4, H=8, D=64, S = 512 … 4096, causal and not, with the peak
    memory it allocates. FLOPs: 2.5 × the forward's (five matrix products instead of
    two)."""
    peaks, rows = bench.device_peaks(), []
    for causal, S in itertools.product((False, True), (512, 1024, 2048, 4096)):
        q, k, v = (t.requires_grad_() for t in _qkv(S))
        do = torch.randn_like(q)
        case = dict(S=S, B=B, H=H, D=D, causal=causal, dtype="float32")
        work = dict(flops=2.5 * bench.attention_flops(B, H, S, S, D, causal),
                    bytes=bench.attention_bytes(B, H, S, S, D) * 2, peaks=peaks)
        outs = {"attnbook flash": attention(q, k, v, is_causal=causal),
                **{f"attnbook flash step {s}": flash_attention_fp32(
                    q, k, v, is_causal=causal, step=s) for s in (1, 2)}}
        rows += _backward_rows(outs, ("efficient", "cudnn", "math"), q, k, v, do,
                               case, work)
        del q, k, v, do, outs
        torch.cuda.empty_cache()
    return rows


def chapter11_tc():
    """One backward pass (the forward excluded) of the book's tensor-core backward
    (ab.attention in fp16 and bf16, and step 1 by name) against SDPA's backends in the
    same dtype, B=4, H=8, D = 64 and 128, S = 512 … 8192, causal and not, with the
    peak memory it allocates. FLOPs: 2.5 × the forward's, as chapter 11's fp32 suite
    counts them."""
    peaks, rows = bench.device_peaks(), []
    bf16 = torch.cuda.get_device_capability() >= (8, 0)
    dtypes = [torch.float16] + ([torch.bfloat16] if bf16 else [])
    for dt, d, causal, S in itertools.product(dtypes, (D, 128), (False, True),
                                              (512, 1024, 2048, 4096, 8192)):
        case = dict(S=S, B=B, H=H, D=d, causal=causal, dtype=str(dt)[6:])
        if not bench.kept(case):
            continue
        q, k, v = (t.requires_grad_() for t in _qkv(S, dt, d=d))
        do = torch.randn_like(q)
        work = dict(flops=2.5 * bench.attention_flops(B, H, S, S, d, causal),
                    bytes=bench.attention_bytes(B, H, S, S, d, itemsize=2) * 2,
                    peaks=peaks, compute="fp16_tflops")
        outs = {"attnbook tc": attention(q, k, v, is_causal=causal),
                "attnbook tc step 1": flash_attention_tc(q, k, v, is_causal=causal,
                                                         backward_step=1)}
        rows += _backward_rows(outs, ("flash", "efficient", "cudnn"), q, k, v, do,
                               case, work)
        del q, k, v, do, outs
        torch.cuda.empty_cache()
    return rows


def peers():
    """FlexAttention, compiled, on chapter 5's strided cases (S = 4096, fp32), chapter
    7's (S = 512 … 4096, fp32), chapter 8's (fp16 and bf16, D = 64 and 128, S = 1024,
    4096 and 16384) and chapter 9's decode steps, causal and not where the chapter
    has both."""
    peaks, rows = bench.device_peaks(), []
    q, k, v = _qkv(4096)
    for causal, stride in itertools.product((False, True), (1, 2, 4, 8, 16, 32)):
        case = dict(S=4096, stride=stride, causal=causal, chapter="05")
        work = dict(flops=bench.attention_flops(B, H, 4096, 4096 / stride, D, causal),
                    bytes=bench.attention_bytes(B, H, 4096, 4096, D), peaks=peaks)
        rows.append(flex_row(case, work, q, k, v, is_causal=causal, stride=stride))
    for S, causal in itertools.product((512, 1024, 2048, 4096), (False, True)):
        q, k, v = _qkv(S)
        case = dict(S=S, B=B, H=H, D=D, causal=causal, dtype="float32", chapter="07")
        work = dict(flops=bench.attention_flops(B, H, S, S, D, causal),
                    bytes=bench.attention_bytes(B, H, S, S, D), peaks=peaks)
        rows.append(flex_row(case, work, q, k, v, is_causal=causal))
    for dt, d, causal, S in itertools.product(_tc_dtypes(), (64, 128), (False, True),
                                              (1024, 4096, 16384)):
        q, k, v, case, work = _tc_case(dt, d, causal, S, peaks)
        rows.append(flex_row(dict(case, chapter="08"), work, q, k, v,
                              is_causal=causal))
    del q, k, v
    torch.cuda.empty_cache()
    for b, length in itertools.product((1, 4, 16, 64), (512, 2048, 8192, 32768)):
        if b * length > 2**19:   # chapter 9's limit: 1 GiB per cache tensor
            continue
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, DECODE_H, 1, DECODE_D, device="cuda", dtype=torch.float16,
                        generator=g)
        kc, vc = (torch.randn(b, DECODE_HKV, length, DECODE_D, device="cuda",
                              dtype=torch.float16, generator=g) for _ in range(2))
        case = dict(B=b, L=length, H=DECODE_H, Hkv=DECODE_HKV, D=DECODE_D,
                    dtype="float16", chapter="09")
        work = dict(flops=0, bytes=decode_bytes(b, length), peaks=peaks)
        rows.append(flex_row(case, work, q, kc, vc))
        del q, kc, vc
        torch.cuda.empty_cache()
    return rows


# Chapter 10's suite benchmarks a model: attnbook.models.ALL_SUITES adds it to these.
SUITES = {"02": chapter02, "03": chapter03, "04": chapter04, "05": chapter05,
          "07": chapter07, "08": chapter08, "08fa2": chapter08_fa2, "09": chapter09,
          "11": chapter11, "11tc": chapter11_tc}
# The peers' suites, beside the chapters' (python -m attnbook.bench runs both; a
# chapter's cell runs its own alone).
PEER_SUITES = {"peers": peers}
# Suites that need one kind of GPU (python -m attnbook.bench runs them by name; a
# chapter's cell shows them once recorded).
HOPPER_SUITES = {"12": chapter12}


def main(chapters, suites):
    """Run and record the whole of ``chapters`` of ``suites`` (all of them if none is
    named)."""
    for chapter in chapters or suites:
        if chapter not in suites:
            raise SystemExit(f"no benchmark for chapter {chapter!r}; "
                             f"there are {sorted(suites)}")
        bench.run_or_load(chapter, suites[chapter], full=True)
