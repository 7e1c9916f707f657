"""Caller cos/sin tables as a first-class path: rotary.apply_cos_sin / apply_qk_cos_sin, rotary.torch.apply_cos_sin
and the flash-attn drop-in rotary.torch.apply_rotary_emb (in place, varlen cu_seqlens + per-sequence offsets, both
pairings, autograd), vs flash-attn's own reference formula transcribed in float64 torch (flash_reference.py), torch
autograd and onnxruntime (the ONNX operator's inverse). The packed qkv_/kv_ forms: test_flash_packed.py."""
from __future__ import annotations

import numpy as np
import pytest

import rotary

torch = pytest.importorskip("torch")
import rotary.torch as rt  # noqa: E402
from flash_reference import F32_ABS_TOL, F64_ABS_TOL  # noqa: E402
from flash_reference import cos_sin_tables as _cos_sin  # noqa: E402
from flash_reference import fa_apply_rotary_emb_torch as _fa_apply_rotary_emb_torch  # noqa: E402
from flash_reference import fa_index_cos_sin as _fa_index_cos_sin  # noqa: E402
from flash_reference import seqlen_offsets as _offsets  # noqa: E402


@pytest.mark.parametrize("offsets_kind", ["zero", "int", "tensor"])
@pytest.mark.parametrize("rotary_fraction", [1.0, 0.5])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("inplace", [False, True])
def test_flash_attn_apply_rotary_emb(inplace, interleaved, rotary_fraction, offsets_kind):
    """flash-attn's test_rotary_emb_func, on CPU: output and x.grad vs its reference formula (float64 autograd)."""
    B, S, H, D = 3, 21, 4, 32
    R = int(rotary_fraction * D)
    torch.manual_seed(1)
    base = torch.randn(B, S, H, D)
    x = base.clone().requires_grad_()
    cos, sin = _cos_sin(2 * S, R)
    offs = _offsets(offsets_kind, B, S)
    # in place on the leaf itself, as flash-attn's test does (its Function writes x; torch's in-place ops refuse a
    # leaf that requires grad): x holds the rotation, the returned tensor carries the gradient
    out = rt.apply_rotary_emb(x, cos, sin, interleaved=interleaved, inplace=inplace, seqlen_offsets=offs)
    if inplace:
        assert torch.equal(x.detach(), out.detach())
    x_pt = base.double().requires_grad_()
    cos_pt, sin_pt = _fa_index_cos_sin(cos.double(), sin.double(), offs, S)
    out_pt = _fa_apply_rotary_emb_torch(x_pt, cos_pt, sin_pt, interleaved)
    torch.testing.assert_close(out.double(), out_pt.detach(), atol=F32_ABS_TOL, rtol=0)
    g = torch.randn_like(out)
    out.backward(g)
    out_pt.backward(g.double())
    torch.testing.assert_close(x.grad.double(), x_pt.grad, atol=F32_ABS_TOL, rtol=0)
    if not inplace:
        assert torch.equal(x.detach(), base)


@pytest.mark.parametrize("offsets_kind", ["zero", "int", "tensor"])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("inplace", [False, True])
def test_flash_attn_varlen(inplace, interleaved, offsets_kind):
    """flash-attn's test_rotary_emb_varlen_func: unpadded [T, H, D] with cu_seqlens, vs the padded reference."""
    B, S, H, D = 3, 13, 2, 16
    lengths = torch.tensor([13, 4, 9])
    torch.manual_seed(2)
    xp = torch.randn(B, S, H, D)
    mask = torch.arange(S)[None] < lengths[:, None]
    x_unpad = xp[mask].clone().requires_grad_()  # [T, H, D], sequences back to back
    cu = torch.cat((torch.zeros(1, dtype=torch.int32), lengths.cumsum(0).to(torch.int32)))
    cos, sin = _cos_sin(2 * S, D, seed=3)
    offs = _offsets(offsets_kind, B, S)
    x_in = x_unpad * 1.0 if inplace and offsets_kind == "int" else x_unpad  # a non-leaf too, and the leaf itself
    out_unpad = rt.apply_rotary_emb(x_in, cos, sin, interleaved=interleaved, inplace=inplace, seqlen_offsets=offs,
                                    cu_seqlens=cu, max_seqlen=int(lengths.max()))
    x_pt = xp.double().requires_grad_()
    cos_pt, sin_pt = _fa_index_cos_sin(cos.double(), sin.double(), offs, S)
    out_pt = _fa_apply_rotary_emb_torch(x_pt, cos_pt, sin_pt, interleaved)
    torch.testing.assert_close(out_unpad.double(), out_pt[mask].detach(), atol=F32_ABS_TOL, rtol=0)
    g = torch.randn_like(out_unpad)
    out_unpad.backward(g)
    g_pad = torch.zeros(B, S, H, D, dtype=torch.float64)
    g_pad[mask] = g.double()
    out_pt.backward(g_pad)
    torch.testing.assert_close(x_unpad.grad.double(), x_pt.grad[mask], atol=F32_ABS_TOL, rtol=0)
    if inplace:
        assert torch.equal(x_in.detach(), out_unpad.detach())


def test_torch_packed_and_per_batch_positions_are_checked_as_rotary_apply_checks_them():
    """rotary.torch (apply_rotary_emb, apply_cos_sin, apply) refuses what rotary.apply refuses, with its message:
    it used to rotate every row by positions computed from a decreasing or short cu_seqlens, to drop seq_offsets
    without cu_seqlens or batch_offsets with it, and to take too many offsets."""
    x = torch.randn(10, 2, 8)
    cos, sin = _cos_sin(32, 8, seed=1)
    spec = rotary.Spec(8)
    cases = [
        (dict(cu_seqlens=[0, 6, 4, 10]), r"cu_seqlens must be non-decreasing, got cu_seqlens\[2\] = 4 < cu_seqlens\[1\] = 6"),
        (dict(cu_seqlens=[0, 4, 8]), r"cu_seqlens\[2\] \(the last entry\) must equal the token count T = 10, got 8"),
        (dict(cu_seqlens=[1, 4, 10]), r"cu_seqlens\[0\] must be 0, got 1"),
        (dict(cu_seqlens=[0, 4, 10], seq_offsets=[1, 2, 3]), r"seq_offsets must have shape \[N\] = \[2\], got \[3\]"),
        (dict(seq_offsets=[1, 2]), "seq_offsets needs cu_seqlens"),
        (dict(cu_seqlens=[0, 4, 10], batch_offsets=[1, 2]), "batch_offsets cannot be combined with cu_seqlens"),
        (dict(cu_seqlens=[0, 4, 10], positions=torch.arange(10)), "positions ids cannot be combined with cu_seqlens"),
    ]
    for kw, message in cases:
        kw = dict(kw)
        pos = kw.pop("positions", None)
        for call in (lambda: rt.apply_cos_sin(x, cos, sin, pos, layout="thd", **kw),
                     lambda: rt.apply(x, 0 if pos is None else pos, spec, layout="thd", **kw)):
            before = x.clone()
            with pytest.raises(ValueError, match=r"\[rotary_apply\] .*" + message):
                call()
            assert torch.equal(x, before)
    with pytest.raises(ValueError, match=r"\[rotary_apply\] seqlen_offsets must have shape \[N\] = \[2\], got \[3\]"):
        rt.apply_rotary_emb(x, cos, sin, seqlen_offsets=torch.tensor([1, 2, 3]), cu_seqlens=torch.tensor([0, 4, 10]))
    xb = torch.randn(2, 5, 2, 8)
    with pytest.raises(ValueError, match=r"\[rotary_apply\] seqlen_offsets must have shape \[B\] = \[2\] \(or \[1\]\)"):
        rt.apply_rotary_emb(xb, cos, sin, seqlen_offsets=torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="layout \"thd\""):
        rt.apply_cos_sin(xb, cos, sin, None, layout="bshd", cu_seqlens=[0, 2])
    # traced with fake or symbolic tensors (make_fx, AOT tracing): the values are not read on the host
    from torch.fx.experimental.proxy_tensor import make_fx
    for mode in ("real", "fake", "symbolic"):
        gm = make_fx(lambda a, cu: rt.apply(a, 0, spec, layout="thd", cu_seqlens=cu), tracing_mode=mode)(
            x, torch.tensor([0, 4, 10]))
        torch.testing.assert_close(gm(x, torch.tensor([0, 4, 10])),
                                   rt.apply(x, 0, spec, layout="thd", cu_seqlens=[0, 4, 10]), rtol=0, atol=0)
    # what stays accepted: an int start added to packed or per-batch starts (documented), a [1] offset broadcast
    want = rt.apply_cos_sin(x, cos, sin, None, layout="thd", cu_seqlens=[0, 4, 10], seq_offsets=[3, 4])
    got = rt.apply_cos_sin(x, cos, sin, 2, layout="thd", cu_seqlens=[0, 4, 10], seq_offsets=[1, 2])
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(rt.apply_rotary_emb(xb, cos, sin, seqlen_offsets=torch.tensor([3])),
                               rt.apply_rotary_emb(xb, cos, sin, seqlen_offsets=3), rtol=0, atol=0)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("layout", ["bshd", "bhsd", "thd"])
def test_autograd_gradcheck_both_pairings(layout, pairing):
    """rotary.torch.apply_cos_sin is differentiable in x (torch.autograd.gradcheck in float64), both pairings."""
    shape = {"bshd": (2, 5, 3, 8), "bhsd": (2, 3, 5, 8), "thd": (5, 3, 8)}[layout]
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    cos, sin = _cos_sin(12, 6)  # partial: R = 6 of D = 8
    ids = torch.tensor([3, 0, 11, 7, 2])
    fn = lambda t: rt.apply_cos_sin(t, cos, sin, ids, layout=layout, pairing=pairing)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x,), eps=1e-6, atol=1e-7)
    assert torch.autograd.gradgradcheck(fn, (x,), eps=1e-6, atol=1e-7)


def _np_truth(x, cos, sin, rows, pairing, inverse):
    """Rotation of x [..., D] by table rows `rows` (broadcastable to x's token axes), float64."""
    c, s = cos[rows].astype(np.float64), sin[rows].astype(np.float64)
    if inverse:
        s = -s
    h = c.shape[-1]
    y = x.astype(np.float64).copy()
    if pairing == "half":
        x0, x1 = y[..., :h].copy(), y[..., h:2 * h].copy()
        y[..., :h], y[..., h:2 * h] = x0 * c - x1 * s, x0 * s + x1 * c
    else:
        x0, x1 = y[..., 0:2 * h:2].copy(), y[..., 1:2 * h:2].copy()
        y[..., 0:2 * h:2], y[..., 1:2 * h:2] = x0 * c - x1 * s, x0 * s + x1 * c
    return y


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("inverse", [False, True])
def test_numpy_every_position_scheme_and_layout(pairing, inverse):
    r = np.random.default_rng(4)
    cos, sin = (a.numpy() for a in _cos_sin(40, 8, seed=9))
    B, S, H, D = 2, 6, 3, 12
    x = r.standard_normal((B, S, H, D)).astype(np.float32)
    kw = dict(pairing=pairing, inverse=inverse)
    # int offset, [B] batch offsets, [S] and [B, S] ids
    s = np.arange(S)
    cases = [(5, {}, 5 + s[None, :, None]),
             (0, {"batch_offsets": np.array([2, 30])}, np.array([2, 30])[:, None, None] + s[None, :, None]),
             (np.array([9, 1, 0, 4, 4, 39]), {}, np.array([9, 1, 0, 4, 4, 39])[None, :, None]),
             (np.arange(12).reshape(2, 6) * 3, {}, (np.arange(12).reshape(2, 6) * 3)[:, :, None])]
    for pos, extra, rows in cases:
        y = rotary.apply_cos_sin(x, cos, sin, pos, **kw, **extra)
        np.testing.assert_allclose(y, _np_truth(x, cos, sin, np.broadcast_to(rows, (B, S, H)), pairing, inverse),
                                   atol=F32_ABS_TOL, rtol=0)
    # bhsd view of the same data, out= in place
    xb = np.ascontiguousarray(x.transpose(0, 2, 1, 3))
    yb = rotary.apply_cos_sin(xb, cos, sin, 5, layout="bhsd", out=xb, **kw)
    assert yb is xb
    np.testing.assert_allclose(xb.transpose(0, 2, 1, 3), _np_truth(x, cos, sin, np.broadcast_to(5 + s[None, :, None], (B, S, H)),
                                                                    pairing, inverse), atol=F32_ABS_TOL, rtol=0)
    # thd packed: cu_seqlens with an int start or per-sequence starts
    xt = x.reshape(B * S, H, D)
    cu = np.array([0, 4, 4, 12])
    for so, starts in ((3, [3, 3, 3]), (np.array([0, 7, 20]), [0, 7, 20])):
        y = rotary.apply_cos_sin(xt, cos, sin, layout="thd", cu_seqlens=cu, seq_offsets=so, **kw)
        rows = np.concatenate([np.arange(cu[n + 1] - cu[n]) + starts[n] for n in range(3)])
        np.testing.assert_allclose(y, _np_truth(xt, cos, sin, np.broadcast_to(rows[:, None], (B * S, H)), pairing, inverse),
                                   atol=F32_ABS_TOL, rtol=0)
    y = rotary.apply_cos_sin(xt, cos, sin, 3, layout="thd", cu_seqlens=cu, **kw)  # an int positions = each start
    np.testing.assert_allclose(y, rotary.apply_cos_sin(xt, cos, sin, layout="thd", cu_seqlens=cu, seq_offsets=3, **kw))


def test_fused_qk_in_place_gqa_and_float64():
    r = np.random.default_rng(5)
    cos, sin = (a.numpy() for a in _cos_sin(20, 16, seed=1))
    qkv = r.standard_normal((2, 7, 4 + 2 * 2, 16))
    q, k = qkv[:, :, :4], qkv[:, :, 4:6]
    q0, k0, v0 = q.copy(), k.copy(), qkv[:, :, 6:].copy()
    rq, rk = rotary.apply_qk_cos_sin(q, k, cos, sin, 3, pairing="interleaved", inplace=True)
    assert rq is q and rk is k
    rows = np.broadcast_to(3 + np.arange(7)[None, :, None], (2, 7, 4))
    np.testing.assert_allclose(q, _np_truth(q0, cos, sin, rows, "interleaved", False), atol=F64_ABS_TOL, rtol=0)
    np.testing.assert_allclose(k, _np_truth(k0, cos, sin, rows[:, :, :2], "interleaved", False), atol=F64_ABS_TOL, rtol=0)
    np.testing.assert_array_equal(qkv[:, :, 6:], v0)
    # Past the table: an error, never the identity (flash-attn leaves such rows unrotated).
    with pytest.raises(ValueError, match="out of range for cos/sin with 20 rows"):
        rotary.apply_qk_cos_sin(q, k, cos, sin, 14)
    with pytest.raises(TypeError, match="fractional"):
        rotary.apply_cos_sin(q0, cos, sin, np.zeros(7, dtype=np.float32))


def test_onnx_inverse_is_the_operator_with_negated_sin():
    """onnx_rotary_embedding(inverse=True) == the ONNX operator run by onnxruntime with -sin, and undoes forward."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    r = np.random.default_rng(6)
    x = r.standard_normal((2, 3, 5, 16)).astype(np.float32)  # [B, N, S, H]
    ang = np.arange(32)[:, None] * (1.0 / 10000 ** (np.arange(0, 16, 2) / 16))[None]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    pos = r.integers(0, 32, (2, 5)).astype(np.int64)
    for interleaved in (0, 1):
        node = helper.make_node("RotaryEmbedding", ["X", "cos_cache", "sin_cache", "position_ids"], ["Y"],
                                interleaved=interleaved)
        f = TensorProto.FLOAT
        graph = helper.make_graph([node], "rope", [helper.make_tensor_value_info("X", f, list(x.shape)),
                                                   helper.make_tensor_value_info("cos_cache", f, list(cos.shape)),
                                                   helper.make_tensor_value_info("sin_cache", f, list(cos.shape)),
                                                   helper.make_tensor_value_info("position_ids", TensorProto.INT64,
                                                                                 list(pos.shape))],
                                  [helper.make_tensor_value_info("Y", f, list(x.shape))])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        peer = sess.run(None, {"X": x, "cos_cache": cos, "sin_cache": -sin, "position_ids": pos})[0]
        ours = rotary.onnx_rotary_embedding(x, cos, sin, pos, interleaved=interleaved, inverse=True)
        np.testing.assert_allclose(ours, peer, atol=F32_ABS_TOL, rtol=0)
        fwd = rotary.onnx_rotary_embedding(x, cos, sin, pos, interleaved=interleaved)
        back = rotary.onnx_rotary_embedding(fwd, cos, sin, pos, interleaved=interleaved, inverse=True)
        np.testing.assert_allclose(back, x, atol=2 * F32_ABS_TOL, rtol=0)


def test_float_offsets_and_cu_seqlens_are_refused_not_truncated():
    # .long() made seqlen_offsets [1.5, 2.7] the rotation of [1, 2] and cu_seqlens [0., 2.5, 5.] that of [0, 2, 5];
    # flash-attn asserts integer dtypes, and rotary.apply refuses float offsets.
    x = torch.randn(2, 5, 2, 8)
    cos, sin = _cos_sin(16, 8)
    spec = rotary.Spec(8)
    for off in (torch.tensor([1.5, 2.7]), torch.tensor(1.5), 1.5, torch.tensor([True, False])):
        with pytest.raises(TypeError, match=r"^\[rotary_apply\] seqlen_offsets must be an int or an integer tensor"):
            rt.apply_rotary_emb(x, cos, sin, seqlen_offsets=off)
    xt = torch.randn(5, 2, 8)
    with pytest.raises(TypeError, match=r"^\[rotary_apply\] cu_seqlens must be an integer tensor"):
        rt.apply_rotary_emb(xt, cos, sin, cu_seqlens=torch.tensor([0.0, 2.5, 5.0]))
    with pytest.raises(TypeError, match=r"^\[rotary_apply\] positions\.seq_offsets must be an integer tensor"):
        rt.apply_cos_sin(xt, cos, sin, layout="thd", cu_seqlens=[0, 2, 5], seq_offsets=[0.9, 3.99])
    with pytest.raises(TypeError, match=r"^\[rotary_apply\] positions\.batch_offsets must be an integer tensor"):
        rt.apply(x, 0, spec, batch_offsets=[0.5, 1.5])


@pytest.mark.parametrize("interleaved", [False, True])
def test_float64_tables_are_used_as_given_and_gradcheck_holds_for_them(interleaved):
    # The CPU kernel read a float64 table in float32 (8e-8 off the float64 formula, gradcheck in the tables failed,
    # and the device composite differed); float64 calls are now float64 throughout.
    B, S, H, D = 2, 4, 2, 8
    g = torch.Generator().manual_seed(3)
    x = torch.randn(B, S, H, D, dtype=torch.float64, generator=g)
    ang = torch.rand(S + 3, D // 2, dtype=torch.float64, generator=g) * 6.0
    cos, sin = torch.cos(ang), torch.sin(ang)
    offs = torch.tensor([0, 3])
    cpt, spt = _fa_index_cos_sin(cos, sin, offs, S)
    want = _fa_apply_rotary_emb_torch(x, cpt, spt, interleaved)
    got = rt.apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=offs)
    torch.testing.assert_close(got, want, atol=1e-15, rtol=0)
    xi = x.clone()
    rt.apply_rotary_emb(xi, cos, sin, interleaved=interleaved, seqlen_offsets=offs, inplace=True)
    torch.testing.assert_close(xi, want, atol=1e-15, rtol=0)
    args = (x.clone().requires_grad_(), cos.clone().requires_grad_(), sin.clone().requires_grad_())
    assert torch.autograd.gradcheck(lambda a, c, s: rt.apply_rotary_emb(a, c, s, interleaved=interleaved,
                                                                        seqlen_offsets=offs), args)
    with pytest.raises(ValueError, match=r"^\[rotary_apply\]"):  # the kernel's named error still comes first
        rt.apply_rotary_emb(x, cos[:4], sin[:4], seqlen_offsets=offs)
    # in place, the kernel's in-place checks too (a broadcast view, q and k sharing memory), before any write
    with pytest.raises(ValueError, match=r"^\[rotary_apply\] x stride of dim 0 is 0"):
        rt.apply_cos_sin(x[:1].expand(2, -1, -1, -1), cos, sin, 0, inplace=True)
    buf = x.clone()
    with pytest.raises(ValueError, match=r"^\[rotary_apply\] the outputs for q and k overlap in memory"):
        torch.ops.rotary.apply_qk_cos_sin_(buf, buf, cos, sin, None, 0, "bshd", "half", False, 1)
    assert torch.equal(buf, x)


def test_in_place_calls_under_torch_func_grad_equal_the_out_of_place_gradient():
    # "In order to use an autograd.Function with functorch transforms ... setup_context" was raised for inplace=True.
    x = torch.randn(1, 4, 2, 8, dtype=torch.float64)
    spec = rotary.Spec(8)
    cos, sin = _cos_sin(8, 8, dtype=torch.float64)
    for f in (lambda a, ip: rt.apply(a * 2, 0, spec, inplace=ip),
              lambda a, ip: rt.apply_qk(a * 2, a * 3, 0, spec, inplace=ip)[1],
              lambda a, ip: rt.apply_rotary_emb(a * 2, cos, sin, inplace=ip)):
        w = torch.randn(1, 4, 2, 8, dtype=torch.float64)  # a weighted sum: |rotation|^2 would not see the angle
        want = torch.func.grad(lambda a: (f(a, False) * w).sum())(x)
        got = torch.func.grad(lambda a: (f(a, True) * w).sum())(x)
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
        assert want.abs().sum() > 0


def test_an_id_past_the_caller_table_is_named_by_its_index():
    # It said "position 10 is out of range for cos/sin", not where.
    x = np.ones((2, 3, 2, 8), np.float32)
    cos, sin = np.ones((10, 4), np.float32), np.zeros((10, 4), np.float32)
    with pytest.raises(ValueError, match=r"^\[rotary_apply\] positions\.ids\[1,2\] is 10, out of range for cos/sin "
                                         r"with 10 rows \(shape \[10,4\]\)"):
        rotary.apply_cos_sin(x, cos, sin, np.array([[0, 1, 2], [3, 9, 10]]))
    with pytest.raises(ValueError, match=r"^\[rotary_apply\] positions\.ids\[2\] is 12, out of range"):
        rotary.apply_cos_sin(x, cos, sin, np.array([0, 1, 12]))


def test_an_array_of_more_than_four_axes_is_refused_in_the_entry_points_words():
    # It said "[rotary] x must have rank <= 4" (the extension's conversion), where the entry points' own rank checks
    # say [rotary_apply].
    x = np.ones((2, 3, 2, 8), np.float32)
    cos, sin = np.ones((10, 4), np.float32), np.zeros((10, 4), np.float32)
    x5, spec = x[None], rotary.Spec(8)
    cases = [
        (lambda: rotary.apply(x5, 0, spec), "[rotary_apply] x must have rank <= 4, got rank 5 (shape [1,2,3,2,8])"),
        (lambda: rotary.apply_qk(x, x5, 0, spec), "[rotary_apply] k must have rank <= 4, got rank 5"),
        (lambda: rotary.apply_cos_sin(x5, cos, sin), "[rotary_apply] x must have rank <= 4, got rank 5"),
        (lambda: rotary.apply_cos_sin(x, cos[None, None, None, None], sin), "[rotary_apply] cos must have rank <= 4"),
        (lambda: rotary.apply_qk_cos_sin(x, x5, cos, sin), "[rotary_apply] k must have rank <= 4, got rank 5"),
    ]
    # Torch tensors requiring grad (routed to rotary.torch) said "[rotary] x ..." even for q, as did rotary.torch's
    # own entry points.
    t, t5 = torch.from_numpy(x), torch.from_numpy(x5)
    tc, ts = torch.from_numpy(cos), torch.from_numpy(sin)
    g5 = lambda: t5.clone().requires_grad_(True)  # noqa: E731
    cases += [
        (lambda: rotary.apply(g5(), 0, spec), "[rotary_apply] x must have rank <= 4, got rank 5 (shape [1,2,3,2,8])"),
        (lambda: rotary.apply_qk(g5(), t, 0, spec), "[rotary_apply] q must have rank <= 4, got rank 5"),
        (lambda: rotary.apply_qk(t.clone().requires_grad_(True), t5, 0, spec), "[rotary_apply] k must have rank <= 4"),
        (lambda: rotary.apply_cos_sin(g5(), tc, ts), "[rotary_apply] x must have rank <= 4, got rank 5"),
        (lambda: rotary.apply_cos_sin(t, tc[None, None, None, None].requires_grad_(True), ts),
         "[rotary_apply] cos must have rank <= 4, got rank 6"),
        (lambda: rotary.apply_qk_cos_sin(g5(), t, tc, ts), "[rotary_apply] q must have rank <= 4, got rank 5"),
        (lambda: rotary.apply_qk_cos_sin(g5(), t, tc, ts, inplace=True), "[rotary_apply] q must have rank <= 4"),
        (lambda: rotary.apply_qk_cos_sin(t, t5, tc.clone().requires_grad_(True), ts),
         "[rotary_apply] k must have rank <= 4, got rank 5"),
        (lambda: rt.apply(t5, 0, spec), "[rotary_apply] x must have rank <= 4, got rank 5"),
        (lambda: rt.apply_qk(t5, t, 0, spec), "[rotary_apply] q must have rank <= 4, got rank 5"),
        (lambda: rt.apply_cos_sin(t, tc, ts[None, None, None, None]), "[rotary_apply] sin must have rank <= 4"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value).startswith(message), str(info.value)


def test_positions_of_more_than_four_axes_are_refused_in_the_entry_points_words():
    # Rank-5 positions said "[rotary] positions must have rank <= 4" (the extension's conversion) on every path of
    # rotary.apply (numpy, torch, torch requiring grad, fp8 out, caller tables) and rotary.torch.apply.
    x = np.ones((1, 4, 2, 8), np.float32)
    cos, sin = np.ones((10, 4), np.float32), np.zeros((10, 4), np.float32)
    spec, p5 = rotary.Spec(8), np.zeros((1, 1, 1, 1, 4), np.int64)
    t, tp5 = torch.from_numpy(x), torch.from_numpy(p5)
    message = r"^\[rotary_apply\] positions must have rank <= 4, got rank 5 \(shape \[1,1,1,1,4\]\)$"
    calls = [lambda: rotary.apply(x, p5, spec), lambda: rotary.apply(t, tp5, spec),
             lambda: rotary.apply(t.clone().requires_grad_(True), tp5, spec), lambda: rt.apply(t, tp5, spec),
             lambda: rt.apply_qk(t, t, tp5, spec), lambda: rotary.apply_qk(x, x, p5, spec),
             lambda: rotary.apply_cos_sin(x, cos, sin, p5), lambda: rt.apply_cos_sin(t, torch.from_numpy(cos),
                                                                                     torch.from_numpy(sin), tp5)]
    ml_dtypes = pytest.importorskip("ml_dtypes")
    calls.append(lambda: rotary.apply(x, p5, spec, out=np.zeros(x.shape, ml_dtypes.float8_e4m3fn), out_scale=1.0))
    for call in calls:
        with pytest.raises(ValueError, match=message):
            call()
    c, _ = rt.cos_sin(tp5, spec)  # cos_sin takes positions of any shape (it reads them flat)
    assert c.shape == (1, 1, 1, 1, 4, 4)
