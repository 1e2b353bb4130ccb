"""python -m attnbook.gpu, as far as a machine without a GPU can take it: the dry run,
the plan of ten-minute commands, the check stage's refusal, and Nsight Compute's
comparison with the emulator on the emulator's side."""
import datetime
import json
import os
import subprocess
import sys

import pytest
import torch

import attnbook as ab
from attnbook.gpu import counters, ncu
from attnbook.gpu.__main__ import main
from attnbook.gpu.stages import (COMMAND_LIMIT_S, ROOT, STAGES, commands_of, outcomes,
                                  plan)


def test_dry_run_lists_every_stage_in_commands_that_fit(tmp_path, capsys):
    assert main(["--dry-run", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for stage in STAGES:
        assert f"\n{stage.name} " in out and stage.what in out
        assert 0 < stage.estimate_s <= COMMAND_LIMIT_S
    total = sum(s.estimate_s for s in STAGES)
    assert f"\n{'total':<13}{total:>7} s" in out
    groups = commands_of(STAGES)
    assert [s for g in groups for s in g] == list(STAGES)
    assert all(sum(s.estimate_s for s in g) <= COMMAND_LIMIT_S for g in groups)
    assert f"in commands of at most {COMMAND_LIMIT_S} s: {len(groups)}" in out
    assert not (tmp_path / "summary.json").exists()   # a dry run runs nothing


def test_the_stages_cover_every_notebook_and_benchmark_once():
    args = [a for s in STAGES for cmd in s.commands for a in cmd]
    notebooks = sorted(a for a in args if a.endswith(".ipynb"))
    assert notebooks == sorted(str(p.relative_to(ROOT))
                               for p in (ROOT / "book").glob("*.ipynb"))
    chapters = [a for s in STAGES if s.name.startswith("bench")
                for a in s.commands[0][3:]]
    assert sorted(chapters) == sorted({**ab.models.ALL_SUITES,
                                       **ab.bench.suites.HOPPER_SUITES})
    order = [s.name for s in STAGES]
    assert order.index("bench-b") < order.index("notebooks-a")   # they plot its results
    for s in STAGES:
        if s.name.startswith("notebooks"):
            assert ("ATTNBOOK_BENCH", "recorded") in s.env


def test_plan_takes_the_stages_that_fit_in_order():
    now, later = plan(STAGES, STAGES[0].estimate_s + STAGES[1].estimate_s)
    assert now == list(STAGES[:2]) and later == list(STAGES[2:])
    assert plan(STAGES, 0) == ([], list(STAGES))


def test_unknown_stage_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit):
        main(["nope", "--out", str(tmp_path)])


@pytest.mark.parametrize("args, message", [
    (["--within", "0"], "--within: must be a number of seconds > 0, got 0"),
    (["--within", "nan"], "--within: must be a number of seconds > 0, got nan"),
    (["--within", "soon"], "--within: 'soon' is not a number of seconds"),
    (["--workers", "0"], "--workers: must be at least 1, got 0"),
    (["--workers", "-2"], "--workers: must be at least 1, got -2"),
])
def test_bad_numbers_are_usage_errors_before_any_plan(tmp_path, capsys, args, message):
    # --within 0 and nan once planned every stage; --workers 0 was taken
    with pytest.raises(SystemExit) as info:
        main(["--dry-run", "--out", str(tmp_path), *args])
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert message in err and "stage" not in out


def test_the_check_stage_refuses_a_machine_without_a_gpu(tmp_path):
    run = subprocess.run([sys.executable, "-m", "attnbook.gpu", "check", "--out",
                          str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "[check] FAILED" in run.stdout
    (record,) = json.loads((tmp_path / "summary.json").read_text()).values()
    assert record["stage"] == "check" and not record["ok"]
    facts = json.loads((tmp_path / "check" / "environment.json").read_text())
    assert facts["gpu"] is None and facts["python"] == sys.version.split()[0]
    log = (tmp_path / "check" / "log.txt").read_text()
    assert "cannot go on without: a GPU (torch.cuda.is_available() is False)" in log


RAW = '''==PROF== Connected to process 7 (python)
"ID","Process ID","Kernel Name","{m0}","{m1}"
"","","","request","sector"
"0","7","void at::native::vectorized_elementwise_kernel<4>(int)","10","40"
"1","7","void softmax_naive(const float *, float *, int, int)","1,024","4,096"
==PROF== Disconnected from process 7
'''.format(m0=ncu.METRICS[("global", "load", "requests")],
           m1=ncu.METRICS[("global", "load", "sectors")])


def test_ncu_raw_csv_is_read_and_paired_with_the_emulator_in_order():
    kernels = ncu.parse_raw_csv(RAW)
    assert [k["Kernel Name"][:30] for k in kernels] == [
        "void at::native::vectorized_el", "void softmax_naive(const float"]
    assert kernels[1][ncu.METRICS[("global", "load", "sectors")]] == 4096.0
    (row,) = ncu.compare([{"kernel": "softmax_naive", "global load requests": 1024,
                           "global load sectors": 4096}], kernels)
    assert row["kernel (ncu)"].startswith("void softmax_naive")   # torch's set aside
    assert row["global load sectors"] == {"emulator": 4096, "ncu": 4096.0}
    assert row["shared load wavefronts"] == {"emulator": None, "ncu": None}


def test_ncu_runs_on_the_gpu_and_the_emulator_side_anywhere(tmp_path, monkeypatch):
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    assert ncu.main(["--out", str(tmp_path), "--only", "softmax naive"]) == 2
    assert ncu.main(["--compare", str(tmp_path), "--only", "softmax naive"]) == 2
    saved = json.loads((tmp_path / "compare.json").read_text())
    assert saved["errors"] == {"softmax naive": "no softmax_naive.csv: run --out on a "
                               "GPU first"}
    (tmp_path / "softmax_naive.csv").write_text(RAW)   # what ncu wrote on a GPU
    (tmp_path.parent / "check").mkdir()
    (tmp_path.parent / "check" / "environment.json").write_text('{"gpu": "H200"}')
    assert ncu.main(["--compare", str(tmp_path), "--only", "softmax naive"]) == 0
    saved = json.loads((tmp_path / "compare.json").read_text())
    assert saved["errors"] == {} and saved["device"] == {"gpu": "H200"}
    assert saved["date"] == datetime.date.today().isoformat()
    (row,) = saved["results"]["softmax naive"]
    assert row["global load requests"]["emulator"] > 0
    assert row["global store sectors"]["emulator"] > 0
    assert row["global load sectors"]["ncu"] == 4096.0
    assert "| global load sectors |" in (tmp_path / "compare.md").read_text()


COUNTERS_RAW = """==PROF== Connected to process 9 (python)
"ID","Kernel Name","Grid Size","Block Size","{t}","{i}","{s}"
"","","","","ns","inst","inst"
"0","void flash_tc_smem_p_kernel<__half, 128>(...)","(64, 128, 1)","(128, 1, 1)",\
"7,214,592","3,655,139,328","1.20"
==PROF== Disconnected from process 9
""".format(t=counters.KEPT["time_ns"], i=counters.KEPT["instructions"],
           s="smsp__average_warps_issue_stalled_wait_per_issue_active.ratio")


def test_counters_read_ncu_raw_pages_into_the_record(tmp_path, monkeypatch):
    """The counters stage on a GPU writes ncu's raw page per launch; --record, run
    anywhere, reads them into the package's record beside the launch's work."""
    monkeypatch.setenv("ATTNBOOK_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(counters.shutil, "which", lambda name: None)
    folder = tmp_path / "counters"
    assert counters.main(["--out", str(folder), "--only", "forward step 3"]) == 2
    with pytest.raises(FileNotFoundError, match="check stage"):
        counters.record(folder)
    (tmp_path / "check").mkdir()
    (tmp_path / "check" / "environment.json").write_text('{"gpu": "NVIDIA H200"}')
    with pytest.raises(FileNotFoundError, match="no launch"):
        counters.record(folder)
    (folder / "forward_step_3.csv").write_text(COUNTERS_RAW)
    assert counters.main(["--record", str(folder)]) == 0
    (saved,) = ab.bench.load_counters()
    assert saved["device"] == {"gpu": "NVIDIA H200"}
    assert saved["date"] == datetime.date.today().isoformat()
    (launch,) = saved["launches"].values()
    assert launch["flops"] == 4 * 8 * 16 * 4096 ** 2 * 128
    assert launch["bytes"] == 2 * 4 * 8 * 16 * 4096 * 128   # q, k, v, o in fp16
    (kernel,) = launch["kernels"]
    assert kernel["kernel"].startswith("void flash_tc_smem_p_kernel")
    assert (kernel["time_ns"], kernel["instructions"]) == (7214592.0, 3655139328.0)
    assert kernel["stalls"] == {"wait": 1.2} and "ldmatrix" not in kernel


def _collect(env, *args):
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:xdist", "tests/test_softmax.py", *args],
                          capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, **env))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without one")
def test_tests_over_devices_take_the_cpu_and_refuse_a_missing_gpu():
    ids = _collect({}).stdout.split("\n")
    kernel_tests = [i for i in ids if "test_kernel_matches_softmax[" in i]
    assert kernel_tests and all("cpu" in i.split("[")[1] for i in kernel_tests)
    assert "no tests collected (" in _collect({}, "-m", "cuda").stdout   # no GPU half
    refused = _collect({"ATTNBOOK_TEST_DEVICES": "cuda"})
    assert refused.returncode != 0
    assert ("ATTNBOOK_TEST_DEVICES names 'cuda', but torch sees no CUDA device here"
            in refused.stdout + refused.stderr)


def test_ncu_profiles_launches_that_exist():
    """The first H200 run stopped at a name the launches had lost ('flash fp32')."""
    from attnbook.gpu.launches import LAUNCHES
    assert set(ncu.KERNELS) <= set(LAUNCHES)


def test_the_record_says_what_failed_even_when_a_worker_dies(tmp_path):
    """Each outcome lands in the record as it comes, from the controller only, with the
    end of a failure's report; a test that kills its worker is recorded too."""
    (tmp_path / "test_three.py").write_text(
        "import os, signal\n"
        "def test_passes(): pass\n"
        "def test_fails(): assert 1 + 1 == 3, 'arithmetic'\n"
        "def test_crashes(): os.kill(os.getpid(), signal.SIGSEGV)\n")
    record = tmp_path / "record.jsonl"
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                    "-p", "attnbook.gpu.record", "--record-to", str(record), "-q",
                    "-n", "2", "--dist", "load", str(tmp_path / "test_three.py")],
                   capture_output=True, text=True, cwd=tmp_path, timeout=300)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    outcome = {line["test"].split("::")[1]: line for line in lines}
    assert len(lines) == len(outcome) == 3, lines
    assert outcome["test_passes"]["outcome"] == "passed"
    assert outcome["test_fails"]["outcome"] == "failed"
    assert "arithmetic" in outcome["test_fails"]["report"]
    assert outcome["test_crashes"]["outcome"] == "failed"
    assert "crashed" in outcome["test_crashes"]["report"]
    summary = outcomes(record)
    assert summary["outcomes"] == {"passed": 1, "failed": 2}
    assert sorted(t.split("::")[1] for t in summary["failed_tests"]) == \
        ["test_crashes", "test_fails"]


def test_every_pytest_stage_records_its_outcomes():
    for stage in STAGES:
        for argv in stage.argv(ROOT / "run" / stage.name, 2):
            if "pytest" in argv:
                assert argv[argv.index("--record-to") + 1] == \
                    str(ROOT / "run" / stage.name / "record.jsonl")
