"""Nsight Compute's speed counters at the shapes the speed issues ask about.

    python -m attnbook.gpu.counters --out DIR [--only NAME ...]   # on the GPU
    python -m attnbook.gpu.counters --record DIR                  # anywhere
    python -m attnbook.gpu.counters --list

Each launch is one kernel call at a shape that fills an H100/H200 (the chapter 8
forward at fp16, D = 128, B 8, H 16, S 4096; chapter 11's backward at fp16, D = 64, B 4,
H 16, S 4096; chapter 9's decode at B 16, L 32768),
run once to warm up and once more between ``cudaProfilerStart`` and ``Stop``, so
``ncu --profile-from-start off`` counts that call's kernels and nothing else (not the
inputs' random fill, not a build). Per launch ``DIR/<launch>.csv`` is ncu's raw page:
the sections below (throughput against peak, the pipes, memory, occupancy, warp
stall reasons, instruction mix) plus ``EXTRA``. Clocks are left as the card is
(``--clock-control none``). Exit code 2 when ncu is missing or a launch failed.
``--record`` reads those files (and ``DIR/../check/environment.json``, the GPU's
facts) into ``results_dir()/counters/<gpu>.json``, which :func:`attnbook.bench.
load_counters` reads: per launch its shape, FLOPs, least DRAM bytes and, per kernel,
the counters of ``KEPT`` and every stall reason (warps stalled per issued
instruction).
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import torch

__all__ = ["LAUNCHES", "SECTIONS", "EXTRA", "KEPT", "kernels_of", "record", "main"]

SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis",
            "Occupancy", "LaunchStats", "WarpStateStats", "SchedulerStats",
            "InstructionStats")
EXTRA = ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
         "smsp__inst_executed.sum", "smsp__inst_executed_op_ldsm.sum",
         "smsp__inst_executed_op_ldgsts.sum",
         "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
         "l1tex__t_sector_hit_rate.pct", "dram__bytes_read.sum",
         "dram__throughput.avg.pct_of_peak_sustained_elapsed", "gpu__time_duration.sum")
# what the record keeps of ncu's raw page, by a short name
KEPT = {"time_ns": "gpu__time_duration.sum",
        "registers": "launch__registers_per_thread",
        "shared_bytes": "launch__shared_mem_per_block",
        "instructions": "smsp__inst_executed.sum",
        "ldmatrix": "smsp__inst_executed_op_ldsm.sum",
        "cp_async": "smsp__inst_executed_op_ldgsts.sum",
        "tensor_pipe_pct":
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "issue_active_pct": "smsp__issue_active.avg.pct_of_peak_sustained_active",
        "warps_per_scheduler": "smsp__warps_active.avg.per_cycle_active",
        "shared_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
        "shared_bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
        "l1_hit_pct": "l1tex__t_sector_hit_rate.pct",
        "l2_hit_pct": "lts__t_sector_hit_rate.pct",
        "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "dram_read_bytes": "dram__bytes_read.sum",
        "spill_instructions": "sass__inst_executed_register_spilling"}
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio")
FORWARD = dict(b=8, h=16, s=4096, d=128)
BACKWARD = dict(b=4, h=16, s=4096, d=64)
DECODE = dict(b=16, length=32768)


def _forward(name):
    """q, k, v at the forward's shape and a call of ``name`` on them."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ..ops import flash_attention_tc
    g = torch.Generator(device="cuda").manual_seed(0)
    b, h, s, d = FORWARD.values()
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16,
                           generator=g) for _ in range(3))
    if name.startswith("step "):
        return lambda: flash_attention_tc(q, k, v, step=int(name[5:]))
    backend = {"sdpa flash": SDPBackend.FLASH_ATTENTION,
               "sdpa cudnn": SDPBackend.CUDNN_ATTENTION}[name]

    def sdpa():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v)
    return sdpa


def _backward(name):
    """One backward pass of chapter 11 at the backward's shape (fp16): the forward's
    graph is made once and kept, the call is dO into q, k and v."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ..ops import flash_attention_tc
    g = torch.Generator(device="cuda").manual_seed(0)
    b, h, s, d = BACKWARD.values()
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16,
                           generator=g).requires_grad_() for _ in range(3))
    if name.startswith("step "):
        o = flash_attention_tc(q, k, v, backward_step=int(name[5:]))
    else:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = F.scaled_dot_product_attention(q, k, v)
    do = torch.randn(o.shape, device="cuda", dtype=o.dtype, generator=g)
    return lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)[0]


def _decode(name):
    """One decode step of chapter 9's shape (grouped heads, fp16, full caches)."""
    import torch.nn.functional as F

    from ..bench.suites import DECODE_D, DECODE_H, DECODE_HKV
    from ..ops.decode import choose_num_splits, decode_attention
    b, length = DECODE.values()
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, DECODE_H, 1, DECODE_D, device="cuda", dtype=torch.float16,
                    generator=g)
    kc, vc = (torch.randn(b, DECODE_HKV, length, DECODE_D, device="cuda",
                          dtype=torch.float16, generator=g) for _ in range(2))
    lens = torch.full((b,), length, dtype=torch.int32, device="cuda")
    if name == "sdpa":
        return lambda: F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True)
    splits = (choose_num_splits(b, DECODE_HKV, DECODE_H // DECODE_HKV, length, "cuda")
              if name == "split-K" else 1)
    return lambda: decode_attention(q, kc, vc, lens, None, 0, splits, True,
                                    DECODE_D ** -0.5)


LAUNCHES = {
    **{f"forward {n}": (lambda n=n: _forward(n))
       for n in ("step 3", "step 4", "step 5", "step 6", "sdpa flash", "sdpa cudnn")},
    **{f"backward {n}": (lambda n=n: _backward(n))
       for n in ("step 1", "step 2", "sdpa flash")},
    **{f"decode {n}": (lambda n=n: _decode(n)) for n in ("split-K", "no split",
                                                          "sdpa")},
}


def _run_one(name: str) -> int:
    """The launch program ncu watches: warm up, then one profiled call."""
    call = LAUNCHES[name]()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    out = call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    if isinstance(out, tuple):   # decoding's (output, logsumexp)
        out = out[0]
    print(f"{name}: {tuple(out.shape)}, finite: {bool(torch.isfinite(out).all())}")
    return 0


def _number(text: str):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def kernels_of(text: str) -> list[dict]:
    """The kernels of ncu's ``--csv --page raw`` output, in launch order: each its
    name, grid, block, the counters of ``KEPT`` it has (None where ncu gave no
    number) and ``stalls`` (reason -> warps stalled per issued instruction)."""
    rows = list(csv.reader(line for line in text.splitlines()
                           if line.startswith('"')))
    if not rows or "Kernel Name" not in rows[0]:
        return []
    names = rows[0]
    kernels = []
    for r in rows[1:]:
        if len(r) != len(names) or not r[names.index("ID")].strip():
            continue   # the units row
        value = dict(zip(names, r))
        k = {"kernel": value["Kernel Name"], "grid": value["Grid Size"],
             "block": value["Block Size"]}
        k.update({key: _number(value[m]) for key, m in KEPT.items() if m in value})
        k["stalls"] = {m.group(1): _number(v) for n, v in value.items()
                       if (m := STALL.fullmatch(n))}
        kernels.append(k)
    return kernels


def _work(name: str) -> dict:
    """A launch's shape, its FLOPs and the least DRAM bytes it must move."""
    from ..bench.harness import attention_bytes, attention_flops
    from ..bench.suites import DECODE_D, DECODE_H, DECODE_HKV, decode_bytes
    if name.startswith("forward"):
        b, h, s, d = FORWARD.values()
        return dict(shape=dict(FORWARD, dtype="float16", causal=False),
                    flops=attention_flops(b, h, s, s, d),
                    bytes=attention_bytes(b, h, s, s, d, itemsize=2))
    if name.startswith("backward"):   # FLOPs and bytes as chapter 11's suites count
        b, h, s, d = BACKWARD.values()
        return dict(shape=dict(BACKWARD, dtype="float16", causal=False),
                    flops=2.5 * attention_flops(b, h, s, s, d),
                    bytes=2 * attention_bytes(b, h, s, s, d, itemsize=2))
    return dict(shape=dict(DECODE, h=DECODE_H, hkv=DECODE_HKV, d=DECODE_D,
                           dtype="float16"),
                flops=0.0, bytes=decode_bytes(DECODE["b"], DECODE["length"]))


def record(folder: pathlib.Path) -> pathlib.Path:
    """Read the launches' csv files in ``folder`` into the package's record of this
    GPU (see the module's docstring); returns the file written."""
    from ..bench.harness import PACKAGE_RESULTS, results_file
    # the package's record, which the book ships, unless ATTNBOOK_RESULTS redirects it
    target = (pathlib.Path(os.environ["ATTNBOOK_RESULTS"])
              if os.environ.get("ATTNBOOK_RESULTS") else PACKAGE_RESULTS)
    environment = folder.parent / "check" / "environment.json"
    if not environment.exists():
        raise FileNotFoundError(f"{environment}: the run's check stage names the GPU")
    device = json.loads(environment.read_text())
    launches, measured = {}, []
    for name in LAUNCHES:
        path = _csv(folder, name)
        if path.exists() and (kernels := kernels_of(path.read_text())):
            launches[name] = dict(_work(name), kernels=kernels)
            measured.append(path.stat().st_mtime)
    if not launches:
        raise FileNotFoundError(f"no launch's csv file in {folder}")
    date = datetime.date.fromtimestamp(min(measured)).isoformat()
    out = results_file("counters", device["gpu"], target)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(date=date, device=device, command=(
        "python -m attnbook.gpu.counters --out DIR; ... --record DIR"),
        launches=launches), indent=1) + "\n")
    return out


def _csv(out: pathlib.Path, name: str) -> pathlib.Path:
    return out / (re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_") + ".csv")


def _ncu(name: str, out: pathlib.Path) -> str | None:
    """ncu's counters of launch ``name`` into its csv file; why not, if it failed.
    Should a metric of EXTRA be unknown to this ncu, the sections alone are kept."""
    if not shutil.which("ncu"):
        return "ncu is not on PATH"
    base = ["ncu", "--csv", "--page", "raw", "--profile-from-start", "off",
            "--clock-control", "none", "--log-file", str(_csv(out, name))]
    base += [a for s in SECTIONS for a in ("--section", s)]
    program = [sys.executable, "-m", "attnbook.gpu.counters", "--launch", name]
    why = None
    for argv in (base + ["--metrics", ",".join(EXTRA)] + program, base + program):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=240)
        if done.returncode == 0:
            return None
        why = f"ncu exited {done.returncode}: {done.stderr.strip()[-1500:]}"
        print(f"{name}: {why}", file=sys.stderr, flush=True)
    return why


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnbook.gpu.counters",
                                     description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", type=pathlib.Path, help="run ncu, files into OUT")
    where.add_argument("--record", type=pathlib.Path,
                       help="read RECORD's csv files into the package's record")
    parser.add_argument("--only", nargs="+", choices=list(LAUNCHES), metavar="NAME")
    parser.add_argument("--list", action="store_true", help="print the names and exit")
    parser.add_argument("--launch", choices=list(LAUNCHES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(LAUNCHES))
        return 0
    if args.launch:
        return _run_one(args.launch)
    if args.record:
        print(f"written: {record(args.record)}")
        return 0
    if not args.out:
        parser.error("--out DIR, --record DIR or --list")
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.only or LAUNCHES:
        try:
            error = _ncu(name, args.out)
        except subprocess.TimeoutExpired:
            error = "ncu ran past 240 s"
        print(f"{name}: {error or 'counted'}", flush=True)
        failed += error is not None
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
