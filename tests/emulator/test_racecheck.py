"""Racecheck: shared-memory hazards between two barriers are reported with both access
sites, whatever the thread order, even where a warp collective hides them; accesses a
barrier, __syncwarp or a collective orders are not."""
import re

import pytest
import torch

import attnbook as ab
from checked_kernels import line_of, run


def test_every_thread_incrementing_a_shared_counter():
    x, out = torch.zeros(64), torch.zeros(1)
    with ab.sanitize(), pytest.raises(ab.RaceError) as info:
        run("shared_counter", x, out, threads=64)
    e = info.value
    assert e.hazard == "read-after-write"
    assert e.sites == (line_of("counter"), line_of("counter"))
    assert "thread (0,0,0) wrote" in str(e) and "thread (1,0,0) reads" in str(e)
    assert "a 4-byte __shared__ variable" in str(e)


def test_write_after_read_hidden_behind_a_warp_collective():
    x = torch.arange(64, dtype=torch.float32)
    results = set()
    for order in ab.emulator.ORDERS:   # no order shows it in the values
        out = torch.zeros(64)
        with ab.thread_order(order, seed=3):
            run("hidden_war", x, out, threads=64)
        results.add(tuple(out.tolist()))
    assert len(results) == 1
    with ab.sanitize(), pytest.raises(ab.RaceError) as info:
        run("hidden_war", x, torch.zeros(64), threads=64)
    e = info.value
    assert e.hazard == "write-after-read"
    assert e.sites == (line_of("war-read"), line_of("war-write"))
    # the reader is in the other warp: the element it read is the writer's own
    reader, writer = map(int, re.findall(r"thread \((\d+),0,0\) (?:read|writes)",
                                         str(e)))
    assert reader == (writer + 32) % 64


def test_async_copy_read_by_another_thread_before_a_barrier():
    # the copy counts as a write from its cp.async on: it may land any time until the
    # wait, and only the issuing thread's wait orders it
    x = torch.arange(32, dtype=torch.float32)
    with ab.sanitize(), pytest.raises(ab.RaceError) as info:
        run("async_shift", x, torch.zeros(32), n=0)
    e = info.value
    assert e.hazard in ("write-after-read", "read-after-write")
    assert set(e.sites) == {line_of("async-copy"), line_of("async-read")}
    out = torch.zeros(32)
    with ab.sanitize():
        run("async_shift", x, out, n=1)   # a barrier after the wait: clean
    assert torch.equal(out, x.roll(-1))


def test_a_race_on_one_half_of_a_word_the_other_half_rewrote():
    # thread 1 writes the other half of thread 0's word; thread 32 then reads thread
    # 0's half: a hazard with thread 0, whatever thread 1 did
    with ab.sanitize(), pytest.raises(ab.RaceError) as info:
        run("half_race", torch.zeros(64), torch.zeros(64), threads=64)
    e = info.value
    assert e.hazard == "read-after-write"
    assert e.sites == (line_of("half-write"), line_of("half-read"))
    assert "thread (0,0,0) wrote" in str(e) and "thread (32,0,0) reads" in str(e)


@pytest.mark.parametrize("order", ab.emulator.ORDERS)
def test_a_read_hazard_is_reported_ahead_of_a_same_value_write(order):
    # the flag's write-after-write came first and was the report
    x = torch.arange(64, dtype=torch.float32)
    with ab.thread_order(order, seed=5), ab.sanitize(), \
            pytest.raises(ab.RaceError) as info:
        run("flag_then_neighbour", x, torch.zeros(64), threads=64)
    e = info.value
    assert e.hazard in ("read-after-write", "write-after-read")
    assert set(e.sites) == {line_of("neighbour-write"), line_of("neighbour-read")}
    assert "more hazards in this block" in str(e)


def test_accesses_ordered_within_a_warp_are_no_hazard():
    x, out = torch.arange(32, dtype=torch.float32), torch.zeros(32)
    with ab.sanitize():
        run("warp_ordered", x, out)
    t = torch.arange(32)
    s = x[(t + 1) % 32] + x[((t ^ 1) + 1) % 32]
    assert torch.equal(out, s[(t + 1) % 32])
