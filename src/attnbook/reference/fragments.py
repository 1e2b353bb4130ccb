"""Per-lane fragment layouts of mma.sync and ldmatrix, transcribed from the PTX ISA
tables ("Matrix Fragments for mma.m16n8k16 / mma.m16n8k8 with floating point type",
"Matrix Fragments for mma.m16n8k32" with .s8/.u8, "ldmatrix").

Each function maps (lane, element index) to (row, col) of the matrix, in the ISA's own
terms: groupID = lane >> 2, threadID_in_group = lane % 4; element a_i lives in register
i // 2, even i in the low 16 bits (8-bit integers: register i // 4, byte i % 4). The
emulator's tensor-core instructions are tested against these tables, and chapter 8's
figures are drawn from them.
"""

__all__ = ["a_m16n8k16", "b_m16n8k16", "a_m16n8k8", "b_m16n8k8", "a_m16n8k32_int8",
           "b_m16n8k32_int8", "c_m16n8", "ldmatrix"]


def a_m16n8k16(lane, i):
    group, tig = lane >> 2, lane % 4
    row = group if i in (0, 1, 4, 5) else group + 8
    col = tig * 2 + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def b_m16n8k16(lane, i):
    group, tig = lane >> 2, lane % 4
    row = tig * 2 + (i & 1) + (8 if i >= 2 else 0)
    return row, group


def a_m16n8k8(lane, i):
    group, tig = lane >> 2, lane % 4
    return (group if i < 2 else group + 8), tig * 2 + (i & 1)


def b_m16n8k8(lane, i):
    group, tig = lane >> 2, lane % 4
    return tig * 2 + i, group


def a_m16n8k32_int8(lane, i):
    """A of m16n8k32 (16 x 32) with .s8/.u8 elements; its first 8 elements are A of
    m16n8k16 (16 x 16)."""
    group, tig = lane >> 2, lane % 4
    row = group if i < 4 or 8 <= i < 12 else group + 8
    return row, tig * 4 + (i & 3) + (16 if i >= 8 else 0)


def b_m16n8k32_int8(lane, i):
    """B of m16n8k32 (32 x 8) with .s8/.u8 elements; its first 4 are m16n8k16's."""
    group, tig = lane >> 2, lane % 4
    return tig * 4 + (i & 3) + (16 if i >= 4 else 0), group


def c_m16n8(lane, i):
    group, tig = lane >> 2, lane % 4
    return (group if i < 2 else group + 8), tig * 2 + (i & 1)


def ldmatrix(lane, i):
    """Element i (0, 1) of the register a lane receives from one 8x8 matrix."""
    return lane >> 2, (lane % 4) * 2 + i
