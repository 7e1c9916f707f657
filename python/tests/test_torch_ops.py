"""rotary's torch.library operators: opcheck grid, fake/meta, compile/export, torch.func, in-place autograd, views."""
from __future__ import annotations

import io
import itertools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from torch_reference import rotate_by_tables  # noqa: E402

ops = torch.ops.rotary
SPEC = rotary.Spec(16, 12, base=1e4)
KEY = rt.spec_key(SPEC)
SHAPES = {"bshd": lambda h: (2, 3, h, 16), "bhsd": lambda h: (2, h, 3, 16), "thd": lambda h: (3, h, 16)}


def _positions(layout):
    return torch.tensor([4, 0, 7]) if layout == "thd" else torch.tensor([[1, 5, 2], [0, 8, 3]])


def _truth(x, positions, spec=SPEC, pairing=None, layout="bshd", inverse=False):
    """float64 RoPE of x (layout) at integer positions (broadcast over heads), numpy."""
    inv, af = spec.frequencies()
    pos = np.asarray(positions, dtype=np.float64)
    ang = pos[..., None] * inv  # [B, S, h] / [S, h] / [T, h]
    if inverse:
        ang = -ang
    c, s = np.cos(ang) * af, np.sin(ang) * af
    xx = x.detach().double().numpy()
    if layout == "bhsd":
        xx = np.swapaxes(xx, 1, 2)
    c, s = c[..., None, :], s[..., None, :]
    h = inv.shape[0]
    y = xx.copy()
    if (pairing or spec.pairing) == "interleaved":
        a, b = xx[..., 0:2 * h:2], xx[..., 1:2 * h:2]
        y[..., 0:2 * h:2], y[..., 1:2 * h:2] = a * c - b * s, b * c + a * s
    else:
        a, b = xx[..., :h], xx[..., h:2 * h]
        y[..., :h], y[..., h:2 * h] = a * c - b * s, b * c + a * s
    return np.swapaxes(y, 1, 2) if layout == "bhsd" else y


# ----------------------------------------------------------------------------------------------- registration


def test_operators_and_mutation_annotations():
    for name in ("apply", "apply_qk", "apply_cos_sin", "apply_qk_cos_sin", "cos_sin"):
        schema = getattr(ops, name).default._schema
        assert not schema.is_mutable and torch.Tag.pt2_compliant_tag in getattr(ops, name).default.tags
    for name, n in (("apply_", 1), ("apply_qk_", 2), ("apply_cos_sin_", 1), ("apply_qk_cos_sin_", 2)):
        schema = getattr(ops, name).default._schema
        written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        assert written == ["x"] if n == 1 else written == ["q", "k"]
        assert len(schema.returns) == 0


def test_spec_key_round_trip():
    for spec in (SPEC, rotary.Spec.preset("llama-3.1-8b"), rotary.Spec(64, 32, pairing="interleaved")):
        key = rt.spec_key(spec)
        assert "name" not in key and len(key) < 200
        rotary._torch_ops._SPEC_BY_KEY.pop(key)  # as in a process that never saw the Spec
        assert rt.spec_from_key(key) == spec.replace(name="")
    with pytest.raises(ValueError, match=r"^\[rotary\.spec_from_key\] spec must be a key made by rotary\.torch\.spec_key, "
                                         r"got 'not json'$"):
        rt.spec_from_key("not json")
    with pytest.raises(TypeError, match=r"^\[rotary\.spec_key\] spec must be a rotary\.Spec, got str$"):
        rt.spec_key("not a spec")


# ----------------------------------------------------------------------------------------------- opcheck

_CHEAP = ("test_schema", "test_autograd_registration", "test_faketensor")


def _op_cases(dtype, layout, pairing, grad):
    q = torch.randn(SHAPES[layout](4), dtype=dtype, requires_grad=grad)
    k = torch.randn(SHAPES[layout](2), dtype=dtype, requires_grad=grad)
    pos = _positions(layout)
    cos = torch.randn(10, 6, dtype=dtype, requires_grad=grad)
    sin = torch.randn(10, 6, dtype=dtype, requires_grad=grad)
    tp = pairing or "half"
    cases = [("apply", (q, pos, 0, KEY, layout, pairing)), ("apply_qk", (q, k, None, 3, KEY, layout, pairing)),
             ("apply_cos_sin", (q, cos, sin, pos, 0, layout, tp)),
             ("apply_qk_cos_sin", (q, k, cos, sin, None, 2, layout, tp))]
    if not grad:
        cases += [("apply_", (q.clone(), pos, 0, KEY, layout, pairing)),
                  ("apply_qk_", (q.clone(), k.clone(), pos, 0, KEY, layout, pairing)),
                  ("apply_cos_sin_", (q.clone(), cos, sin, pos, 0, layout, tp)),
                  ("apply_qk_cos_sin_", (q.clone(), k.clone(), cos, sin, None, 1, layout, tp))]
    return cases


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_opcheck_grid(dtype):
    """Every operator, in and out of place, each layout and pairing, with and without grad: schema, autograd
    registration and fake kernels on the whole grid; AOT dispatch (dynamic shapes) on a diagonal of it."""
    full = itertools.cycle([True, False, False])
    for layout, pairing, grad in itertools.product(("bshd", "bhsd", "thd"), ("", "interleaved"), (False, True)):
        for name, args in _op_cases(dtype, layout, pairing, grad):
            utils = {} if (dtype == torch.float32 and next(full)) else {"test_utils": _CHEAP}
            torch.library.opcheck(getattr(ops, name).default, args, **utils)
    pos = torch.randint(0, 99, (2, 5))
    torch.library.opcheck(ops.cos_sin.default, (pos, KEY))
    mrope = rotary.Spec(16, mrope_section=[2, 3, 3])
    torch.library.opcheck(ops.cos_sin.default, (torch.randint(0, 99, (3, 2, 5)), rt.spec_key(mrope)))


def test_fake_and_meta_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 7, 4, 16).transpose(1, 2)  # non-contiguous [B, H, S, D] view
        k = torch.empty(2, 2, 7, 16)
        out = ops.apply(q, None, 5, KEY, "bhsd")
        assert out.shape == q.shape and out.stride() == torch.empty_like(q).stride()
        qo, ko = ops.apply_qk(q, k, torch.arange(7), 0, KEY, "bhsd")
        assert qo.shape == q.shape and ko.shape == k.shape
        c, s = ops.cos_sin(torch.arange(7)[None], KEY)
        assert c.shape == (1, 7, 6) and c.dtype == torch.float32
    m = torch.empty(1, 3, 2, 16, device="meta", dtype=torch.bfloat16)
    y = ops.apply(m, None, 0, KEY)
    assert y.device.type == "meta" and y.dtype == torch.bfloat16 and y.shape == m.shape
    assert ops.cos_sin(torch.empty(3, 4, 5, device="meta", dtype=torch.long),
                       rt.spec_key(rotary.Spec(16, mrope_section=[2, 3, 3])))[0].shape == (4, 5, 8)


# ----------------------------------------------------------------------------------------------- compile / export


def _explain(fn, *args):
    torch._dynamo.reset()
    ex = torch._dynamo.explain(fn)(*args)
    return ex.graph_count, ex.graph_break_count


def test_compile_fullgraph_without_graph_breaks():
    rope = rt.RoPE(16)
    x = torch.randn(2, 5, 16)
    q, k = torch.randn(1, 5, 4, 16), torch.randn(1, 5, 2, 16)
    cos, sin = rt.cos_sin(torch.arange(5)[None], SPEC)
    hf_cos, hf_sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    cases = {
        "RoPE": (rope, (x,)),
        "apply": (lambda t, p: rt.apply(t, p, SPEC) * 2, (q, torch.arange(5))),
        "apply_qk": (lambda a, b: rt.apply_qk(a, b, 3, SPEC), (q, k)),
        "apply_qk inplace": (lambda a, b: rt.apply_qk(a, b, torch.arange(5), SPEC, inplace=True), (q.clone(), k.clone())),
        "apply_rotary_pos_emb": (lambda a, b: rt.apply_rotary_pos_emb(a, b, hf_cos, hf_sin, unsqueeze_dim=2), (q, k)),
        "cos_sin": (lambda p: rt.cos_sin(p, SPEC), (torch.arange(9),)),
    }
    for name, (fn, args) in cases.items():
        assert _explain(fn, *args) == (1, 0), name
        torch._dynamo.reset()
        compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
        ref = fn(*[a.clone() for a in args])
        got = compiled(*[a.clone() for a in args])
        for g, r in zip(got if isinstance(got, tuple) else (got,), ref if isinstance(ref, tuple) else (ref,)):
            torch.testing.assert_close(g, r, rtol=0, atol=0)
    # inductor (the default backend) on the module, with autograd through the compiled graph
    torch._dynamo.reset()
    xg = x.clone().requires_grad_(True)
    y = torch.compile(rope, fullgraph=True)(xg)
    y.sum().backward()
    xr = x.clone().requires_grad_(True)
    rope(xr).sum().backward()
    torch.testing.assert_close(y, rope(x), rtol=0, atol=0)
    torch.testing.assert_close(xg.grad, xr.grad, rtol=0, atol=0)


def test_export_round_trip():
    spec = rotary.Spec(32, base=5e4, rope_type="linear", factor=2.0)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rope = rt.RoPE(32)

        def forward(self, q, k, p):
            a, b = rt.apply_qk(q, k, p, spec)
            return self.rope(a.flatten(1, 2)), b

    q, k, p = torch.randn(1, 5, 4, 32), torch.randn(1, 5, 2, 32), torch.tensor([0, 3, 9, 10, 11])
    want = M()(q, k, p)
    ep = torch.export.export(M(), (q, k, p))
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    rotary._torch_ops._SPEC_BY_KEY.clear()  # the loading process rebuilds the specs from their keys
    got = torch.export.load(buf).module()(q, k, p)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    assert "torch.ops.rotary.apply_qk.default" in ep.graph_module.code


class _Recorder(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_eager_calls_equal_the_operators_and_modes_see_them():
    """Plain eager calls run the operators' CPU kernels directly; the results are the operators' own, and inside a
    dispatch mode (as under tracing) the operator itself is what runs."""
    q, k = torch.randn(2, 5, 4, 16), torch.randn(2, 5, 2, 16)
    pos = torch.randint(0, 50, (2, 5))
    want = ops.apply_qk(q, k, pos, 0, KEY)
    for g, w in zip(rt.apply_qk(q, k, pos, SPEC), want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    with _Recorder() as rec:
        got = rt.apply_qk(q, k, pos, SPEC)
        rt.apply(q.clone(), 3, SPEC, inplace=True)
        rt.cos_sin(pos, SPEC)
    assert ["rotary.apply_qk.default", "rotary.apply_.default", "rotary.cos_sin.default"] == \
        [o for o in rec.ops if o.startswith("rotary.")]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


# ----------------------------------------------------------------------------------------------- torch.func


_reference = rotate_by_tables  # plain torch, float64 cos/sin broadcast over heads (bshd)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_func_grad_jvp_vmap_against_plain_torch(pairing):
    spec = rotary.Spec(32, 24, base=1e4, pairing=pairing, rope_type="linear", factor=2.0)
    torch.manual_seed(0)
    pos = torch.randint(0, 500, (2, 5))
    posb = torch.randint(0, 500, (4, 2, 5))
    inv, af = spec.frequencies()

    def tables(p):
        ang = p.numpy()[..., None, None] * inv
        return torch.from_numpy(np.cos(ang) * af), torch.from_numpy(np.sin(ang) * af)

    c, s = tables(pos)
    cb = [tables(p) for p in posb]
    x = torch.randn(2, 5, 3, 32, dtype=torch.float64)
    w = torch.randn_like(x)
    t = torch.randn_like(x)
    xb = torch.randn(4, 2, 5, 3, 32, dtype=torch.float64)
    tol = dict(rtol=0, atol=4e-7)  # float64 math with rotary's f32 cos/sin table (2^-24 relative)
    g = torch.func.grad(lambda u: (rt.apply(u, pos, spec) * w).sum())(x)
    torch.testing.assert_close(g, torch.func.grad(lambda u: (_reference(u, c, s, pairing) * w).sum())(x), **tol)
    _, jt = torch.func.jvp(lambda u: rt.apply(u, pos, spec), (x,), (t,))
    torch.testing.assert_close(jt, _reference(t, c, s, pairing), **tol)
    v = torch.func.vmap(lambda u: rt.apply(u, pos, spec))(xb)
    torch.testing.assert_close(v, torch.stack([_reference(u, c, s, pairing) for u in xb]), **tol)
    v = torch.func.vmap(lambda u, p: rt.apply(u, p, spec))(xb, posb)
    torch.testing.assert_close(v, torch.stack([_reference(u, *cs, pairing) for u, cs in zip(xb, cb)]), **tol)
    jac = torch.func.jacrev(lambda u: rt.apply(u, pos[:1, :2], spec))(x[:1, :2, :1])
    jref = torch.func.jacrev(lambda u: _reference(u, c[:1, :2], s[:1, :2], pairing))(x[:1, :2, :1])
    torch.testing.assert_close(jac, jref, **tol)
    # the operators' own vmap rules (batch folded into B, thd into bshd; in place through views)
    key = rt.spec_key(spec)
    want = torch.stack([_reference(u, *cs, pairing) for u, cs in zip(xb, cb)])
    torch.testing.assert_close(torch.func.vmap(lambda u, p: ops.apply(u, p, 0, key))(xb, posb), want, **tol)
    xi = xb.clone()
    torch.func.vmap(lambda u, p: (ops.apply_(u, p, 0, key), u)[1])(xi, posb)
    torch.testing.assert_close(xi, want, **tol)
    xt = xb[:, 0]  # [N, S, H, D] seen as thd [S, H, D] per item
    vt = torch.func.vmap(lambda u, p: ops.apply(u, p, 0, key, "thd"))(xt, posb[:, 0])
    torch.testing.assert_close(vt, want[:, 0], **tol)


# ----------------------------------------------------------------------------------------------- reliability (issue 13)


def test_inplace_on_tensors_requiring_grad():
    """13.3: in place on a leaf requiring grad raises as torch does; on a non-leaf the op is recorded."""
    spec = rotary.Spec(8)
    for call in (lambda a, b: rt.apply(a, 5, spec, inplace=True),
                 lambda a, b: rt.apply_qk(a, b, 5, spec, inplace=True),
                 lambda a, b: rotary.apply_qk(a, b, 5, spec, inplace=True),
                 lambda a, b: ops.apply_(a, None, 5, rt.spec_key(spec))):
        leaf = torch.randn(1, 3, 2, 8, requires_grad=True)
        before = leaf.detach().clone()
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            call(leaf, torch.randn(1, 3, 2, 8))
        assert torch.equal(leaf.detach(), before)
    W = torch.randn(8, 8, requires_grad=True)
    x = torch.randn(1, 3, 2, 8)
    weight = torch.arange(8.0)
    for call in (lambda a, b: rt.apply_qk(a, b, 5, spec, inplace=True),
                 lambda a, b: rotary.apply_qk(a, b, 5, spec, inplace=True),
                 lambda a, b: (rt.apply(a, 5, spec, inplace=True), b)):
        W.grad = None
        q, k = x @ W, (x @ W).clone()
        v = q._version
        q2, _ = call(q, k)
        assert q2 is q and q._version > v and q.grad_fn is not None
        (q2 * weight).sum().backward()
        got = W.grad.clone()
        W.grad = None
        (rt.apply(x @ W, 5, spec) * weight).sum().backward()
        torch.testing.assert_close(got, W.grad, rtol=0, atol=1e-6)
    t = torch.randn(1, 3, 2, 8)
    v = t._version
    rt.apply_qk(t, t.clone(), 5, spec, inplace=True)
    assert t._version > v  # no grad needed: the version counter still moves


def _qk_cos_sin(q, k, cos, sin, inplace):
    if not inplace:
        return ops.apply_qk_cos_sin(q, k, cos, sin, None, 0, "bshd", "half", False, 0)
    ops.apply_qk_cos_sin_(q, k, cos, sin, None, 0, "bshd", "half", False, 0)
    return q, k


def test_inplace_rotation_by_tables_that_need_a_gradient():
    """In place by caller tables computed from a learnable inv_freq: backward gives the out-of-place gradients
    (it raised "modified by an inplace operation": the functional op had saved x, which copy_ then overwrote)."""
    inv_freq = torch.rand(4, dtype=torch.float64, requires_grad=True)
    W = torch.randn(8, 8, dtype=torch.float64, requires_grad=True)
    x = torch.randn(2, 5, 3, 8, dtype=torch.float64)
    weight = torch.linspace(-1, 1, 2 * 5 * 3 * 8, dtype=torch.float64).reshape(2, 5, 3, 8)

    def grads(call, x_needs_grad):
        inv_freq.grad = W.grad = None
        ang = torch.arange(10, dtype=torch.float64)[:, None] * inv_freq
        a = x @ W if x_needs_grad else x.clone()
        out = call(a, ang.cos(), ang.sin())
        if isinstance(out, tuple):
            out = out[0] + 2 * out[1]
        (out * weight).sum().backward()
        return inv_freq.grad.clone(), None if W.grad is None else W.grad.clone()

    cases = [(lambda a, c, s, ip: rt.apply_rotary_emb(a, c, s, inplace=ip)),
             (lambda a, c, s, ip: rt.apply_cos_sin(a, c, s, inplace=ip)),
             (lambda a, c, s, ip: _qk_cos_sin(a, a * 0.5, c, s, ip))]
    for call in cases:
        for x_needs_grad in (True, False):
            want = grads(lambda a, c, s: call(a, c, s, False), x_needs_grad)
            got = grads(lambda a, c, s: call(a, c, s, True), x_needs_grad)
            torch.testing.assert_close(got[0], want[0], rtol=1e-12, atol=1e-12)
            if x_needs_grad:
                torch.testing.assert_close(got[1], want[1], rtol=1e-12, atol=1e-12)


def test_negative_bit_views():
    """13.5: a negative-bit view (t._neg_view(), z.conj().imag) is read as its value, as input and in place;
    an `out=` that is one is refused clearly."""
    spec = rotary.Spec(8)
    t = torch.randn(1, 2, 1, 8)
    nv = t._neg_view()
    assert nv.is_neg()
    zero = torch.tensor([0, 0])
    torch.testing.assert_close(rotary.apply(nv, zero, spec), -t, rtol=0, atol=0)  # identity rotation
    torch.testing.assert_close(rt.apply(nv, zero, spec), -t, rtol=0, atol=0)
    torch.testing.assert_close(rt.apply(nv, 3, spec), rt.apply(-t, 3, spec), rtol=0, atol=0)
    z = torch.randn(1, 2, 1, 8, dtype=torch.complex64)
    im = z.conj().imag
    assert im.is_neg()
    torch.testing.assert_close(rt.apply(im, 3, spec), rt.apply(im.resolve_neg(), 3, spec), rtol=0, atol=0)
    inplace = t.clone()._neg_view()
    want = rt.apply(inplace.resolve_neg(), 3, spec)
    rt.apply(inplace, 3, spec, inplace=True)
    torch.testing.assert_close(inplace.resolve_neg(), want, rtol=0, atol=0)
    cos, sin = rt.cos_sin(torch.arange(4), spec)
    torch.testing.assert_close(rt.apply_cos_sin(t, cos._neg_view(), sin, torch.tensor([1, 2])),
                               rt.apply_cos_sin(t, -cos, sin, torch.tensor([1, 2])), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"^\[rotary_apply\] out is a negative-bit view"):
        rotary.apply(t, 3, spec, out=torch.empty_like(t)._neg_view())


def test_positions_mutated_before_backward_raise():
    """13.18: positions are saved for backward with their version: changing them in place raises like torch."""
    x = torch.randn(1, 3, 1, 8, requires_grad=True)
    p = torch.tensor([0, 1, 2])
    y = rt.apply(x, p, rotary.Spec(8))
    p += 100
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()




# ----------------------------------------------------------------------------------------------- threads


_THREADS_SCRIPT = textwrap.dedent("""
    import os, sys, torch, rotary, rotary.torch as rt
    mode = sys.argv[1]
    if mode == "affinity":
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    elif mode == "set_num_threads":
        torch.set_num_threads(1)
    x = torch.randn(2, 512, 8, 64)             # 2 MiB: rotary would use every core it may
    k = x.clone()
    spec = rotary.Spec(64)
    before = len(os.listdir("/proc/self/task"))
    rt.apply(x, 0, spec, inplace=True)         # only rotary runs between the two counts
    rt.apply_qk(x, k, 0, spec, inplace=True)
    print(before, len(os.listdir("/proc/self/task")))
""")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two usable cores")
def test_threads_follow_torch():
    """torch.set_num_threads(1), or a process pinned to one core: no thread is started (and, as a control, a
    process left alone does start rotary's pool for the same call)."""
    modes = ("set_num_threads", "affinity", "control")
    procs = {m: subprocess.Popen([sys.executable, "-c", _THREADS_SCRIPT, m], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for m in modes}
    counts = {}
    for m, p in procs.items():
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        counts[m] = tuple(map(int, out.split()))
    assert counts["set_num_threads"][1] == counts["set_num_threads"][0], counts
    assert counts["affinity"][1] == counts["affinity"][0], counts
    assert counts["control"][1] > counts["control"][0], counts


def test_readme_python_example_runs(tmp_path, monkeypatch):
    """README's Python / PyTorch block runs as written (with `model` a tiny transformers Llama)."""
    transformers = pytest.importorskip("transformers")
    from conftest import REPO_ROOT

    text = (REPO_ROOT / "README.md").read_text()
    section = text[text.index("### Python / PyTorch"):]
    block = section[section.index("```python") + len("```python"):]
    block = block[:block.index("```")]
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    monkeypatch.chdir(tmp_path)
    scope = {"model": transformers.LlamaForCausalLM(cfg).eval()}
    exec(compile(block, "README.md", "exec"), scope)
    assert rt.is_patched(scope["model"])
    rt.unpatch(scope["model"])


def test_torch_bench_decode_lines():
    """python -m rotary.bench --torch: JSON lines with the fields its docstring lists (decode case, quick)."""
    out = subprocess.run([sys.executable, "-m", "rotary.bench", "--torch", "--torch-case", "decode", "--json",
                          "--quick"], capture_output=True, text=True, check=True, timeout=600)
    rows = [__import__("json").loads(line) for line in out.stdout.splitlines()]
    assert {r["impl"] for r in rows} == {"rotary-kernel", "rotary-op-inplace", "rotary-op", "rt-inplace", "numpy-out",
                                     "custom-op-inplace"}
    for r in rows:
        assert r["case"] == "decode-f32" and r["mode"] == "decode" and r["ms"] > 0
        assert ("overhead_us" in r) == (r["impl"] not in ("rotary-kernel", "numpy-out"))
