"""``python -m attnbook.gpu``: see the package's docstring, and ``--help``."""
import argparse
import json
import os
import pathlib
import shlex
import sys
import time

from ..toolchain.cli import seconds, whole
from . import __doc__ as DOC
from .stages import (COMMAND_LIMIT_S, ROOT, STAGES, build, commands_of, environment,
                     plan, run_stage)

BY_NAME = {s.name: s for s in STAGES}


def _parser():
    p = argparse.ArgumentParser(prog="python -m attnbook.gpu", description=DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stages", nargs="*", metavar="STAGE",
                   help=f"stages to run, in their order: {', '.join(BY_NAME)} "
                   "(default: every stage without a passing record in the run's "
                   "summary.json)")
    p.add_argument("--out", type=pathlib.Path, default=ROOT / "build" / "gpu" / "run",
                   help="the run's folder (default: build/gpu/run)")
    p.add_argument("--within", type=seconds, metavar="SECONDS",
                   help="run the next stages whose estimates fit in SECONDS, no more")
    p.add_argument("--workers", type=whole(1),
                   default=max(1, min(8, (os.cpu_count() or 2) // 2)),
                   help="pytest-xdist workers and parallel builds (default: half the "
                   "cores, at most 8)")
    p.add_argument("--rerun", action="store_true",
                   help="with no STAGE: run passed stages again too")
    p.add_argument("--dry-run", action="store_true",
                   help="list the stages, their commands and expected times; run none")
    # the stages' own commands
    p.add_argument("--environment", type=pathlib.Path, help=argparse.SUPPRESS)
    p.add_argument("--build", type=whole(1), metavar="WORKERS",
                   help=argparse.SUPPRESS)
    return p


def _dry_run(stages, later, out, workers):
    print(f"{'stage':<13}{'estimate':>9}  what")
    for s in stages:
        print(f"{s.name:<13}{s.estimate_s:>7} s  {s.what}")
        for argv in s.argv(out / s.name, workers):
            print(f"{'':<24}$ {shlex.join(argv)}")
    total = sum(s.estimate_s for s in stages)
    print(f"{'total':<13}{total:>7} s  ({total / 60:.0f} min, estimates for one H100 "
          "or H200 with 16 cores)")
    groups = commands_of(stages)
    print(f"in commands of at most {COMMAND_LIMIT_S} s: {len(groups)}")
    for i, group in enumerate(groups, 1):
        print(f"  {i}. {' '.join(s.name for s in group)} "
              f"({sum(s.estimate_s for s in group)} s)")
    if later:
        print("not within the time given: " + " ".join(s.name for s in later))


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.environment:
        return environment(args.environment)
    if args.build:
        return build(args.build)
    if not (ROOT / "tests").is_dir() or not (ROOT / "book").is_dir():
        _parser().error(f"the stages run the tests and notebooks of a clone: run this "
                        f"in one ({ROOT} is none)")
    unknown = [n for n in args.stages if n not in BY_NAME]
    if unknown:
        _parser().error(f"no stage {unknown[0]!r}; the stages: {', '.join(BY_NAME)}")
    summary_path = args.out / "summary.json"
    summary = (json.loads(summary_path.read_text()) if summary_path.exists() else {})
    if args.stages:
        chosen = [s for s in STAGES if s.name in args.stages]
    else:
        chosen = [s for s in STAGES
                  if args.rerun or not summary.get(s.name, {}).get("ok")]
    now, later = plan(chosen, args.within) if args.within else (chosen, [])
    if args.dry_run:
        _dry_run(now, later, args.out, args.workers)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + (args.within or float("inf"))
    failed = []
    for stage in now:
        timeout = min(deadline - time.monotonic(), 3 * stage.estimate_s)
        print(f"[{stage.name}] {stage.what} (about {stage.estimate_s} s)", flush=True)
        record = run_stage(stage, args.out, args.workers, timeout)
        summary[stage.name] = record
        summary_path.write_text(json.dumps(summary, indent=1) + "\n")
        print(f"[{stage.name}] {'passed' if record['ok'] else 'FAILED'} in "
              f"{record['seconds']} s; log: {args.out / stage.name / 'log.txt'}",
              flush=True)
        if not record["ok"]:
            failed.append(stage.name)
            if stage.name == "check":
                break   # nothing after it can run
    if later:
        print("next (not within the time given): " + " ".join(s.name for s in later))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
