"""Benchmark harness: timing on the GPU, throughput against the device's peak, PyTorch
baselines side by side, and the recorded results of
``bench/results/<chapter>/<device>.json``.

Timings are CUDA-event intervals after warm-up, summarised by their median; the L2 cache
is flushed before every repeat so that each one reads its inputs from device memory.
Results are written only here, only on a real GPU, and always with the device and
versions that produced them. Without a GPU the book plots what was recorded. On a
reader's GPU a chapter's cell times a quick set where the whole suite would take more
than about a minute on a T4, and says how long first.
"""
from __future__ import annotations

import contextlib
import contextvars
import datetime
import json
import math
import os
import pathlib
import re
import statistics
from dataclasses import asdict, dataclass, field

import torch

from ..toolchain.devices import GPUS
from ..toolchain.text import wrap

__all__ = ["PEAKS", "device_peaks", "time_cuda", "attention_flops", "attention_bytes",
           "pytorch_attention", "Result", "Table", "markdown_table", "machine_record",
           "measure", "save",
           "load", "load_ncu", "load_counters", "load_sass_anchors", "results_dir",
           "results_file", "PACKAGE_RESULTS", "run_or_load", "ratio", "bound_ms",
           "QUICK", "kept", "estimate_s"]

# Datasheet peaks: fp32 on CUDA cores (TFLOP/s), dense fp16 on tensor cores (TFLOP/s),
# and DRAM bandwidth (GB/s). Matched against torch's device name in this order
# (first hit wins).
PEAKS = [
    ("H200", dict(fp32_tflops=67.0, fp16_tflops=989.0, bandwidth_gbs=4800.0)),
    ("H100 PCIe", dict(fp32_tflops=51.0, fp16_tflops=756.0, bandwidth_gbs=2000.0)),
    ("H100 NVL", dict(fp32_tflops=60.0, fp16_tflops=835.0, bandwidth_gbs=3900.0)),
    ("H100", GPUS["H100"].peaks),   # SXM5
    ("A100-SXM4-80GB", dict(fp32_tflops=19.5, fp16_tflops=312.0, bandwidth_gbs=2039.0)),
    ("A100 80GB PCIe", dict(fp32_tflops=19.5, fp16_tflops=312.0, bandwidth_gbs=1935.0)),
    ("A100", GPUS["A100"].peaks),   # 40 GB
    ("L4", dict(fp32_tflops=30.3, fp16_tflops=121.0, bandwidth_gbs=300.0)),
    ("T4", GPUS["T4"].peaks),
]


def _require_gpu(what):
    if not torch.cuda.is_available():
        raise RuntimeError(f"{what} needs a CUDA GPU; on the CPU the book shows "
                           "recorded results")


def device_peaks(device=None) -> dict:
    """The device's peak fp32/fp16 throughput and bandwidth: from the datasheet table
    when the GPU is in it, otherwise measured here (a large copy and a large fp32
    matmul), marked as such."""
    _require_gpu("device_peaks")
    name = torch.cuda.get_device_name(device)
    for key, peaks in PEAKS:
        if key in name:
            return dict(peaks, name=name, source="datasheet")
    return dict(_measure_peaks(device), name=name, source="measured")


def _measure_peaks(device):
    x = torch.empty(2**28, device=device)                    # 1 GiB: far beyond any L2
    copy_ms = time_cuda(lambda: x.clone(), flush_l2=False)["median_ms"]
    n = 8192
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        mm_ms = time_cuda(lambda: a @ b, flush_l2=False)["median_ms"]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return dict(fp32_tflops=2 * n**3 / mm_ms / 1e9, fp16_tflops=None,
                bandwidth_gbs=2 * x.numel() * 4 / copy_ms / 1e6)


def time_cuda(fn, *, warmup: int = 3, repeats: int = 20, flush_l2: bool = True) -> dict:
    """Run ``fn()`` ``warmup`` times, then time ``repeats`` runs with CUDA events.

    Returns the median and every repeat, in milliseconds. With ``flush_l2`` a buffer
    twice the size of L2 is overwritten before each repeat (outside the timed
    interval). This is the method of Triton's ``triton.testing.do_bench`` (L2 flushed,
    events around each run, a quantile), written out so that it needs no Triton (a CPU
    build of torch brings none) and keeps every repeat for the tables;
    ``torch.utils.benchmark.Timer`` times many runs back to back with a warm L2, where
    a kernel whose inputs fit in L2 would look faster than one reading from memory."""
    _require_gpu("time_cuda")
    for _ in range(warmup):
        fn()
    scratch = None
    if flush_l2:
        l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()),
                     "L2_cache_size", 0)
        scratch = torch.empty(max(2 * l2, 2**20) // 4, device="cuda")
    times = []
    for _ in range(repeats):
        if scratch is not None:
            scratch.zero_()
        start, end = (torch.cuda.Event(enable_timing=True),
                      torch.cuda.Event(enable_timing=True))
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return dict(median_ms=statistics.median(times), times_ms=times)


def attention_flops(B, H, Sq, Sk, D, causal=False) -> float:
    """Multiply-adds of QKᵀ and PV, counted as 2 FLOPs each: 4·B·H·Sq·Sk·D, halved for
    causal (the convention of FlashAttention's benchmarks)."""
    flops = 4.0 * B * H * Sq * Sk * D
    return flops / 2 if causal else flops


def attention_bytes(B, H, Sq, Sk, D, Hkv=None, itemsize=4) -> float:
    """The least traffic any attention must move: read Q, K, V and write O once."""
    Hkv = H if Hkv is None else Hkv
    return float(itemsize * (2 * B * H * Sq * D + 2 * B * Hkv * Sk * D))


def pytorch_attention(causal=False, scale=None) -> dict:
    """PyTorch's ways of computing attention on this GPU: eager math
    (matmul, softmax, matmul) and ``scaled_dot_product_attention`` pinned to each
    backend. A backend that cannot run the inputs is reported by ``measure`` as
    unsupported rather than silently replaced."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    def eager(q, k, v):
        s = q @ k.transpose(-2, -1) * (scale if scale is not None
                                       else q.shape[-1] ** -0.5)
        if causal:
            sq, sk = s.shape[-2:]
            s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device=s.device)
                              .tril(sk - sq).logical_not(),
                              float("-inf"))
        return torch.softmax(s, dim=-1) @ v

    def pinned(backend):
        def run(q, k, v):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                      scale=scale)
        return run

    fns = {"torch eager": eager}
    for label, backend in (("sdpa flash", SDPBackend.FLASH_ATTENTION),
                           ("sdpa efficient", SDPBackend.EFFICIENT_ATTENTION),
                           ("sdpa cudnn", SDPBackend.CUDNN_ATTENTION),
                           ("sdpa math", SDPBackend.MATH)):
        fns[label] = pinned(backend)
    return fns


# A row's measurements (the rest of a row is its case) and the headings they are
# shown under.
MEASURED = {"impl", "ms", "times_ms", "tflops", "gbs", "pct_peak", "peak_mem_bytes",
            "error", "ttft_ms", "tbt_ms"}
NUMERIC = MEASURED - {"impl", "error"}
HEADINGS = {"impl": "implementation", "ms": "time (ms)", "tflops": "TFLOP/s",
            "gbs": "GB/s", "pct_peak": "% of peak",
            "peak_mem_bytes": "peak memory (MiB)",
            "ttft_ms": "first token (ms)", "tbt_ms": "per token (ms)",
            "num_splits": "splits"}
# A measurement's unit, as a pivot's caption names its cells
UNITS = {"ms": "ms", "tflops": "TFLOP/s", "gbs": "GB/s", "pct_peak": "% of peak",
         "peak_mem_bytes": "peak MiB", "ttft_ms": "ms to the first token",
         "tbt_ms": "ms a token"}
CASE_ORDER = ["model", "B", "H", "Hkv", "S", "L", "D", "dtype", "causal"]


class Table(str):
    """A Markdown table, with its caption: a table in a notebook and in the book, its
    Markdown text where printed."""

    def __new__(cls, text: str, caption: str = ""):
        table = super().__new__(cls, text)
        table.caption = caption
        return table

    def _repr_markdown_(self):
        return (f"*{self.caption}*\n\n" if self.caption else "") + str(self)

    def __repr__(self):
        return str(self)


def markdown_table(header, rows, caption: str = "") -> Table:
    """A :class:`Table` of ``rows`` (each a list of cells, shown as ``str`` gives them)
    under ``header``: the first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(map(str, header)) + " |",
             "|---|" + "--:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return Table("\n".join(lines), caption)


def _number(value: float) -> str:
    """Three significant digits, and whole numbers from 1,000 up: 2,813 GB/s, not
    2.81e+03."""
    return f"{value:,.0f}" if abs(value) >= 999.5 else f"{value:.3g}"


def _cell(row: dict, key: str) -> str:
    """A measurement as a table shows it (an unsupported run: its reason's first
    sentence)."""
    val = row.get(key)
    if key == "ms" and val is None:
        # its first sentence ("No available kernel. Aborting ...")
        val = "unsupported: " + row.get("error", "").split(". ")[0][:40]
    elif key == "peak_mem_bytes" and val is not None:
        mib = val / 2**20
        val = f"{mib:,.0f}" if mib >= 100 else f"{mib:.3g}"
    elif isinstance(val, float):
        val = _number(val) if key != "pct_peak" else f"{val:.1f}%"
    return "" if val is None else str(val)


@dataclass
class Result:
    """One chapter's benchmark: a row per (implementation, case), and where it was
    measured."""
    chapter: str
    rows: list = field(default_factory=list)
    machine: dict = field(default_factory=dict)

    def select(self, **where):
        return [r for r in self.rows if all(r.get(k) == v for k, v in where.items())]

    def table(self, columns=("impl", "ms", "tflops", "gbs", "pct_peak"),
              **where) -> Table:
        """The rows as a :class:`Table` of ``columns`` (unsupported runs show their
        reason's first sentence), captioned with the device and the case settings
        that every row shares and no column shows."""
        rows = self.select(**where)
        keys = [c for c in columns if any(c in r for r in rows)]
        lines = ["| " + " | ".join(HEADINGS.get(k, k) for k in keys) + " |",
                 "|" + "".join("--:|" if k in NUMERIC else "---|" for k in keys)]
        lines += ["| " + " | ".join(_cell(r, key) for key in keys) + " |"
                  for r in rows]
        return Table("\n".join(lines), self._caption(rows, keys))

    def pivot(self, value: str = "pct_peak", row="impl", column: str = "n",
              **where) -> Table:
        """``value`` as a :class:`Table` with a line per ``row`` (a key, or a tuple of
        keys: a column each) and a column per ``column`` value, both in the order the
        rows first give them; an empty cell where a pair was not measured, "–" where
        it was not supported. ``value`` may be two keys, shown "first (second)".
        Captioned as :meth:`table` is, and with ``value``."""
        rows = self.select(**where)
        keys = (row,) if isinstance(row, str) else tuple(row)
        first, *second = (value,) if isinstance(value, str) else value
        lines = list(dict.fromkeys(tuple(r.get(k) for k in keys) for r in rows))
        columns = list(dict.fromkeys(r[column] for r in rows))
        cells = {(tuple(r.get(k) for k in keys), r[column]):
                 "–" if "error" in r else _cell(r, first) + "".join(
                     f" ({_cell(r, k)})" for k in second) for r in rows}
        text = ["| " + " | ".join([HEADINGS.get(k, k) for k in keys] + [
                    str(c) if column == "impl" else f"{column} = {c}"
                    for c in columns]) + " |",
                "|---|" + "--:|" * (len(keys) - 1 + len(columns))]
        text += ["| " + " | ".join([*map(str, line)] + [cells.get((line, c), "")
                                                        for c in columns]) + " |"
                 for line in lines]
        caption = [self._caption(rows, [*keys, column]), UNITS.get(first, first)
                   + "".join(f" ({UNITS.get(k, k)})" for k in second)]
        if any("error" in r for r in rows):
            caption.append("–: unsupported")
        return Table("\n".join(text), " · ".join(filter(None, caption)))

    def _caption(self, rows, shown) -> str:
        """The device and the case settings that every row shares and ``shown`` (the
        columns) does not show."""
        shared = {k: v for k, v in rows[0].items()
                  if k not in MEASURED and k not in shown
                  and all(r.get(k) == v for r in rows)} if rows else {}
        first = [k for k in CASE_ORDER if k in shared]
        case = ", ".join(str(shared[k]) if k == "dtype" else f"{k} = {shared[k]}"
                         for k in first + [k for k in shared if k not in first])
        return " · ".join(filter(None, [self.machine.get("gpu"), case]))

    def describe(self) -> str:
        m = self.machine
        return (f"chapter {self.chapter}{' (quick set)' if m.get('quick') else ''}: "
                f"{m.get('gpu')} "
                f"(sm_{m.get('capability', '?')}), torch "
                f"{m.get('torch')}, CUDA {m.get('cuda')}, recorded {m.get('date')}")


def machine_record() -> dict:
    _require_gpu("machine_record")
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    peaks = device_peaks()
    return dict(gpu=p.name, capability=f"{p.major}{p.minor}",
                sms=p.multi_processor_count,
                memory_gib=round(p.total_memory / 2**30, 1), torch=torch.__version__,
                cuda=torch.version.cuda,
                date=datetime.date.today().isoformat(), peaks=peaks)


def measure(impl: str, fn, case: dict, *, flops: float, bytes: float, peaks: dict,
            compute="fp32_tflops", **timing) -> dict:
    """Time ``fn`` and return a row: the case, the median time, TFLOP/s, GB/s, % of the
    device's peak (compute-bound work against ``peaks[compute]``, memory-bound work,
    ``flops=0``, against bandwidth), and peak memory above what was live. An
    implementation that raises is recorded as unsupported with its error. A case
    outside the quick set being run (:func:`kept`) is not timed: None."""
    from .memory import peak_memory
    if not kept(case):
        return None
    row = dict(case, impl=impl)
    try:
        mem, _ = peak_memory(fn, "cuda")
        t = time_cuda(fn, **timing)
    except (RuntimeError, NotImplementedError, ValueError) as e:
        return dict(row, ms=None,
                    error=str(e).splitlines()[0] if str(e) else type(e).__name__)
    ms = t["median_ms"]
    row.update(ms=ms, times_ms=t["times_ms"], peak_mem_bytes=mem, gbs=bytes / ms / 1e6)
    if flops:
        row["tflops"] = flops / ms / 1e9
        if peaks.get(compute):
            row["pct_peak"] = 100 * row["tflops"] / peaks[compute]
    else:
        row["pct_peak"] = 100 * row["gbs"] / peaks["bandwidth_gbs"]
    return row


PACKAGE_RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def results_dir() -> pathlib.Path:
    """Where results measured on this machine are written: ``$ATTNBOOK_RESULTS`` if
    set, else the user's cache (``$XDG_CACHE_HOME`` or ``~/.cache``, then
    ``attnbook/results``), never the installed package, which a reader may not own
    and an upgrade replaces."""
    if os.environ.get("ATTNBOOK_RESULTS"):
        return pathlib.Path(os.environ["ATTNBOOK_RESULTS"])
    cache = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(cache) / "attnbook" / "results"


def _folders() -> list:
    """Where recorded results are read: ``$ATTNBOOK_RESULTS`` alone if set (a GPU run
    shows its own); else the user's results, then the package's own records
    (:data:`PACKAGE_RESULTS`, package data: an installed wheel and a Colab reader find
    them)."""
    if os.environ.get("ATTNBOOK_RESULTS"):
        return [results_dir()]
    return [results_dir(), PACKAGE_RESULTS]


def results_file(kind: str, gpu: str,
                 folder: pathlib.Path | None = None) -> pathlib.Path:
    """Where the record of ``kind`` (a chapter, "counters", …) for the GPU named
    ``gpu`` lives: ``<folder>/<kind>/<gpu, letters and digits>.json``, in
    :func:`results_dir` unless ``folder`` is given."""
    return (folder or results_dir()) / kind / (
        re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_") + ".json")


def save(result: Result) -> pathlib.Path:
    """Write ``result`` to ``results_dir()/<chapter>/<gpu>.json``. Only a result
    measured on this machine's GPU may be saved."""
    _require_gpu("saving benchmark results")
    if result.machine.get("gpu") != torch.cuda.get_device_name():
        raise ValueError("a result is saved only by the machine that measured it")
    quick = " quick" if result.machine.get("quick") else ""
    path = results_file(result.chapter, result.machine["gpu"] + quick)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(result), indent=1, sort_keys=True) + "\n")
    return path


def _records(kind: str) -> list:
    """The recorded JSON files of ``kind`` over :func:`_folders`, one per GPU (the
    user's own measurement of a GPU before the package's), newest first by their
    ``date`` (a chapter's: its machine's)."""
    found = {}
    for folder in _folders():
        for path in sorted((folder / kind).glob("*.json")):
            found.setdefault(path.name, json.loads(path.read_text()))
    return sorted(found.values(), key=lambda r: r.get("date") or r["machine"]["date"],
                  reverse=True)


def load(chapter: str) -> list:
    """Every recorded result of a chapter, one per device, newest first."""
    return [Result(**record) for record in _records(chapter)]


def load_ncu() -> list:
    """Nsight Compute's counts of a few launches beside the emulator's profile of the
    same launches (``python -m attnbook.gpu.ncu``), one record per GPU, newest first:
    each a dict of ``date``, ``device`` and ``results`` (launch -> its kernels, each
    count as ``{"emulator": n, "ncu": n}``)."""
    return _records("ncu")


def load_counters() -> list:
    """Nsight Compute's speed counters of full-size launches (``python -m
    attnbook.gpu.counters``), one record per GPU, newest first: each a dict of
    ``date``, ``device`` and ``launches`` (name -> its shape, FLOPs, least bytes and
    kernels, each kernel a dict of counters)."""
    return _records("counters")


def load_sass_anchors() -> list:
    """Public kernels as calibration of the design card's SASS column: per source
    (newest first) its repository, commit and where its speeds are published, and per
    kernel and architecture the hot-loop figures of :mod:`attnbook.toolchain.sass`
    (compiled here; figures only, no code) beside its published fraction of
    FlashAttention-2's speed."""
    return _records("sass_anchors")


# The quick set of the chapters whose whole benchmark takes longer than about a minute
# on Colab's T4: the cases their cells show, fewer sizes of each (test_bench checks
# the estimate). A case is kept when each of these keys it has takes one of the listed
# values. The other chapters' suites run whole.
QUICK = {
    "07": dict(S=(512, 1024, 2048)),
    "08": dict(dtype=("float16",), D=(128,), S=(1024, 2048), causal=(False,)),
    "08fa2": dict(dtype=("float16",), S=(1024, 4096), causal=(False,)),
    "10": dict(model=("strided Decoder",), stride=(2, 8)),   # generation: minutes
}
_QUICK_SET = contextvars.ContextVar("quick_set", default=None)


def kept(case: dict) -> bool:
    """Whether the suite being run times ``case``: always, unless a quick set is being
    run (:data:`QUICK`) and one of the case's values is not in it (a key the case
    lacks does not restrict it)."""
    quick = _QUICK_SET.get()
    return quick is None or all(case[k] in values for k, values in quick.items()
                                if k in case)


@contextlib.contextmanager
def _quick_set(values):
    token = _QUICK_SET.set(values)
    try:
        yield
    finally:
        _QUICK_SET.reset(token)


def _row_seconds(row: dict, recorded_peaks: dict, peaks: dict) -> float:
    """A recorded row's time on a device of ``peaks``: every run of it (the timed ones,
    the warm-ups and the peak-memory run; chapter 10's two generations of
    :func:`~attnbook.models.benchmarks.ttft_tbt`) at the recorded time, scaled by the
    ratio of the row's bounds on the two devices (its work at each one's peaks; a row
    without counted work, by the largest ratio of the peaks)."""
    if row.get("ms") is None:
        return 0.0
    if "ttft_ms" in row:
        ms = 6 * (row["ttft_ms"] + row["ms"])
    else:
        ms = (len(row.get("times_ms") or ()) + 4) * row["ms"]
    if row.get("gbs"):
        scale = bound_ms(row, peaks) / bound_ms(row, recorded_peaks)
    else:
        scale = max(recorded_peaks[k] / peaks[k] for k in
                    ("fp32_tflops", "fp16_tflops", "bandwidth_gbs") if peaks.get(k))
    return ms * scale / 1e3


def estimate_s(chapter: str, peaks: dict, quick: bool = True) -> float | None:
    """About how many seconds a chapter's suite (its quick set, or all of it) takes on
    a device of ``peaks``: the rows of the newest result of a whole suite, each scaled
    to that device by :func:`_row_seconds` (builds and the inputs' setup not counted).
    None without such a result."""
    recorded = [r for r in load(chapter) if not r.machine.get("quick")]
    if not recorded:
        return None
    result = recorded[0]
    with _quick_set(QUICK.get(chapter) if quick else None):
        return sum(_row_seconds(r, result.machine["peaks"], peaks)
                   for r in result.rows if kept(r))


def run_or_load(chapter: str, suite, *, full: bool | None = None):
    """On a GPU: run ``suite()`` (a list of rows), save it and return it first, then
    the results recorded on other GPUs. Its quick set (:data:`QUICK`, about a minute
    on a T4) unless ``full`` (default: ``ATTNBOOK_BENCH=full``); the estimated time of
    both is printed first. Without a GPU, or with ``ATTNBOOK_BENCH=recorded`` (a GPU
    busy with other work times nothing faithfully): the recorded results of the
    chapter (possibly none). Prints where the numbers come from."""
    mode = os.environ.get("ATTNBOOK_BENCH")
    if torch.cuda.is_available() and mode != "recorded":
        full = mode == "full" if full is None else full
        quick = None if full else QUICK.get(chapter)
        gpu = torch.cuda.get_device_name()
        print(wrap(_plan_line(chapter, gpu, quick, device_peaks())))
        with _quick_set(quick):
            rows = [r for r in suite() if r is not None and kept(r)]
        result = Result(chapter, rows=rows,
                        machine=dict(machine_record(), quick=quick is not None))
        print(wrap(f"measured now and saved to {save(result)}: {result.describe()}"))
        return [result] + [r for r in load(chapter) if r.machine.get("gpu") != gpu]
    recorded = load(chapter)
    if not recorded:
        print(wrap(f"No GPU here, and no results are recorded yet for chapter "
                   f"{chapter}: run this notebook on a GPU (for instance in Colab) to "
                   "measure them."))
    for r in recorded:
        print(wrap(f"recorded results: {r.describe()}"))
    return recorded


def _plan_line(chapter, gpu, quick, peaks) -> str:
    """What a benchmark cell is about to time, and for about how long."""
    quick_s, full_s = (estimate_s(chapter, peaks, q) for q in (True, False))
    about = "" if full_s is None else \
        f", about {quick_s if quick else full_s:.0f} s by the recorded times scaled " \
        "to this GPU's peaks (builds not counted)"
    if quick is None:
        return f"Timing the whole of chapter {chapter}'s benchmark on {gpu}{about}."
    cases = "; ".join(f"{k} in {', '.join(map(str, v))}" for k, v in quick.items())
    whole = "" if full_s is None else f", about {full_s:.0f} s"
    return (f"Timing a quick set of chapter {chapter}'s benchmark on {gpu} ({cases})"
            f"{about}. The whole suite: run_or_load(..., full=True) or "
            f"ATTNBOOK_BENCH=full{whole}.")


def ratio(result: Result, impl: str, baseline: str, **where) -> float:
    """How many times faster ``impl`` ran than ``baseline`` on the same case."""
    a, b = result.select(impl=impl, **where), result.select(impl=baseline, **where)
    if len(a) != 1 or len(b) != 1 or a[0]["ms"] is None or b[0]["ms"] is None:
        return math.nan
    return b[0]["ms"] / a[0]["ms"]


def bound_ms(row: dict, peaks: dict) -> float:
    """The least time a recorded row's work can take on the device it was measured on
    (``peaks``, the result's ``machine["peaks"]``): its FLOPs at the compute peak of its
    dtype (fp32 on CUDA cores; fp16 and bf16 on tensor cores) or its bytes at the
    memory bandwidth, whichever takes longer. The bytes are those the suite counted,
    the least the operation moves; the design cards' bound, at the benchmark's shape."""
    fp32 = row.get("dtype", "float32") == "float32"
    compute = "fp32_tflops" if fp32 else "fp16_tflops"
    share = row["gbs"] / peaks["bandwidth_gbs"]
    if row.get("tflops") and peaks.get(compute):   # a measured fp16 peak may be None
        share = max(share, row["tflops"] / peaks[compute])
    return row["ms"] * share
