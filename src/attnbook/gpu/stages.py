"""The stages of ``python -m attnbook.gpu``: each a name, what it proves, the time it
is expected to take on one H100 or H200 with 16 cores (rounded up from the first H200
run's ``summary.json`` where that run finished the stage, a guess otherwise), and the
commands it runs.

Every stage runs its commands with the same environment: the checkout's ``src`` (and
``build/gpu/site``, where the check stage installs carried wheels) on ``PYTHONPATH``,
one extension cache (``build/gpu/torch_extensions``, so the build stage's sm_90 builds
serve every later stage and command) and benchmark results written into the run's
folder (``ATTNBOOK_RESULTS``), never into the package. Benchmarks run alone on the GPU
(the bench stages, one suite after another); the notebooks, several at a time, plot
what those recorded (``ATTNBOOK_BENCH=recorded``) instead of timing next to each
other.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time


def _checkout() -> pathlib.Path:
    """The clone whose tests and notebooks the stages run: the working directory, or
    the one this package's source sits in."""
    for folder in (pathlib.Path.cwd(), pathlib.Path(__file__).resolve().parents[3]):
        if (folder / "tests").is_dir() and (folder / "book").is_dir():
            return folder
    return pathlib.Path.cwd()


ROOT = _checkout()
SITE = ROOT / "build" / "gpu" / "site"
EXTENSIONS_DIR = ROOT / "build" / "gpu" / "torch_extensions"
COMMAND_LIMIT_S = 600   # one command on the machines the project is lent

__all__ = ["Stage", "STAGES", "COMMAND_LIMIT_S", "plan", "commands_of", "child_env",
           "run_stage", "outcomes", "environment", "build"]


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str
    what: str
    estimate_s: int
    commands: tuple   # argv lists; "{out}" is the stage's folder, "{workers}" -n
    env: tuple = ()   # (name, value) pairs for this stage's commands

    def argv(self, out: pathlib.Path, workers: int) -> list:
        return [[a.format(out=out, workers=workers, python=sys.executable) for a in cmd]
                for cmd in self.commands]


PY = "{python}"
# every outcome into the stage's record.jsonl as it comes (attnbook.gpu.record): the
# second H200 run's tests stage hit its time limit and left no junit file behind
PYTEST = (PY, "-m", "pytest", "-p", "no:cacheprovider", "-p", "attnbook.gpu.record",
          "--record-to", "{out}/record.jsonl", "-q", "-rfEs")
NOTEBOOKS_A = ("01", "02", "03", "04", "05", "06", "A1", "B1")
NOTEBOOKS_B = ("07", "08", "09", "10", "11", "12")
SANITIZERS = ("memcheck", "racecheck", "synccheck")


def _notebooks(part, which, prefixes, estimate_s):
    paths = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "book").glob("*.ipynb"))
             if p.name.split("_")[0] in prefixes]
    return Stage(f"notebooks-{part}", f"{which} under nbval, lax: the stored outputs "
                 "are the emulator's, so every cell must run and pass its asserts; the "
                 "benchmark cells plot what the bench stages recorded", estimate_s,
                 (PYTEST + ("-n", "{workers}", "--nbval-lax", "--junitxml",
                            "{out}/junit.xml", *paths),),
                 env=(("ATTNBOOK_BENCH", "recorded"),))


def _sanitizer(tool):
    return ("compute-sanitizer", "--tool", tool, "--error-exitcode", "1",
            "--log-file", f"{{out}}/{tool}.log", PY, "-m", "attnbook.gpu.launches")


def _bench(part, chapters, estimate_s):
    return Stage(f"bench-{part}", "the benchmark suites of chapters "
                 + ", ".join(chapters) + " (results into the run's folder)",
                 estimate_s, ((PY, "-m", "attnbook.bench", *chapters),))


STAGES = (
    Stage("check", "versions, the GPU, nvcc, compute-sanitizer and ncu; installs the "
          "carried wheels (.whl/) the notebooks need", 15,
          ((PY, "-m", "attnbook.gpu", "--environment", "{out}/environment.json"),)),
    Stage("build", "every extension of the package built by nvcc for this GPU, in "
          "parallel, into the shared extension cache", 60,
          ((PY, "-m", "attnbook.gpu", "--build", "{workers}"),)),
    # the third H200 run's (2026-11-27, 14 workers) had 1,540 passed, about 97%, at
    # 500 s, when its command's limit ended it
    Stage("tests", "the unit tests of every op and kernel on cuda, and the GPU-only "
          "checks (-m 'cuda or gpu'); the exercises' kernels each an nvcc build", 540,
          # --dist load: a test that kills its worker is an error and the run goes on
          # (the file-grouped modes ended the first H200 run at one such crash)
          (PYTEST + ("-n", "{workers}", "--dist", "load", "-m", "cuda or gpu",
                     "--junitxml", "{out}/junit.xml", "tests/"),),
          env=(("ATTNBOOK_TEST_DEVICES", "cuda"),)),   # collect the cuda half only
    _bench("a", ("02", "03", "04", "05", "08fa2"), 90),
    _bench("hopper", ("12",), 150),   # an H100/H200 only
    _bench("b", ("07", "08", "09", "10", "11", "11tc"), 330),
    Stage("peers", "FlexAttention, compiled, on the cases of chapters 5, 7, 8 and 9 "
          "(attnbook.bench.peers; results into the run's folder)", 240,
          ((PY, "-m", "attnbook.bench", "peers"),)),
    Stage("host", "the host's side of GPT-2 small's prefill (B 1 and 8, S 1024) with "
          "the book's attention beside SDPA's: operators and waits per layer "
          "(attnbook.models.profiling)", 60,
          tuple((PY, "-m", "attnbook.models.profiling", "--device", "cuda", "--batch",
                 b) for b in ("1", "8"))),
    _notebooks("a", "chapters 1-6 and the appendices", NOTEBOOKS_A, 180),
    _notebooks("b", "chapters 7-12", NOTEBOOKS_B, 420),
    Stage("sanitize", "compute-sanitizer " + ", ".join(SANITIZERS) + " on every "
          "package kernel at small shapes (attnbook.gpu.launches)", 60,
          tuple(_sanitizer(tool) for tool in SANITIZERS),
          # every tensor its own allocation, so that memcheck sees each one's bounds
          env=(("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"),)),
    # the emulator's side of the comparison runs off the GPU (ncu --compare): the
    # second H200 run's stage spent its 150 s on it
    Stage("counters", "Nsight Compute's speed counters (pipes, stalls, instruction "
          "mix, memory) of the tensor-core forward, SDPA's flash and cuDNN kernels and "
          "decoding at full size (attnbook.gpu.counters)", 120,
          ((PY, "-m", "attnbook.gpu.counters", "--out", "{out}"),)),
    Stage("profile", "Nsight Compute's counts of three kernels (beside the emulator's "
          "afterwards, anywhere: python -m attnbook.gpu.ncu --compare DIR)", 60,
          ((PY, "-m", "attnbook.gpu.ncu", "--out", "{out}"),)),
)


def plan(stages, within: float) -> tuple[list, list]:
    """Split ``stages`` (in order) into those whose estimates fit in ``within`` seconds
    and the rest, stopping at the first that does not fit."""
    now, used = [], 0
    for i, stage in enumerate(stages):
        if used + stage.estimate_s > within:
            return now, list(stages[i:])
        now.append(stage)
        used += stage.estimate_s
    return now, []


def commands_of(stages, limit=COMMAND_LIMIT_S) -> list:
    """The stages grouped greedily into commands whose estimates fit ``limit``."""
    groups, rest = [], list(stages)
    while rest:
        now, rest = plan(rest, limit)
        groups.append(now or [rest.pop(0)])
    return groups


def child_env(out: pathlib.Path) -> dict:
    env = dict(os.environ)
    paths = [str(ROOT / "src"), str(SITE)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env.update(PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1",
               ATTNBOOK_RESULTS=str(out / "results"))
    env.setdefault("TORCH_EXTENSIONS_DIR", str(EXTENSIONS_DIR))
    return env


def run_stage(stage: Stage, run_dir: pathlib.Path, workers: int,
              timeout: float) -> dict:
    """Run a stage's commands in order (stopping at the first failure), each command's
    output in ``<stage>/log.txt``; returns its record for ``summary.json``."""
    out = run_dir / stage.name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = dict(child_env(run_dir), **dict(stage.env))
    record = dict(stage=stage.name, estimate_s=stage.estimate_s, commands=[])
    start = time.monotonic()
    with open(out / "log.txt", "w") as log:
        for argv in stage.argv(out, workers):
            left = timeout - (time.monotonic() - start)
            log.write(f"$ {' '.join(argv)}\n")
            log.flush()
            t0 = time.monotonic()
            try:
                rc = subprocess.run(argv, cwd=ROOT, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, timeout=max(left, 1),
                                    stdin=subprocess.DEVNULL).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
            except FileNotFoundError as e:
                rc = f"not found: {e.filename}"
            record["commands"].append(dict(argv=argv, rc=rc,
                                           seconds=round(time.monotonic() - t0, 1)))
            if rc != 0:
                break
    record["seconds"] = round(time.monotonic() - start, 1)
    record["ok"] = all(c["rc"] == 0 for c in record["commands"])
    if (out / "record.jsonl").exists():
        record.update(outcomes(out / "record.jsonl"))
    return record


def outcomes(path: pathlib.Path, listed: int = 50) -> dict:
    """How many tests of a pytest stage's record passed, failed, were skipped, and the
    first ``listed`` that did not pass."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    failed = [line["test"] for line in lines if line["outcome"] == "failed"]
    return dict(outcomes=dict(collections.Counter(line["outcome"] for line in lines)),
                failed_tests=failed[:listed])


def _version(argv) -> str | None:
    if not shutil.which(argv[0]):
        return None
    out = subprocess.run(argv, capture_output=True, text=True).stdout.strip()
    return out.splitlines()[-1] if out else ""


def environment(path: pathlib.Path) -> int:
    """The check stage: write what this machine is to ``path``; install the carried
    wheels (``.whl/``) into ``build/gpu/site`` when the notebooks' test tools are
    missing. Exit code 2, and why, when a stage after it could not run."""
    import importlib.metadata as md
    import importlib.util

    wheels = sorted((ROOT / ".whl").glob("*.whl"))
    if importlib.util.find_spec("nbval") is None and wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index",
                        "--no-deps", "--no-compile", "--upgrade", "--target", str(SITE),
                        *map(str, wheels)], check=True)
        sys.path.insert(0, str(SITE))
    import torch

    facts = dict(python=sys.version.split()[0], torch=torch.__version__,
                 torch_cuda=torch.version.cuda, gpu=None,
                 nvcc=_version(["nvcc", "--version"]),
                 compute_sanitizer=_version(["compute-sanitizer", "--version"]),
                 ncu=_version(["ncu", "--version"]))
    for name in ("transformers", "pytest", "pytest-xdist", "nbval", "ipykernel",
                 "matplotlib", "ninja"):
        try:
            facts[name] = md.version(name)
        except md.PackageNotFoundError:
            facts[name] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        facts.update(gpu=p.name, capability=f"{p.major}.{p.minor}",
                     sms=p.multi_processor_count,
                     memory_gib=round(p.total_memory / 2**30, 1))
    path.write_text(json.dumps(facts, indent=1) + "\n")
    print(json.dumps(facts, indent=1))
    missing = [what for what, ok in (
        ("a GPU (torch.cuda.is_available() is False)", facts["gpu"]),
        ("nvcc on PATH", facts["nvcc"]),
        ("nbval (carry the wheels: bash ../shared/gpu/wheels.sh)", facts["nbval"]),
        ("pytest-xdist", facts["pytest-xdist"])) if not ok]
    if missing:
        print("cannot go on without: " + "; ".join(missing), file=sys.stderr)
        return 2
    return 0


def _build_one(ext) -> tuple[str, float]:
    t0 = time.monotonic()
    ext.module("cuda")
    return ext.name, time.monotonic() - t0


def build(workers: int) -> int:
    """The build stage: every package extension for this GPU, ``workers`` at a time,
    each ninja with its share of the cores."""
    import concurrent.futures
    import multiprocessing

    from ..ops import EXTENSIONS
    os.environ.setdefault("MAX_JOBS", str(max(1, (os.cpu_count() or 1) // workers)))
    pool = concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"))
    with pool:
        for name, seconds in pool.map(_build_one, EXTENSIONS):
            print(f"{name}: {seconds:.1f} s", flush=True)
    return 0
