"""Every exercise: its skeleton compiles and is not yet right, its solution passes under
the three thread orders, and a planted wrong answer is rejected with feedback that says
where."""
import ast
import json
import pathlib
import re

import pytest
import torch

import attnbook as ab

EXERCISES = ab.exercises.EXERCISES
BOOK = pathlib.Path(__file__).parents[1] / "book"


def grade(name, source, device):
    """The grader's report on ``source`` run on ``device`` (the CPU: the emulator)."""
    return ab.exercises.grade(name, source,
                              backend="cuda" if device == "cuda" else "emulator")


def notebook_exercises():
    """{(notebook, name, variable): text} of every cell that grades an exercise:
    ``MY_KERNEL`` (the skeleton, for the reader to complete) or ``SOLUTION``."""
    found = {}
    for nb in sorted(BOOK.glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            source = "".join(cell["source"])
            call = re.search(r'exercises\.grade\("(\w+)", (\w+)\)', source)
            if cell["cell_type"] != "code" or not call:
                continue
            text = next(node.value.value for node in ast.walk(ast.parse(source))
                        if isinstance(node, ast.Assign)
                        and node.targets[0].id == call.group(2))
            found[nb.name, call.group(1), call.group(2)] = text
    return found


def test_the_notebooks_show_each_exercise_s_files_verbatim():
    """The chapter folder holds the one copy of each skeleton and solution; the
    chapter's notebook shows both as they are."""
    found = notebook_exercises()
    assert sorted((name, var) for _, name, var in found) == sorted(
        (name, var) for name in EXERCISES for var in ("MY_KERNEL", "SOLUTION"))
    for (notebook, name, var), text in found.items():
        ex = EXERCISES[name]
        assert notebook.startswith(ex.chapter + "_"), (notebook, name)
        want = ex.skeleton if var == "MY_KERNEL" else ex.solution
        assert text.strip("\n") == want.strip("\n"), (notebook, name, var)


def test_solutions_are_hidden_in_the_book_and_in_colab():
    """A solution cell is collapsed in the rendered book (hide-input) and is a Colab
    form (cellView: form, a # @title line), whose code Colab hides until asked."""
    hidden = 0
    for nb in sorted(BOOK.glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            source = "".join(cell["source"])
            if not re.search(r'exercises\.grade\("\w+", SOLUTION\)', source):
                continue
            assert "hide-input" in cell["metadata"].get("tags", []), nb.name
            assert cell["metadata"].get("cellView") == "form", nb.name
            assert source.startswith("# @title Solution"), nb.name
            hidden += 1
    assert hidden == len(EXERCISES)


def test_each_chapter_folder_holds_its_exercises_parts_and_nothing_else():
    parts = (".cu", ".solution.cu", ".launcher.cu", ".wrapper.cpp")
    want = {f"ch{ex.chapter}/{ex.name}{part}" for ex in EXERCISES.values()
            for part in parts}
    folder = pathlib.Path(ab.exercises.catalog.EXERCISE_DIR)
    assert {str(p.relative_to(folder)) for p in folder.glob("ch*/*")} == want


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_solution_passes_skeleton_and_planted_bug_do_not(name, device):
    ex = EXERCISES[name]
    if device == "cuda" and not ab.exercises.runs_here(ex):
        pytest.skip(f"{name} is built for {ex.arch}, which this GPU does not run")
    report = grade(name, ex.solution, device)
    assert report.passed, str(report)
    # the emulator runs every case under each thread order, a GPU runs it once
    cases = len(ex.cases())
    orders = " × 3 thread orders" if device == "cpu" else ""
    assert report.lines[0] == f"correct on {cases} cases{orders}", str(report)
    skeleton = grade(name, ab.exercises.skeleton(name), device)
    assert not skeleton.passed and "wrong" in str(skeleton)
    bug = ex.planted
    assert bug.old in ex.solution, bug.what
    if device == "cuda" and bug.says in ("under thread order", "deadlock"):
        # a missing barrier: a race that only the emulator's orders surely show; a
        # deadlock, which the emulator names and a GPU would hang on
        return
    planted = grade(name, ex.solution.replace(bug.old, bug.new), device)
    assert not planted.passed and bug.says in str(planted), (bug.what, str(planted))


def test_a_hopper_exercise_is_graded_on_the_emulator_off_a_hopper_gpu(monkeypatch):
    """On Colab's T4, ring_sum (built for sm_90a) runs on the emulator, as it does
    without a GPU; an exercise that names no architecture runs on any GPU."""
    ring = EXERCISES["ring_sum"]
    capability = (7, 5)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: capability)
    assert not ab.exercises.runs_here(ring)
    assert ab.exercises.runs_here(EXERCISES["relu_grid_stride"])
    monkeypatch.setattr(ab.exercises, "has_gpu", lambda: True)
    report = ab.exercises.grade("ring_sum", ring.solution)
    assert report.passed and report.lines == ["correct on 4 cases × 3 thread orders"]
    capability = (9, 0)
    assert ab.exercises.runs_here(ring)
    capability = (10, 0)                    # sm_90a code runs on 9.0 alone
    assert not ab.exercises.runs_here(ring)


@pytest.mark.gpu
def test_a_report_on_a_gpu_times_the_kernel_against_pytorch():
    name = "relu_grid_stride"
    report = grade(name, EXERCISES[name].solution, "cuda")
    assert report.passed and len(report.lines) == 2, str(report)
    case = EXERCISES[name].cases()[-1][0]     # the case that is timed
    timing = re.fullmatch(rf"case {re.escape(case)}: (\d+\.\d{{3}}) ms, "
                          r"PyTorch (\d+\.\d{3}) ms", report.lines[1])
    assert timing, str(report)
    assert all(float(ms) > 0 for ms in timing.groups()), str(report)


def test_a_compile_error_is_reported_not_raised(device):
    report = grade("relu_grid_stride",
                   "__global__ void relu(const float* x, "
                   "float* y, int n) { y[0] = z; }", device)
    text = str(report)
    assert not report.passed and "does not compile" in text and "z" in text


def test_a_nan_result_is_reported_as_nan_with_where(device):
    """A kernel that writes NaN is told so, where and how often: not as a 'max error'
    of 1.8e+308."""
    report = grade("relu_grid_stride",
                   "__global__ void relu(const float* x, float* y, int n) {\n"
                   "  for (int i = threadIdx.x; i < n; i += blockDim.x)\n"
                   "    y[i] = i == 3 ? NAN : fmaxf(x[i], 0.f);\n}\n", device)
    text = str(report)
    assert not report.passed and "e+308" not in text, text
    assert "1 NaN where the answer is a number (first at (3,))" in text, text


def test_a_row_max_that_drops_nan_fails(device):
    """Chapter 3 argues for max_nan: a row_max folded with fmaxf, which drops a NaN,
    fails the row that holds one."""
    solution = EXERCISES["row_max"].solution
    report = grade("row_max", solution.replace("max_nan(", "fmaxf("), device)
    text = str(report)
    assert not report.passed and "a NaN in row 1" in text, text
    assert "a number where the answer is NaN" in text, text


def test_unknown_exercise():
    with pytest.raises(ValueError, match="no exercise 'nope'"):
        ab.exercises.grade("nope", "")
