"""The interactive figures' logic and their static twins."""
import math

import matplotlib
import torch

import attnbook as ab

matplotlib.use("Agg")


def test_online_softmax_states_end_in_the_row_max_and_sum():
    x = [0.3, -2.0, 5.0, float("-inf"), 4.5]
    states = ab.widgets.online_softmax_states(x)
    assert states[0] == (-math.inf, 0.0) and len(states) == len(x) + 1
    m, l = states[-1]
    assert m == 5.0 and math.isclose(l, sum(math.exp(v - 5.0) for v in x))
    assert ab.widgets.online_softmax_states([float("-inf")])[-1] == (-math.inf, 0.0)


def test_static_figures_and_widgets_build():
    fig = ab.widgets.online_softmax_figure([1.0, 2.0, 0.5], steps=[1, 3])
    assert len(fig.axes) == 2 and fig.axes[1].get_title().startswith("k = 3:  m = 2.00")
    fig = ab.widgets.mask_explorer_figure([("causal", 3, 5, dict(is_causal=True)),
                                           ("window", 4, 4, dict(window=2))])
    assert [im.get_array().sum() for ax in fig.axes for im in ax.get_images()] == [
        ab.masks.allowed(3, 5, is_causal=True).sum().item(),
        ab.masks.allowed(4, 4, window=2).sum().item()]
    stepper = ab.widgets.online_softmax_stepper([1.0, 2.0, 3.0, 0.0])
    # not the empty state
    assert len(stepper.children) == 2 and stepper.children[0].value == 2
    assert len(ab.widgets.mask_explorer().children) == 2
    matplotlib.pyplot.close("all")


def test_mask_figures_keep_three_panels_to_a_row():
    # six panels in one row were 18 inches wide: 1.3 cm each at the book's page width
    fig = ab.plots.mask_gallery()
    width, height = fig.get_size_inches()
    assert width <= 9 and len([ax for ax in fig.axes if ax.get_images()]) == 6
    assert height > width / 2   # two rows
    matplotlib.pyplot.close("all")
