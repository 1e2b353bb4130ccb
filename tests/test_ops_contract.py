"""ab.attention keeps scaled_dot_product_attention's contract: its layouts, values
(NaN and ±inf included) and errors, as registered ops that torch.compile, meta tensors,
jit.trace and export understand. Every reproducer of the issue that asked for it is a
test here."""
import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attnbook as ab
from attnbook.reference.checks import attention_args

IMPLS = ["flash", "tiled", "naive"]
NAN, INF = float("nan"), float("inf")


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def sdpa_math(q, k, v, mask=None):
    """SDPA's math path in float64: the values ab.attention must reproduce."""
    h, hkv = q.shape[-3], k.shape[-3]
    k, v = (t.repeat_interleave(h // hkv, dim=-3) for t in (k, v))
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                              attn_mask=mask if mask is None
                                              or mask.dtype == torch.bool
                                              else mask.double())


def same(got, want):
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5, equal_nan=True)


# ---- values: SDPA's math path over layouts × masks × NaN/inf placements --------------
def layouts(b, h, s, d, seed):
    """The same [b, h, s, d] values in the layouts models hand to attention."""
    x = randn(b, s, h, d, seed=seed)
    yield "contiguous", x.transpose(1, 2).contiguous()
    yield "[B, S, H, D] transposed", x.transpose(1, 2)
    yield "head_dim strided", torch.cat([x, x], -1)[..., ::2].transpose(1, 2)
    yield "leading dims", x.transpose(1, 2).contiguous().view(1, b, h, s, d).squeeze(0)


@pytest.mark.parametrize("impl", IMPLS)
def test_layouts_give_sdpas_values(impl):
    b, h, s, d = 2, 4, 19, 32
    for (name, q), (_, k), (_, v) in zip(layouts(b, h, s, d, 1), layouts(b, h, s, d, 2),
                                         layouts(b, h, s, d, 3)):
        same(ab.attention(q, k, v, impl=impl), sdpa_math(q, k, v))
    five = [randn(2, 3, 2, 11, 32, seed=i) for i in range(3)]   # two batch dims
    out = ab.attention(*five, is_causal=True, impl=impl)
    assert out.shape == (2, 3, 2, 11, 32)
    same(out, sdpa_math(*five, torch.ones(11, 11, dtype=torch.bool).tril()))
    three = [randn(2, 7, 32, seed=i) for i in range(3)]          # [H, S, D]
    same(ab.attention(*three, impl=impl), sdpa_math(*three))


def test_transposed_layout_is_not_copied():
    x = randn(2, 9, 4, 32)                   # [B, S, H, D], as a projection produces it
    q = x.transpose(1, 2)
    assert attention_args(q, q, q).q.data_ptr() == x.data_ptr()


def mask_cases(b, h, sq, sk):
    """(name, ab.attention keywords, the equivalent SDPA mask)."""
    causal = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
    lengths = torch.tensor([sk, sk // 2][:b])
    padding = (torch.arange(sk) < lengths.view(b, 1, 1, 1))
    boolean = torch.rand(b, 1, sq, sk, generator=torch.Generator().manual_seed(9)) > 0.3
    additive = randn(1, h, sq, sk, seed=8)
    return [("none", {}, None), ("causal", dict(is_causal=True), causal),
            ("key padding", dict(key_lengths=lengths), padding),
            ("boolean", dict(attn_mask=boolean), boolean),
            ("additive", dict(attn_mask=additive), additive),
            ("window", dict(window=5), (torch.arange(sq).view(-1, 1) + sk - sq
                                        - torch.arange(sk)).abs() < 5)]


def poison(which, q, k, v, mask, value, row=3, key=6):
    """Put ``value`` in q (a row), k or v (a key that row 3 attends) or the additive
    mask."""
    q, k, v = q.clone(), k.clone(), v.clone()
    if which == "q":
        q[:, :, row, 1] = value
    elif which == "k":
        k[:, :, key, 2] = value
    elif which == "v":
        v[:, :, key, 0] = value
    else:
        mask = torch.zeros(q.shape[-2], k.shape[-2]) if mask is None else mask.clone()
        mask[..., row, key] = value
    return q, k, v, mask


@pytest.mark.parametrize("impl,where,value", list(itertools.product(
    IMPLS, ["q", "k", "v", "mask"], [NAN, INF, -INF])))
def test_nan_and_inf_propagate_as_in_sdpa(impl, where, value):
    """SDPA's math path, value for value, with the one documented difference: rows that
    do not admit the poisoned key see it as absent (for v: on the fused path only)."""
    b, h, sq, sk, d, key = 2, 2, 9, 13, 32, 6
    q, k, v = (randn(b, h, sq, d, seed=1), randn(b, 1, sk, d, seed=2),
               randn(b, 1, sk, d, seed=3))
    for name, opts, mask in mask_cases(b, h, sq, sk):
        if where == "mask" and mask is not None and mask.dtype == torch.bool:
            continue                                 # a float mask carries the value
        pq, pk, pv, pmask = poison(where, q, k, v,
                                   mask if "attn_mask" in opts else None,
                                   value, key=key)
        sdpa_mask = mask
        if where == "mask":
            opts = dict(opts, attn_mask=pmask)
            sdpa_mask = pmask if mask is None or name == "additive" else \
                pmask.masked_fill(~mask, -INF)
        want = sdpa_math(pq, pk, pv, sdpa_mask)
        if where == "k" or (where == "v" and impl == "flash"):
            admitted = torch.ones(sq, sk, dtype=torch.bool) if mask is None else \
                mask if mask.dtype == torch.bool else mask != -INF
            sees = admitted[..., key].expand(b, h, sq)[..., None]
            want = torch.where(sees, want, sdpa_math(q, k, v, sdpa_mask))
        same(ab.attention(pq, pk, pv, impl=impl, **opts), want)


def test_one_nan_in_q_gives_a_nan_row():
    q, k, v = (randn(1, 1, 8, 32, seed=1), randn(1, 1, 8, 32, seed=2),
               randn(1, 1, 8, 32, seed=3))
    q[0, 0, 2, 5] = NAN
    for impl in IMPLS:
        out = ab.attention(q, k, v, impl=impl)
        assert (out[0, 0, 2].isnan().all()
                and not out[0, 0, [0, 1, 3]].isnan().any()), impl


def test_nan_keys_of_a_leading_tile_are_not_dropped():
    """The fused kernel once took max(-inf, NaN) = -inf for a tile of NaN keys and
    skipped it: the answer was finite."""
    q, k, v = (randn(1, 1, 4, 32, seed=1), randn(1, 1, 70, 32, seed=2),
               randn(1, 1, 70, 32, seed=3))
    k[:, :, :32] = NAN                                 # the whole first key tile
    assert ab.attention(q, k, v).isnan().all()


@pytest.mark.parametrize("impl", IMPLS)
def test_a_masked_key_is_absent(impl):
    """NaN or inf under a masked key: SDPA's math path spreads it (0·NaN); the book's
    kernels never let a masked k through, and the fused kernel never a masked v."""
    b, h, s, d = 1, 2, 40, 32
    q, k, v = (randn(b, h, s, d, seed=1), randn(b, h, s, d, seed=2),
               randn(b, h, s, d, seed=3))
    lengths = torch.tensor([30])
    clean = ab.attention(q, k, v, key_lengths=lengths, is_causal=True, impl=impl)
    padding, future = k.clone(), k.clone()
    padding[:, :, 33:] = NAN                                     # keys past the length
    future[:, :, 12, 0] = INF                                    # masked for rows < 12
    torch.testing.assert_close(ab.attention(q, padding, v, key_lengths=lengths,
                                            is_causal=True, impl=impl), clean)
    out = ab.attention(q, future, v, key_lengths=lengths, is_causal=True, impl=impl)
    torch.testing.assert_close(out[:, :, :12], clean[:, :, :12])
    if impl == "flash":
        bad_v = v.clone()
        bad_v[:, :, 35:] = NAN
        torch.testing.assert_close(ab.attention(q, k, bad_v, key_lengths=lengths,
                                                is_causal=True), clean)


def test_fully_masked_rows_are_zero():
    q, k, v = (randn(2, 2, 5, 32, seed=1), randn(2, 2, 7, 32, seed=2),
               randn(2, 2, 7, 32, seed=3))
    for impl in IMPLS:
        out = ab.attention(q, k, v, key_lengths=torch.tensor([7, 0]), impl=impl)
        assert (out[1] == 0).all() and (out[0] != 0).all()


def test_softmax_like_torch_for_nan_and_inf():
    x = torch.tensor([[1.0, NAN, 2.0], [1.0, INF, 2.0], [-INF] * 3, [1.0, -INF, 2.0]])
    want = torch.softmax(x, -1)
    want[2] = 0                                        # the book's empty row
    for kernel in ab.SOFTMAX_KERNELS:
        torch.testing.assert_close(ab.softmax(x, kernel), want, equal_nan=True)


# ---- integers wider than the kernels' ------------------------------------------------
@pytest.mark.parametrize("impl", IMPLS)
def test_huge_strides_windows_and_lengths_keep_their_meaning(impl):
    q, k, v = (randn(2, 2, 6, 32, seed=1), randn(2, 2, 9, 32, seed=2),
               randn(2, 2, 9, 32, seed=3))
    for opts in (dict(stride=2**32 + 2), dict(stride=2**31), dict(window=2**32 + 1),
                 dict(key_lengths=torch.tensor([2**33, 5]))):
        want = ab.attention_reference(q, k, v, float64=True, **opts)
        same(ab.attention(q, k, v, impl=impl, **opts), want)
    same(ab.attention(q, k, v, key_lengths=torch.tensor([-4, 3]), impl=impl),
         ab.attention_reference(q, k, v, key_lengths=torch.tensor([0, 3]),
                                float64=True))


# ---- sizes past CUDA's grid limits, and empty ones -----------------------------------
@pytest.mark.parametrize("impl", IMPLS)
def test_more_than_65535_batch_heads(impl):
    q = randn(65537, 1, 1, 32, seed=1)             # B·H = 65537 (grid.y / grid.z limit)
    same(ab.attention(q, q, q, impl=impl), sdpa_math(q, q, q))


def test_more_than_a_million_query_rows_naive():
    q, k = randn(1, 1, 2**20 + 17, 1, seed=1), randn(1, 1, 1, 1, seed=2)
    out = ab.attention(q, k, k, impl="naive")        # ceil(Sq / 16) > 65535 blocks in y
    assert torch.equal(out, k.expand_as(out))


def test_gemm_batch_over_65535():
    a, b = randn(65537, 2, 3, seed=1), randn(65537, 3, 2, seed=2)
    for step in (1, 3):
        torch.testing.assert_close(ab.gemm(a, b, step=step), a @ b)


@pytest.mark.parametrize("impl", IMPLS)
def test_empty_dimensions_give_empty_outputs(impl):
    for qs, ks in [((0, 2, 5, 32), (0, 2, 5, 32)), ((1, 0, 5, 32), (1, 0, 5, 32)),
                   ((1, 2, 0, 32), (1, 2, 5, 32)), ((1, 2, 5, 0), (1, 2, 5, 0))]:
        q, k = torch.randn(qs), torch.randn(ks)
        assert ab.attention(q, k, k, impl=impl).shape == qs
    # no keys: every row empty
    q, k = torch.randn(1, 2, 5, 32), torch.randn(1, 2, 0, 32)
    assert (ab.attention(q, k, k, impl=impl) == 0).all()


# ---- errors, before any launch -------------------------------------------------------
Q = randn(2, 4, 5, 32)
K = randn(2, 2, 6, 32)


@pytest.mark.parametrize("call,err,match", [
    (lambda: ab.flash_attention_fp32(Q, K[:, :0], K[:, :0]), ValueError, "0 heads"),
    (lambda: ab.attention(Q, K[:, :0], K[:, :0], impl="naive"), ValueError, "0 heads"),
    (lambda: ab.flash_attention_fp32(Q, K, K, key_lengths=torch.tensor([3])),
     ValueError, "key_lengths must have shape"),
    (lambda: ab.flash_attention_fp32(Q, K, K,
                                     attn_mask=torch.ones(5, 6, dtype=torch.int64)),
     TypeError, "bool or floating"),
    (lambda: ab.flash_attention_fp32(Q, K, K, stride=-1), ValueError, "stride"),
    (lambda: ab.attention(Q, K, K, stride=2.0), ValueError, "stride"),
    (lambda: ab.attention(Q, K, K, is_causal="yes"), TypeError, "is_causal"),
    (lambda: ab.attention(Q, K, K, scale="0.1"), TypeError, "scale"),
    (lambda: ab.attention(Q, K, K, dropout_p=0.1), NotImplementedError, "dropout"),
    (lambda: ab.attention(Q, K, K, enable_gqa=None), TypeError, "enable_gqa"),
    (lambda: ab.attention(Q.half(), K.half(), K.half(), impl="naive"),
     NotImplementedError, "chapter 8"),
    (lambda: ab.attention(Q.double(), K.double(), K.double()), TypeError, "float32"),
    (lambda: ab.attention(Q, K, K.to("meta")), ValueError, "one device"),
    (lambda: ab.attention(Q, K, K, key_lengths=[1, 2]), ValueError, "integer tensor"),
    (lambda: ab.attention(Q, K, K, attn_mask=[[True]]), TypeError, "attn_mask"),
    (lambda: ab.softmax(torch.ones(3), kernel=3), ValueError, "kernel"),
    (lambda: ab.gemm(torch.ones(2, 2), torch.ones(2, 2), step=1.0), ValueError, "step"),
    (lambda: ab.gemm(torch.ones(2, 2), torch.ones(2, 2), transpose_b=1), TypeError,
     "transpose_b"),
])
def test_bad_input_is_a_clear_error(call, err, match):
    with pytest.raises(err, match=match):
        call()


# ---- registered ops: compile, meta, fake, trace, export ------------------------------
def test_ops_are_registered_with_schemas():
    for name in ("flash_forward", "three_kernel_forward", "softmax", "gemm"):
        assert hasattr(torch.ops.attnbook, name), name


@pytest.mark.parametrize("impl", IMPLS)
def test_meta_tensors_give_shapes(impl):
    q, k = torch.empty(3, 4, 2, 100, 64, device="meta"), torch.empty(3, 4, 1, 70, 64,
                                                                       device="meta")
    out = ab.attention(q, k, k, is_causal=True, impl=impl)
    assert out.shape == q.shape and out.device.type == "meta"


def test_fake_tensor_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 8, 50, 64)
        o, lse = ab.flash_attention_fp32(q, q, q, return_lse=True)
        assert o.shape == q.shape and lse.shape == (2, 8, 50)
        assert (ab.softmax(q).shape == q.shape
                and ab.gemm(q[0], q[0], transpose_b=True).shape == (8, 50, 50))


@pytest.mark.parametrize("impl", IMPLS)
def test_torch_compile_fullgraph(impl):
    torch._dynamo.reset()
    q, k, v = (randn(2, 4, 33, 32, seed=1), randn(2, 2, 40, 32, seed=2),
               randn(2, 2, 40, 32, seed=3))
    mask = torch.rand(33, 40, generator=torch.Generator().manual_seed(4)) > 0.2

    def f(q, k, v):
        return ab.attention(q * 2, k, v, attn_mask=mask, is_causal=True,
                            impl=impl).relu()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(q, k, v), f(q, k, v))


def test_torch_compile_fullgraph_softmax_and_gemm():
    torch._dynamo.reset()
    x = randn(3, 17, 24)

    def f(x):
        return ab.gemm(ab.softmax(x * 3), x.mT) + 1

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), f(x))


# shapes are traced as constants
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:DeprecationWarning")
def test_jit_trace_records_the_op():
    q, k = randn(1, 2, 9, 32, seed=1), randn(1, 2, 9, 32, seed=2)
    traced = torch.jit.trace(lambda q, k: ab.attention(q, k, k, is_causal=True), (q, k))
    assert "attnbook::flash_forward" in str(traced.graph)
    q2 = randn(1, 2, 9, 32, seed=3)
    torch.testing.assert_close(traced(q2, k), ab.attention(q2, k, k, is_causal=True))


def test_export():
    class M(torch.nn.Module):
        def forward(self, q, k, v):
            return ab.attention(q, k, v, is_causal=True)

    q = randn(1, 2, 9, 32)
    ep = torch.export.export(M(), (q, q, q))
    assert any("attnbook.flash_forward" in str(n.target) for n in ep.graph.nodes)
    torch.testing.assert_close(ep.module()(q, q, q), M()(q, q, q))


def test_module_and_sdpa_argument_order():
    """Positional arguments in SDPA's order: attn_mask, dropout_p, is_causal, scale."""
    q = randn(1, 2, 9, 32)
    torch.testing.assert_close(ab.attention(q, q, q, None, 0.0, True, 0.5),
                               ab.attention(q, q, q, is_causal=True, scale=0.5))
    torch.testing.assert_close(ab.Attention(is_causal=True)(q, q, q),
                               ab.attention(q, q, q, is_causal=True))
    assert math.isclose(attention_args(q, q, q).scale, 32 ** -0.5)
