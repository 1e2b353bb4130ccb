"""The SASS reader of the design cards (attnbook.toolchain.sass): which loop is hot and
what is counted there, on nvdisasm text written here; and on a real build, where nvcc
and nvdisasm are installed."""
import pytest

import attnbook as ab
from attnbook.toolchain import find_nvcc, sass
from attnbook.toolchain.sass import (LoopMix, find_nvdisasm, fma_loops, fma_report,
                                    forms_report, hot_loops, load_loops, load_report,
                                    memory_forms, sass_report)

# Two kernels. k1: an outer loop (.L_x_0) around an inner one (.L_x_1) that holds all
# 64 HMMA; the inner loop is the hot one (2 others per HMMA), the outer has more. A
# predicated instruction counts by its opcode, NOPs not at all. k2: 8 HMMA only.
def _kernel(name, hmma_per_block, blocks):
    lines = [f".text.{name}:", ".L_x_0:"]
    address = 0

    def emit(text):
        nonlocal address
        lines.append(f"        /*{address:04x}*/                   {text} ;")
        address += 16
    emit("S2R R0, SR_TID.X")
    lines.append(".L_x_1:")
    for _ in range(blocks):
        emit("LDSM.16.M88.4 R4, [R2]")
        for _ in range(hmma_per_block):
            emit("HMMA.16816.F32 R8, R4, R6, R8")
        emit("@!P0 FMNMX R9, R9, R10, !PT")
        emit("NOP")
    emit("BAR.SYNC.DEFER_BLOCKING 0x0")
    emit("@P1 BRA `(.L_x_1)")
    emit("STL [R1], R3")
    emit("MUFU.EX2 R4, R4")
    emit("@P2 BRA `(.L_x_0)")
    emit("EXIT")
    return lines


SASS = "\n".join(_kernel("k1", 16, 4) + _kernel("k2", 8, 1))


def test_the_hot_loop_is_the_one_with_fewest_others_per_hmma():
    loops = hot_loops(SASS)
    assert set(loops) == {"k1"}                       # k2: fewer than 64 HMMA
    mix = loops["k1"]
    assert (mix.hmma, mix.other) == (64, 4 + 4 + 1 + 1)   # LDSM, FMNMX, BAR, BRA
    assert mix.count("FMNMX") == 4 and mix.count("NOP") == 4
    assert mix.ldsm_per_hmma == 4 / 64 and mix.barriers_per_256_hmma == 4.0
    assert mix.local == 0 and mix.count("MUFU") == 0   # both outside the inner loop
    assert set(hot_loops(SASS, min_hmma=8)) == {"k1", "k2"}


def test_an_fp32_kernels_loop_is_read_by_its_ffma():
    """The same reading with FFMA as the work: k1's inner loop, its 64 FFMA (written as
    HMMA above, renamed here) against the LDSM, FMNMX, BAR and BRA beside them."""
    text = SASS.replace("HMMA.16816.F32", "FFMA").replace("LDSM.16.M88.4", "LDS.128")
    assert hot_loops(text) == {}
    mix = fma_loops(text)["k1"]
    assert (mix.hmma, mix.other) == (64, 10) and mix.ffma_per_other == 6.4
    assert mix.lds_per_ffma == 4 / 64 and set(fma_loops(text, min_ffma=8)) == {"k1",
                                                                              "k2"}


def test_a_memory_bound_kernels_passes_are_its_loops_of_loads():
    """k1 with LDG for its HMMA: the inner loop (64 loads) and the outer one around
    it (64 too), in program order; k2's loops have 8, fewer than asked."""
    text = SASS.replace("HMMA.16816.F32 R8, R4, R6, R8", "LDG.E R8, desc[UR4][R2.64]")
    loops = load_loops(text, min_loads=16)
    assert set(loops) == {"k1"} and [m.hmma for m in loops["k1"]] == [64, 64]
    inner, outer = loops["k1"]
    assert inner.other == 10 and outer.other == 10 + 4   # S2R, STL, MUFU, BRA
    assert set(load_loops(text)) == {"k1", "k2"}


def test_shared_memory_instructions_are_counted_by_their_form():
    """Registers and predicates lose their numbers, addresses their offsets and
    descriptors; an instruction that never runs (@!PT) is a form of its own, and the
    other opcodes are left out."""
    body = ["@!PT LDS RZ, [RZ]", "@P4 STS.128 [R15+0x2000], RZ",
            "@P0 STS.128 [R18], RZ",
            "@!P4 LDGSTS.E.BYPASS.128 [R15+0x2000], desc[UR8][R16.64]",
            "LDS R17, [R6+0x2000]", "@!PT LDS RZ, [RZ]", "LDSM.16.M88.4 R80, [R80]",
            "STS [R2+UR4], R3", "FFMA R1, R2, R3, R4", "LDG.E R8, desc[UR4][R2.64]"]
    text = "\n".join([".text.k:"] + [f"        /*{16 * n:04x}*/  {t} ;"
                                      for n, t in enumerate(body)] + [".text.none:"])
    assert memory_forms(text) == {"k": {
        "@!PT LDS RZ, [RZ]": 2, "@P STS.128 [R], RZ": 2, "LDS R, [R]": 1,
        "@!P LDGSTS.E.BYPASS.128 [R], [R.64]": 1, "LDSM.16.M88.4 R, [R]": 1,
        "STS [R+UR], R": 1}}


def test_an_hgmma_counts_its_share_of_hmma():
    """A warpgroup's HGMMA.64xNx16 is, per warp, a 16 x N x 16 product: N / 8
    HMMA.16816s. k1 with HGMMA.64x64x16 (8 each) in place of its 64 HMMA: 512."""
    text = SASS.replace("HMMA.16816.F32 R8, R4, R6, R8",
                        "HGMMA.64x64x16.F32 R24, gdesc[UR4], R24, gsb0")
    mix = hot_loops(text)["k1"]
    assert (mix.hmma, mix.other, mix.count("HGMMA")) == (8 * 64, 10, 64)
    wide = text.replace("64x64x16", "64x128x16")
    assert hot_loops(wide)["k1"].hmma == 16 * 64
    assert set(hot_loops(text.replace("64x64x16", "64x8x16"))) == {"k1"}   # 64 x 1


def test_a_mix_round_trips_as_the_cache_keeps_it():
    mix = hot_loops(SASS)["k1"]
    import dataclasses
    assert LoopMix(**dataclasses.asdict(mix)) == mix


@pytest.mark.skipif(find_nvcc() is None or find_nvdisasm() is None,
                    reason="needs nvcc and nvdisasm")
def test_a_real_build_names_its_tensor_core_kernels():
    """Chapter 8's build: every fp16 and bf16 instance of every step has a hot loop;
    the vector add (no tensor cores) has none."""
    report = sass_report(ab.kernel_source("flash_tc.cu"), "sm_80")
    assert len(report) == 2 * (2 * 5 + 3 + 2)   # steps 1-5 at two tiles, the sweep, 6
    assert all(mix.hmma >= 64 for mix in report.values())
    assert sass_report(ab.kernel_source("vector_add.cu"), "sm_80") == {}


@pytest.mark.skipif(find_nvcc() is None or find_nvdisasm() is None,
                    reason="needs nvcc and nvdisasm")
def test_a_real_sm_90a_build_reads_its_hgmma_loops():
    """Chapter 12's build: every instance of every step has a hot loop of HGMMAs,
    one key tile's worth: per warp S (16 x 64 x D) and O (16 x D x 64), D / 2
    HMMA.16816s each. Only step 5 runs instructions beside its newest wgmma group
    (the softmax of a tile beside the P V of the one before)."""
    report = sass_report(ab.kernel_source("flash_hopper.cu"), "sm_90a")
    assert len(report) == 5 * 2 * 2   # steps 1-5, fp16/bf16, D 64/128
    for name, mix in report.items():
        d = 128 if ", 128, 64" in name else 64
        assert mix.count("HMMA") == 0 and mix.hmma == d, name
        assert (mix.beside_last_group >= 32) == (", 3, 5>" in name), name


def test_the_instructions_beside_the_newest_wgmma_group_are_counted():
    """Between `DEPBAR.LE gsb0, 0x1` and the next `0x0` of the hot loop, NOPs aside;
    a loop without the pair has none."""
    body = ["HGMMA.64x64x16.F32 R24, gdesc[UR4], R24, gsb0 ;",
            "WARPGROUP.DEPBAR.LE gsb0, 0x1 ;", "FMUL R1, R2, R3 ;", "NOP ;",
            "MUFU.EX2 R4, R1 ;", "WARPGROUP.DEPBAR.LE gsb0, 0x0 ;", "FADD R5, R4, R4 ;"]
    assert sass._beside_last_group(body) == 2
    assert sass._beside_last_group(body[:1] + body[2:]) == 0


@pytest.mark.skipif(find_nvcc() is None or find_nvdisasm() is None,
                    reason="needs nvcc and nvdisasm")
def test_a_real_build_names_its_fp32_kernels_ffma_loops():
    report = fma_report(ab.kernel_source("flash_fp32.cu"), "sm_90")
    assert any("flash_fwd_fp32_occupancy_kernel<64>" in name for name in report)
    assert all(mix.count("FFMA") == mix.hmma >= 64 for mix in report.values())


@pytest.mark.skipif(find_nvcc() is None or find_nvdisasm() is None,
                    reason="needs nvcc and nvdisasm")
def test_a_real_build_counts_the_cp_async_copies_never_true_loads():
    """What appendix B reads: in chapter 8's step 5 on sm_90 each LDGSTS has three
    loads under a never-true predicate, and the kernel has no other plain LDS."""
    report = forms_report(ab.kernel_source("flash_tc.cu"), "sm_90")
    step5 = "void flash_tc_pipeline_kernel<__half, 64, 64, 4, true>("
    (forms,) = [v for k, v in report.items() if k.startswith(step5)]
    copies = sum(n for form, n in forms.items() if "LDGSTS" in form)
    assert copies > 0 and forms["@!PT LDS RZ, [RZ]"] == 3 * copies
    assert not [form for form in forms if form.startswith("LDS ")]


@pytest.mark.skipif(find_nvcc() is None or find_nvdisasm() is None,
                    reason="needs nvcc and nvdisasm")
def test_the_lean_online_softmax_takes_one_exponential_per_element():
    """Chapter 3's online kernel issues two MUFU (an exponential's, a division's) per
    element in each pass; its lean form one, in fewer instructions than the three-pass
    kernels' three passes."""
    report = load_report(ab.kernel_source("softmax.cu"), "sm_90")

    def per_element(kernel, what):
        (loops,) = [v for k, v in report.items() if f"softmax_{kernel}<" in k]
        return [what(m) / m.hmma for m in loops]

    assert per_element("online", lambda m: m.count("MUFU")) == [2, 2]
    assert per_element("online_lean", lambda m: m.count("MUFU")) == [1, 1]
    assert len(per_element("block_warps", lambda m: 0)) == 3      # max, sum, write
    issued = {k: sum(per_element(k, lambda m: m.other + m.hmma))
              for k in ("online", "block_warps", "online_lean")}
    assert issued["online_lean"] < issued["block_warps"] < issued["online"]
