"""The benchmark harness: workload arithmetic, the peak table, result files and figures.
Timing itself needs a GPU; here we check that it refuses to run without one."""
import json
import pathlib
import subprocess
import sys

import matplotlib
import pytest
import torch

import attnbook as ab
from attnbook import bench

matplotlib.use("Agg")
RESULTS = bench.PACKAGE_RESULTS
ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_attention_work():
    assert bench.attention_flops(4, 8, 1024, 1024, 64) == 4 * 4 * 8 * 1024 * 1024 * 64
    assert (bench.attention_flops(4, 8, 1024, 1024, 64, causal=True)
            == 2 * 4 * 8 * 1024 * 1024 * 64)
    # Q and O: B·H·Sq·D each; K and V: B·Hkv·Sk·D each; 4 bytes an element.
    assert (bench.attention_bytes(2, 8, 10, 20, 64, Hkv=2)
            == 4 * (2 * 2 * 8 * 10 * 64 + 2 * 2 * 2 * 20 * 64))


@pytest.mark.parametrize("name,bandwidth", [("NVIDIA H100 80GB HBM3", 3350.0),
                                            ("NVIDIA H100 PCIe", 2000.0),
                                            ("NVIDIA H200", 4800.0),
                                            ("NVIDIA A100-SXM4-40GB", 1555.0),
                                            ("NVIDIA A100-SXM4-80GB", 2039.0),
                                            ("Tesla T4", 320.0),
                                            ("NVIDIA L4", 300.0)])
def test_peak_table_matches_names(monkeypatch, name, bandwidth):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    peaks = bench.device_peaks()
    assert peaks["bandwidth_gbs"] == bandwidth and peaks["source"] == "datasheet"


@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="checks the refusal on a machine without a GPU")
def test_gpu_only_functions_refuse_on_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNBOOK_RESULTS", str(tmp_path))
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        bench.time_cuda(lambda: None)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        bench.save(bench.Result("02", machine=dict(gpu="Tesla T4")))
    assert not any(tmp_path.iterdir())


def fake_result(chapter="02", gpu="Tesla T4", date="2026-01-02"):
    rows = [dict(S=s, impl=impl, ms=ms * s / 256, tflops=1.0, pct_peak=10.0,
                 peak_mem_bytes=s * s)
            for s in (256, 512)
            for impl, ms in (("attnbook naive", 4.0), ("torch eager", 1.0))]
    rows.append(dict(S=256, impl="sdpa flash", ms=None,
                     error="No available kernel. Aborting execution."))
    return bench.Result(chapter, rows, dict(gpu=gpu, capability="75", torch="2.13.0",
                                            cuda="13.0", date=date))


def test_save_and_load_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNBOOK_RESULTS", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    path = bench.save(fake_result())
    assert path == tmp_path / "02" / "Tesla_T4.json"
    with pytest.raises(ValueError, match="only by the machine that measured it"):
        bench.save(fake_result(gpu="NVIDIA H100 80GB HBM3"))
    (loaded,) = bench.load("02")
    assert loaded == fake_result()
    assert bench.ratio(loaded, "torch eager", "attnbook naive", S=512) == 4.0
    assert (bench.ratio(loaded, "sdpa flash", "attnbook naive", S=256)
            != bench.ratio(loaded, "sdpa flash", "attnbook naive", S=256))  # NaN


def test_a_readers_results_go_to_their_cache_and_come_first(tmp_path, monkeypatch):
    """Without ATTNBOOK_RESULTS a GPU's results are saved in the user's cache, never
    in the installed package; reading, a chapter has the package's records and the
    reader's, the reader's own measurement of a GPU in place of the package's."""
    monkeypatch.delenv("ATTNBOOK_RESULTS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    packaged = {r.machine["gpu"] for r in bench.load("08")}
    assert packaged and "Tesla T4" not in packaged
    path = bench.save(fake_result("08", date="2099-01-01"))
    assert path == tmp_path / "attnbook" / "results" / "08" / "Tesla_T4.json"
    assert [r.machine["gpu"] for r in bench.load("08")][0] == "Tesla T4"  # newest
    assert {r.machine["gpu"] for r in bench.load("08")} == packaged | {"Tesla T4"}
    gpu = sorted(packaged)[0]
    mine = fake_result("08", gpu=gpu, date="2099-01-02")
    mine.rows[0]["ms"] = 123.0
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: gpu)
    bench.save(mine)
    (theirs,) = [r for r in bench.load("08") if r.machine["gpu"] == gpu]
    assert theirs.rows[0]["ms"] == 123.0 and len(bench.load("08")) == len(packaged) + 1


def test_table_marks_unsupported_runs():
    table = fake_result().table(S=256)
    lines = table.splitlines()
    assert lines[0] == "| implementation | time (ms) | TFLOP/s | % of peak |"
    assert lines[1] == "|---|--:|--:|--:|"
    assert lines[2] == "| attnbook naive | 4 | 1 | 10.0% |"
    assert "unsupported: No available kernel" in lines[4]


def test_a_table_renders_as_markdown_under_its_caption():
    """A notebook shows the table (text/markdown), captioned with the device and the
    settings every row shares; printed, it is the Markdown text."""
    result = fake_result()
    for row in result.rows:
        row.update(B=2, dtype="float16")
    table = result.table(columns=("impl", "S", "ms", "peak_mem_bytes"),
                         impl="torch eager")
    assert table.caption == "Tesla T4 · B = 2, float16"
    markdown = table._repr_markdown_()
    assert markdown.startswith("*Tesla T4 · B = 2, float16*\n\n| implementation | S |")
    assert markdown.endswith("| torch eager | 512 | 2 | 0.25 |")   # 512² bytes, MiB
    assert repr(table) == str(table) == markdown.split("\n\n", 1)[1]


def test_a_pivot_has_a_line_per_implementation_and_a_column_per_case():
    result = fake_result()
    del result.rows[3]                                  # torch eager at S = 512
    table = result.pivot("ms", column="S")
    assert table.splitlines() == [
        "| implementation | S = 256 | S = 512 |", "|---|--:|--:|",
        "| attnbook naive | 4 | 8 |", "| torch eager | 1 |  |", "| sdpa flash | – |  |"]
    assert table.caption == "Tesla T4 · ms · –: unsupported"
    for r in result.rows:
        r.update(B=2, causal=r["S"] == 256)
    by_case = result.pivot("ms", row=("S", "causal"), column="impl", B=2)
    assert by_case.splitlines()[:3] == [
        "| S | causal | attnbook naive | torch eager | sdpa flash |",
        "|---|--:|--:|--:|--:|", "| 256 | True | 4 | 1 | – |"]
    assert by_case.caption.startswith("Tesla T4 · B = 2 · ms")
    both = result.pivot(("ms", "pct_peak"), column="S")
    assert both.splitlines()[2] == "| attnbook naive | 4 (10.0%) | 8 (10.0%) |"
    assert both.caption.startswith("Tesla T4 · B = 2 · ms (% of peak)")


def test_large_numbers_are_written_whole_and_tables_from_rows():
    result = fake_result()
    result.rows[0].update(gbs=2813.4)
    assert "| 2,813 |" in result.table(columns=("impl", "gbs"), S=256)
    result.rows[0].update(gbs=999.7)   # three digits would say 1e+03
    assert "| 1,000 |" in result.table(columns=("impl", "gbs"), S=256)
    table = bench.markdown_table(["case", "ms", "ratio"],
                                 [["S = 512", "0.215", "1.7×"]], caption="H200")
    assert table.splitlines() == ["| case | ms | ratio |", "|---|--:|--:|",
                                  "| S = 512 | 0.215 | 1.7× |"]
    assert table._repr_markdown_().startswith("*H200*\n\n| case |")


def test_run_or_load_without_gpu(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ATTNBOOK_RESULTS", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.run_or_load(
        "03", lambda: pytest.fail("a suite must not run without a GPU")) == []
    assert "no results are recorded yet for chapter 03" in capsys.readouterr().out
    for gpu, date in (("Tesla T4", "2026-01-02"),
                      ("NVIDIA H100 80GB HBM3", "2026-03-04")):
        (tmp_path / "03").mkdir(exist_ok=True)
        (tmp_path / "03" / f"{gpu}.json").write_text(
            json.dumps(fake_result("03", gpu, date).__dict__))
    recorded = bench.run_or_load("03", None)
    assert [r.machine["gpu"] for r in recorded] == ["NVIDIA H100 80GB HBM3",
                                                    "Tesla T4"]  # newest first
    assert ("recorded results: chapter 03: NVIDIA H100 80GB HBM3 (sm_75)"
            in capsys.readouterr().out)


def test_a_busy_gpu_plots_what_is_recorded(tmp_path, monkeypatch, capsys):
    """ATTNBOOK_BENCH=recorded: notebooks that share a GPU (python -m attnbook.gpu runs
    several at a time) time nothing and show what the benchmark stage recorded."""
    monkeypatch.setenv("ATTNBOOK_RESULTS", str(tmp_path))
    monkeypatch.setenv("ATTNBOOK_BENCH", "recorded")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    (tmp_path / "07").mkdir()
    (tmp_path / "07" / "T4.json").write_text(json.dumps(fake_result("07").__dict__))
    recorded = bench.run_or_load("07", lambda: pytest.fail("timed on a busy GPU"))
    assert [r.machine["gpu"] for r in recorded] == ["Tesla T4"]
    assert "recorded results: chapter 07: Tesla T4" in capsys.readouterr().out


def test_figures_draw_every_implementation_that_ran():
    result = fake_result()
    ax = ab.plots.plot_times(result)
    assert sorted(line.get_label() for line in ax.lines) == ["attnbook naive",
                                                             "torch eager"]
    assert list(ax.lines[0].get_xdata()) == [256, 512]
    ax = ab.plots.plot_speedups(result, "attnbook naive")
    assert [bar.get_height() for bar in ax.patches] == [4.0, 4.0]
    with pytest.raises(ValueError, match="baseline"):
        ab.plots.plot_speedups(result, "cuBLAS")
    # equal memory at every S: one line, named for both
    assert [line.get_label() for line in ab.plots.plot_memory(result).lines] == [
        "attnbook naive = torch eager"]
    matplotlib.pyplot.close("all")


def test_recorded_results_are_complete():
    """Every recorded result file names its machine and versions and holds measured
    rows."""
    from attnbook.bench.suites import HOPPER_SUITES, PEER_SUITES
    from attnbook.models import ALL_SUITES
    for path in sorted([*RESULTS.glob("[0-9]*/*.json"),
                        *(RESULTS / "peers").glob("*.json")]):
        data = json.loads(path.read_text())
        assert path.parent.name == data["chapter"], path
        assert data["chapter"] in {**ALL_SUITES, **PEER_SUITES, **HOPPER_SUITES}, path
        for key in ("gpu", "capability", "torch", "cuda", "date", "peaks"):
            assert data["machine"].get(key), (path, key)
        assert data["rows"] and all("impl" in r and "ms" in r
                                    for r in data["rows"]), path
        assert any(r["ms"] for r in data["rows"]), path


def test_sweep_heatmap_places_each_tile_shape():
    rows = [dict(impl="flash sweep", Br=br, Bc=bc, ms=float(br + bc), S=2048)
            for br in (32, 64) for bc in (16, 32, 64)]
    ax = ab.plots.plot_sweep(bench.Result("07", rows, dict(gpu="Tesla T4")))
    grid = ax.get_images()[0].get_array()
    assert grid.shape == (2, 3) and grid[1, 2] == 64 + 64 and grid[0, 0] == 32 + 16
    matplotlib.pyplot.close("all")


def test_sweep_heatmap_says_what_it_shows_and_stays_legible():
    # its numbers were white on the map's yellow end, with no scale and no case named
    rows = [dict(impl="flash sweep", Br=br, Bc=bc, ms=float(br + bc), S=2048,
                 causal=False) for br in (32, 64) for bc in (16, 32, 64)]
    ax = ab.plots.plot_sweep(bench.Result("07", rows, dict(gpu="Tesla T4")),
                             what="step 1's tiles")
    assert ax.get_title() == "step 1's tiles, S = 2048\nTesla T4"
    assert len(ax.figure.axes) == 2   # the colour bar
    colours = {t.get_text(): t.get_color() for t in ax.texts}
    assert colours["48.00"] == "black" and colours["128.00"] == "white"   # fast: light
    matplotlib.pyplot.close("all")


def test_series_equal_everywhere_are_one_line_and_the_rest_differ_in_style():
    # chapter 7's memory plot showed 4 of its 8 implementations: the others lay under
    result = fake_result()
    result.rows += [dict(r, impl="attnbook copy") for r in result.rows
                    if r["impl"] == "torch eager"]
    ax = ab.plots.plot_times(result)
    assert sorted(line.get_label() for line in ax.lines) == [
        "attnbook copy = torch eager", "attnbook naive"]
    styles = {(line.get_marker(), line.get_linestyle()) for line in ax.lines}
    assert len(styles) == len(ax.lines) == 2
    matplotlib.pyplot.close("all")


def test_the_bound_is_the_slower_of_compute_and_memory_at_the_peaks():
    peaks = dict(fp32_tflops=60.0, fp16_tflops=900.0, bandwidth_gbs=4000.0)
    fp32 = dict(ms=2.0, tflops=30.0, gbs=40.0)            # half the fp32 peak, 1% of bw
    assert bench.bound_ms(fp32, peaks) == 1.0
    fp16 = dict(fp32, dtype="float16", tflops=90.0)       # a tenth of the tensor cores
    assert bench.bound_ms(fp16, peaks) == pytest.approx(0.2)
    copy = dict(ms=2.0, gbs=3000.0)                        # no FLOPs: bandwidth alone
    assert bench.bound_ms(copy, peaks) == 1.5


def test_peak_memory_counts_what_the_call_allocates(device):
    """Views of tensors made before the call cost nothing; the registered ops'
    workspaces (the naive path's S×S scores) are counted although the op is one opaque
    call. (Every size here is a multiple of the CUDA allocator's 512-byte rounding.)"""
    q = torch.randn(1, 2, 64, 32).to(device)
    assert ab.peak_memory(lambda: q.view(2, 64, 32).transpose(1, 2), device)[0] == 0
    peak, _ = ab.peak_memory(lambda: ab.attention(q, q, q, impl="naive"), device)
    assert peak == q.numel() * 4 + 2 * 64 * 64 * 4
    peak, _ = ab.peak_memory(lambda: ab.attention(q, q, q), device)
    assert peak == q.numel() * 4 + 2 * 64 * 4          # o and the log-sum-exp


@pytest.mark.gpu
def test_peak_memory_leaves_out_the_first_products_workspace():
    """In a fresh process the first matrix product on a GPU allocates cuBLAS's workspace
    (32 MiB on an H200), which stays: chapter 1's peak of a 128 × 128 attention was
    measured as 34 MB, 130 times its scores. The peak is the computation's own."""
    code = ("import torch, attnbook as ab\n"
            "q = torch.randn(1, 4, 128, 64, device='cuda')\n"
            "f = lambda: torch.softmax(q @ q.transpose(-2, -1), -1) @ q\n"
            "print(ab.peak_memory(f, 'cuda')[0])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    scores = 4 * 128 * 128 * 4
    assert scores <= int(done.stdout) <= 3 * scores, done.stdout


@pytest.mark.gpu
def test_cuda_event_timing_measures_the_work():
    """A 256 MiB copy timed with flushed L2: a timing that did not wait for the GPU, or
    that measured the flush, would be far off the device's bandwidth."""
    x = torch.empty(2**26, device="cuda")
    t = bench.time_cuda(lambda: x.clone(), repeats=10)
    assert len(t["times_ms"]) == 10 and t["median_ms"] > 0
    gbs = 2 * x.numel() * 4 / t["median_ms"] / 1e6          # bytes read and written
    peak = bench.device_peaks()["bandwidth_gbs"]
    assert 0.2 * peak < gbs < 1.1 * peak, (gbs, peak)


def test_recorded_results_ship_in_the_wheel(tmp_path):
    """Results are package data: an installed wheel (a Colab reader's pip install) finds
    them, and the kernels and emulator headers come along."""
    import os
    import shutil
    import subprocess
    import sys
    import zipfile
    root = pathlib.Path(__file__).resolve().parents[1]
    src = tmp_path / "src"
    shutil.copytree(root, src, ignore=shutil.ignore_patterns(".git", "_build",
                                                             "*.ipynb", "__pycache__",
                                                             "*.egg-info"))
    results = src / "src" / "attnbook" / "bench" / "results" / "99"
    results.mkdir(parents=True, exist_ok=True)
    (results / "Tesla_T4.json").write_text(json.dumps(fake_result("99").__dict__))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"),
                    str(src)], check=True)
    (wheel,) = (tmp_path / "dist").glob("attnbook-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("attnbook/bench/results/99/Tesla_T4.json",
                   "attnbook/kernels/flash_fp32.cu",
                   "attnbook/kernels/mask.cuh",
                   "attnbook/toolchain/include/attnbook_torch.h",
                   "cuda_emulator/include/cassert"):
        assert needed in names, needed
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                    "--target", str(site), str(wheel)], check=True)
    env = dict(os.environ, PYTHONPATH=str(site))
    env.pop("ATTNBOOK_RESULTS", None)
    out = subprocess.run([sys.executable, "-c", "import attnbook as ab; "
                          "print(ab.__file__); "
                          "print(ab.bench.load('99')[0].machine['gpu'])"],
                         env=env, cwd=tmp_path, capture_output=True, text=True,
                         check=True)
    assert out.stdout.splitlines() == [str(site / "attnbook" / "__init__.py"),
                                       "Tesla T4"]


def test_recorded_ncu_counts_name_their_gpu_and_agree_on_global_loads():
    """Nsight Compute beside the emulator (appendix B): every record names its GPU and
    date, and holds, per launch, the kernels with both counts."""
    records = bench.load_ncu()
    assert records and len(records) == len(list(RESULTS.glob("ncu/*.json")))
    for record in records:
        assert record["device"]["gpu"] and record["date"]
        for launch, kernels in record["results"].items():
            assert kernels, launch
            for kernel in kernels:
                for count in ("global load requests", "global load sectors"):
                    assert kernel[count]["emulator"] == kernel[count]["ncu"], launch


def test_recorded_speed_counters_name_their_gpu_and_hold_each_kernel():
    """Nsight Compute's speed counters at full size (chapter 8, appendix B): every
    record names its GPU and date; each launch its work and at least one kernel with
    its time, instructions and stall reasons."""
    records = bench.load_counters()
    assert records and len(records) == len(list(RESULTS.glob("counters/*.json")))
    for record in records:
        assert record["device"]["gpu"] and record["date"]
        for launch in record["launches"].values():
            assert launch["bytes"] > 0 and launch["kernels"]
            for kernel in launch["kernels"]:
                assert kernel["time_ns"] > 0 and kernel["instructions"] > 0
                assert 0 < kernel["issue_active_pct"] <= 100
                assert kernel["stalls"]["selected"] == 1.0   # ncu's own unit


def test_the_sass_anchors_cite_their_source_and_hold_figures_only():
    """The public kernels that calibrate the card's SASS column (chapter 8): a
    repository at a commit and where its speeds are published; per kernel and
    architecture the hot-loop figures and a published fraction of FlashAttention-2."""
    from attnbook.bench.cards import SASS_ARCHS
    records = bench.load_sass_anchors()
    assert records and len(records) == len(list(RESULTS.glob("sass_anchors/*.json")))
    for record in records:
        source = record["source"]
        assert len(source["commit"]) == 40 and source["published"].startswith("http")
        assert source["repository"].count("/") == 1 and source["gpu"]
        for k in record["kernels"]:
            assert k["arch"] in SASS_ARCHS and k["hmma"] >= 64
            assert 0 < k["published_fraction_of_fa2"] <= 1.0
            assert k["other_per_hmma"] > 0 and 0 < k["ldsm_per_hmma"] < 1


# ---- a reader's GPU: the quick set, its estimate, beside the recorded results --------
T4_PEAKS = dict(bench.PEAKS)["T4"]


def test_each_benchmark_cell_takes_about_a_minute_on_a_t4_by_default():
    """The estimate (the recorded rows scaled to a T4's peaks by their bounds) of what a
    benchmark cell times by default: at most a minute; a chapter has a quick set only
    where its whole suite would take longer."""
    from attnbook.models import ALL_SUITES
    for chapter in ALL_SUITES:
        quick, whole = (bench.estimate_s(chapter, T4_PEAKS, q) for q in (True, False))
        assert 0 < quick <= 60, (chapter, quick)
        assert (whole > 60) == (chapter in bench.QUICK), (chapter, whole)
    assert bench.estimate_s("no such chapter", T4_PEAKS) is None


def test_the_estimate_scales_each_row_by_its_bound():
    """A row bound by memory, on a device with a tenth of the bandwidth, takes ten
    times as long, for each of its runs (20 timed, 3 warm-ups, 1 for memory)."""
    row = dict(ms=2.0, times_ms=[2.0] * 20, gbs=480.0)   # a tenth of the H200's
    h200 = dict(bench.PEAKS)["H200"]
    slow = dict(h200, bandwidth_gbs=480.0)
    assert bench.harness._row_seconds(row, h200, slow) == pytest.approx(24 * 2e-3 * 10)
    row.update(tflops=67.0)                              # now compute bound
    assert bench.harness._row_seconds(row, h200, slow) == pytest.approx(24 * 2e-3)


def _on_a_gpu(monkeypatch, tmp_path, gpu="Tesla T4"):
    monkeypatch.delenv("ATTNBOOK_RESULTS", raising=False)
    monkeypatch.delenv("ATTNBOOK_BENCH", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: gpu)
    monkeypatch.setattr(bench.harness, "device_peaks",
                        lambda device=None: dict(T4_PEAKS, name=gpu))
    monkeypatch.setattr(bench.harness, "machine_record", lambda: dict(
        gpu=gpu, capability="75", torch="2.11.0", cuda="12.8", date="2099-01-01",
        peaks=T4_PEAKS))


def test_a_readers_gpu_times_the_quick_set_and_shows_it_first(tmp_path, monkeypatch,
                                                              capsys):
    """On a GPU a benchmark cell prints what it times and for about how long, times the
    quick set (a case outside it is not timed), saves it in the user's cache and
    returns it before the recorded results; the whole suite on request."""
    _on_a_gpu(monkeypatch, tmp_path)
    case = dict(S=16384, D=128, dtype="float16", causal=False)
    with bench.harness._quick_set(bench.QUICK["08"]):
        assert not bench.kept(case) and bench.kept(dict(case, S=1024, model="any"))
        assert bench.measure("step 3", pytest.fail, case, flops=1, bytes=1,
                             peaks={}) is None

    def rows():
        return [dict(S=S, D=128, dtype="float16", causal=False, impl="step 3",
                     ms=1.0) for S in (1024, 16384)]
    shown = bench.run_or_load("08", rows)
    printed = " ".join(capsys.readouterr().out.split())
    quick, whole = (bench.estimate_s("08", T4_PEAKS, q) for q in (True, False))
    assert ("Timing a quick set of chapter 08's benchmark on Tesla T4" in printed
            and f"about {quick:.0f} s" in printed and f"about {whole:.0f} s" in printed
            and "ATTNBOOK_BENCH=full" in printed and "S in 1024, 2048" in printed
            and "chapter 08 (quick set): Tesla T4" in printed)
    assert [r.machine["gpu"] for r in shown][:2] == ["Tesla T4", "NVIDIA H200"]
    assert [r["S"] for r in shown[0].rows] == [1024] and shown[0].machine["quick"]
    assert (tmp_path / "attnbook" / "results" / "08" / "Tesla_T4_quick.json").exists()
    whole_run = bench.run_or_load("08", rows, full=True)
    assert [r["S"] for r in whole_run[0].rows] == [1024, 16384]
    assert "Timing the whole of chapter 08" in capsys.readouterr().out
    monkeypatch.setenv("ATTNBOOK_BENCH", "full")
    assert len(bench.run_or_load("08", rows)[0].rows) == 2
    assert (tmp_path / "attnbook" / "results" / "08" / "Tesla_T4.json").exists()


BENCH_CELLS = ("run_or_load(", "for result in recorded", "for result in fa2",
               "HEADLINES")


@pytest.mark.parametrize("notebook", sorted(
    p.name for p in (ROOT / "book").glob("*.ipynb")
    if any(m in p.read_text() for m in BENCH_CELLS)))
def test_benchmark_cells_show_a_readers_quick_set_beside_the_recorded(
        notebook, tmp_path, monkeypatch):
    """What a reader's T4 leaves in their cache after each chapter's default run (the
    recorded rows of the quick set stand in for its timings): every benchmark cell
    shows it, newest first, and the recorded GPU's rows after it."""
    from attnbook.models import ALL_SUITES
    monkeypatch.delenv("ATTNBOOK_RESULTS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for chapter in ALL_SUITES:
        (recorded,) = bench.load(chapter)
        with bench.harness._quick_set(bench.QUICK.get(chapter)):
            rows = [r for r in recorded.rows if bench.kept(r)]
        machine = dict(recorded.machine, gpu="Tesla T4", date="2099-01-01",
                       peaks=T4_PEAKS, quick=chapter in bench.QUICK)
        path = bench.results_file(chapter, "Tesla T4 quick")
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(dict(chapter=chapter, rows=rows, machine=machine)))
    cells = ["".join(c["source"]) for c in
             json.loads((ROOT / "book" / notebook).read_text())["cells"]
             if c["cell_type"] == "code"]
    import importlib
    import itertools
    import re
    figs = re.search(r"from attnbook.figures import (\w+) as figs", "\n".join(cells))
    shown = []
    namespace = dict(ab=ab, torch=torch, itertools=itertools,
                     display=shown.append, print=lambda *a, **k: shown.extend(a),
                     figs=figs and importlib.import_module(
                         f"attnbook.figures.{figs.group(1)}"))
    for cell in cells:
        if any(m in cell for m in BENCH_CELLS):
            exec(cell, namespace)
    matplotlib.pyplot.close("all")
    text = "\n".join(map(str, shown)) + "".join(
        getattr(s, "caption", "") for s in shown)
    assert "Tesla T4" in text and "H200" in text, text[:500]


def test_the_generation_figure_marks_each_bar_with_its_time_over_sdpas():
    from attnbook.figures import generation
    (recorded,) = bench.load("10")
    fig = generation.plot_ttft_tbt(recorded)
    ttft, tbt = fig.axes[:2]
    rows = [r for r in recorded.rows if r.get("ttft_ms")]
    assert len(ttft.patches) == len(tbt.patches) == len(rows) == 14
    labels = [t.get_text() for t in ttft.texts]
    assert labels.count("1.00×") >= 4 and "2.39×" in labels   # HF GPT-2, B = 1
    assert [t.get_text() for t in fig.legends[0].texts] == [
        "the book's kernels", "SDPA", "eager", "the book's kernels, paged cache"]
    strided = bench.Result("10", [r for r in recorded.rows if "ttft_ms" not in r],
                           recorded.machine)
    assert generation.plot_ttft_tbt(strided) is None   # a quick set's rows
    matplotlib.pyplot.close("all")


# ---- the peers: FlexAttention on the chapters' cases ---------------------------------
FLEX_RULES = [dict(is_causal=True), dict(stride=3, is_causal=True), dict(window=4),
              dict(key_lengths=torch.tensor([5, 11]))]


@pytest.mark.parametrize("rule", FLEX_RULES, ids=["causal", "stride causal", "window",
                                                  "key lengths"])
@pytest.mark.parametrize("sq, hkv", [(7, 4), (1, 2)], ids=["prefill", "decode gqa"])
def test_the_peers_flexattention_computes_what_the_book_computes(rule, sq, hkv):
    """What the peers' suite times is the same attention as the chapter's rows: the
    call of FlexAttention (here eager, on the CPU) gives ab.attention's output for
    each mask, grouped heads and a single query included."""
    from attnbook.bench.peers import flex_call
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, sq, 32, generator=g)
    k, v = (torch.randn(2, hkv, 11, 32, generator=g) for _ in range(2))
    got = flex_call(q, k, v, compiled=False, **rule)()
    torch.testing.assert_close(got, ab.attention(q, k, v, enable_gqa=True, **rule),
                               atol=2e-6, rtol=1e-5)
    nothing = flex_call(q, k, v, compiled=False)()   # no mask: no block mask
    torch.testing.assert_close(nothing, ab.attention(q, k, v, enable_gqa=True),
                               atol=2e-6, rtol=1e-5)


def test_the_peers_suite_stays_out_of_the_chapters_cells():
    """FlexAttention compiles for tens of seconds per mask and shape: its suite is run
    by python -m attnbook.bench (and the GPU runner's peers stage), never by a
    chapter's benchmark cell or quick set."""
    from attnbook.gpu.stages import STAGES
    from attnbook.models import ALL_SUITES
    from attnbook.bench.suites import PEER_SUITES as peers
    assert not set(peers) & set(ALL_SUITES) and not set(peers) & set(bench.QUICK)
    for path in (ROOT / "book").glob("*.ipynb"):
        assert "peers" not in path.read_text(), path
    (stage,) = [s for s in STAGES if s.name == "peers"]
    assert [c[1:] for c in stage.commands] == [("-m", "attnbook.bench", "peers")]


@pytest.mark.gpu
def test_a_peer_row_is_timed_after_its_build():
    """On a GPU, a FlexAttention row: compiled in its warm-up, then timed."""
    from attnbook.bench.peers import flex_row
    q, k, v = (torch.randn(1, 2, 256, 64, device="cuda") for _ in range(3))
    case = dict(S=256, causal=True, chapter="07")
    work = dict(flops=bench.attention_flops(1, 2, 256, 256, 64, True),
                bytes=bench.attention_bytes(1, 2, 256, 256, 64),
                peaks=bench.device_peaks())
    row = flex_row(case, work, q, k, v, is_causal=True)
    assert row["impl"] == "flex" and row["ms"] > 0, row
