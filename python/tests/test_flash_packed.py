"""flash-attn's packed in-place rotations rotary.torch.apply_rotary_emb_qkv_ and apply_rotary_emb_kv_ (qkv [B, S, 3, H, D],
GQA [B, S, Hq + 2*Hk, D], kv [B, S, 2, H, D]): values and gradients vs flash-attn's reference formula in float64, torch.func,
torch.compile (static and dynamic shapes), vmap, and their refusals."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import rotary.torch as rt  # noqa: E402
from flash_reference import F32_ABS_TOL  # noqa: E402
from flash_reference import cos_sin_tables as _cos_sin  # noqa: E402
from flash_reference import fa_apply_rotary_emb_torch as _fa_apply_rotary_emb_torch  # noqa: E402
from flash_reference import fa_index_cos_sin as _fa_index_cos_sin  # noqa: E402
from flash_reference import seqlen_offsets as _offsets  # noqa: E402


@pytest.mark.parametrize("offsets_kind", ["zero", "int", "tensor"])
@pytest.mark.parametrize("own_k_tables", [False, True])
@pytest.mark.parametrize("layout", ["qkv", "qkv_gqa", "kv"])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("grad", [False, True])
def test_flash_attn_packed_qkv_and_kv_rotate_q_and_k_in_place(grad, interleaved, layout, own_k_tables, offsets_kind):
    """flash-attn's apply_rotary_emb_qkv_ / apply_rotary_emb_kv_: q and k of the packed tensor rotated in place
    (k by cos_k/sin_k when given), v's bits untouched; with a gradient, the returned tensor carries it (q and k's
    parts rotated back, v's passed through) and equals the written tensor; without, the packed tensor itself."""
    B, S, H, D, R = 3, 13, 4, 32, 16
    torch.manual_seed(2)
    shape = {"qkv": (B, S, 3, H, D), "qkv_gqa": (B, S, H + 2 * 2, D), "kv": (B, S, 2, H, D)}[layout]
    base = torch.randn(shape)
    cos, sin = _cos_sin(2 * S, R, seed=3)
    cos_k, sin_k = _cos_sin(2 * S, R, seed=4) if own_k_tables and layout != "kv" else (cos, sin)
    offs = _offsets(offsets_kind, B, S)
    packed = base.clone().requires_grad_(grad)
    if layout == "kv":
        out = rt.apply_rotary_emb_kv_(packed, cos, sin, interleaved=interleaved, seqlen_offsets=offs)
    else:
        out = rt.apply_rotary_emb_qkv_(packed, cos, sin, cos_k if own_k_tables else None,
                                       sin_k if own_k_tables else None, interleaved=interleaved, seqlen_offsets=offs,
                                       num_heads_q=H if layout == "qkv_gqa" else None)
    assert (out is packed) == (not grad) and torch.equal(packed.detach(), out.detach())
    ref = base.double().requires_grad_()
    parts = {"qkv": lambda t: (t[:, :, 0], t[:, :, 1], t[:, :, 2:]), "qkv_gqa": lambda t: (t[:, :, :H], t[:, :, H:H + 2],
             t[:, :, H + 2:]), "kv": lambda t: (None, t[:, :, 0], t[:, :, 1:])}[layout]
    q, k, v = parts(ref)
    tables = [_fa_index_cos_sin(c.double(), s_.double(), offs, S) for c, s_ in ((cos, sin), (cos_k, sin_k))]
    k = _fa_apply_rotary_emb_torch(k, *tables[1], interleaved)
    want = [k, v] if q is None else [_fa_apply_rotary_emb_torch(q, *tables[0], interleaved), k, v]
    want = torch.cat([w if w.dim() == len(shape) else w.unsqueeze(2) for w in want], dim=2)
    torch.testing.assert_close(out.detach().double(), want.detach(), atol=F32_ABS_TOL, rtol=0)
    assert torch.equal(parts(out.detach())[2], parts(base)[2])  # v's bits
    if grad:
        g = torch.randn_like(out)
        out.backward(g)
        want.backward(g.double())
        torch.testing.assert_close(packed.grad.double(), ref.grad, atol=F32_ABS_TOL, rtol=0)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_flash_attn_packed_forms_rotate_without_grad_mode_a_tensor_that_requires_grad(mode):
    """Under no_grad / inference_mode a qkv that requires grad is rotated in place like any other (k's view, made
    before q was written, refused an is_leaf read; found by a review)."""
    B, S, H, D = 2, 5, 2, 8
    cos, sin = _cos_sin(2 * S, D)
    base = torch.randn(B, S, H + 2 * 1, D)
    want = rt.apply_rotary_emb_qkv_(base.clone(), cos, sin, num_heads_q=H)
    ctx = torch.no_grad() if mode == "no_grad" else torch.inference_mode()
    for make in (lambda: base.clone().requires_grad_(), lambda: base.clone().requires_grad_() * 1):
        x = make()
        with ctx:
            out = rt.apply_rotary_emb_qkv_(x, cos, sin, cos, sin, num_heads_q=H)
        assert out is x and torch.equal(x.detach(), want)
        kv = make()[:, :, :2].reshape(B, S, 2, 1, D).clone().detach().requires_grad_()
        with ctx:
            rt.apply_rotary_emb_kv_(kv, cos, sin)


@pytest.mark.parametrize("form", ["qkv", "kv"])
def test_flash_attn_packed_forms_differentiate_under_torch_func(form):
    """torch.func.grad / jacrev of the packed forms equal eager autograd (the Function saves its input under
    torch.func, and the write into the packed tensor changed that input; found by a review)."""
    from torch.func import grad, jacrev

    B, S, H, D = 2, 5, 2, 8
    cos, sin = _cos_sin(2 * S, D)
    shape = (B, S, 3, H, D) if form == "qkv" else (B, S, 2, H, D)
    x, g = torch.randn(shape), torch.randn(shape)
    fn = rt.apply_rotary_emb_qkv_ if form == "qkv" else rt.apply_rotary_emb_kv_
    loss = lambda t: (fn(t * 1, cos, sin, seqlen_offsets=torch.tensor([0, 3])) * g).sum()  # noqa: E731
    xe = x.clone().requires_grad_()
    loss(xe).backward()
    torch.testing.assert_close(grad(loss)(x), xe.grad, rtol=0, atol=0)
    assert jacrev(lambda t: fn(t * 1, cos, sin)[0, 0].sum())(x).shape == shape


def test_flash_attn_packed_qkv_compiles_with_its_gradient():
    """flash-attn's test compiles apply_rotary_emb_qkv_ on a leaf that requires grad: torch's internal-overlap test
    broke the graph there, into graphs AOT autograd refused (aliased leaf and non-leaf inputs)."""
    torch.manual_seed(0)
    base, g = torch.randn(2, 6, 3, 2, 16), torch.randn(2, 6, 3, 2, 16)
    cos, sin = _cos_sin(12, 16)
    outs = []
    for fn in (rt.apply_rotary_emb_qkv_, torch.compile(rt.apply_rotary_emb_qkv_, backend="aot_eager")):
        qkv = base.clone().requires_grad_()
        out = fn(qkv, cos, sin, seqlen_offsets=2)
        out.backward(g)
        outs.append((out.detach(), qkv.detach(), qkv.grad))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["qkv", "qkv_gqa", "kv"])
def test_flash_attn_packed_forms_compiled_with_dynamic_shapes_write_the_rows_eager_writes(layout):
    """Inductor rebuilt k's view of the packed input at storage offset 0 when the offset was symbolic
    (dynamic=True; pytorch/pytorch#198068): k's rotated rows landed on q's, silently (errors of order 5)."""
    torch.manual_seed(0)
    cos, sin = _cos_sin(16, 16)
    H = 2
    shape = {"qkv": (2, 5, 3, H, 16), "qkv_gqa": (2, 5, H + 2 * 1, 16), "kv": (2, 5, 2, H, 16)}[layout]
    if layout == "kv":
        fn = lambda t, c, s: rt.apply_rotary_emb_kv_(t, c, s, seqlen_offsets=1)  # noqa: E731
    else:
        fn = lambda t, c, s: rt.apply_rotary_emb_qkv_(t, c, s, seqlen_offsets=1,  # noqa: E731
                                                       num_heads_q=H if layout == "qkv_gqa" else None)
    base = torch.randn(shape)
    want = base.clone()
    fn(want, cos, sin)
    torch._dynamo.reset()
    got = base.clone()
    out = torch.compile(fn, fullgraph=True, dynamic=True)(got, cos, sin)
    torch.testing.assert_close(got, want, rtol=0, atol=F32_ABS_TOL)
    torch.testing.assert_close(out, want, rtol=0, atol=F32_ABS_TOL)


def test_flash_attn_packed_forms_run_under_vmap():
    """torch.func.vmap has no batching rule for torch's internal-overlap test, which the packed forms ran first."""
    from torch.func import vmap
    torch.manual_seed(0)
    cos, sin = _cos_sin(8, 8)
    for fn, shape in ((rt.apply_rotary_emb_qkv_, (3, 2, 5, 3, 2, 8)), (rt.apply_rotary_emb_kv_, (3, 2, 5, 2, 2, 8))):
        x = torch.randn(shape)
        want = torch.stack([fn(x[i].clone(), cos, sin) for i in range(shape[0])])
        torch.testing.assert_close(vmap(lambda t: fn(t.clone(), cos, sin))(x), want, rtol=0, atol=0)


def test_flash_attn_packed_forms_refuse_shared_elements_and_write_nothing_on_a_k_table_error():
    cos, sin = _cos_sin(8, 8)
    shared = torch.randn(1, 5, 1, 2, 8)
    for fn, x in ((rt.apply_rotary_emb_qkv_, shared.expand(1, 5, 3, 2, 8)), (rt.apply_rotary_emb_kv_, shared.expand(1, 5, 2, 2, 8))):
        with pytest.raises(ValueError, match=r"^\[rotary_apply\] (qkv|kv) must not have internally overlapping elements"):
            fn(x, cos, sin)
    assert torch.equal(shared, shared.clone())
    qkv = torch.randn(1, 5, 3, 2, 8)
    before = qkv.clone()
    with pytest.raises(ValueError, match=r"^\[rotary_apply\] position 4 is out of range for cos/sin with 3 rows"):
        rt.apply_rotary_emb_qkv_(qkv, cos, sin, cos[:3], sin[:3])  # k's own tables are too short: q is not written
    assert torch.equal(qkv, before)
    with pytest.raises(TypeError, match=r"^\[rotary_apply\] num_heads_q must be an int, got float"):
        rt.apply_rotary_emb_qkv_(torch.zeros(1, 4, 6, 8), cos, sin, num_heads_q=2.5)


def test_flash_attn_packed_forms_refuse_shapes_they_cannot_split():
    cos, sin = _cos_sin(8, 8)
    for x, kw, msg in ((torch.zeros(1, 4, 2, 2, 8), {}, r"qkv of rank 5 must have shape \[B, S, 3, H, D\], got \[1, 4, 2, 2, 8\]"),
                       (torch.zeros(1, 4, 6, 8), {}, r"num_heads_q must be given for a qkv of shape"),
                       (torch.zeros(1, 4, 7, 8), {"num_heads_q": 4}, r"qkv's 7 heads must be num_heads_q = 4 plus twice"),
                       (torch.zeros(1, 4, 8), {}, r"qkv must have rank 5 .* or rank 4")):
        with pytest.raises(ValueError, match=r"^\[rotary_apply\] " + msg):
            rt.apply_rotary_emb_qkv_(x, cos, sin, **kw)
    with pytest.raises(ValueError, match=r"^\[rotary_apply\] kv must have shape \[B, S, 2, H, D\], got \[1, 4, 3, 2, 8\]"):
        rt.apply_rotary_emb_kv_(torch.zeros(1, 4, 3, 2, 8), cos, sin)
