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
from attnbook.args.attention import attention_args
from grid_limits import OVER_GRID_Y, SEAM, seam_key_lengths

IMPLS = ["flash", "tiled", "naive"]
NAN, INF = float("nan"), float("inf")


def randn(*shape, device, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device)


def qkv(q_shape, kv_shape, device):
    """q, k and v of seeds 1, 2 and 3."""
    return (randn(*q_shape, device=device, seed=1),
            randn(*kv_shape, device=device, seed=2),
            randn(*kv_shape, device=device, seed=3))


def sdpa_math(q, k, v, mask=None):
    """SDPA's math path in float64: the values ab.attention must reproduce."""
    h, hkv = q.shape[-3], k.shape[-3]
    k, v = (t.repeat_interleave(h // hkv, dim=-3) for t in (k, v))
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                              attn_mask=mask if mask is None
                                              or mask.dtype == torch.bool
                                              else mask.double())


def no_finite_score(q, k, mask=None):
    """[..., Sq]: rows whose every admitted score is -inf (a -inf in q against keys of
    one sign), which ab.attention, like SDPA's default CPU path, answers with zeros as
    it does a row with no admitted key; SDPA's math path gives NaN."""
    h, hkv = q.shape[-3], k.shape[-3]
    s = q.double() @ k.repeat_interleave(h // hkv, dim=-3).double().transpose(-1, -2)
    if mask is not None:
        s = (s.masked_fill(~mask, -INF) if mask.dtype == torch.bool
             else s + mask.double())
    return (s == -INF).all(-1)


def same(got, want):
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5, equal_nan=True)


# ---- values: SDPA's math path over layouts × masks × NaN/inf placements --------------
def layouts(b, h, s, d, device, seed):
    """The same [b, h, s, d] values in the layouts models hand to attention."""
    x = randn(b, s, h, d, device=device, seed=seed)
    yield "contiguous", x.transpose(1, 2).contiguous()
    yield "[B, S, H, D] transposed", x.transpose(1, 2)
    yield "head_dim strided", torch.cat([x, x], -1)[..., ::2].transpose(1, 2)
    yield "leading dims", x.transpose(1, 2).contiguous().view(1, b, h, s, d).squeeze(0)


@pytest.mark.parametrize("impl", IMPLS)
def test_layouts_give_sdpas_values(impl, device):
    b, h, s, d = 2, 4, 19, 32
    for (name, q), (_, k), (_, v) in zip(layouts(b, h, s, d, device, 1),
                                         layouts(b, h, s, d, device, 2),
                                         layouts(b, h, s, d, device, 3)):
        same(ab.attention(q, k, v, impl=impl), sdpa_math(q, k, v))
    # two batch dims
    five = [randn(2, 3, 2, 11, 32, device=device, seed=i) for i in range(3)]
    out = ab.attention(*five, is_causal=True, impl=impl)
    assert out.shape == (2, 3, 2, 11, 32)
    causal = torch.ones(11, 11, dtype=torch.bool, device=device).tril()
    same(out, sdpa_math(*five, causal))
    three = [randn(2, 7, 32, device=device, seed=i) for i in range(3)]   # [H, S, D]
    same(ab.attention(*three, impl=impl), sdpa_math(*three))


def test_transposed_layout_is_not_copied():
    """The argument check alone, no kernel: the CPU."""
    x = randn(2, 9, 4, 32, device="cpu")     # [B, S, H, D], as a projection produces it
    q = x.transpose(1, 2)
    assert attention_args(q, q, q).q.data_ptr() == x.data_ptr()


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
        mask = (torch.zeros(q.shape[-2], k.shape[-2], device=q.device) if mask is None
                else mask.clone())
        mask[..., row, key] = value
    return q, k, v, mask


@pytest.mark.parametrize("impl,where,value", list(itertools.product(
    IMPLS, ["q", "k", "v", "mask"], [NAN, INF, -INF])))
def test_nan_and_inf_propagate_as_in_sdpa(impl, where, value, device):
    """SDPA's math path, value for value, with two documented differences: rows that
    do not admit the poisoned key see it as absent (for v: on the fused path only), and
    a row whose every admitted score is -inf gives zeros (no_finite_score)."""
    b, h, sq, sk, d, key = 2, 2, 9, 13, 32, 6
    q, k, v = qkv((b, h, sq, d), (b, 1, sk, d), device)
    for name, opts, mask in ab.masks.cases(b, h, sq, sk, device=device):
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
        want = sdpa_math(pq, pk, pv, sdpa_mask).masked_fill(
            no_finite_score(pq, pk, sdpa_mask)[..., None], 0.0)
        if where == "k" or (where == "v" and impl == "flash"):
            admitted = torch.ones(sq, sk, dtype=torch.bool, device=device) \
                if mask is None else mask if mask.dtype == torch.bool else mask != -INF
            sees = admitted[..., key].expand(b, h, sq)[..., None]
            want = torch.where(sees, want, sdpa_math(q, k, v, sdpa_mask))
        same(ab.attention(pq, pk, pv, impl=impl, enable_gqa=True, **opts), want)


def test_one_nan_in_q_gives_a_nan_row(device):
    q, k, v = qkv((1, 1, 8, 32), (1, 1, 8, 32), device)
    q[0, 0, 2, 5] = NAN
    for impl in IMPLS:
        out = ab.attention(q, k, v, impl=impl)
        assert (out[0, 0, 2].isnan().all()
                and not out[0, 0, [0, 1, 3]].isnan().any()), impl


def test_nan_keys_of_a_leading_tile_are_not_dropped(device):
    """The fused kernel once took max(-inf, NaN) = -inf for a tile of NaN keys and
    skipped it: the answer was finite."""
    q, k, v = qkv((1, 1, 4, 32), (1, 1, 70, 32), device)
    k[:, :, :32] = NAN                                 # the whole first key tile
    assert ab.attention(q, k, v).isnan().all()


@pytest.mark.parametrize("impl", IMPLS)
def test_a_masked_key_is_absent(impl, device):
    """NaN or inf under a masked key: SDPA's math path spreads it (0·NaN); the book's
    kernels never let a masked k through, and the fused kernel never a masked v."""
    b, h, s, d = 1, 2, 40, 32
    q, k, v = qkv((b, h, s, d), (b, h, s, d), device)
    lengths = torch.tensor([30], device=device)
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


def test_fully_masked_rows_are_zero(device):
    q, k, v = qkv((2, 2, 5, 32), (2, 2, 7, 32), device)
    lengths = torch.tensor([7, 0], device=device)
    for impl in IMPLS:
        out = ab.attention(q, k, v, key_lengths=lengths, impl=impl)
        assert (out[1] == 0).all() and (out[0] != 0).all()


def test_softmax_like_torch_for_nan_and_inf(device):
    x = torch.tensor([[1.0, NAN, 2.0], [1.0, INF, 2.0], [-INF] * 3, [1.0, -INF, 2.0]],
                     device=device)
    want = torch.softmax(x, -1)
    want[2] = 0                                        # the book's empty row
    for kernel in ab.SOFTMAX_KERNELS:
        torch.testing.assert_close(ab.softmax(x, kernel), want, equal_nan=True)


# ---- integers wider than the kernels' ------------------------------------------------
@pytest.mark.parametrize("impl", IMPLS)
def test_huge_strides_windows_and_lengths_keep_their_meaning(impl, device):
    q, k, v = qkv((2, 2, 6, 32), (2, 2, 9, 32), device)
    for opts in (dict(stride=2**32 + 2), dict(stride=2**31), dict(window=2**32 + 1),
                 dict(key_lengths=torch.tensor([2**33, 5], device=device))):
        want = ab.attention_reference(q, k, v, float64=True, **opts)
        same(ab.attention(q, k, v, impl=impl, **opts), want)
    negative = torch.tensor([-4, 3], device=device)
    zero = torch.tensor([0, 3], device=device)
    same(ab.attention(q, k, v, key_lengths=negative, impl=impl),
         ab.attention_reference(q, k, v, key_lengths=zero, float64=True))


def test_the_wrappers_take_one_mask_value_per_option_by_name(device):
    """The C++ wrappers fill MaskParams from MASK_OPTIONS (kernels/mask_params.h), the
    list the Python side reads: a list of another length, or a value past 32 bits,
    is refused naming the option."""
    from attnbook.args.attention import MASK_OPTIONS, attention_args
    q, k, v = qkv((1, 2, 6, 32), (1, 2, 9, 32), device)
    a = attention_args(q, k, v, is_causal=True, window=3)
    assert a.mask_options == [{"causal": 1, "stride": 0, "window": 3}[name]
                              for name in MASK_OPTIONS]
    from attnbook.ops.flash import check_flash_config
    tiles = check_flash_config(32, None, 1)

    def run(options):
        return torch.ops.attnbook.flash_forward(a.q, a.k, a.v, None, None, options,
                                                a.scale, 1, *tiles)
    torch.testing.assert_close(run(a.mask_options)[0], ab.attention_reference(
        q, k, v, is_causal=True, window=3))
    with pytest.raises(RuntimeError, match=f"no value for {MASK_OPTIONS[-1]}"):
        run(a.mask_options[:-1])
    with pytest.raises(RuntimeError, match=f"{len(MASK_OPTIONS) + 1} values for "
                                           f"{len(MASK_OPTIONS)} options"):
        run([*a.mask_options, 0])
    with pytest.raises(RuntimeError,
                       match=r"mask option window must be in \[0, 2\^31\)"):
        run([1, 0, 2**31])


def test_mask_keywords_are_checked_by_name(device):
    from attnbook.args.attention import MASK_KEYWORDS, MASK_OPTIONS
    assert [*MASK_KEYWORDS] == [n for n in MASK_OPTIONS if n != "causal"]
    q, k, v = qkv((1, 2, 6, 32), (1, 2, 9, 32), device)
    for fn in (ab.attention, ab.flash_attention_fp32, ab.attention_reference,
               ab.flash_attention_tiles, lambda *t, **kw: ab.Attention(**kw)(*t)):
        with pytest.raises(TypeError, match=r"unexpected keyword argument 'windw': "
                                            r"neither an argument of the function "
                                            r"nor one of the masks by keyword "
                                            r"\(stride, window\)"):
            fn(q, k, v, windw=3)
        with pytest.raises(ValueError, match="window must be a positive"):
            fn(q, k, v, window=0)
    same(ab.Attention(window=3, stride=2)(q, k, v),
         ab.attention_reference(q, k, v, window=3, stride=2, float64=True))


# ---- sizes past CUDA's grid limits, and empty ones -----------------------------------
@pytest.mark.stack_independent
@pytest.mark.parametrize("impl", IMPLS)
def test_more_than_65535_batch_heads(impl, device):
    q = randn(OVER_GRID_Y, 1, 1, 32, device=device, seed=1)
    lengths = seam_key_lengths(device)
    o = ab.attention(q, q, q, impl=impl, key_lengths=lengths)
    same(o[SEAM], sdpa_math(q[SEAM], q[SEAM], q[SEAM]))
    assert (o[lengths == 0] == 0).all()


@pytest.mark.stack_independent
def test_more_than_a_million_query_rows_naive(device):
    q, k = (randn(1, 1, 2**20 + 17, 1, device=device, seed=1),
            randn(1, 1, 1, 1, device=device, seed=2))
    out = ab.attention(q, k, k, impl="naive")        # ceil(Sq / 16) > 65535 blocks in y
    assert torch.equal(out, k.expand_as(out))


@pytest.mark.stack_independent
def test_gemm_batch_over_65535(device):
    a, b = (randn(65537, 2, 3, device=device, seed=1),
            randn(65537, 3, 2, device=device, seed=2))
    for step in (1, 3):
        torch.testing.assert_close(ab.gemm(a, b, step=step), a @ b)


@pytest.mark.parametrize("impl", IMPLS)
def test_empty_dimensions_give_empty_outputs(impl, device):
    for qs, ks in [((0, 2, 5, 32), (0, 2, 5, 32)), ((1, 0, 5, 32), (1, 0, 5, 32)),
                   ((1, 2, 0, 32), (1, 2, 5, 32)), ((1, 2, 5, 0), (1, 2, 5, 0))]:
        q, k = torch.randn(qs).to(device), torch.randn(ks).to(device)
        assert ab.attention(q, k, k, impl=impl).shape == qs
    # no keys: every row empty
    q, k = torch.randn(1, 2, 5, 32).to(device), torch.randn(1, 2, 0, 32).to(device)
    assert (ab.attention(q, k, k, impl=impl) == 0).all()


# ---- errors, before any launch -------------------------------------------------------
# call(q, k, dev): q [2, 4, 5, 32] and k [2, 2, 6, 32] on the device dev
@pytest.mark.parametrize("call,err,match", [
    (lambda q, k, dev: ab.flash_attention_fp32(q, k[:, :0], k[:, :0]), ValueError,
     "0 heads"),
    (lambda q, k, dev: ab.attention(q, k[:, :0], k[:, :0], impl="naive"), ValueError,
     "0 heads"),
    (lambda q, k, dev: ab.flash_attention_fp32(
        q, k, k, key_lengths=torch.tensor([3], device=dev)),
     ValueError, "key_lengths must have shape"),
    (lambda q, k, dev: ab.flash_attention_fp32(
        q, k, k, attn_mask=torch.ones(5, 6, dtype=torch.int64, device=dev)),
     TypeError, "bool or floating"),
    (lambda q, k, dev: ab.flash_attention_fp32(q, k, k, stride=-1), ValueError,
     "stride"),
    (lambda q, k, dev: ab.attention(q, k, k, stride=2.0, enable_gqa=True), ValueError,
     "stride"),
    (lambda q, k, dev: ab.attention(q, k, k, is_causal="yes", enable_gqa=True),
     TypeError, "is_causal"),
    (lambda q, k, dev: ab.attention(q, k, k, scale="0.1", enable_gqa=True), TypeError,
     "scale"),
    (lambda q, k, dev: ab.attention(q, k, k, dropout_p=0.1, enable_gqa=True),
     NotImplementedError, "dropout"),
    (lambda q, k, dev: ab.attention(q, k, k, enable_gqa=None), TypeError, "enable_gqa"),
    # grouped heads were run without enable_gqa, where SDPA refuses them
    (lambda q, k, dev: ab.attention(q, k, k), ValueError,
     r"q has 4 heads and k, v 2: grouped-query attention needs enable_gqa=True"),
    (lambda q, k, dev: ab.Attention()(q, k, k), ValueError, "enable_gqa=True"),
    (lambda q, k, dev: ab.attention(q.half(), k.half(), k.half(), impl="naive",
                                    enable_gqa=True), NotImplementedError, "chapter 8"),
    (lambda q, k, dev: ab.attention(q.double(), k.double(), k.double()), TypeError,
     "float32"),
    (lambda q, k, dev: ab.attention(q, k, k.to("meta"), enable_gqa=True), ValueError,
     "one device"),
    (lambda q, k, dev: ab.attention(q, k, k, key_lengths=[1, 2], enable_gqa=True),
     ValueError, "integer tensor"),
    (lambda q, k, dev: ab.attention(q, k, k, attn_mask=[[True]], enable_gqa=True),
     TypeError, "attn_mask"),
    (lambda q, k, dev: ab.softmax(torch.ones(3, device=dev), kernel=3), ValueError,
     "kernel"),
    (lambda q, k, dev: ab.gemm(torch.ones(2, 2, device=dev),
                               torch.ones(2, 2, device=dev), step=1.0),
     ValueError, "step"),
    (lambda q, k, dev: ab.gemm(torch.ones(2, 2, device=dev),
                               torch.ones(2, 2, device=dev), transpose_b=1),
     TypeError, "transpose_b"),
])
def test_bad_input_is_a_clear_error(call, err, match, device):
    q, k = randn(2, 4, 5, 32, device=device), randn(2, 2, 6, 32, device=device)
    with pytest.raises(err, match=match):
        call(q, k, device)


# ---- registered ops: compile, meta, fake, trace, export ------------------------------
def test_ops_are_registered_with_schemas():
    for name in ("flash_forward", "three_kernel_forward", "softmax", "gemm"):
        assert hasattr(torch.ops.attnbook, name), name


@pytest.mark.parametrize("impl", IMPLS)
def test_meta_tensors_give_shapes(impl):
    q, k = torch.empty(3, 4, 2, 100, 64, device="meta"), torch.empty(3, 4, 1, 70, 64,
                                                                       device="meta")
    out = ab.attention(q, k, k, is_causal=True, impl=impl, enable_gqa=True)
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
def test_torch_compile_fullgraph(impl, device):
    torch._dynamo.reset()
    q, k, v = qkv((2, 4, 33, 32), (2, 2, 40, 32), device)
    mask = (torch.rand(33, 40, generator=torch.Generator().manual_seed(4))
            > 0.2).to(device)

    def f(q, k, v):
        return ab.attention(q * 2, k, v, attn_mask=mask, is_causal=True,
                            impl=impl, enable_gqa=True).relu()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(q, k, v), f(q, k, v))


def test_torch_compile_fullgraph_softmax_and_gemm(device):
    torch._dynamo.reset()
    x = randn(3, 17, 24, device=device)

    def f(x):
        return ab.gemm(ab.softmax(x * 3), x.mT) + 1

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), f(x))


# shapes are traced as constants
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:DeprecationWarning")
def test_jit_trace_records_the_op(device):
    q, k = (randn(1, 2, 9, 32, device=device, seed=1),
            randn(1, 2, 9, 32, device=device, seed=2))
    traced = torch.jit.trace(lambda q, k: ab.attention(q, k, k, is_causal=True), (q, k))
    assert "attnbook::flash_forward" in str(traced.graph)
    q2 = randn(1, 2, 9, 32, device=device, seed=3)
    torch.testing.assert_close(traced(q2, k), ab.attention(q2, k, k, is_causal=True))


def test_export(device):
    class M(torch.nn.Module):
        def forward(self, q, k, v):
            return ab.attention(q, k, v, is_causal=True)

    q = randn(1, 2, 9, 32, device=device)
    ep = torch.export.export(M(), (q, q, q))
    assert any("attnbook.flash_forward" in str(n.target) for n in ep.graph.nodes)
    torch.testing.assert_close(ep.module()(q, q, q), M()(q, q, q))


def test_module_and_sdpa_argument_order(device):
    """Positional arguments in SDPA's order: attn_mask, dropout_p, is_causal, scale."""
    q = randn(1, 2, 9, 32, device=device)
    torch.testing.assert_close(ab.attention(q, q, q, None, 0.0, True, 0.5),
                               ab.attention(q, q, q, is_causal=True, scale=0.5))
    torch.testing.assert_close(ab.Attention(is_causal=True)(q, q, q),
                               ab.attention(q, q, q, is_causal=True))
    assert math.isclose(attention_args(q, q, q).scale, 32 ** -0.5)
