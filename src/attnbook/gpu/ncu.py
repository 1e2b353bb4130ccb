"""Nsight Compute beside the emulator's profile: the same launches counted both ways.

    python -m attnbook.gpu.ncu --out DIR [--only NAME ...]      # on the GPU: ncu
    python -m attnbook.gpu.ncu --compare DIR [--only NAME ...]  # anywhere: the emulator

For each launch (by default three: the fused fp32 kernel, the tensor-core kernel's
last step and split-K decoding), ``--out`` has ``ncu`` profile ``python -m
attnbook.gpu.launches --only NAME`` on the GPU and writes ``DIR/<launch>.csv`` (ncu's
raw page); exit code 2 when ncu is missing or fails. ``--compare`` needs no GPU: it
counts the same launches with :func:`attnbook.profile` on the emulator (a minute or
more of CPU each, which a lent GPU's minutes are not spent on) and pairs them with
those files. Per kernel, in launch order (PyTorch's own kernels set aside): warp
requests and 32-byte sectors of global loads and stores, requests and wavefronts of
shared loads and stores. Writes ``DIR/compare.json`` (with the day ncu ran, and the
GPU's facts where ``DIR/../check/environment.json`` has them) and ``DIR/compare.md``.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import pathlib
import re
import shutil
import subprocess
import sys
import time

from .launches import LAUNCHES

__all__ = ["KERNELS", "METRICS", "parse_raw_csv", "compare", "main"]

KERNELS = ("flash fp32 step 3", "tensor cores step 5", "decode, split-K")
# (space, op, what) -> the ncu metric that counts it. ldmatrix and cp.async have
# counters of their own on the GPU (op_ldsm, op_ldgsts); the emulator counts them as
# shared and global loads.
METRICS = {
    ("global", "load", "requests"): "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    ("global", "load", "sectors"): "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    ("global", "store", "requests"): "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    ("global", "store", "sectors"): "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    ("shared", "load", "requests"): "smsp__inst_executed_op_shared_ld.sum",
    ("shared", "load", "wavefronts"):
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    ("shared", "store", "requests"): "smsp__inst_executed_op_shared_st.sum",
    ("shared", "store", "wavefronts"):
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    ("ldmatrix", "load", "requests"): "smsp__inst_executed_op_ldsm.sum",
    ("cp.async", "load", "sectors"):
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum",
}
TORCHS = re.compile(r"\b(at|c10|cub|cutlass)::|^(void )?(elementwise|vectorized|"
                    r"unrolled|reduce)_")


def parse_raw_csv(text: str) -> list[dict]:
    """The kernels of ncu's ``--csv --page raw`` output, in launch order: each a dict
    of "Kernel Name" and the metrics as numbers. Lines that are not CSV rows (ncu's
    ==PROF== messages) and the units row are skipped."""
    rows = [r for r in csv.reader(line for line in text.splitlines()
                                  if line.startswith('"'))]
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if head is None:
        return []
    names = rows[head]
    kernels = []
    for r in rows[head + 1:]:
        if len(r) != len(names) or not r[names.index("ID")].strip():
            continue   # the units row
        k = {"Kernel Name": r[names.index("Kernel Name")]}
        for col, value in zip(names, r):
            if col in METRICS.values():
                try:
                    k[col] = float(value.replace(",", ""))
                except ValueError:
                    k[col] = None
        kernels.append(k)
    return kernels


def _emulator_counts(name: str) -> list[dict]:
    from cuda_emulator import profile
    with profile() as report:
        LAUNCHES[name]("cpu")
    out = []
    for launch in report.launches:
        counts = {"kernel": launch.kernel, "grid": list(launch.grid),
                  "block": list(launch.block)}
        for space in ("global", "shared"):
            for op in ("load", "store"):
                t = launch.total(space, op)
                unit = "sectors" if space == "global" else "wavefronts"
                counts[f"{space} {op} requests"] = t.requests
                counts[f"{space} {op} {unit}"] = t.units
        out.append(counts)
    return out


def compare(emulated: list[dict], measured: list[dict]) -> list[dict]:
    """Pair the emulator's launches with ncu's kernels of the book (PyTorch's own
    set aside), in order; each row the emulator's count beside the GPU's."""
    ours = [k for k in measured if not TORCHS.search(k["Kernel Name"])]
    rows = []
    for i in range(max(len(emulated), len(ours))):
        emu = emulated[i] if i < len(emulated) else {}
        gpu = ours[i] if i < len(ours) else {}
        row = {"kernel (emulator)": emu.get("kernel"),
               "kernel (ncu)": gpu.get("Kernel Name")}
        for (space, op, what), metric in METRICS.items():
            key = f"{space} {op} {what}"
            row[key] = {"emulator": emu.get(key), "ncu": gpu.get(metric)}
        rows.append(row)
    return rows


def _markdown(results: dict) -> str:
    out = []
    for name, rows in results.items():
        out.append(f"## {name}\n")
        for row in rows:
            out += [f"`{row['kernel (emulator)']}` / `{row['kernel (ncu)']}`\n",
                    "| count | emulator | ncu |", "| --- | ---: | ---: |"]
            out += [f"| {k} | {v['emulator']} | {v['ncu']} |" for k, v in row.items()
                    if isinstance(v, dict)]
            out.append("")
    return "\n".join(out) + "\n"


def _csv(out: pathlib.Path, name: str) -> pathlib.Path:
    return out / (re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_") + ".csv")


def _ncu(name: str, out: pathlib.Path) -> str | None:
    """ncu's counts of launch ``name`` into its csv file; why not, if it failed."""
    if not shutil.which("ncu"):
        return "ncu is not on PATH"
    argv = ["ncu", "--csv", "--page", "raw", "--metrics", ",".join(METRICS.values()),
            "--log-file", str(_csv(out, name)), sys.executable, "-m",
            "attnbook.gpu.launches", "--only", name]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        return f"ncu exited {done.returncode}: {done.stderr.strip()[-2000:]}"
    return None


def _compare(out: pathlib.Path, names) -> dict:
    """The emulator's counts beside ncu's files in ``out``, written as compare.json
    and compare.md; launches without a file are listed as errors."""
    results, errors = {}, {}
    for name in names:
        path = _csv(out, name)
        if not path.exists():
            errors[name] = f"no {path.name}: run --out on a GPU first"
            continue
        results[name] = compare(_emulator_counts(name), parse_raw_csv(path.read_text()))
    measured = [_csv(out, name).stat().st_mtime for name in results]
    saved = dict(results=results, errors=errors, date=datetime.date.fromtimestamp(
        min(measured, default=time.time())).isoformat())
    environment = out.parent / "check" / "environment.json"
    if environment.exists():
        saved["device"] = json.loads(environment.read_text())
    (out / "compare.json").write_text(json.dumps(saved, indent=1) + "\n")
    (out / "compare.md").write_text(_markdown(results))
    return errors


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnbook.gpu.ncu",
                                     description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=pathlib.Path, help="run ncu, files into OUT")
    where.add_argument("--compare", type=pathlib.Path,
                       help="pair ncu's files in COMPARE with the emulator's counts")
    parser.add_argument("--only", nargs="+", choices=list(LAUNCHES), metavar="NAME")
    args = parser.parse_args(argv)
    names = args.only or KERNELS
    if args.compare:
        errors = _compare(args.compare, names)
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        errors = {name: error for name in names
                  if (error := _ncu(name, args.out)) is not None}
    for name, error in errors.items():
        print(f"{name}: {error}", file=sys.stderr)
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
