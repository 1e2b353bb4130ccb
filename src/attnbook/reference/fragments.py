"""Per-lane fragment layouts of mma.sync, ldmatrix and wgmma, transcribed from the PTX
ISA tables ("Matrix Fragments for mma.m16n8k16 / mma.m16n8k8 with floating point type",
"Matrix Fragments for mma.m16n8k32" with .s8/.u8, "ldmatrix", "Register Fragments and
Shared Memory Matrix Layouts" of wgmma), and the shared-memory layouts wgmma and TMA
read and write: the canonical layouts and the swizzles on address bits.

Each function maps (lane, element index) to (row, col) of the matrix, in the ISA's own
terms: groupID = lane >> 2, threadID_in_group = lane % 4; element a_i lives in register
i // 2, even i in the low 16 bits (8-bit integers: register i // 4, byte i % 4). The
emulator's tensor-core instructions are tested against these tables, and chapter 8's
figures are drawn from them.
"""

__all__ = ["a_m16n8k16", "b_m16n8k16", "a_m16n8k8", "b_m16n8k8", "a_m16n8k32_int8",
           "b_m16n8k32_int8", "c_m16n8", "ldmatrix", "d_m64nN", "a_m64k16",
           "SWIZZLES", "swizzle", "wgmma_canonical", "wgmma_address"]


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


# ---- wgmma (sm_90a): a warpgroup of 128 threads, thread t = 32 * warp + lane ---------
def d_m64nN(thread, i):
    """Accumulator d_i of wgmma .m64nNk16 (.f32): warp w holds rows 16w..16w+15, each
    8 columns as mma.sync's C fragment."""
    warp, lane = divmod(thread, 32)
    row = 16 * warp + lane // 4 + 8 * (i >> 1 & 1)
    return row, 8 * (i >> 2) + 2 * (lane % 4) + (i & 1)


def a_m64k16(thread, i):
    """Element a_i (register i // 2, even i low) of A in registers, .m64nNk16 f16/bf16:
    warp w's 16 rows as mma.sync's m16n8k16 A fragment - the accumulator's places for
    N = 16."""
    return d_m64nN(thread, i)


# The swizzles of wgmma's descriptors and of TMA, by the span of their rows in bytes:
# CuTe's Swizzle<B, 4, 3> XORs address bits [4, 4 + B) with bits [7, 7 + B).
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}


def swizzle(address, span):
    """A shared-memory byte address as a swizzle of `span` bytes (0: none) places it."""
    bits = SWIZZLES[span]
    return address ^ ((address >> 7) & ((1 << bits) - 1)) << 4


def wgmma_canonical(span, mn_major, lbo, sbo):
    """The canonical layout of a 16-bit operand tile, in elements, as (shape, stride)
    of the MN mode and of the K mode (CuTe's notation in CUTLASS's GMMA traits; the PTX
    ISA's "canonical layouts"): T = 8 elements a 16-byte row of a core matrix, lbo and
    sbo in elements, the last mode of each unbounded."""
    t = 8
    if not mn_major:                       # K-major: rows of MN, K contiguous
        if span == 0:
            return ((8, None), (t, sbo)), ((t, None), (1, lbo))
        return ((8, None), (span // 2, sbo)), ((t, None), (1, t))
    if span == 0:                          # MN-major: rows of K, MN contiguous
        return ((t, 1, None), (1, t, sbo)), ((8, None), (t, lbo))
    return ((t, span // 16, None), (1, t, lbo)), ((8, None), (span // 2, sbo))


def _evaluate(shape, stride, x):
    """A CuTe mode (shape, stride) at coordinate x: its digits, first mode fastest."""
    offset = 0
    for n, d in zip(shape, stride):
        digit, x = (x, 0) if n is None else (x % n, x // n)
        offset += digit * d
    assert x == 0
    return offset


def wgmma_address(start, mn, k, span, mn_major, lbo, sbo):
    """The shared-memory byte address of element (mn, k) of a 16-bit wgmma operand at
    descriptor start address `start` (lbo, sbo in bytes), swizzled."""
    (s_mn, d_mn), (s_k, d_k) = wgmma_canonical(span, mn_major, lbo // 2, sbo // 2)
    offset = _evaluate(s_mn, d_mn, mn) + _evaluate(s_k, d_k, k)
    return swizzle(start + 2 * offset, span)
