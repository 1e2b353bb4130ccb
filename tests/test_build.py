"""compile(): the source transform, both context-switch implementations, error
reporting, and the nvcc compile check of every kernel the package and the notebooks
compile, for the three architectures the book targets."""
import ast
import contextlib
import io
import json
import logging
import pathlib
import re
import sys
import time

import pytest
import torch

import attnbook as ab
from cuda_emulator import emulate
from cuda_emulator import progress
from cuda_emulator.build import report_build
from attnbook.toolchain import KERNEL_DIR, find_nvcc

HERE = pathlib.Path(__file__).parent / "cuda"
KERNEL_FILES = sorted(KERNEL_DIR.glob("*.cu")) + [
    HERE / name for name in ("selftest.cu", "libraries.cu", "ptx_probe.cu",
                             "pipeline.cu")]
ARCHS = ["sm_75", "sm_80", "sm_90"]


# ---- the source transform ------------------------------------------------------------
def test_transform_keeps_every_line():
    src = (HERE / "selftest.cu").read_text()
    out = emulate.to_cpp(src)
    assert out.count("\n") == src.count("\n")
    assert "<<<" not in out and "extern __shared__" not in out
    # Each launch stays on the line it was written on.
    for i, (a, b) in enumerate(zip(src.splitlines(), out.splitlines())):
        if "<<<" in a:
            assert "launch_of(" in b, i


def test_transform_of_launch_forms():
    src = """k<<<g, b>>>(x);
ns::k2<float, 64><<<dim3(1, 2),
                   256, smem, stream>>>(x,
   y);
// k<<<1, 1>>>(commented out);
printf("<<<not a launch>>>");
"""
    out = emulate.to_cpp(src)
    # the kernel's address where it is one function, else the call as written
    assert "kernel_address<decltype(attnbook_t)>(k); }, [&](auto&... attnbook_a) { " \
           'k(attnbook_a...); }, "k").cfg(g, b)(x);' in out
    assert "kernel_address<decltype(attnbook_t)>(ns::k2<float, 64>); }, " \
           "[&](auto&... attnbook_a) { ns::k2<float, 64>(attnbook_a...); }, " \
           '"ns::k2<float, 64>").cfg(dim3(1, 2),' in out
    assert '"<<<not a launch>>>"' in out
    assert out.count("\n") == src.count("\n")


def test_transform_of_shared_declarations():
    src = """__global__ void k() {
  extern __shared__ __align__(16) float smem[];
  __shared__ float a[4][8], b[3];
  __shared__ int c;
}"""
    out = emulate.to_cpp(src).splitlines()
    assert "float* const smem = reinterpret_cast<float*>(" in out[1]
    assert ("poison_static_shared(&a, sizeof(a))" in out[2]
            and "poison_static_shared(&b, sizeof(b))" in out[2])
    assert "poison_static_shared(&c, sizeof(c))" in out[3]


def test_static_shared_keeps_its_lines_and_builds_at_namespace_scope():
    # `static __shared__` (LeetCUDA) failed to build: "conflicting specifiers"
    src = ("static __shared__ float g[4];\n__global__ void k(float* o) {\n  static\n"
           "  __shared__ float s[4];\n  __shared__ static int t;\n  o[0] = s[0];\n}\n")
    out = emulate.to_cpp(src)
    assert out.count("\n") == src.count("\n")
    lines = out.splitlines()
    assert lines[0] == "__shared__ float g[4];"
    assert "poison_static_shared(&s, sizeof(s))" in lines[2]
    assert "poison_static_shared(&t, sizeof(t))" in lines[4]
    assert lines[5] == "  o[0] = s[0];"
    assert not re.search(r"\bstatic\b", lines[2] + lines[4])


def test_an_alignment_after_shared_moves_before_it():
    # nvcc takes `__shared__ alignas(16) float t[8];`; after `static thread_local` (the
    # emulator's __shared__) an alignas would sit among the specifiers, an error in C++.
    out = emulate.to_cpp("__global__ void k() {\n  __shared__ alignas(16) float t[8];"
                         "\n  __shared__ __align__(8) int u;\n}\n").splitlines()
    assert out[1].startswith("  alignas(16) __shared__ float attnbook_shared_t[8];")
    assert out[2].startswith("  __align__(8) __shared__ int attnbook_shared_u;")


def test_unterminated_launch_is_a_compile_error():
    with pytest.raises(ab.CompileError, match="line 2"):
        ab.compile("broken", "\nk<<<1, 1(x);\n", "", ["f"], backend="emulator")


# ---- compile errors point at the reader's line ---------------------------------------
def test_compile_error_is_short_and_points_at_the_line():
    src = "__global__ void k(float* x) {\n  x[0] = 1.f;\n  y[0] = 2.f;\n}\n"
    with pytest.raises(ab.CompileError) as e:
        ab.compile("typo", src, "", ["k_of"], backend="emulator")
    msg = str(e.value)
    assert "cell.cu:3" in msg and "was not declared" in msg and "3 | y[0] = 2.f;" in msg
    assert len(msg.splitlines()) < 15


def test_a_wrapper_named_like_a_kernel_is_a_clear_error():
    """The emulator compiles both in one translation unit, where pybind then sees an
    overload set: say so instead of a template error."""
    src = "__global__ void __launch_bounds__(32) scale(float* x) { x[0] *= 2.f; }\n"
    with pytest.raises(ab.CompileError, match="'scale' has the name of a kernel"):
        ab.compile("clash", src, "at::Tensor scale(at::Tensor x) { return x; }",
                   ["scale"], backend="emulator")


def test_bad_arguments():
    with pytest.raises(ValueError):
        ab.compile("x", "", "", ["f"], backend="metal")
    with pytest.raises(ValueError):
        ab.compile("not a name", "", "", ["f"], backend="emulator")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="needs a GPU"):
            ab.compile("x", "", "", ["f"], backend="cuda")
    with pytest.raises(FileNotFoundError, match="vector_add.cu"):
        ab.kernel_source("nope.cu")


# ---- the line a build leaves ---------------------------------------------------------
def test_an_emulator_build_leaves_a_log_record_and_no_output(capsys, caplog):
    """Builds for the emulator take seconds and would leave a line in every notebook
    cell that compiles: they log it. A GPU build, a minute the first time, prints it."""
    with caplog.at_level(logging.INFO, logger="cuda_emulator"):
        ab.compile("selftest", (HERE / "selftest.cu").read_text(),
                   (HERE / "selftest_wrapper.cpp").read_text(), ["run"],
                   backend="emulator")
    assert capsys.readouterr().out == ""
    assert [r.getMessage().split(" in ")[0] for r in caplog.records] == [
        "compiled selftest for the CPU emulator"]
    report_build("decode", False, "sm_80", 41.04)
    assert capsys.readouterr().out == "compiled decode for sm_80 in 41.0 s\n"


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_first_build_shows_a_line_while_it_runs(tmp_path, monkeypatch):
    """On a terminal a build that is not cached shows what compiles while it runs,
    then the finished line in its place; the next first build of the same name and
    target says how long the last one took; a failed build says so; a cached build,
    and any build with ATTNBOOK_BUILD_PROGRESS=0, shows nothing."""
    folder = tmp_path / "decode_emulator_0123"
    folder.mkdir()
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("ATTNBOOK_BUILD_PROGRESS", "1")
    with progress.build_progress("decode", "sm_80", folder, cached=False) as done:
        assert err.getvalue() == ("compiling decode for sm_80: its first use here; "
                                  "later uses load it from the cache…")
    assert done("compiled decode for sm_80 in 0.0 s")
    assert err.getvalue().endswith("\rcompiled decode for sm_80 in 0.0 s".ljust(
        len("compiling decode for sm_80: its first use here; later uses load it from "
            "the cache…") + 1) + "\n")
    assert progress.last_seconds(folder, "decode for sm_80") is not None

    err.seek(0), err.truncate()
    monkeypatch.setattr(progress, "last_seconds", lambda folder, what: 41.0)
    with pytest.raises(KeyboardInterrupt):
        with progress.build_progress("decode", "sm_80", folder, cached=False):
            assert err.getvalue().endswith(", about 41 s as last time…")
            raise KeyboardInterrupt
    assert err.getvalue().endswith("\rcompiling decode for sm_80 failed".ljust(
        len(err.getvalue().split("\r")[0]) + 1) + "\n")

    err.seek(0), err.truncate()
    with progress.build_progress("decode", "sm_80", folder, cached=True) as done:
        pass
    assert not done("compiled") and err.getvalue() == ""
    monkeypatch.setenv("ATTNBOOK_BUILD_PROGRESS", "0")
    with progress.build_progress("decode", "sm_80", folder, cached=False) as done:
        pass
    assert not done("compiled") and err.getvalue() == ""


def test_a_first_build_in_jupyter_is_one_display_updated_in_place(tmp_path,
                                                                  monkeypatch):
    shown = []

    class Handle:
        def update(self, obj):
            shown.append(("update", repr(obj)))

    def display(obj, display_id):
        shown.append(("display", repr(obj)))
        return Handle()

    import IPython.display
    monkeypatch.setattr(IPython.display, "display", display)
    monkeypatch.setattr(progress, "_in_jupyter", lambda: True)
    monkeypatch.setenv("ATTNBOOK_BUILD_PROGRESS", "1")
    with progress.build_progress("gemm", "the CPU emulator", tmp_path / "g",
                                 cached=False) as done:
        pass
    done("compiled gemm for the CPU emulator in 3.0 s")
    assert shown == [("display", "compiling gemm for the CPU emulator: its first use "
                      "here; later uses load it from the cache…"),
                     ("update", "compiled gemm for the CPU emulator in 3.0 s")]


def test_compile_shows_the_line_for_a_build_that_is_not_cached(monkeypatch):
    """ab.compile of a kernel text never built before: the line, then the finished
    one in its place (the text differs each run, so it is never cached)."""
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("ATTNBOOK_BUILD_PROGRESS", "1")
    cuda = (HERE / "selftest.cu").read_text() + f"\n// {time.time_ns()}\n"
    ab.compile("selftest", cuda, (HERE / "selftest_wrapper.cpp").read_text(), ["run"],
               backend="emulator")
    lines = err.getvalue().split("\r")
    assert lines[0].startswith("compiling selftest for the CPU emulator: its first "
                               "use here")
    assert re.fullmatch(r"compiled selftest for the CPU emulator in [\d.]+ s *\n",
                        lines[1])


# ---- the portable context switch gives the same answers ------------------------------
@pytest.mark.stack_independent
def test_ucontext_fallback_beside_the_assembly_switch():
    """Two extensions with differently built emulators live in one process, each with
    its own emulator state."""
    asm = ab.compile("selftest", (HERE / "selftest.cu").read_text(),
                     (HERE / "selftest_wrapper.cpp").read_text(), ["run"],
                     backend="emulator")
    ext = ab.compile("selftest_ucontext", (HERE / "selftest.cu").read_text(),
                     (HERE / "selftest_wrapper.cpp").read_text(), ["run"],
                     backend="emulator", extra_cflags=["-DATTNBOOK_EMU_UCONTEXT"])
    x = torch.arange(2 * 100, dtype=torch.float32).reshape(2, 100)
    with ab.thread_order("shuffle", 4):
        out = torch.zeros(2)
        ext.run("block_sum", [x, out], 2, 128, 0, [100])
        torch.testing.assert_close(out, x.sum(1))
        with pytest.raises(RuntimeError, match="__trap"):
            ext.run("failing", [torch.zeros(64)], 2, 32, 0, [0])
        for module in (asm, ext, asm):
            out = torch.zeros(2)
            module.run("block_sum", [x, out], 2, 128, 0, [100])
            torch.testing.assert_close(out, x.sum(1))


# ---- every kernel file compiles for the GPUs the book targets ------------------------
@pytest.mark.skipif(find_nvcc() is None,
                    reason="nvcc (CUDA toolkit) not installed: compile check skipped")
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: p.name)
def test_kernel_file_compiles_with_nvcc(path, arch):
    report = ab.ptxas_report(path.read_text(), arch)
    assert report, f"{path.name}: no kernels found by ptxas"
    for kernel, r in report.items():
        assert (r["registers"] > 0 and r["spill_stores"] >= 0
                and r["shared_bytes"] >= 0), kernel


@pytest.mark.skipif(find_nvcc() is None,
                    reason="nvcc (CUDA toolkit) not installed: compile check skipped")
def test_the_hopper_probes_compile_with_nvcc_for_sm_90a():
    """The kernels the emulator's wgmma, TMA and mbarrier tests run are what nvcc
    builds for sm_90a: nvcc's ptxas checks the same instructions."""
    report = ab.ptxas_report((HERE / "hopper_probe.cu").read_text(), "sm_90a")
    assert {"wgmma_probe<8>", "wgmma_probe<64>", "tma_load_probe", "tma_store_probe",
            "mbarrier_ring", "elect_probe", "setmaxnreg_probe"} <= {
        k.split("(")[0].replace("void ", "") for k in report}


def notebook_kernels():
    """{"NN_NAME@cell": text} of every kernel a notebook writes: a name bound to a
    string that holds a ``__global__`` function. (A kernel written inline in a call is
    a compile error shown on purpose; a ``load_inline`` example that includes torch's
    headers is built by ``cuda_build_check`` with a CUDA build of torch.)"""
    found = {}
    for nb in sorted((HERE.parents[1] / "book").glob("*.ipynb")):
        for n, cell in enumerate(json.loads(nb.read_text())["cells"]):
            if cell["cell_type"] != "code":
                continue
            for node in ast.walk(ast.parse("".join(cell["source"]))):
                text = getattr(getattr(node, "value", None), "value", None)
                if (isinstance(node, ast.Assign) and isinstance(text, str)
                        and "__global__" in text and "<torch/" not in text):
                    for target in node.targets:
                        found[f"{nb.stem[:3]}{target.id}@{n}"] = text
    return found


def exercise_kernels():
    """{"exercise:NAME": text}: each exercise's skeleton with its launcher, as the
    grader compiles it."""
    return {f"exercise:{name}": ex.skeleton + "\n" + ex.launcher
            for name, ex in ab.exercises.EXERCISES.items()}


# a notebook's copy of an exercise's skeleton is compiled with its launcher
BOOK_KERNELS = {**{name: text for name, text in notebook_kernels().items()
                   if text.strip("\n") not in {
                       ex.skeleton.strip("\n")
                       for ex in ab.exercises.EXERCISES.values()}},
                **exercise_kernels()}


def test_the_kernel_finder_sees_every_notebook_kernel():
    assert any(name.startswith("A1_FOREIGN@") for name in BOOK_KERNELS)
    assert len(BOOK_KERNELS) >= 40


@pytest.mark.skipif(find_nvcc() is None,
                    reason="nvcc (CUDA toolkit) not installed: compile check skipped")
@pytest.mark.parametrize("name", sorted(BOOK_KERNELS))
def test_notebook_and_exercise_kernels_compile_with_nvcc(name, tmp_path):
    """What the emulator builds, nvcc builds too, for each architecture (one nvcc run,
    host pass included): appendix A's lane_sums once used cg::reduce without
    <cooperative_groups/reduce.h>, which only the emulator accepted."""
    import subprocess
    source = tmp_path / "kernel.cu"
    source.write_text(BOOK_KERNELS[name])
    targets = [f"-gencode=arch=compute_{a[3:]},code={a}" for a in ARCHS]
    run = subprocess.run([find_nvcc(), "-c", "-std=c++17", *targets, f"-I{KERNEL_DIR}",
                          "-o", str(tmp_path / "kernel.o"), str(source)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{name}: nvcc failed\n{run.stderr[-3000:]}"


def test_the_emulator_needs_the_header_nvcc_needs():
    kernel = ("#include <cooperative_groups.h>\n"
              "namespace cg = cooperative_groups;\n"
              "__global__ void k(float* x) {\n"
              "  auto w = cg::tiled_partition<32>(cg::this_thread_block());\n"
              "  x[0] = cg::reduce(w, x[0], cg::plus<float>());\n}\n")
    with pytest.raises(ab.CompileError, match="reduce"):
        ab.compile("no_reduce_header", kernel, "", [], backend="emulator")
    with_header = kernel.replace("\nnamespace",
                                 "\n#include <cooperative_groups/reduce.h>\nnamespace")
    ab.compile("reduce_header", with_header, "", [], backend="emulator")


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc (CUDA toolkit) not installed")
def test_two_processes_wanting_one_report_compile_it_once(tmp_path, monkeypatch):
    """Test workers and notebooks ask for the same kernel file's report at once: the
    second waits for the first's compile (a lock per report) instead of compiling
    again."""
    import threading
    from attnbook.toolchain import ptxas
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    made = []

    def make(nvcc, cuda, arch):
        made.append(arch)
        time.sleep(0.5)
        return {"k": arch}

    got = []
    workers = [threading.Thread(target=lambda: got.append(ptxas.cached_report(
        "locked_reports", "__global__ void k() {}", "sm_80", make))) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert made == ["sm_80"] and got == [{"k": "sm_80"}] * 2


def test_ptxas_report_has_the_numbers_a_chapter_shows():
    if find_nvcc() is None:
        pytest.skip("nvcc (CUDA toolkit) not installed")
    report = ab.ptxas_report((HERE / "selftest.cu").read_text(), "sm_80")
    r = report["void block_sum<true>(float const*, float*, int)"]
    assert r["shared_bytes"] == 256 * 4 and r["spill_stores"] == 0


# ---- the package's extensions: one registry, the C++ in C++ files --------------------
WRAPPERS = sorted(KERNEL_DIR.glob("*_wrapper.cpp"))
# The kernels' plain structs and launcher prototypes: host code that needs no torch.
HOST_HEADERS = [p for p in sorted(KERNEL_DIR.glob("*.h"))
                if "attnbook_torch.h" not in p.read_text()]


def test_the_registry_names_every_wrapper_and_what_it_binds():
    from attnbook.ops.registry import EXTENSIONS
    assert sorted(e.wrapper for e in EXTENSIONS) == [p.name for p in WRAPPERS]
    assert len({e.name for e in EXTENSIONS}) == len(EXTENSIONS)
    for e in EXTENSIONS:
        assert (KERNEL_DIR / e.kernel).is_file(), e.name
        assert hasattr(torch.ops.attnbook, e.op), e.name
        for fn in e.functions:
            assert re.search(rf"\b{fn}\b", ab.kernel_source(e.wrapper)), (e.name, fn)


ROOT = pathlib.Path(__file__).parents[1]


def test_the_developers_page_shows_the_registry():
    from attnbook.ops.registry import EXTENSIONS, markdown_table
    page = (ROOT / "docs" / "developing.md").read_text()
    assert markdown_table() in page
    for e in EXTENSIONS:   # and the test file it names exists
        assert (ROOT / "tests" / e.test).is_file(), e.test


def chapter_table() -> str:
    """Each page of the table of contents with a notebook: its benchmark suites and its
    graded exercises, from ``attnbook.models.ALL_SUITES`` and the exercise catalog."""
    from attnbook.exercises.catalog import EXERCISES
    from attnbook.models import ALL_SUITES
    rows = ["| chapter | title | notebook | benchmark suites | exercises |",
            "| --- | --- | --- | --- | --- |"]
    for page in re.findall(r"file: (book/\w+)", (ROOT / "_toc.yml").read_text()):
        notebook = pathlib.Path(page + ".ipynb")
        if not (ROOT / notebook).is_file():
            continue
        number = notebook.stem.split("_")[0]
        suites = ", ".join(f"`{key}`" for key in ALL_SUITES if key[:2] == number)
        names = ", ".join(f"`{ex.name}`" for ex in EXERCISES.values()
                          if ex.chapter == number)
        cells = json.loads((ROOT / notebook).read_text())["cells"]
        title = cells[0]["source"][0].strip().lstrip("# ").split(". ", 1)[1]
        link = f"[{notebook.name}]({notebook})"
        rows.append(f"| {number.lstrip('0')} | {title} | {link} | {suites or '–'} | "
                    f"{names or '–'} |")
    return "\n".join(rows)


def test_the_readme_shows_each_chapter_s_suites_and_exercises():
    readme = (ROOT / "README.md").read_text()
    assert chapter_table() in readme, "the README's table should read:\n" + \
        chapter_table()


def test_the_ops_hold_no_cpp():
    for path in (KERNEL_DIR.parent / "ops").glob("*.py"):
        text = path.read_text()
        assert "TORCH_CHECK" not in text and "#include" not in text, path.name


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc (CUDA toolkit) not installed")
@pytest.mark.parametrize("path", HOST_HEADERS, ids=lambda p: p.name)
def test_a_host_header_compiles_by_itself(path, tmp_path):
    import subprocess
    (tmp_path / "one.cpp").write_text(f'#include "{path.name}"\n')
    run = subprocess.run([find_nvcc(), "-c", "-std=c++17", f"-I{KERNEL_DIR}", "-o",
                          str(tmp_path / "one.o"), str(tmp_path / "one.cpp")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"{path.name}: nvcc failed\n{run.stderr[-3000:]}"


def nvcc_with_torch(source, tmp_path):
    """nvcc -c of host C++ ``source`` against torch's headers, as the CUDA back end
    compiles a wrapper: the CUDA side of attnbook_torch.h, which the emulator never
    reads."""
    import subprocess
    import sysconfig
    from torch.utils import cpp_extension
    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"],
                str(ab.toolchain.INCLUDE_DIR), str(KERNEL_DIR)]
    return subprocess.run([find_nvcc(), "-c", "-std=c++20", "-arch=sm_80",
                           *(f"-I{p}" for p in includes), "-o", str(tmp_path / "w.o"),
                           str(source)], capture_output=True, text=True, timeout=600)


NEEDS_CUDA_TORCH = pytest.mark.skipif(
    find_nvcc() is None or torch.version.cuda is None,
    reason="needs nvcc and a CUDA build of torch (CI's colab job has both); the "
           "emulator builds every wrapper everywhere")


@NEEDS_CUDA_TORCH
@pytest.mark.parametrize("path", WRAPPERS, ids=lambda p: p.name)
def test_a_wrapper_compiles_by_itself_for_the_cuda_back_end(path, tmp_path):
    """Each wrapper includes what it uses, torch's headers first (a kernel struct named
    like one of torch's, seen first, makes torch's headers ambiguous)."""
    run = nvcc_with_torch(path, tmp_path)
    assert run.returncode == 0, f"{path.name}: nvcc failed\n{run.stderr[-3000:]}"


@NEEDS_CUDA_TORCH
def test_the_exercise_wrappers_compile_for_the_cuda_back_end(tmp_path):
    """Their functions have distinct names: one translation unit holds all of them."""
    folder = ab.exercises.catalog.EXERCISE_DIR
    unit = tmp_path / "exercise_wrappers.cpp"
    unit.write_text("".join(f'#include "{p}"\n'
                            for p in sorted(folder.glob("ch*/*.wrapper.cpp"))))
    run = nvcc_with_torch(unit, tmp_path)
    assert run.returncode == 0, f"nvcc failed\n{run.stderr[-3000:]}"


# ---- the extension cache: a new process loads what an earlier one built --------------
def test_cached_extension_loads_in_a_new_process_without_rebuilding(tmp_path):
    import os
    import subprocess
    import sys
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path))
    script = ("import torch, attnbook as ab; "
              "print(ab.softmax(torch.ones(2, 3)).sum().item())")
    run = lambda: subprocess.run([sys.executable, "-c", script], env=env,  # noqa
                                 check=True, capture_output=True, text=True,
                                 timeout=300)
    assert run().stdout.endswith("2.0\n")
    (build,) = tmp_path.glob("softmax_emulator_*")
    built = {p.name: p.stat().st_mtime_ns for p in build.iterdir()
             if p.suffix in (".o", ".so")}
    assert len(built) == 2
    start = time.perf_counter()
    assert run().stdout.endswith("2.0\n")
    reload_s = time.perf_counter() - start
    assert {p.name: p.stat().st_mtime_ns for p in build.iterdir()
            if p.suffix in (".o", ".so")} == built
    ninja = subprocess.run(["ninja", "-n", "-d", "explain", "-C", str(build)],
                           capture_output=True, text=True)
    assert "no work to do" in ninja.stdout, ninja.stdout + ninja.stderr
    assert reload_s < 8, f"a cached load took {reload_s:.1f} s"
    # a build killed midway leaves torch's lock file behind: the next load, which once
    # waited for it forever, goes on
    (build / "lock").touch()
    assert run().stdout.endswith("2.0\n")


def test_a_number_in_an_error_message_survives_a_static_libstdcxx(tmp_path):
    """A linker that finds libstdc++.a before libstdc++.so put a second, uninitialised
    libstdc++ into every extension: TORCH_CHECK(ok, "got ", n) then lost its number
    (GCC 12) or crashed the process (GCC 13, the lent H200). Simulated with a compiler
    whose link sees the archive first."""
    import os
    import shutil
    import subprocess
    import sys
    import uuid
    archive = subprocess.run(["c++", "-print-file-name=libstdc++.a"],
                             capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(archive):
        pytest.skip("this compiler has no libstdc++.a to link")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libstdc++.a").symlink_to(archive)
    cxx = tmp_path / "c++"
    cxx.write_text(f'#!/bin/sh\nexec c++ "$@" -L{tmp_path / "lib"}\n')
    cxx.chmod(0o755)
    name = f"numbers_{uuid.uuid4().hex[:8]}"   # a new build every run
    script = (
        "import attnbook as ab\n"
        f"m = ab.compile({name!r}, '', 'void check(int64_t n) "
        "{ TORCH_CHECK(n < 0, \"got \", n); }', ['check'], backend='emulator')\n"
        "try:\n    m.check(12345)\nexcept RuntimeError as e:\n"
        "    print(str(e).splitlines()[0])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, CXX=str(cxx)))
    from torch.utils.cpp_extension import get_default_build_root
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    for build in pathlib.Path(root).glob(f"{name}_*"):
        shutil.rmtree(build, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "got 12345"


def test_an_emulator_build_reads_the_precompiled_torch_header(tmp_path, monkeypatch):
    """g++ silently skips a precompiled header made with other options than the
    build's: the build's own command (torch's flags, then ours) must take it, in the
    plain build and in the checked one (-fsanitize=thread: a copy of its own). Builds
    for two architectures, whose -D flags differ, take the same one."""
    import subprocess
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    kernel = "__global__ void k(float* x) { x[threadIdx.x] = 1.f; }\n" \
             "void launch(float* x) { k<<<1, 4>>>(x); }\n"
    wrapper = "void launch(float* x);\n" \
              "void run(at::Tensor x) { launch(x.data_ptr<float>()); }\n"
    for arch in ("sm_80", "sm_90a"):
        module = ab.compile("pch_probe", kernel, wrapper, ["run"], arch=arch)
        for checked in (False, True):
            x = torch.zeros(4)
            with ab.sanitize() if checked else contextlib.nullcontext():
                module.run(x)   # inside sanitize(), the checked twin is built
            assert torch.equal(x, torch.ones(4))
    for kind in ("emulator", "checked"):
        builds = list(tmp_path.glob(f"pch_probe_{kind}_*"))
        assert len(builds) == 2
        pch_folders = set()
        for build in builds:
            ninja = (build / "build.ninja").read_text()
            flags = re.search(r"^cflags = (.*)$", ninja, re.M)[1].split()
            post = re.search(r"^post_cflags = (.*)$", ninja, re.M)[1].split()
            pch_folders.add(tuple(f for f in flags if "/pch_attnbook_torch_" in f))
            done = subprocess.run(["c++", *flags, "-H", "-fsyntax-only",
                                   str(build / "main.cpp"), *post],
                                  capture_output=True, text=True)
            assert done.returncode == 0, done.stderr[-2000:]
            used = [ln for ln in done.stderr.splitlines() if ln.startswith("! ")]
            assert len(used) == 1 and used[0].endswith("/attnbook_torch.h.gch"), \
                done.stderr[:2000]
        assert len(pch_folders) == 1   # both architectures take one copy
    # the plain builds' copy and the checked builds' (-fsanitize=thread)
    assert len(list(tmp_path.glob("pch_attnbook_torch_*"))) == 2


def test_a_wrapper_error_after_a_pasted_header_names_its_line(tmp_path, monkeypatch):
    """The wrapper's local headers are pasted into it: an error after one names the
    wrapper's own line (once off by one), and builds that differ in their include
    folders share one precompiled header (it holds the package's header alone)."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "cache"))
    kernel = "__global__ void k(float* x) { x[threadIdx.x] = 1.f; }\n" \
             "void launch(float* x) { k<<<1, 4>>>(x); }\n"
    folders = []
    for n in (1, 2):
        folders.append(tmp_path / f"include{n}")
        folders[-1].mkdir()
        (folders[-1] / "helper.h").write_text("inline int helper() { return 1; }\n")
    wrapper = ('#include "helper.h"\n'
               "void launch(float* x);\n"
               "void run(at::Tensor x) { launch(x.data_ptr<float>()); no_such(); }\n")
    with pytest.raises(ab.CompileError, match=r"wrapper:3:\d+: error: .*no_such"):
        ab.compile("line_probe", kernel, wrapper, ["run"], include_dirs=[folders[0]])
    module = ab.compile("line_probe", kernel, wrapper.replace(" no_such();", ""),
                        ["run"], include_dirs=[folders[1]])
    x = torch.zeros(4)
    module.run(x)
    assert torch.equal(x, torch.ones(4))
    assert len(list((tmp_path / "cache").glob("pch_*"))) == 1


def test_cuda_sources_name_only_files_that_exist(monkeypatch, tmp_path):
    """nvcc's dependency file names the sources the CUDA build includes; a name that is
    not a file (a '#line 1 "x.cu"' directive once was) makes ninja rebuild in every
    process."""
    import torch.utils.cpp_extension as ce
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(ce, "load_inline", lambda **kw: calls.append(kw))
    source = ab.kernel_source("softmax.cu")
    for _ in range(2):
        ab.compile("softmax", source, "", ["f"], backend="cuda", arch="sm_80")
    cu = calls[0]["cuda_sources"][0]
    assert "#line" not in cu
    (included,) = re.findall(r'#include "([^"]+)"', cu)
    path = tmp_path / calls[0]["name"] / included
    assert path.read_text() == source
    assert calls[1] == calls[0]  # the same build, and the file untouched:
    first = path.stat().st_mtime_ns
    ab.compile("softmax", source, "", ["f"], backend="cuda", arch="sm_80")
    assert path.stat().st_mtime_ns == first


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc (CUDA toolkit) not installed")
def test_nvcc_check_compiles_the_host_pass_too():
    host_error = ("__global__ void k() {}\n"
                  "void launch() { k<<<1, 1>>>(); undeclared(); }\n")
    with pytest.raises(ab.CompileError, match="undeclared"):
        ab.ptxas_report(host_error, "sm_80")


# ---- python -m attnbook.gpu.cuda_build_check -----------------------------------------
def test_cuda_build_check_finds_the_notebooks_extensions(tmp_path):
    """Both kinds of extension a notebook builds are found: compile() calls
    (recorded, not built) and dicts of load_inline arguments that a notebook without a
    GPU only shows."""
    import nbformat
    from attnbook.gpu import cuda_build_check
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        'import attnbook as ab\n'
        'plain = dict(name="plain", cpp_sources="", '
        'cuda_sources="__global__ void k() {}")\n'
        'ext = ab.compile("mine", "__global__ void k() {}", "", ["f"])\n'
        'ext.f()   # fails: compile() only recorded the call')])
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    calls = cuda_build_check.notebook_extensions([path])
    assert ["mine", "__global__ void k() {}", "", ["f"]] in calls
    assert ["load_inline", dict(name="plain", cpp_sources="",
                                cuda_sources="__global__ void k() {}")] in calls
    assert len(calls) == 2


@pytest.mark.skipif(torch.version.cuda is not None,
                    reason="checks the refusal on CPU torch")
def test_cuda_build_check_needs_a_cuda_build_of_torch(capsys):
    from attnbook.gpu import cuda_build_check
    assert cuda_build_check.main(["--no-notebooks"]) == 2
    assert "CUDA build of torch" in capsys.readouterr().out


def test_a_build_from_another_directory_is_the_same_build(tmp_path):
    """A notebook builds from book/, the tests from the repository's root: the working
    directory on the include path made each rebuild the other's extension in place
    (twice the compile time, and a library relinked under a process using it)."""
    import subprocess
    import sys
    script = (
        "import torch, attnbook as ab\n"
        "m = ab.compile('cwd_probe', '__global__ void k(float* x) { x[0] = 2.f; }\\n"
        "void launch(float* x) { k<<<1, 1>>>(x); }', 'void launch(float*);\\n"
        "void run(at::Tensor x) { launch(x.data_ptr<float>()); }', ['run'], "
        "backend='emulator')\n"
        "print(m.__file__)\n")
    runs = [subprocess.run([sys.executable, "-c", script], cwd=cwd, check=True,
                           capture_output=True, text=True, timeout=300)
            for cwd in (tmp_path, pathlib.Path(ab.__file__).parent, tmp_path)]
    (library,) = {run.stdout.strip() for run in runs}
    log = (pathlib.Path(library).parent / ".ninja_log").read_text().splitlines()
    assert len(log) == 3, log   # the header, one compile and one link


def test_a_second_build_in_one_process_is_the_same_build():
    """torch's builder appends its libraries to the link flags it is handed: the
    shared list grew with every build, so the next build of a name in the same process
    changed its command line (torch then builds name_v1) and, in another process,
    relinked the library in place under the processes that had it loaded (addr2line
    found it empty, and memcheck named lines by offset)."""
    from cuda_emulator.cache import LINK_FLAGS
    flags = tuple(LINK_FLAGS)
    kernel = "__global__ void k(float* x) { x[0] = 3.f; }\n" \
             "void launch(float* x) { k<<<1, 1>>>(x); }\n"
    wrapper = ("void launch(float*);\n"
               "void run(at::Tensor x) { launch(x.data_ptr<float>()); }")
    files = {ab.compile("twice_probe", kernel, wrapper, ["run"],
                        backend="emulator").__file__ for _ in range(2)}
    assert len(files) == 1 and not next(iter(files)).endswith("_v1.so"), files
    assert tuple(LINK_FLAGS) == flags
