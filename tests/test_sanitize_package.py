"""Every kernel of the package runs clean under the checked build (memcheck and
racecheck) in each of the emulator's thread orders, and computes what the plain build
computes, to the rounding of a fused multiply-add: the checked build's instrumentation
changes where the compiler contracts a·b + c into one (two nvcc builds may differ the
same way), a few ulps at most. The launches are the ones compute-sanitizer runs on a
GPU (``attnbook.gpu.launches``)."""

import pytest
import torch

import attnbook as ab
from attnbook.gpu.launches import LAUNCHES, main
from attnbook.ops.registry import EXTENSIONS, Extension
from cuda_emulator import ORDERS

pytestmark = pytest.mark.stack_independent

@pytest.mark.parametrize("name", list(LAUNCHES))
def test_package_kernel_is_clean_in_every_order(name):
    for order in ORDERS:
        with ab.thread_order(order, seed=3):
            plain = LAUNCHES[name]("cpu")
            with ab.sanitize():
                checked = LAUNCHES[name]("cpu")
        torch.testing.assert_close(checked, plain)


def test_the_launches_cover_every_extension_of_the_package():
    """A kernel added to the package without a launch here would go unchecked by both
    sanitizers: every extension must be built by some launch."""
    built = set()
    real = Extension.module

    def record(self, device):
        built.add(self.name)
        return real(self, device)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Extension, "module", record)
        for launch in LAUNCHES.values():
            launch("cpu")
    assert built == {e.name for e in EXTENSIONS}


def test_the_driver_runs_a_launch_and_lists_them(capsys):
    assert main(["--device", "cpu", "--only", "softmax naive"]) == 0
    assert capsys.readouterr().out.startswith("softmax naive: (3, 77) torch.float32")
    assert main(["--list"]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == list(LAUNCHES)
