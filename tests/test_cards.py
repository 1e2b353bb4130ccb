"""Design cards (attnbook.bench.cards): every kernel the package ships has one, every
card holds its budget in bench/budgets.toml, and a kernel that gets worse (one more
spill byte, one more register, lower occupancy, more sectors) fails, named with its
number. (The profile's counts themselves are checked by hand in test_profile.py.)"""
import copy

import pytest

import attnbook as ab
from attnbook.bench import cards
from attnbook.toolchain import find_nvcc
from attnbook.toolchain.sass import find_nvdisasm

BUDGETS = cards.budgets()
NEEDS_NVCC = pytest.mark.skipif(
    find_nvcc() is None or find_nvdisasm() is None,
    reason="a card's ptxas and SASS figures need nvcc and nvdisasm (CUDA toolkit, "
           "PyPI's nvidia-cuda-nvdisasm)")


def test_every_kernel_file_of_the_package_has_a_card_and_a_budget():
    assert {e.kernel for e in ab.ops.EXTENSIONS} == {s.source for s in cards.SPECS}
    assert [s.name for s in cards.SPECS] == [k for k in BUDGETS if k != "nvcc"]


@NEEDS_NVCC
@pytest.mark.parametrize("name", [s.name for s in cards.SPECS])
def test_the_card_holds_its_budget(name):
    """The emulator's figures always; ptxas's where nvcc is the release the budgets
    were written with (another release allocates registers differently)."""
    card = cards.card(name)
    budget = BUDGETS[name]
    assert len(card.kernels) == len(budget["kernels"]), name
    assert cards.over_budget(card, budget, static=False) == []
    if cards._release(find_nvcc()) != BUDGETS["nvcc"]:
        pytest.skip(f"ptxas figures are budgeted for nvcc {BUDGETS['nvcc']}")
    assert cards.over_budget(card, budget) == []


@NEEDS_NVCC
def test_a_kernel_made_worse_fails_its_budget_with_its_name_and_number():
    card = cards.card("flash fp32 step 1")
    worse = copy.deepcopy(card)
    kernel = worse.kernels[0]
    kernel.static["sm_80"]["spill_stores"] += 1
    kernel.static["sm_90"]["registers"] = 233
    kernel.static["sm_75"]["occupancy"] = 0.0625
    kernel.memory["global store"]["sectors_per_request"] = 32.0
    found = cards.over_budget(worse, BUDGETS["flash fp32 step 1"])
    name = "flash fp32 step 1: flash_fwd_fp32_kernel<64, 64, 32>"
    assert found == [f"{name} registers 233, budget 232",
                     f"{name} spill_bytes 1, budget 0",
                     f"{name} occupancy 0.0625, budget 0.125",
                     f"{name} store_sectors 32, budget 31.57"]
    assert cards.over_budget(card, BUDGETS["flash fp32 step 1"]) == []


@NEEDS_NVCC
def test_a_card_shows_the_numbers_the_chapter_discusses():
    """Chapter 7's kernel: one thread per row, so 64 threads a block, a row of scores
    in local memory (stack), 12.5% occupancy on sm_80 limited by registers, and o
    written a row per thread: nearly a sector per lane."""
    card = cards.card("flash fp32 step 1")
    (kernel,) = card.kernels
    assert kernel.block == (64, 1, 1)
    sm80 = kernel.static["sm_80"]
    assert sm80["occupancy"] == 0.125 and sm80["bound_by"] == ["registers"]
    assert sm80["stack_bytes"] > 0
    assert kernel.memory["global store"]["sectors_per_request"] > 30
    bound, counted = card.bounds_us["A100"]
    assert 0 < bound <= counted
    assert "lower bound" in str(card)


@pytest.mark.parametrize("name, occupancy", [
    ("flash fp32 step 2", 0.25), ("flash fp32 step 2 D=128", 0.25),
    ("flash fp32 step 3", 0.5), ("flash fp32 step 3 D=128", 0.25)])
def test_register_tiles_keep_chapter_7s_targets(name, occupancy):
    """The budgets of steps 2 and 3 hold the chapter's design, and cannot be loosened
    past it: 16-byte global loads in full sectors, conflict-free shared memory, at
    least 8 FMAs per shared load, K and V read once per query tile (S = 128: twice,
    1.5x the least), and the occupancy on every architecture (sm_75, sm_80, sm_90):
    25% for step 2, 50% for step 3 at D = 64 (4 blocks on sm_80 and sm_90, 2 on a
    T4), 25% at D = 128."""
    budget = BUDGETS[name]
    (kernel,) = budget["kernels"]
    assert budget["fmas_per_shared_load"] >= 8.0 and budget["traffic"] <= 1.505
    assert kernel["load_sectors"] == 16.0 and kernel["conflict_ways"] <= 1.1
    assert kernel["occupancy"] >= occupancy


@pytest.mark.parametrize("name", [
    "flash fp32 step 2", "flash fp32 step 2 D=128", "flash fp32 step 3",
    "flash fp32 step 3 D=128"])
def test_register_tiles_neither_spill_nor_use_a_stack(name):
    """No spill bytes and no stack on sm_75, sm_80 and sm_90."""
    (kernel,) = BUDGETS[name]["kernels"]
    assert kernel["spill_bytes"] == 0 and kernel["stack_bytes"] == 0


@pytest.mark.parametrize("step", [3, 4, 5])
def test_the_swizzled_tensor_core_steps_keep_chapter_8s_design(step):
    """From step 3 on: conflict-free ldmatrix, 16-byte global loads in full sectors, no
    spills or stack on sm_75, sm_80 and sm_90 (the budgets cannot be loosened past
    it)."""
    (kernel,) = BUDGETS[f"flash tc step {step}"]["kernels"]
    assert kernel["conflict_ways"] <= 1.0 and kernel["load_sectors"] == 16.0
    assert kernel["spill_bytes"] == 0 and kernel["stack_bytes"] == 0


@pytest.mark.parametrize("name", ["flash tc step 6", "flash tc step 6 D=128"])
def test_the_fa2_step_keeps_chapter_8s_instruction_budget(name):
    """Step 6's hot loop on sm_80 and sm_90 (the budgets cannot be loosened past it):
    at most 3 instructions beside each HMMA, 0.35 ldmatrix per HMMA and 2 barriers
    per 256 HMMA (the figures of kernels at 95-99% of FlashAttention-2), 16-byte
    global loads in full sectors, conflict-free ldmatrix, two blocks per SM."""
    (kernel,) = BUDGETS[name]["kernels"]
    assert kernel["other_per_hmma"] <= 3.0 and kernel["ldsm_per_hmma"] <= 0.35
    assert kernel["barriers_per_256_hmma"] <= 2.0
    assert kernel["load_sectors"] == 16.0 and kernel["conflict_ways"] <= 1.0
    assert kernel["occupancy"] >= 0.125   # 2 blocks of 4 warps of an SM's 64


@NEEDS_NVCC
def test_a_tensor_core_kernel_that_issues_more_fails_its_budget():
    card = cards.card("flash tc step 6")
    worse = copy.deepcopy(card)
    (kernel,) = worse.kernels
    mix = kernel.sass["sm_90"]
    kernel.sass["sm_90"] = type(mix)(mix.hmma, mix.other + mix.hmma,
                                     dict(mix.opcodes, BAR=8 * mix.hmma // 256))
    budget = BUDGETS["flash tc step 6"]
    found = cards.over_budget(worse, budget)
    name = "flash tc step 6: flash_tc_fa2_kernel<__half, 64, 128, 4>"
    assert [f.rsplit(", budget", 1)[0] for f in found] == [
        f"{name} other_per_hmma {mix.other_per_hmma + 1:g}",
        f"{name} barriers_per_256_hmma {256 * (8 * mix.hmma // 256) / mix.hmma:g}"]
    assert cards.over_budget(worse, budget, static=False) == []   # SASS is static


@NEEDS_NVCC
def test_an_fp32_kernel_whose_loop_issues_more_fails_its_ffma_floor():
    """Chapter 7's FFMA reading is held from below: twice the other instructions in
    step 3's densest loop on sm_90 is named with its number; a tensor-core card has no
    FFMA loop, and chapter 4's GEMM keeps the reference figure of 3.5."""
    card = cards.card("flash fp32 step 3")
    worse = copy.deepcopy(card)
    (kernel,) = worse.kernels
    mix = kernel.fma["sm_90"]
    kernel.fma["sm_90"] = type(mix)(mix.hmma, 2 * mix.other, mix.opcodes)
    found = cards.over_budget(worse, BUDGETS["flash fp32 step 3"])
    assert [f.rsplit(", budget", 1)[0] for f in found] == [
        "flash fp32 step 3: flash_fwd_fp32_occupancy_kernel<64> ffma_per_other "
        f"{mix.count('FFMA') / (2 * mix.other):g}"]
    assert cards.card("flash tc step 6").kernels[0].fma == {}
    assert BUDGETS["gemm step 4"]["kernels"][0]["ffma_per_other"] >= 3.5


@pytest.mark.parametrize("name", ["decode", "decode paged"])
def test_decode_keeps_chapter_9s_design(name):
    """Chapter 9's decode, contiguous and paged: 16-byte loads of the cache (full
    sectors but for the queries' and the block table's reads), conflict-free shared
    memory, the cache read once (≤ 1.05 of the least traffic), no spills or stack."""
    budget = BUDGETS[name]
    (kernel,) = budget["kernels"]
    assert budget["traffic"] <= 1.05 and kernel["load_sectors"] >= 14.5
    assert kernel["conflict_ways"] <= 1.0
    assert kernel["spill_bytes"] == 0 and kernel["stack_bytes"] == 0


@pytest.mark.parametrize("name", ["flash fp32 backward step 2",
                                  "flash fp32 backward step 2 D=128"])
def test_the_backward_in_lane_groups_keeps_chapter_11s_design(name):
    """Step 2 of the backward: no spills or stack in any of its kernels, 16-byte
    stores in full sectors, conflict-free shared memory, at least 2.5 FMAs per shared
    load, and less global traffic than step 1 at the same head dim."""
    budget = BUDGETS[name]
    before = BUDGETS[name.replace("step 2", "step 1")]
    assert budget["fmas_per_shared_load"] >= 2.5
    assert budget["traffic"] < before["traffic"]
    for kernel in budget["kernels"]:
        assert kernel["spill_bytes"] == 0 and kernel["stack_bytes"] == 0
        assert kernel["conflict_ways"] <= 1.0
    for kernel in budget["kernels"][1:]:   # dK/dV and dQ
        assert kernel["store_sectors"] == 16.0 and kernel["load_sectors"] > 13


# Every instance of a kernel template, not only the cards' (file, kernel, instances).
INSTANCES = [("decode.cu", "decode_kernel", 12),   # fp32, fp16, bf16 × D 32 … 128
             ("flash_bwd_fp32.cu", "flash_bwd_dkdv_lanes_kernel", 4),
             ("flash_bwd_fp32.cu", "flash_bwd_dq_lanes_kernel", 4)]


@NEEDS_NVCC
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
@pytest.mark.parametrize("source, kernel, count", INSTANCES,
                         ids=[i[1] for i in INSTANCES])
def test_no_instance_spills(source, kernel, count, arch):
    """No spill stores or loads and no stack in any instance of the kernel."""
    if cards._release(find_nvcc()) != BUDGETS["nvcc"]:
        pytest.skip(f"ptxas figures are budgeted for nvcc {BUDGETS['nvcc']}")
    report = ab.ptxas_report(ab.kernel_source(source), arch)
    kernels = {k: v for k, v in report.items() if k.startswith(f"void {kernel}<")}
    assert len(kernels) == count
    assert {k: (v["spill_stores"], v["spill_loads"], v["stack_bytes"])
            for k, v in kernels.items()} == {k: (0, 0, 0) for k in kernels}


@NEEDS_NVCC
def test_the_compact_table_names_each_kernel_of_a_card_in_88_columns():
    backward = cards.card("flash fp32 backward step 2")   # a card of three kernels
    lines = cards.compact([backward, cards.card("decode")]).splitlines()
    # the card-wide FMAs per shared load once, on the card's own line
    assert lines[1].split() == ["flash", "fp32", "backward", "step", "2",
                                f"{backward.fmas_per_shared_load:.2f}"]
    assert [line.split()[0] for line in lines[2:5]] == [
        "delta", "dkdv_lanes<64>", "dq_lanes<64>"]
    assert all(len(line.split()) == 6 for line in lines[2:5])   # FMAs: blank
    assert lines[2].split()[-1] == "–"   # delta reads no shared memory
    assert lines[5].split()[0] == "decode" and len(lines) == 6
    assert max(map(len, lines)) <= 88


def test_a_card_below_its_fma_floor_fails_it():
    card = cards.design_card(next(s for s in cards.SPECS
                                  if s.name == "flash fp32 step 2"))
    assert card.fmas_per_shared_load == pytest.approx(8.0)
    floor = dict(BUDGETS["flash fp32 step 2"], fmas_per_shared_load=9.0)
    assert cards.over_budget(card, floor, static=False) == [
        "flash fp32 step 2: 8.000 FMAs per shared load, budget 9.0"]


def test_the_bound_is_the_larger_of_compute_and_memory_time():
    # An A100: 19.5 TFLOP/s in fp32, 312 on tensor cores, 1555 GB/s.
    assert cards.lower_bound_us(19.5e12, 1555e9 * 2, "A100") == pytest.approx(2e6)
    assert cards.lower_bound_us(19.5e12 * 3, 1555e9, "A100") == pytest.approx(3e6)
    assert cards.lower_bound_us(312e12, 0, "A100", tensor_cores=True) == \
        pytest.approx(1e6)


@pytest.mark.skipif(find_nvcc() is None or find_nvdisasm() is None,
                    reason="needs nvcc and nvdisasm")
def test_a_hot_loop_table_names_the_kernel_of_a_card_of_several():
    """Chapter 11's step 1 at d = 128 has two kernels with a hot loop: each row says
    which (a card of one kernel is its name alone)."""
    rows = [line.split("  ")[0] for line in cards.hot_loops(
        [cards.card("flash tc backward step 1 D=128"), cards.card("flash tc step 6")],
        "sm_90").splitlines()[1:]]
    assert rows == ["flash tc backward step 1 D=128: dkdv",
                    "flash tc backward step 1 D=128: dq", "flash tc step 6"]
