"""Every exercise: its skeleton compiles and is not yet right, its solution passes under
the three thread orders, and a planted wrong answer is rejected with feedback that says
where."""
import re

import pytest

import attnbook as ab
from exercise_solutions import PLANTED, SOLUTIONS


def grade(name, source, device):
    """The grader's report on ``source`` run on ``device`` (the CPU: the emulator)."""
    return ab.exercises.grade(name, source,
                              backend="cuda" if device == "cuda" else "emulator")


def test_every_exercise_has_a_solution_and_a_planted_bug():
    assert set(SOLUTIONS) == set(PLANTED) == set(ab.exercises.EXERCISES)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes_skeleton_and_planted_bug_do_not(name, device):
    report = grade(name, SOLUTIONS[name], device)
    assert report.passed, str(report)
    # the emulator runs every case under each thread order, a GPU runs it once
    cases = len(ab.exercises.EXERCISES[name].cases())
    orders = " × 3 thread orders" if device == "cpu" else ""
    assert report.lines[0] == f"correct on {cases} cases{orders}", str(report)
    skeleton = grade(name, ab.exercises.skeleton(name), device)
    assert not skeleton.passed and "wrong" in str(skeleton)
    what, (old, new), says = PLANTED[name]
    assert old in SOLUTIONS[name], what
    if device == "cuda" and says == "under thread order":
        return   # a missing barrier: a race that only the emulator's orders surely show
    planted = grade(name, SOLUTIONS[name].replace(old, new), device)
    assert not planted.passed and says in str(planted), (what, str(planted))


@pytest.mark.gpu
def test_a_report_on_a_gpu_times_the_kernel_against_pytorch():
    name = "relu_grid_stride"
    report = grade(name, SOLUTIONS[name], "cuda")
    assert report.passed and len(report.lines) == 2, str(report)
    case = ab.exercises.EXERCISES[name].cases()[-1][0]     # the case that is timed
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


def test_unknown_exercise():
    with pytest.raises(ValueError, match="no exercise 'nope'"):
        ab.exercises.grade("nope", "")
