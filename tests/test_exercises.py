"""Every exercise: its skeleton compiles and is not yet right, its solution passes under
the three thread orders, and a planted wrong answer is rejected with feedback that says
where."""
import pytest

import attnbook as ab
from exercise_solutions import PLANTED, SOLUTIONS


def test_every_exercise_has_a_solution_and_a_planted_bug():
    assert set(SOLUTIONS) == set(PLANTED) == set(ab.exercises.EXERCISES)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes_skeleton_and_planted_bug_do_not(name):
    report = ab.exercises.grade(name, SOLUTIONS[name])
    assert report.passed, str(report)
    assert "3 thread orders" in str(report)
    skeleton = ab.exercises.grade(name, ab.exercises.skeleton(name))
    assert not skeleton.passed and "wrong" in str(skeleton)
    what, (old, new), says = PLANTED[name]
    assert old in SOLUTIONS[name], what
    planted = ab.exercises.grade(name, SOLUTIONS[name].replace(old, new))
    assert not planted.passed and says in str(planted), (what, str(planted))


def test_a_compile_error_is_reported_not_raised():
    report = ab.exercises.grade("relu_grid_stride",
                                "__global__ void relu(const float* x, "
                                "float* y, int n) { y[0] = z; }")
    text = str(report)
    assert not report.passed and "does not compile" in text and "z" in text


def test_unknown_exercise():
    with pytest.raises(ValueError, match="no exercise 'nope'"):
        ab.exercises.grade("nope", "")
