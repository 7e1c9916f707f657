"""torch.ops.rotary.prologue / rerotate_cache: schemas, fake kernels, results, refusals (the patched HF models: test_prologue_torch_models.py)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import rotary  # noqa: E402
from rotary import prologue_torch  # noqa: E402
from prologue_ops import op_args as _op_args  # noqa: E402
from reference import default_inv_freq, rotate  # noqa: E402


def test_the_ops_are_registered_with_mutating_schemas():
    s = str(torch.ops.rotary.prologue.default._schema)
    for arg in ("q", "k_cache", "v_cache"):
        assert f"Tensor(" in s and f"!) {arg}" in s, s
    assert "!) k_cache" in str(torch.ops.rotary.rerotate_cache.default._schema)
    mutable = {a.name for a in torch.ops.rotary.prologue_q_out.default._schema.arguments
               if a.alias_info is not None and a.alias_info.is_write}
    assert mutable == {"q_out", "k_cache", "v_cache", "k_scale", "v_scale"}, mutable


def test_prologue_q_out_leaves_q_unwritten_in_its_schema_and_its_version():
    # rotary::prologue's schema marks q written even when q_out takes the rotation (a custom op's mutated arguments
    # are fixed): its version counter moves, and torch.compile orders q's later readers after the call.
    # rotary::prologue_q_out reads q only: same bytes, q's version unchanged, opcheck's schema test (which fails an
    # op writing an argument its schema leaves unwritten) and fake-tensor test pass.
    key = prologue_torch.spec_key(rotary.Spec(64))
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn((3, h, 64), generator=g) for h in (4, 2, 2))
    w = 1.0 + 0.2 * torch.randn(64, generator=g)
    got = {}
    for name in ("prologue", "prologue_q_out"):
        qq, kc, vc, out = q.clone(), torch.zeros((2, 4, 2, 64)), torch.zeros((2, 4, 2, 64)), torch.empty((3, 4, 64))
        before = (qq._version, out._version)
        getattr(torch.ops.rotary, name)(*_op_args(qq, k, v, kc, vc, key, q_out=out, q_norm_weight=w, k_norm_weight=w))
        got[name] = (out, kc, vc, qq._version - before[0], out._version - before[1])
        assert torch.equal(qq, q)
    (o1, k1, v1, dq1, do1), (o2, k2, v2, dq2, do2) = got["prologue"], got["prologue_q_out"]
    assert torch.equal(o1, o2) and torch.equal(k1, k2) and torch.equal(v1, v2) and k1.any()
    assert dq1 > 0 and dq2 == 0 and do1 == do2 > 0
    args = _op_args(q.clone(), k, v, torch.zeros((2, 4, 2, 64)), torch.zeros((2, 4, 2, 64)), key,
                    q_out=torch.empty((3, 4, 64)), q_norm_weight=w, k_norm_weight=w)
    torch.library.opcheck(torch.ops.rotary.prologue_q_out.default, tuple(args), test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.rotary.prologue.default, tuple(_op_args(q.clone(), k, v, torch.zeros((2, 4, 2, 64)),
                                                                            torch.zeros((2, 4, 2, 64)), key)),
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.parametrize("call", ["op", "patched layers' call"])
def test_prologue_q_out_refuses_q_itself_none_or_an_overlapping_q_out_before_writing(call):
    # Its schema says q is not written: q_out None (the dispatcher passes None for a required tensor), q itself or
    # a view at q's address would rotate q in place behind the schema's back, and a q_out overlapping q otherwise
    # is refused by the prologue's own aliasing rule; each names q_out, before the caches are touched. A view of
    # the same buffer apart from q passes.
    key = prologue_torch.spec_key(rotary.Spec(64))
    g = torch.Generator().manual_seed(9)
    buf = torch.randn((2, 3, 4, 64), generator=g)
    q, k, v = buf[0], torch.randn((3, 2, 64), generator=g), torch.randn((3, 2, 64), generator=g)
    fn = torch.ops.rotary.prologue_q_out if call == "op" else prologue_torch._call_prologue
    own = r"^\[rotary_prologue\] q_out must (not be q|be a tensor) in prologue_q_out"
    cases = [(None, own), (q, own), (q[:, :, :], own),
             (buf.view(-1)[64:64 + 3 * 4 * 64].view(3, 4, 64), r"^\[rotary_prologue\] q_out must either be q itself")]
    for out, needle in cases:
        if out is None and call != "op":
            continue  # _call_prologue with q_out None is the in-place operator, prologue
        kc, vc = torch.zeros((2, 4, 2, 64)), torch.zeros((2, 4, 2, 64))
        q0 = q.clone()
        with pytest.raises(ValueError, match=needle):
            fn(*_op_args(q, k, v, kc, vc, key, q_out=out))
        assert torch.equal(q, q0) and not kc.any() and not vc.any()
    kc, vc = torch.zeros((2, 4, 2, 64)), torch.zeros((2, 4, 2, 64))
    fn(*_op_args(q, k, v, kc, vc, key, q_out=buf[1]))
    want = torch.empty((3, 4, 64))
    torch.ops.rotary.prologue(*_op_args(q.clone(), k, v, torch.zeros_like(kc), torch.zeros_like(vc), key, q_out=want))
    assert torch.equal(buf[1], want) and kc.any()
    # q_out None also fails opcheck's schema test (q would be written); refused instead.
    with pytest.raises(ValueError, match=own):
        torch.ops.rotary.prologue_q_out(*_op_args(q.clone(), k, v, kc, vc, key))


def test_prologue_op_writes_the_cache_and_the_fake_kernel_traces():
    spec = rotary.Spec(64)
    key = prologue_torch.spec_key(spec)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn((3, h, 64), generator=g) for h in (4, 2, 2))
    q0 = q.clone()
    kc, vc = torch.zeros((2, 4, 2, 64)), torch.zeros((2, 4, 2, 64))
    slots = torch.tensor([5, -1, 2])
    pos = torch.tensor([10, 11, 12])
    torch.ops.rotary.prologue(q, k, v, pos, key, kc, vc, slots, None, "nhd", "thd", None, None, 1e-6, 0.0,
                              None, None, 1.0, 1.0, None, 1)
    inv = default_inv_freq(10000.0, 64)
    for t, s in ((0, 5), (2, 2)):
        want = rotate(k[t].double().numpy(), (pos[t].item() * inv)[None, :])
        np.testing.assert_allclose(kc.reshape(-1, 2, 64)[s].numpy(), want, atol=2e-5)
        np.testing.assert_array_equal(vc.reshape(-1, 2, 64)[s].numpy(), v[t].numpy())
    np.testing.assert_allclose(q[1].numpy(), rotate(q0[1].double().numpy(), (11 * inv)[None, :]), atol=2e-5)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:  # the fake kernel: shapes only, nothing computed
        fq, fk, fv = (mode.from_tensor(x) for x in (q, k, v))
        torch.ops.rotary.prologue(fq, fk, fv, mode.from_tensor(pos), key, mode.from_tensor(kc), mode.from_tensor(vc),
                                  mode.from_tensor(slots), None, "nhd", "thd", None, None, 1e-6, 0.0, None, None, 1.0,
                                  1.0, None, 1)
    torch.library.opcheck(torch.ops.rotary.rerotate_cache.default,
                          (kc.clone(), torch.tensor([5, 2]), torch.tensor([10, 12]), torch.tensor([3, 4]), key, None,
                           "nhd", None, 1.0, 1), test_utils=("test_schema", "test_faketensor"))


def test_patched_layers_run_the_kernel_directly_in_eager_code_and_the_operator_otherwise(monkeypatch):
    # _call_prologue (what patched attention layers call, with a q_out): in plain eager code the op's implementation
    # directly, with the same results and the same version-counter bumps as torch.ops.rotary.prologue_q_out (q_out
    # and the caches, not q); under a dispatch mode (as under torch.compile, torch.func, jit tracing or the profiler)
    # the operator itself, which the mode sees.
    from torch.utils._python_dispatch import TorchDispatchMode

    key = prologue_torch.spec_key(rotary.Spec(64, base=10000.0))
    g = torch.Generator().manual_seed(4)
    base = dict(q=torch.randn((1, 2, 4, 64), generator=g), k=torch.randn((1, 2, 2, 64), generator=g),
                v=torch.randn((1, 2, 2, 64), generator=g), kc=torch.zeros((1, 2, 8, 64)), vc=torch.zeros((1, 2, 8, 64)),
                w=1.0 + 0.1 * torch.randn(64, generator=g))

    def args():
        t = {n: x.clone() for n, x in base.items()}
        out = torch.empty((1, 4, 2, 64)).transpose(1, 2)
        return t, (t["q"], t["k"], t["v"], torch.tensor([[7, 8]]), key, t["kc"], t["vc"], None, torch.tensor([3]),
                   "bhsd", "bshd", t["w"], t["w"], 1e-6, 0.0, None, None, 1.0, 1.0, out, 1)

    direct = []  # calls of the implementation by _call_prologue's own direct branch (the operator keeps its reference)
    real = prologue_torch._prologue_q_out_impl
    monkeypatch.setattr(prologue_torch, "_prologue_q_out_impl", lambda *a: (direct.append(1), real(*a))[1])
    results = []
    for fn, want in ((prologue_torch._call_prologue, [1]), (torch.ops.rotary.prologue_q_out, [])):
        direct.clear()
        t, a = args()
        before = [x._version for x in (t["q"], a[-2], t["kc"], t["vc"], t["k"])]
        fn(*a)
        assert direct == want
        results.append((a[-2].clone(), t["kc"], t["vc"], [x._version for x in (t["q"], a[-2], t["kc"], t["vc"], t["k"])],
                        before))
    (o1, k1, v1, after1, before1), (o2, k2, v2, after2, before2) = results
    assert torch.equal(o1, o2) and torch.equal(k1, k2) and torch.equal(v1, v2) and k1.abs().sum() > 0
    bumps = [x - y for x, y in zip(after1, before1)]
    assert bumps == [x - y for x, y in zip(after2, before2)]
    assert bumps[0] == bumps[-1] == 0 and min(bumps[1:4]) > 0  # q and k unwritten; q_out and the caches written

    seen = []

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    t, a = args()
    direct.clear()
    with Seen():
        prologue_torch._call_prologue(*a)
    assert any("rotary.prologue_q_out" in name for name in seen), seen  # a q_out: the op that leaves q unwritten
    assert direct == []
    assert torch.equal(t["kc"], k1)


@pytest.mark.parametrize("path", ["rotary.prologue", "op", "patched layers' call"])
def test_the_prologue_refuses_tensors_that_need_a_gradient_before_writing(path):
    # No autograd formula: run anyway, it wrote q in place behind autograd's back (a saved q gave a silently wrong
    # gradient) and dropped the rotation from q's gradient. Under no_grad, weights that are Parameters are fine.
    spec = rotary.Spec(64)
    key = prologue_torch.spec_key(spec)
    g = torch.Generator().manual_seed(3)
    x = torch.randn((3, 4, 64), generator=g, requires_grad=True)
    k, v = torch.randn((3, 2, 64), generator=g), torch.randn((3, 2, 64), generator=g)
    w = torch.nn.Parameter(torch.ones(64))
    for q, weight in ((x * 2, None), (x.detach() * 2, w)):
        kc, vc = torch.zeros((2, 4, 2, 64)), torch.zeros((2, 4, 2, 64))
        q0 = q.detach().clone()
        args = _op_args(q, k, v, kc, vc, key, q_norm_weight=weight)
        with pytest.raises(RuntimeError, match=r"^\[rotary_prologue\] (q|q_norm_weight) requires grad.*not differentiable"):
            if path == "rotary.prologue":
                rotary.prologue(q, k, v, args[3], spec, k_cache=kc, v_cache=vc, slot_mapping=args[7], layout="thd",
                                q_norm_weight=weight)
            elif path == "op":
                torch.ops.rotary.prologue(*args)
            else:
                prologue_torch._call_prologue(*args)
        assert torch.equal(q.detach(), q0) and not kc.any() and not vc.any()
        with torch.no_grad():
            prologue_torch._call_prologue(*args) if path != "rotary.prologue" else rotary.prologue(
                q, k, v, args[3], spec, k_cache=kc, v_cache=vc, slot_mapping=args[7], layout="thd", q_norm_weight=weight)
        assert kc.any() and not torch.equal(q.detach(), q0)


def test_the_prologue_refuses_caches_that_need_a_gradient():
    key = prologue_torch.spec_key(rotary.Spec(64))
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn((3, h, 64), generator=g) for h in (4, 2, 2))
    kc, vc = torch.zeros((2, 4, 2, 64), requires_grad=True), torch.zeros((2, 4, 2, 64))
    with pytest.raises(RuntimeError, match=r"^\[rotary_prologue\] k_cache requires grad"):
        torch.ops.rotary.prologue(*_op_args(q, k, v, kc, vc, key))
    with pytest.raises(RuntimeError, match=r"^\[rotary_prologue\] k_cache requires grad"):
        rotary.prologue(q, k, v, torch.tensor([10, 11, 12]), rotary.Spec(64), k_cache=kc, v_cache=vc,
                        slot_mapping=torch.tensor([5, -1, 2]), layout="thd")
    assert not kc.detach().any()


def test_the_ops_refuse_a_scale_of_the_other_kind_or_given_twice():
    key = prologue_torch.spec_key(rotary.Spec(64))
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn((3, h, 64), generator=g) for h in (4, 2, 2))
    f8 = torch.zeros((2, 4, 2, 64), dtype=torch.float8_e4m3fn)
    cases = [(dict(k_cache=f8, v_cache=f8.clone(), k_scale=torch.tensor([2.0]), fp8_k_scale=2.0), "got both"),
             (dict(k_cache=f8, v_cache=f8.clone(), v_scale=torch.ones((2, 4, 2))), r"^\[rotary_prologue\] v_scale must hold one value"),
             (dict(k_cache=torch.zeros((2, 4, 2, 64)), v_cache=torch.zeros((2, 4, 2, 64)), fp8_v_scale=0.5),
              "fp8_v_scale is the scale of an fp8 cache")]
    for over, needle in cases:
        args = _op_args(q.clone(), k, v, over.pop("k_cache"), over.pop("v_cache"), key, **over)
        with pytest.raises(ValueError, match=needle):
            torch.ops.rotary.prologue(*args)
    kc8 = torch.zeros((2, 4, 2, 64), dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"^\[rotary_rerotate_cache\] k_scale must hold one value"):
        torch.ops.rotary.rerotate_cache(kc8, torch.tensor([1]), torch.tensor([0]), torch.tensor([3]), key, None, "nhd",
                                        torch.ones((2, 4, 2)), 1.0, 1)


def test_fp8_scales_given_as_tensors_equal_floats_and_compile_in_one_graph():
    # vLLM keeps its fp8 scales as tensors. The ops take one as k_scale / v_scale (one element) as well as the float
    # fp8_k_scale / fp8_v_scale; under torch.compile(fullgraph=True) float(tensor) cannot be traced, a tensor can.
    key = prologue_torch.spec_key(rotary.Spec(64))
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn((3, h, 64), generator=g) for h in (4, 2, 2))
    f8 = torch.zeros((2, 4, 2, 64), dtype=torch.float8_e4m3fn)
    ks, vs = torch.tensor([0.02]), torch.tensor([0.05])
    want = [q.clone(), f8.clone(), f8.clone()]
    torch.ops.rotary.prologue(*_op_args(want[0], k, v, want[1], want[2], key, fp8_k_scale=0.02, fp8_v_scale=0.05))
    eager = [q.clone(), f8.clone(), f8.clone()]
    torch.ops.rotary.prologue(*_op_args(eager[0], k, v, eager[1], eager[2], key, k_scale=ks, v_scale=vs))

    def step(qq, kc, vc, kscale, vscale):
        torch.ops.rotary.prologue(*_op_args(qq, k, v, kc, vc, key, k_scale=kscale, v_scale=vscale))

    compiled = [q.clone(), f8.clone(), f8.clone()]
    torch._dynamo.reset()
    try:
        torch.compile(step, fullgraph=True, backend="aot_eager")(*compiled, ks, vs)
    finally:
        torch._dynamo.reset()
    for got in (eager, compiled):
        for a, b in zip(got, want):
            assert torch.equal(a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
                               b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b)
    assert compiled[1].view(torch.uint8).any() and torch.equal(ks, torch.tensor([0.02]))
    kc = want[1].clone()
    torch.ops.rotary.rerotate_cache(kc, torch.tensor([5, 2]), torch.tensor([10, 12]), torch.tensor([3, 4]), key, None,
                                    "nhd", None, 0.02, 1)
    kt = want[1].clone()
    torch.ops.rotary.rerotate_cache(kt, torch.tensor([5, 2]), torch.tensor([10, 12]), torch.tensor([3, 4]), key, None,
                                    "nhd", ks, 1.0, 1)
    assert torch.equal(kt.view(torch.uint8), kc.view(torch.uint8)) and not torch.equal(kc.view(torch.uint8),
                                                                                        want[1].view(torch.uint8))


def test_rerotate_op_equals_rotating_at_the_new_positions():
    spec = rotary.Spec(64)
    key = prologue_torch.spec_key(spec)
    k = torch.randn((2, 2, 64), generator=torch.Generator().manual_seed(1))
    kc = torch.zeros((1, 4, 2, 64))
    vc = torch.zeros((1, 4, 2, 64))
    torch.ops.rotary.prologue(torch.zeros((2, 1, 64)), k, k, torch.tensor([100, 101]), key, kc, vc,
                              torch.tensor([0, 3]), None, "nhd", "thd", None, None, 1e-6, 0.0, None, None, 1.0, 1.0, None, 1)
    torch.ops.rotary.rerotate_cache(kc, torch.tensor([0, 3]), torch.tensor([100, 101]), torch.tensor([4, 5]), key, None,
                                    "nhd", None, 1.0, 1)
    inv = default_inv_freq(10000.0, 64)
    for i, (s, p) in enumerate(((0, 4), (3, 5))):
        np.testing.assert_allclose(kc[0, s].numpy(), rotate(k[i].double().numpy(), (p * inv)[None, :]), atol=3e-5)


def test_the_prologue_and_rerotation_refuse_inference_tensors_outside_inference_mode():
    # torch refuses in-place updates to inference tensors outside torch.inference_mode(); rotary.prologue (its direct
    # torch entry and the generic path), the op and rerotate_cache wrote the caches, q and the int8 scales.
    spec = rotary.Spec(64)
    key = prologue_torch.spec_key(spec)
    g = torch.Generator().manual_seed(4)
    k, v = torch.randn((3, 2, 64), generator=g), torch.randn((3, 2, 64), generator=g)
    with torch.inference_mode():
        q_inf, kc_inf, sc_inf = torch.randn((3, 4, 64), generator=g), torch.zeros((2, 4, 2, 64)), torch.ones(2, 4, 2)
    plain = dict(q=torch.randn((3, 4, 64), generator=g), k_cache=torch.zeros((2, 4, 2, 64)),
                 v_cache=torch.zeros((2, 4, 2, 64)))
    cases = [("q", dict(plain, q=q_inf)), ("k_cache", dict(plain, k_cache=kc_inf)),
             ("v_cache", dict(plain, v_cache=kc_inf)),
             ("k_scale", dict(plain, k_cache=torch.zeros((2, 4, 2, 64), dtype=torch.int8), k_scale=sc_inf))]
    for name, a in cases:
        before = {n: t.clone() for n, t in a.items()}
        msg = rf"^\[rotary_prologue\] {name} must not be an inference tensor for an in-place update outside"
        args = _op_args(a["q"], k, v, a["k_cache"], a["v_cache"], key, k_scale=a.get("k_scale"))
        for call in (lambda: rotary.prologue(a["q"], k, v, args[3], spec, k_cache=a["k_cache"], v_cache=a["v_cache"],
                                             slot_mapping=args[7], k_scale=a.get("k_scale")),
                     lambda: torch.ops.rotary.prologue(*args), lambda: prologue_torch._call_prologue(*args)):
            with pytest.raises(RuntimeError, match=msg):
                call()
            assert all(torch.equal(a[n], t) for n, t in before.items()), name
    for cache, scale, name in ((kc_inf, None, "k_cache"), (torch.zeros((2, 4, 2, 64), dtype=torch.int8), sc_inf,
                                                           "k_scale")):
        msg = rf"^\[rotary_rerotate_cache\] {name} must not be an inference tensor"
        ids = torch.tensor([5, 2]), torch.tensor([10, 12]), torch.tensor([3, 4])
        for call in (lambda: rotary.rerotate_cache(cache, *ids, spec, k_scale=scale),
                     lambda: torch.ops.rotary.rerotate_cache(cache, *ids, key, None, "nhd", scale, 1.0, 1)):
            with pytest.raises(RuntimeError, match=msg):
                call()
    assert not kc_inf.any() and torch.equal(sc_inf, torch.ones(2, 4, 2))
    with torch.inference_mode():  # inside inference_mode: allowed, as for torch's ops
        rotary.prologue(q_inf, k, v, 10, spec, k_cache=kc_inf, v_cache=kc_inf.clone(), slot_mapping=args[7])
        rotary.rerotate_cache(kc_inf, *ids, spec)
    assert kc_inf.any()


def test_rerotate_op_takes_the_lengths_a_dynamic_spec_sees():
    # Dynamic NTK's base switch as a sequence grows: keys written while it was 256 long, re-rotated for 5000.
    # The operator passes from_seq_len / to_seq_len as rotary.rerotate_cache does (it used to have no way to).
    spec = rotary.Spec(64, rope_type="dynamic", factor=4.0, max_position_embeddings=256)
    key = prologue_torch.spec_key(spec)
    kc = torch.randn((1, 4, 2, 64), generator=torch.Generator().manual_seed(2))
    ids = (torch.tensor([0, 3]), torch.tensor([100, 101]), torch.tensor([100, 101]))
    want = rotary.rerotate_cache(kc.clone(), *ids, spec, from_seq_len=256, to_seq_len=5000)
    got = kc.clone()
    torch.ops.rotary.rerotate_cache(got, *ids, key, None, "nhd", None, 1.0, 1, 256, 5000)
    assert torch.equal(got, want)
    assert not torch.equal(got, kc)  # the base switch moved the keys (same positions)
    torch.library.opcheck(torch.ops.rotary.rerotate_cache.default, (kc.clone(), *ids, key, None, "nhd", None, 1.0, 1,
                                                                     256, 5000), test_utils=("test_schema", "test_faketensor"))
