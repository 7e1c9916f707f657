"""rotary's PyTorch entries at the edges of differentiation: refused writes, positions, dual outputs, transforms."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import numpy as np  # noqa: E402

import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402

fwAD = torch.autograd.forward_ad
SPEC = rotary.Spec(head_dim=16)


def _tables(n=8):
    return tuple(torch.from_numpy(t) for t in rotary.cos_sin(SPEC, n))


@pytest.mark.parametrize("case", ["k leaf requires grad", "k inference tensor, cos requires grad",
                                  "q leaf requires grad"])
def test_apply_qk_cos_sin_in_place_refused_write_leaves_both_unchanged(case):
    # The gradient path rotated q in place, then k's write was refused: q was left rotated (|q - q0| ~ 3).
    c, s = _tables()
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 4, 2, 16, generator=g), torch.randn(1, 4, 1, 16, generator=g)
    if case == "k leaf requires grad":
        k.requires_grad_()
    elif case == "q leaf requires grad":
        q.requires_grad_()
    else:
        with torch.inference_mode():
            k = torch.randn(1, 4, 1, 16)
        c = c.clone().requires_grad_()
    q0, k0 = q.detach().clone(), k.detach().clone()
    with pytest.raises(RuntimeError, match="leaf Variable|inference tensor"):
        rotary.apply_qk_cos_sin(q, k, c, s, 0, inplace=True)
    assert torch.equal(q.detach(), q0) and torch.equal(k.detach(), k0)


def test_apply_qk_cos_sin_in_place_records_both_rotations():
    c, s = _tables()
    c = c.clone().requires_grad_()
    qa, ka = torch.randn(1, 4, 2, 16, requires_grad=True), torch.randn(1, 4, 1, 16, requires_grad=True)
    q, k = qa * 1, ka * 1
    rq, rk = rotary.apply_qk_cos_sin(q, k, c, s, 0, inplace=True)
    assert rq is q and rk is k
    ref_q, ref_k = rt.apply_cos_sin(qa, c, s, 0), rt.apply_cos_sin(ka, c, s, 0)
    assert torch.allclose(q, ref_q) and torch.allclose(k, ref_k)
    w = torch.randn_like(q), torch.randn_like(k)
    got = torch.autograd.grad((q * w[0]).sum() + (k * w[1]).sum(), (qa, ka, c))
    want = torch.autograd.grad((ref_q * w[0]).sum() + (ref_k * w[1]).sum(), (qa, ka, c))
    for a, b in zip(got, want):
        assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("entry", ["rotary.apply_qk_cos_sin", "ops.apply_qk_cos_sin_"])
def test_q_and_k_views_of_one_plain_buffer_are_both_rotated_in_place_with_learnable_tables(entry):
    # q's write made the shared base require grad, and k's view, not refreshed, was then refused as a write into a
    # leaf: the call raised with q rotated and k not. Truth: the fp64 formula on a copy, and its gradients.
    from torch_reference import rotate_by_tables

    g = torch.Generator().manual_seed(0)
    cos = torch.randn(6, 4, dtype=torch.float64, generator=g).requires_grad_()
    sin = torch.randn(6, 4, dtype=torch.float64, generator=g).requires_grad_()
    ids = torch.tensor([[0, 5, 2]])
    qkv = torch.randn(1, 3, 4, 8, dtype=torch.float64, generator=g)  # a plain fused buffer (no grad)
    x0 = qkv.clone()
    q, k = qkv[:, :, :2], qkv[:, :, 2:3]
    if entry == "rotary.apply_qk_cos_sin":
        rotary.apply_qk_cos_sin(q, k, cos, sin, ids, inplace=True)
    else:
        torch.ops.rotary.apply_qk_cos_sin_(q, k, cos, sin, ids, 0, "bshd", "half", False, 0)
    c, s = cos[ids][:, :, None, :], sin[ids][:, :, None, :]
    want = torch.cat([rotate_by_tables(x0[:, :, :2], c, s, "half"), rotate_by_tables(x0[:, :, 2:3], c, s, "half"),
                      x0[:, :, 3:]], dim=2)
    torch.testing.assert_close(qkv, want, rtol=0, atol=1e-12)
    w = torch.randn(qkv.shape, dtype=torch.float64, generator=g)
    got = torch.autograd.grad((qkv * w).sum(), (cos, sin))
    expected = torch.autograd.grad((want * w).sum(), (cos, sin))
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def _entries(x, freqs):
    key = rt.spec_key(SPEC)
    c, s = _tables(16)
    return {"rotary.apply": lambda p: rotary.apply(x, p, SPEC),
            "rotary.apply_qk": lambda p: rotary.apply_qk(x, x[:, :, :1], p, SPEC)[0],
            "rt.apply": lambda p: rt.apply(x, p, SPEC),
            "rt.apply_qk": lambda p: rt.apply_qk(x, x[:, :, :1], p, SPEC)[0],
            "ops.apply": lambda p: torch.ops.rotary.apply(x, p, 0, key, "bshd", "", False, None, 0),
            "rotary.apply_axes": lambda p: rotary.apply_axes(x, p, freqs),
            "rt.cos_sin": lambda p: rt.cos_sin(p, SPEC)[0],
            "ops.cos_sin": lambda p: torch.ops.rotary.cos_sin(p, key, None)[0],
            "rotary.cos_sin": lambda p: torch.as_tensor(rotary.cos_sin(SPEC, p)[0])}


@pytest.mark.parametrize("mode", ["requires_grad", "forward_ad", "func.grad", "func.jvp", "numpy x"])
def test_a_derivative_with_respect_to_float_positions_is_refused_everywhere(mode):
    # rotary.apply / apply_axes with plain x and positions requiring grad gave outputs not requiring grad; a tangent
    # on positions was dropped (None) by rotary.apply, rt.apply, ops.apply, apply_axes; func.jvp through rt.apply gave
    # 0 (the true |dy/dp| is ~1.7); rt.cos_sin / ops.cos_sin gave a grad_fn and a None (func.grad: zero) gradient.
    x = torch.randn(1, 4, 2, 16, generator=torch.Generator().manual_seed(1))
    p = torch.tensor([0.25, 1.5, 2.75, 3.0], dtype=torch.float64)
    entries = _entries(x, rotary.mrope_frequencies(SPEC))
    if mode == "numpy x":
        xn = x.numpy()
        entries = {"rotary.apply": lambda q: rotary.apply(xn, q, SPEC),
                   "rotary.apply_axes": lambda q: rotary.apply_axes(xn, q, rotary.mrope_frequencies(SPEC)),
                   "rotary.cos_sin": entries["rotary.cos_sin"]}
    for name, f in entries.items():
        with pytest.raises(RuntimeError, match=r"^\[rotary_(apply|apply_axes|cos_sin)\] positions (requires grad|"
                                               r"carries a forward-mode tangent), but rotary gives no derivative"):
            if mode in ("requires_grad", "numpy x"):
                f(p.clone().requires_grad_())
            elif mode == "forward_ad":
                with fwAD.dual_level():
                    f(fwAD.make_dual(p, torch.ones_like(p)))
            elif mode == "func.grad":
                torch.func.grad(lambda q: f(q).sum())(p)
            else:
                torch.func.jvp(f, (p,), (torch.ones_like(p),))
        assert name  # every entry refused


def test_vmap_over_positions_works_through_the_array_functions():
    # rotary.apply / apply_qk / apply_cos_sin with a plain x under vmap over positions reached the extension with
    # the transform's tensor: nanobind's "incompatible function arguments" dump.
    x = torch.randn(1, 4, 2, 16, generator=torch.Generator().manual_seed(2))
    P = torch.stack([torch.arange(4), torch.arange(4) + 2])
    c, s = _tables(16)
    for f in (lambda q: rotary.apply(x, q, SPEC), lambda q: rotary.apply_qk(x, x, q, SPEC)[1],
              lambda q: rotary.apply_cos_sin(x, c, s, q), lambda q: rotary.apply_qk_cos_sin(x, x, c, s, q)[0]):
        y = torch.func.vmap(f)(P)
        for i in range(2):
            torch.testing.assert_close(y[i], rt.apply(x, P[i], SPEC))
    with pytest.raises(TypeError, match=r"^\[rotary_apply\] positions must be a plain tensor"):
        torch.func.vmap(lambda q: rotary.apply(x.numpy(), q, SPEC))(P)


def test_rotary_cos_sin_refuses_a_transformed_positions_tensor_in_its_own_words():
    # rotary.cos_sin (numpy rows) under vmap over its positions said "... when the rotated arrays are not torch
    # tensors": cos_sin rotates nothing; the message names what it takes and where transforms work.
    P = torch.stack([torch.arange(4), torch.arange(4) + 2])
    with pytest.raises(TypeError, match=r"^\[rotary_cos_sin\] positions must be a plain tensor \(rotary.cos_sin "
                                        r"returns numpy rows.*got a torch.func transform's tensor \(use "
                                        r"rotary.torch.cos_sin"):
        torch.func.vmap(lambda q: torch.as_tensor(rotary.cos_sin(SPEC, q)[0]))(P)
    c, _ = torch.func.vmap(lambda q: rt.cos_sin(q, SPEC))(P)  # the torch function transforms them
    torch.testing.assert_close(c[1], torch.from_numpy(rotary.cos_sin(SPEC, P[1].numpy())[0]))


def _prologue_calls():
    sp = rotary.Spec(head_dim=16)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(4, h, 16, generator=g) for h in (2, 1, 1))
    kc, vc = torch.randn(2, 4, 1, 16, generator=g), torch.randn(2, 4, 1, 16, generator=g)
    slots = torch.arange(4)
    calls = {"prologue q": lambda t: rotary.prologue(t, k, v, 0, sp, k_cache=kc, v_cache=vc, slot_mapping=slots),
             "prologue k_cache": lambda t: rotary.prologue(q, k, v, 0, sp, k_cache=t, v_cache=vc, slot_mapping=slots),
             "rerotate_cache": lambda t: rotary.rerotate_cache(t, torch.arange(3), torch.arange(3), torch.arange(3) + 2,
                                                               sp)}
    inputs = {"prologue q": q, "prologue k_cache": kc, "rerotate_cache": kc}
    return calls, inputs, (q, k, v, kc, vc)


@pytest.mark.parametrize("mode", ["forward_ad", "func.jvp", "func.vmap"])
def test_prologue_and_rerotate_refuse_transformed_tensors_before_writing(mode):
    # A dual q (or cache) had its primal rotated in place and kept its tangent unrotated; vmap gave nanobind's dump.
    calls, inputs, tensors = _prologue_calls()
    before = [t.clone() for t in tensors]
    for name, call in calls.items():
        x = inputs[name]
        with pytest.raises(RuntimeError, match=r"^\[rotary_(prologue|rerotate_cache)\] (q|k_cache) (carries a "
                                               r"forward-mode tangent|must not be a torch.func transform's tensor)"):
            if mode == "forward_ad":
                with fwAD.dual_level():
                    call(fwAD.make_dual(x, torch.ones_like(x)))
            elif mode == "func.jvp":
                torch.func.jvp(call, (x,), (torch.ones_like(x),))
            else:
                torch.func.vmap(call)(x[None])
        for t, t0 in zip(tensors, before):
            assert torch.equal(t, t0), name


def _onnx_case():
    g = torch.Generator().manual_seed(4)
    X = torch.randn(2, 2, 4, 16, dtype=torch.float64, generator=g)
    c, s = (torch.from_numpy(t).double() for t in rotary.cos_sin(SPEC, 8))
    ids = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]])
    return X, c, s, ids


def test_onnx_rotary_embedding_carries_x_tangents_refuses_cache_tangents_and_runs_under_torch_func():
    # A tangent on cos_cache/sin_cache was dropped (output tangent None); func.grad / vmap / jvp / jacrev raised
    # torch's "must override the setup_context staticmethod"; an X carrying a tangent raised.
    from reference import onnx_rotary_embedding as onnx_ref64

    X, c, s, ids = _onnx_case()

    def f(x):
        return rotary.onnx_rotary_embedding(x, c, s, ids)

    def ref(x):
        return torch.from_numpy(onnx_ref64(x.numpy(), c.numpy(), s.numpy(), ids.numpy()))

    t = torch.randn_like(X)
    with fwAD.dual_level():
        for name, cache in (("cos_cache", c), ("sin_cache", s)):
            dual = fwAD.make_dual(cache.clone(), torch.ones_like(cache))
            with pytest.raises(ValueError, match=rf"^\[onnx_rotary_embedding\] {name} must not carry a forward-mode "
                                                 r"tangent"):
                rotary.onnx_rotary_embedding(X, dual if name == "cos_cache" else c, dual if name == "sin_cache" else s,
                                             ids)
        y = f(fwAD.make_dual(X, t))
        torch.testing.assert_close(fwAD.unpack_dual(y).tangent, ref(t), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match=r"^\[onnx_rotary_embedding\] cos_cache must not carry a forward-mode"):
        torch.func.jvp(lambda cc: rotary.onnx_rotary_embedding(X, cc, s, ids), (c,), (torch.ones_like(c),))
    w = torch.randn_like(X)
    gx = torch.func.grad(lambda x: (f(x) * w).sum())(X)
    torch.testing.assert_close(gx, torch.from_numpy(onnx_ref64(w.numpy(), c.numpy(), -s.numpy(), ids.numpy())),
                               rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.func.jvp(f, (X,), (t,))[1], ref(t), rtol=0, atol=1e-12)
    xs = torch.stack([X, 2 * X])
    torch.testing.assert_close(torch.func.vmap(f)(xs), torch.stack([ref(X), ref(2 * X)]), rtol=0, atol=1e-12)
    idb = torch.stack([ids, ids.flip(1)])
    got = torch.func.vmap(lambda i: rotary.onnx_rotary_embedding(X, c, s, i))(idb)
    torch.testing.assert_close(got[1], rotary.onnx_rotary_embedding(X, c, s, idb[1]), rtol=0, atol=0)
    xj = X[:1, :1, :2]
    jac = torch.func.jacrev(lambda x: rotary.onnx_rotary_embedding(x, c, s, ids[:1, :2]))(xj)
    torch.testing.assert_close(jac, torch.autograd.functional.jacobian(
        lambda x: rotary.onnx_rotary_embedding(x, c, s, ids[:1, :2]), xj), rtol=0, atol=1e-12)
    torch.autograd.gradcheck(lambda x: rotary.onnx_rotary_embedding(x, c, s, ids[:1, :2]),
                             (xj.clone().requires_grad_(),), check_forward_ad=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_onnx_rotary_embedding_of_an_empty_torch_x_is_empty(dtype):
    # An empty torch X raised "[onnx_rotary_embedding] input X is missing" (its data address is null); numpy gave
    # an empty result.
    c, s = (torch.from_numpy(t).to(dtype) for t in rotary.cos_sin(SPEC, 8))
    for shape, ids in (((0, 2, 4, 16), torch.zeros(0, 4, dtype=torch.long)),
                       ((1, 2, 0, 16), torch.zeros(1, 0, dtype=torch.long))):
        y = rotary.onnx_rotary_embedding(torch.zeros(shape, dtype=dtype), c, s, ids)
        assert isinstance(y, torch.Tensor) and y.shape == shape and y.dtype == dtype
        yn = rotary.onnx_rotary_embedding(np.zeros(shape, np.float32), c.float().numpy(), s.float().numpy(),
                                          ids.numpy())
        assert yn.shape == shape
    with pytest.raises(ValueError, match=r"^\[onnx_rotary_embedding\] position_ids shape \[2,4\]"):
        rotary.onnx_rotary_embedding(torch.zeros(0, 2, 4, 16, dtype=dtype), c, s, torch.zeros(2, 4, dtype=torch.long))


def test_out_arguments_carrying_a_tangent_or_under_a_transform_are_refused_before_writing():
    # rotary.apply(x, out=dual) wrote the primal and kept the stale tangent; torch's own out= functions refuse.
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, 4, 2, 16, generator=g)
    c, s = _tables()
    freqs = rotary.mrope_frequencies(SPEC)
    calls = {"out": lambda o: rotary.apply(x, 0, SPEC, out=o),
             "out ": lambda o: rotary.apply_cos_sin(x, c, s, 0, out=o),
             "q_out": lambda o: rotary.apply_qk(x, x, 0, SPEC, q_out=o, k_out=torch.empty_like(x)),
             "k_out": lambda o: rotary.apply_qk_cos_sin(x, x, c, s, 0, q_out=torch.empty_like(x), k_out=o),
             "out  ": lambda o: rotary.apply_axes(x, torch.arange(4)[None], freqs, out=o)}
    for name, call in calls.items():
        buf = torch.zeros_like(x)
        with fwAD.dual_level():
            with pytest.raises(RuntimeError, match=rf"^\[rotary_apply(_axes)?\] {name.strip()} must not carry a "
                                                   r"forward-mode tangent"):
                call(fwAD.make_dual(buf, torch.ones_like(buf)))
        assert not buf.any(), name
        with pytest.raises(RuntimeError, match=rf"^\[rotary_apply(_axes)?\] {name.strip()} must not be a torch.func"):
            torch.func.vmap(call)(buf[None])
        assert not buf.any(), name


def test_apply_axes_out_with_a_transformed_or_dual_input_names_what_is_refused():
    # apply_axes(vmapped x, out=...) said "out must be None for tensors that require grad": nothing required grad.
    x = torch.randn(2, 1, 4, 2, 16, generator=torch.Generator().manual_seed(7))
    freqs = rotary.mrope_frequencies(SPEC)
    pos = torch.arange(4)[None]
    out = torch.zeros_like(x[0])
    with pytest.raises(ValueError, match=r"^\[rotary_apply_axes\] out must be None when x is a torch.func "
                                         r"transform's tensor .*got an out \(Tensor\)$"):
        torch.func.vmap(lambda t: rotary.apply_axes(t, pos, freqs, out=out))(x)
    with pytest.raises(ValueError, match=r"^\[rotary_apply_axes\] out must be None when positions is a torch.func "
                                         r"transform's tensor"):
        torch.func.vmap(lambda p: rotary.apply_axes(x[0], p, freqs, out=out))(torch.stack([pos, pos + 1]))
    with fwAD.dual_level():
        with pytest.raises(ValueError, match=r"^\[rotary_apply_axes\] out must be None when k carries a "
                                             r"forward-mode tangent"):
            rotary.apply_axes(x[0], pos, freqs, k=fwAD.make_dual(x[0], torch.ones_like(x[0])), out=out)
    assert not out.any()


def test_apply_axes_and_permute_qk_weight_run_under_vmap_jacrev_and_jacfwd():
    # "You tried to vmap over _AxesRotation / _Permutation, but it does not have vmap support" (func.grad worked).
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 1, 3, 2, 8, dtype=torch.float64, generator=g)
    spec = rotary.Spec(head_dim=8)
    freqs = rotary.mrope_frequencies(spec)
    pos = torch.arange(3)[None]
    y = torch.func.vmap(lambda t: rotary.apply_axes(t, pos, freqs))(x)
    for i in range(2):
        torch.testing.assert_close(y[i], rotary.apply_axes(x[i], pos, freqs), rtol=0, atol=0)
    yq, yk = torch.func.vmap(lambda t: rotary.apply_axes(t, pos, freqs, k=t[:, :, :1]))(x)
    torch.testing.assert_close(yk[1], rotary.apply_axes(x[1, :, :, :1], pos, freqs), rtol=0, atol=0)
    ps = torch.stack([pos, pos + 3])
    yp = torch.func.vmap(lambda p: rotary.apply_axes(x[0], p, freqs))(ps)
    torch.testing.assert_close(yp[1], rotary.apply_axes(x[0], ps[1], freqs), rtol=0, atol=0)
    xs = x[0, :, :2, :1]

    def f(t):
        return rotary.apply_axes(t, pos[:, :2], freqs)

    want = torch.autograd.functional.jacobian(f, xs)
    for jac in (torch.func.jacrev, torch.func.jacfwd):
        torch.testing.assert_close(jac(f)(xs), want, rtol=0, atol=1e-12)
    w = torch.randn(2 * 8, 3, dtype=torch.float64, generator=g)
    ws = torch.stack([w, 2 * w])
    got = torch.func.vmap(lambda t: rotary.permute_qk_weight(t, 2, 8))(ws)
    torch.testing.assert_close(got[1], rotary.permute_qk_weight(ws[1], 2, 8), rtol=0, atol=0)

    def p(t):
        return rotary.permute_qk_weight(t, 2, 8)

    want = torch.autograd.functional.jacobian(p, w)
    for jac in (torch.func.jacrev, torch.func.jacfwd):
        torch.testing.assert_close(jac(p)(w), want, rtol=0, atol=0)


def test_mixed_array_types_on_the_gradient_path_are_named_as_without_gradient():
    # apply_qk_cos_sin(torch q requiring grad, numpy k) said "[rotary] x must be a torch.Tensor, got ndarray" (there is
    # no argument x); apply_cos_sin(torch x requiring grad, numpy cos/sin) raised torch's schema error.
    c, s = rotary.cos_sin(SPEC, 8)
    q = torch.randn(1, 4, 2, 16, requires_grad=True)
    kn = np.zeros((1, 4, 1, 16), np.float32)
    for call in (lambda: rotary.apply_qk_cos_sin(q, kn, torch.from_numpy(c), torch.from_numpy(s), 0),
                 lambda: rotary.apply_qk(q, kn, 0, SPEC)):
        with pytest.raises(TypeError, match=r"^\[rotary_apply\] q and k must be the same array type, got Tensor and ndarray"):
            call()
    y = rotary.apply_cos_sin(q, c, s, 0)
    assert y.requires_grad
    torch.testing.assert_close(y, rt.apply_cos_sin(q, torch.from_numpy(c), torch.from_numpy(s), 0), rtol=0, atol=0)
