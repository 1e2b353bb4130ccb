"""mma.sync operands as per-lane registers, from the PTX ISA's fragment tables, for the
tests of the package's tensor-core helpers (test_emulator) and of inline PTX
(test_ptx)."""
import torch

from attnbook.reference import fragments as ptx


def to_bits(x, dtype):
    return x.to(dtype).view(torch.int16).to(torch.int32) & 0xFFFF


def pack_fragments(m, layout, regs, dtype):
    """Per-lane registers [32, 4] (the first `regs` used) of matrix m under a layout
    (lane, element) -> (row, col)."""
    out = torch.zeros(32, 4, dtype=torch.int64)
    bits = to_bits(m, dtype)
    for lane in range(32):
        for i in range(2 * regs):
            r, c = layout(lane, i)
            out[lane, i // 2] |= int(bits[r, c]) << (16 * (i % 2))
    out[out >= 2**31] -= 2**32          # reinterpret as int32 bit patterns
    return out.to(torch.int32)


def pack_bytes(m, layout, regs):
    """Per-lane registers [32, 4] (the first `regs` used) of the 8-bit integer matrix
    m under a layout (lane, element) -> (row, col): element i in byte i % 4 of
    register i // 4."""
    out = torch.zeros(32, 4, dtype=torch.int64)
    for lane in range(32):
        for i in range(4 * regs):
            out[lane, i // 4] |= (int(m[layout(lane, i)]) & 0xFF) << (8 * (i % 4))
    out[out >= 2**31] -= 2**32          # reinterpret as int32 bit patterns
    return out.to(torch.int32)


def mma_case(seed, k, dtype, a_layout, b_layout, c_dtype=torch.float32):
    """Random A [16, k], B [k, 8] in ``dtype`` and C [16, 8] in ``c_dtype`` (as float),
    the registers a, b, c that hold them, and D's expected value A B + C."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(16, k, generator=g).to(dtype).float()
    B = torch.randn(k, 8, generator=g).to(dtype).float()
    C = torch.randn(16, 8, generator=g).to(c_dtype).float()
    a = pack_fragments(A, a_layout, k // 4, dtype)
    b = pack_fragments(B, b_layout, k // 8, dtype)
    c = torch.zeros(32, 4)
    for lane in range(32):
        for i in range(4):
            c[lane, i] = C[ptx.c_m16n8(lane, i)]
    return a, b, c, A @ B + C


def gather_c(d):
    """The 16 x 8 matrix held by the per-lane accumulators d [32, 4]."""
    D = torch.zeros(16, 8)
    for lane in range(32):
        for i in range(4):
            D[ptx.c_m16n8(lane, i)] = d[lane, i]
    return D


def check_ldmatrix(out, n, trans):
    """``out`` [32 * 4] int32: the registers ldmatrix .x``n`` (``.trans``) left in each
    lane, loaded from 4 matrices of 8 x 8 halves whose values are their indices."""
    out = out.view(32, 4)
    for lane in range(32):
        for mat in range(n):
            for i in range(2):
                r, c = ptx.ldmatrix(lane, i)
                if trans:
                    r, c = c, r
                want = mat * 64 + r * 8 + c
                assert (int(out[lane, mat]) >> (16 * i)) & 0xFFFF == want, \
                    (lane, mat, i)
