"""The profile: per launch and source line, requests, 32-byte sectors per global
request and bank-conflict wavefronts per shared request, exactly as the CUDA
programming guide counts them in its textbook cases."""
import pytest
import torch

import attnbook as ab
from checked_kernels import line_of, run


@pytest.mark.parametrize("stride, sectors", [(1, 4), (2, 8), (32, 32)])
def test_sectors_per_request_of_a_strided_float_load(stride, sectors):
    x, out = torch.arange(32 * 32, dtype=torch.float32), torch.zeros(32)
    with ab.profile() as report:
        run("strided_load", x, out, n=stride)
    assert torch.equal(out, x[::stride][:32])
    (launch,) = report.launches
    assert launch.kernel == "strided_load" and launch.block == (32, 1, 1)
    load = launch.line(line_of("strided"), "global", "load")
    assert (load.requests, load.units, load.bytes) == (1, sectors, 128)
    store = launch.line(line_of("strided"), "global", "store")
    assert store.per_request == 4


@pytest.mark.parametrize("layout, ways", [(0, 32), (1, 1), (2, 1)],
                         ids=["32x32", "padded-33", "xor-swizzle"])
def test_bank_conflicts_of_a_column_read(layout, ways):
    x, out = torch.ones(32), torch.zeros(32)
    with ab.profile() as report:
        run("tile_columns", x, out, n=layout, smem=32 * 33 * 4)
    assert torch.equal(out, torch.full((32,), 32.0))
    (launch,) = report.launches
    read = launch.line(line_of("column"), "shared", "load")
    assert (read.requests, read.units, read.ideal) == (32, 32 * ways, 32)
    assert read.conflict_ways == ways
    assert launch.barriers == 1
    assert launch.line(line_of("column-barrier"), "block", "barrier").requests == 1
    writes = launch.total("shared", "store")
    assert writes.units == writes.ideal == 32   # the rows: conflict-free


def test_an_async_copy_counts_as_a_global_load_and_a_shared_store():
    x = torch.arange(32, dtype=torch.float32)
    with ab.profile() as report:
        run("async_shift", x, out := torch.zeros(32), n=1)
    assert torch.equal(out, x.roll(-1))
    (launch,) = report.launches
    load = launch.line(line_of("async-copy"), "global", "load")
    assert (load.requests, load.units, load.bytes) == (1, 4, 128)
    store = launch.line(line_of("async-copy"), "shared", "store")
    assert (store.requests, store.units, store.ideal, store.bytes) == (1, 1, 1, 128)


def test_128_bit_shared_loads_take_four_phases():
    with ab.profile() as report:
        run("wide_loads", torch.zeros(32), out := torch.zeros(32, 4))
    assert torch.equal(out, torch.tensor([1.0, 2, 3, 4]).expand(32, 4))
    read = report.launches[0].line(line_of("wide"), "shared", "load")
    assert (read.requests, read.units, read.ideal, read.bytes) == (1, 4, 4, 512)


def test_lanes_reading_one_word_share_its_wavefront():
    x, out = torch.arange(32, dtype=torch.float32), torch.zeros(32)
    with ab.profile() as report:
        run("shared_reads", x, out)
    lanes = torch.arange(32)
    assert torch.equal(out, (lanes // 16 * 16 + lanes % 16).float())
    launch = report.launches[0]
    for marker, op, wavefronts in (("two-words", "load", 1), ("pairs", "load", 1),
                                   ("pitch-17", "store", 2)):
        counts = launch.line(line_of(marker), "shared", op)
        assert (counts.requests, counts.units, counts.ideal) == (1, wavefronts, 1)


def test_report_prints_a_table_per_launch():
    x, out = torch.arange(1000, dtype=torch.float32), torch.zeros(1)
    with ab.profile() as report:
        run("block_sum", x, out, n=1000, blocks=8, threads=128, smem=16)
        run("strided_load", x, torch.zeros(32), n=1)
    assert [p.kernel for p in report.launches] == ["block_sum", "strided_load"]
    assert report.launches[0].grid == (8, 1, 1) and report.launches[0].barriers == 8
    text = str(report)
    assert "kernel 'block_sum' grid (8, 1, 1) block (128, 1, 1)" in text
    # a file's name on a line of its own, then its lines' rows; 88 columns at most
    file, _, line = line_of("strided").rpartition(":")
    assert f"\n{file}\n  {line:<6}global  load" in text
    assert max(len(row) for row in text.splitlines()) <= 88
    assert out.item() == x.sum().item()


def test_profile_is_off_by_default():
    assert ab.emulator.sanitizer.mode() == 0
    with ab.profile():
        assert ab.emulator.sanitizer.mode() == ab.emulator.sanitizer.PROFILE
    s = ab.emulator.sanitizer
    with ab.sanitize():
        assert s.mode() == s.MEMCHECK | s.RACECHECK | s.INITCHECK
    with ab.sanitize(racecheck=False, initcheck=False):
        assert s.mode() == s.MEMCHECK
    assert ab.emulator.sanitizer.mode() == 0
