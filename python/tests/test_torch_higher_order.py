"""rotary's torch operators under higher-order AD: forward-over-reverse with caller tables, torch.func compositions."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from torch_reference import rotate_by_tables  # noqa: E402

ops = torch.ops.rotary
fwd = torch.autograd.forward_ad


def _table_calls(pos, pairing):
    """name -> (f(x, k, cos, sin) -> outputs, n outputs): every caller-table form, out of place and in place."""
    def inplace_x(u, k, c, s):
        v = u.clone()
        ops.apply_cos_sin_(v, c, s, pos, 0, "bshd", pairing)
        return (v,)

    def inplace_qk(u, k, c, s):
        v, w = u.clone(), k.clone()
        ops.apply_qk_cos_sin_(v, w, c, s, pos, 0, "bshd", pairing)
        return v, w

    return {"ops.apply_cos_sin": lambda u, k, c, s: (ops.apply_cos_sin(u, c, s, pos, 0, "bshd", pairing),),
            "ops.apply_qk_cos_sin": lambda u, k, c, s: ops.apply_qk_cos_sin(u, k, c, s, pos, 0, "bshd", pairing),
            "ops.apply_cos_sin_": inplace_x, "ops.apply_qk_cos_sin_": inplace_qk,
            "rt.apply_cos_sin": lambda u, k, c, s: (rt.apply_cos_sin(u, c, s, pos, pairing=pairing),),
            "rt.apply_cos_sin inplace": lambda u, k, c, s: (rt.apply_cos_sin(u.clone(), c, s, pos, pairing=pairing,
                                                                             inplace=True),)}


@pytest.mark.parametrize("width", [8, 10])  # every channel rotated; 2 passing through
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_forward_over_reverse_tables_keep_the_operators_values_and_dtype(dtype, pairing, width):
    # A caller-table call with tangents that also records a gradient (autograd.grad(create_graph=True) in a dual level)
    # rotated by a plain-torch formula: its primal differed from the operator's own output by 1-2 ulp in f32, and a
    # bf16/f16 x got an f32 tangent (rotate()'s copy_ into empty_like(x) kept the source's tangent dtype).
    g = torch.Generator().manual_seed(51)
    x, k, tx, tk, w = (torch.randn(2, 7, 3, width, generator=g).to(dtype) for _ in range(5))
    ang = torch.randn(9, 4, generator=g) * 3
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)
    tc, ts = (torch.randn(9, 4, generator=g).to(dtype) for _ in range(2))
    pos = torch.tensor([[0, 8, 2, 5, 1, 1, 7], [3, 4, 0, 6, 2, 8, 5]])
    want_y = ops.apply_qk_cos_sin(x, k, cos, sin, pos, 0, "bshd", pairing)
    wide = dict(dtype=torch.float64)
    for name, f in _table_calls(pos, pairing).items():
        with fwd.dual_level():
            xd = fwd.make_dual(x.clone().requires_grad_(), tx)
            kd = fwd.make_dual(k.clone().requires_grad_(), tk)
            cd = fwd.make_dual(cos.clone().requires_grad_(), tc)
            sd = fwd.make_dual(sin.clone().requires_grad_(), ts)
            outs = f(xd, kd, cd, sd)
            assert outs[0].requires_grad, name
            for i, out in enumerate(outs):
                p, t = fwd.unpack_dual(out)
                assert torch.equal(p.detach(), want_y[i]), (name, i)  # bit-identical to the operator's output
                assert t is not None and t.dtype == dtype, (name, i, None if t is None else t.dtype)
                a, b = (x, tx) if i == 0 else (k, tk)
                want_t = (rotate_by_tables(b.to(**wide), cos.to(**wide)[pos][:, :, None], sin.to(**wide)[pos][:, :, None],
                                           pairing)
                          + rotate_by_tables(a.to(**wide), tc.to(**wide)[pos][:, :, None],
                                             ts.to(**wide)[pos][:, :, None], pairing)
                          - torch.cat((torch.zeros_like(a[..., :8]), a[..., 8:]), -1).to(**wide))
                tol = 1e-5 if dtype == torch.float32 else 6e-2
                torch.testing.assert_close(t.to(**wide), want_t, rtol=tol, atol=tol, msg=name)
            grads = torch.autograd.grad(sum((o * w).sum() for o in outs), (xd, cd), create_graph=True)
            for gr, primal in zip(grads, (x, cos)):
                t = fwd.unpack_dual(gr).tangent
                assert t is not None and t.dtype == primal.dtype, name


def _transforms(f, a, t):
    """Each torch.func composition of f at a (tangent t): name -> result."""
    batch = torch.stack((a, a * 0.5 + t, -a))
    return {"grad": torch.func.grad(f)(a),
            "jvp(grad)": torch.func.jvp(torch.func.grad(f), (a,), (t,))[1],
            "hessian": torch.func.hessian(f)(a),
            "jacfwd(jacrev)": torch.func.jacfwd(torch.func.jacrev(f))(a),
            "jacrev(jacrev)": torch.func.jacrev(torch.func.jacrev(f))(a),
            "vmap(grad)": torch.func.vmap(torch.func.grad(f))(batch),
            "grad(vmap)": torch.func.grad(lambda b: torch.func.vmap(f)(b).sum())(batch)}


def test_torch_func_compositions_through_the_operators():
    # torch.func.grad (and every composition with it: jvp(grad), hessian, jacfwd(jacrev), vmap(grad)) of a function
    # calling torch.ops.rotary.* raised torch's "must override the setup_context staticmethod": the formula
    # registered with register_autograd lives in an autograd.Function that torch.func transforms refuse.
    g = torch.Generator().manual_seed(52)
    x, k, t, w = (torch.randn(2, 3, 2, 6, dtype=torch.float64, generator=g) for _ in range(4))  # 4 rotated, 2 pass
    cos, sin, tc = (torch.randn(5, 2, dtype=torch.float64, generator=g) for _ in range(3))
    pos = torch.tensor([[0, 4, 2], [1, 1, 3]])
    spec = rotary.Spec(6, rotary_dim=4, base=100.0)
    key = rt.spec_key(spec)
    ang = pos[..., None].double() * (1.0 / 100.0 ** (torch.arange(0, 4, 2, dtype=torch.float64) / 4))
    spec_c, spec_s = ang.cos()[:, :, None], ang.sin()[:, :, None]

    def by_tables(u, c, s):
        return rotate_by_tables(u, c[pos][:, :, None], s[pos][:, :, None], "half")

    def in_place_x(u):
        v = u * 1
        ops.apply_cos_sin_(v, cos, sin, pos)
        return v

    def in_place_qk(u):
        v, kk = u * 1, k * u
        ops.apply_qk_(v, kk, pos, 0, key)
        return kk

    def in_place_spec(u):
        v = u * 1
        ops.apply_(v, pos, 0, key)
        return v

    # name -> (f(a), the same composition in plain torch, the argument, its tangent, float64 exact or f32 rows)
    cases = {
        "apply_cos_sin x": (lambda u: ops.apply_cos_sin(u, cos, sin, pos), lambda u: by_tables(u, cos, sin), x, t),
        "apply_cos_sin cos": (lambda c: ops.apply_cos_sin(x, c, sin, pos), lambda c: by_tables(x, c, sin), cos, tc),
        "apply_cos_sin_": (in_place_x, lambda u: by_tables(u, cos, sin), x, t),
        "apply_qk_cos_sin": (lambda u: ops.apply_qk_cos_sin(u, k * u, cos, sin, pos)[1],
                             lambda u: by_tables(k * u, cos, sin), x, t),
        "apply_qk_cos_sin cos": (lambda c: ops.apply_qk_cos_sin(x, k, c, sin, pos)[0] * 2
                                 + ops.apply_qk_cos_sin(x, k, c, sin, pos)[1],
                                 lambda c: by_tables(x, c, sin) * 2 + by_tables(k, c, sin), cos, tc),
        "apply": (lambda u: ops.apply(u, pos, 0, key), lambda u: rotate_by_tables(u, spec_c, spec_s, "half"), x, t),
        "apply_": (in_place_spec, lambda u: rotate_by_tables(u, spec_c, spec_s, "half"), x, t),
        "apply_qk": (lambda u: ops.apply_qk(u, k * u, pos, 0, key)[1],
                     lambda u: rotate_by_tables(k * u, spec_c, spec_s, "half"), x, t),
        "apply_qk_": (in_place_qk, lambda u: rotate_by_tables(k * u, spec_c, spec_s, "half"), x, t),
        "rt.apply_cos_sin": (lambda u: rt.apply_cos_sin(u, cos, sin, pos), lambda u: by_tables(u, cos, sin), x, t),
    }
    for name, (rot, ref, a, ta) in cases.items():
        tol = 1e-12 if "cos_sin" in name else 2e-6  # spec operators rotate by rotary's f32 cos/sin rows

        def f(u, rot=rot):
            return ((rot(u) ** 2) * w).sum() + (rot(u) * u.sum()).sum()

        def f_ref(u, ref=ref):
            return ((ref(u) ** 2) * w).sum() + (ref(u) * u.sum()).sum()

        got, want = _transforms(f, a, ta), _transforms(f_ref, a, ta)
        for tname in want:
            torch.testing.assert_close(got[tname], want[tname], rtol=tol, atol=tol, msg=f"{name} {tname}")


def _tables_case(seed):
    g = torch.Generator().manual_seed(seed)
    x, t, w = (torch.randn(1, 3, 2, 8, dtype=torch.float64, generator=g) for _ in range(3))
    cos, sin, tc = (torch.randn(4, 4, dtype=torch.float64, generator=g) for _ in range(3))
    pos = torch.tensor([[0, 2, 3]])
    return x, t, w, cos, sin, tc, pos, lambda u, c: rotate_by_tables(u, c[pos][:, :, None], sin[pos][:, :, None], "half")


def test_jvp_of_in_place_table_operators_with_an_outer_gradient_for_the_tables():
    # torch.func.jvp over ops.apply_cos_sin_ / apply_qk_cos_sin_ while cos also requires grad for ordinary autograd:
    # the jvp level computed the rotation by the functional op (which saves the rotated tensor for the tables'
    # gradient) and then copied the result into that very tensor, so backward raised "modified by an inplace
    # operation". The functional operators gave the formula's values.
    x, t, _, cos, sin, tc, pos, ref = _tables_case(53)

    def x_inplace(u, c):
        q, k = u * 1, u * 2
        ops.apply_cos_sin_(q, c, sin, pos)
        ops.apply_cos_sin_(k, c, sin, pos)
        return q * k

    def qk_inplace(u, c):
        q, k = u * 1, u * 2
        ops.apply_qk_cos_sin_(q, k, c, sin, pos)
        return q * k

    def results(fn):
        c = cos.clone().requires_grad_()
        p, tt = torch.func.jvp(fn, (x, c), (t, tc))
        return (tt, *torch.autograd.grad((tt ** 2).sum() + p.sum(), c))

    want = results(lambda u, c: ref(u, c) * ref(2 * u, c))
    for name, fn in (("apply_cos_sin_", x_inplace), ("apply_qk_cos_sin_", qk_inplace)):
        for got, exp, what in zip(results(fn), want, ("tangent", "dcos")):
            torch.testing.assert_close(got, exp, rtol=1e-12, atol=1e-9, msg=f"{name} {what}")


def test_in_place_operators_refuse_a_tensor_captured_by_a_torch_func_transform():
    # torch.func.grad / vjp / jacrev / jvp of a function whose in-place operator rotates a tensor made outside it
    # (captured: a module's buffer, say) returned a zero gradient or tangent, silently: the write was invisible to
    # the transform. torch refuses its own in-place ops there; so does rotary now, before writing. A tensor made
    # inside the function (a clone) gives the formula's derivatives.
    x, t, w, cos, sin, tc, pos, ref = _tables_case(54)
    key = rt.spec_key(rotary.Spec(8))
    calls = {"apply_cos_sin_": lambda b, c: ops.apply_cos_sin_(b[0], c, sin, pos),
             "apply_qk_cos_sin_": lambda b, c: ops.apply_qk_cos_sin_(b[0], b[1], c, sin, pos),
             "apply_": lambda b, c: ops.apply_(b[0], pos, 0, key),
             "apply_qk_": lambda b, c: ops.apply_qk_(b[0], b[1], pos, 0, key)}
    for name, call in calls.items():
        for tname in ("grad", "vjp", "jacrev", "jvp"):
            bufs = (x.clone(), x.clone())  # captured by f

            def f(c, call=call, bufs=bufs):
                call(bufs, c)
                return (bufs[0] * w).sum() + c.sum()

            with pytest.raises(RuntimeError, match=rf"\[rotary_{name}\] [qx] must be a tensor made inside .*"
                                                   r"captured.*Clone it inside"):
                {"grad": lambda: torch.func.grad(f)(cos), "vjp": lambda: torch.func.vjp(f, cos),
                 "jacrev": lambda: torch.func.jacrev(f)(cos), "jvp": lambda: torch.func.jvp(f, (cos,), (tc,))}[tname]()
            assert torch.equal(bufs[0], x) and torch.equal(bufs[1], x), (name, tname)

    def made_inside(c):
        v = x.clone()
        ops.apply_cos_sin_(v, c, sin, pos)
        return v

    want = torch.func.grad(lambda c: (ref(x, c) * w).sum())(cos)
    torch.testing.assert_close(torch.func.grad(lambda c: (made_inside(c) * w).sum())(cos), want, rtol=1e-12, atol=0)
    def rotated_clone(u, c):
        v = u.clone()
        ops.apply_cos_sin_(v, c, sin, pos)
        return v

    torch.testing.assert_close(torch.func.functionalize(rotated_clone)(x, cos), ref(x, cos), rtol=1e-12, atol=0)
    _, tangent = torch.func.jvp(made_inside, (cos,), (tc,))
    torch.testing.assert_close(tangent, torch.func.jvp(lambda c: ref(x, c), (cos,), (tc,))[1], rtol=1e-12, atol=0)
    buf = x.clone()  # a view of a captured tensor, made inside: torch's own check of the write refuses it
    with pytest.raises(RuntimeError, match="captured Tensor"):
        torch.func.grad(lambda c: (ops.apply_cos_sin_(buf[:, :, :1], c, sin, pos), (buf * w).sum())[1])(cos)
    assert torch.equal(buf, x)


def test_two_tensor_in_place_operators_refuse_a_view_of_a_captured_tensor_before_writing_either():
    # Under jvp, q the function's input and k a view of a captured tensor: torch refused k's write, but q (the
    # caller's tensor, which jvp's in-place rule reaches) was already rotated. Both are now checked first.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 3, 1, 8, dtype=torch.float64, generator=g)
    key = rt.spec_key(rotary.Spec(8))
    pos = torch.arange(3)
    cos, sin = (torch.from_numpy(a).double() for a in rotary.cos_sin(rotary.Spec(8), 3))
    calls = {"apply_qk_": lambda q, k: ops.apply_qk_(q, k, pos, 0, key),
             "apply_qk_cos_sin_": lambda q, k: ops.apply_qk_cos_sin_(q, k, cos, sin, pos)}
    for name, call in calls.items():
        for captured_is_k in (True, False):
            buf = torch.randn(2, 3, 1, 8, dtype=torch.float64, generator=g)  # captured by f
            buf0, q = buf.clone(), x.clone()

            def f(qq, call=call, buf=buf, captured_is_k=captured_is_k):
                call(qq, buf[0:1]) if captured_is_k else call(buf[0:1], qq)
                return qq * 1

            with pytest.raises(RuntimeError, match="captured Tensor"):
                torch.func.jvp(f, (q,), (torch.randn_like(q),))
            assert torch.equal(q, x) and torch.equal(buf, buf0), (name, captured_is_k)
