"""rotary.torch at its edges: vmap (cos_sin, length-dependent specs), shared tables, in place, grad positions."""
from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

import numpy as np  # noqa: E402

import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from reference import apply_bshd, default_inv_freq  # noqa: E402

ops = torch.ops.rotary


@pytest.mark.parametrize("kind", ["plain", "dynamic", "mrope"])
def test_vmap_of_cos_sin_equals_each_items_own_call(kind):
    # The rule lacked the defaulted seq_len (TypeError); M-RoPE ids [N, 3, ...] went to the op as they were (an
    # error for N = 2, wrong values for N = 3); dynamic scaling saw the longest item's length for every item.
    spec = {"plain": rotary.Spec(8),
            "dynamic": rotary.Spec(8, rope_type="dynamic", factor=4.0, max_position_embeddings=16),
            "mrope": rotary.Spec(16, mrope_section=[2, 3, 3])}[kind]
    key = rt.spec_key(spec)
    g = torch.Generator().manual_seed(1)
    for n in (2, 3):
        shape = (n, 3, 2, 5) if kind == "mrope" else (n, 2, 5)
        hi = 40 if kind == "dynamic" else 50
        ps = torch.randint(0, hi, shape, generator=g)
        if kind == "dynamic":
            ps[0] = ps[0] % 8  # one item within the original length, the others past it
        for seq_len in ((None, 64) if kind != "mrope" else (None,)):
            c, s = torch.func.vmap(lambda p: ops.cos_sin(p, key, seq_len))(ps)
            for i in range(n):
                ci, si = ops.cos_sin(ps[i], key, seq_len)
                assert torch.equal(c[i], ci) and torch.equal(s[i], si), (kind, n, seq_len, i)
        c, s = torch.func.vmap(lambda p: rt.cos_sin(p, spec))(ps)
        assert torch.equal(c[1], rt.cos_sin(ps[1], spec)[0])
        # batched along another axis
        c2, _ = torch.func.vmap(lambda p: ops.cos_sin(p, key), in_dims=1)(ps.movedim(0, 1).contiguous())
        assert torch.equal(c2, c)


@pytest.mark.parametrize("kind", ["dynamic", "longrope"])
def test_vmap_of_a_length_dependent_rotation_equals_each_items_own_call(kind):
    # The items were merged into one call, so each was rotated with the longest item's length.
    spec = (rotary.Spec(16, rope_type="dynamic", factor=2.0, max_position_embeddings=8) if kind == "dynamic" else
            rotary.Spec(16, rope_type="longrope", short_factor=[1.0 + 0.1 * i for i in range(8)],
                        long_factor=[2.0 + 0.3 * i for i in range(8)], original_max_position_embeddings=8,
                        max_position_embeddings=64))
    g = torch.Generator().manual_seed(0)
    xs, ks = torch.randn(2, 1, 5, 2, 16, generator=g), torch.randn(2, 1, 5, 1, 16, generator=g)
    ps = torch.stack((torch.arange(5), torch.arange(5) + 20))  # item 0 within the original length, item 1 past it
    for f in (lambda x, k, p: rt.apply(x, p, spec), lambda x, k, p: rt.apply_qk(x, k, p, spec),
              lambda x, k, p: ops.apply_qk(x, k, p, 0, rt.spec_key(spec))):
        got = torch.func.vmap(f)(xs, ks, ps)
        want = [f(xs[i], ks[i], ps[i]) for i in range(2)]
        want = torch.stack(want) if isinstance(got, torch.Tensor) else tuple(torch.stack(w) for w in zip(*want))
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    x0, x1 = xs[0].clone(), xs[1].clone()
    xi = xs.clone()
    torch.func.vmap(lambda x, p: (ops.apply_(x, p, 0, rt.spec_key(spec)), x)[1])(xi, ps)
    torch.testing.assert_close(xi, torch.stack((rt.apply(x0, ps[0], spec), rt.apply(x1, ps[1], spec))), rtol=0, atol=0)


def test_vmap_over_x_with_shared_mrope_ids_equals_each_items_own_call():
    # Unbatched [3, S] M-RoPE ids were merged as if they were [B, S] ids: the call raised a shape error.
    spec = rotary.Spec(16, mrope_section=[2, 3, 3])
    g = torch.Generator().manual_seed(3)
    xs, ks = torch.randn(4, 1, 5, 2, 16, generator=g), torch.randn(4, 1, 5, 1, 16, generator=g)
    ids = torch.stack((torch.arange(5), torch.arange(5) + 3, 2 * torch.arange(5)))
    for f in (lambda x, k: rt.apply(x, ids, spec), lambda x, k: rt.apply_qk(x, k, ids, spec)):
        got = torch.func.vmap(f)(xs, ks)
        want = [f(xs[i], ks[i]) for i in range(4)]
        want = torch.stack(want) if isinstance(got, torch.Tensor) else tuple(torch.stack(w) for w in zip(*want))
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_table_shared_by_the_batch_gets_the_sum_of_the_gradients():
    # [1, S, R/2] tables broadcast over B = 2 in the forward; backward reshaped [2, S, R/2] into [1, S, R/2] and raised.
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 2, 8, dtype=torch.float64, generator=g)
    cos = torch.randn(1, 3, 4, dtype=torch.float64, generator=g, requires_grad=True)
    sin = torch.randn(1, 3, 4, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(2, 3, 2, 8, dtype=torch.float64, generator=g)
    (rt.apply_cos_sin(x, cos, sin) * w).sum().backward()
    c2, s2 = cos.detach().expand(2, 3, 4).clone().requires_grad_(), sin.detach().expand(2, 3, 4).clone().requires_grad_()
    (rt.apply_cos_sin(x, c2, s2) * w).sum().backward()
    torch.testing.assert_close(cos.grad, c2.grad.sum(0, keepdim=True), rtol=0, atol=1e-12)
    torch.testing.assert_close(sin.grad, s2.grad.sum(0, keepdim=True), rtol=0, atol=1e-12)


def test_positions_that_require_grad_are_refused_not_given_no_gradient():
    # The output required grad and backward left positions.grad None: a silent zero for learned positions.
    x = torch.randn(1, 3, 1, 8, dtype=torch.float64)
    p = torch.tensor([0.5, 1.25, 7.75], dtype=torch.float64, requires_grad=True)
    spec = rotary.Spec(8)
    for call in (lambda: rt.apply(x, p, spec), lambda: rt.apply(x.clone().requires_grad_(), p, spec),
                 lambda: torch.func.grad(lambda u: rt.apply(u, p, spec).sum())(x)):
        with pytest.raises(RuntimeError, match=r"^\[rotary_apply\] positions requires grad"):
            call()
    y = rt.apply(x.clone().requires_grad_(), p.detach(), spec)
    assert y.requires_grad


def test_a_rope_module_patched_through_another_module_is_not_patched_again():
    # patch(m.model) then patch(m) took rotary's forward for the original: after both unpatches, in either order,
    # the RoPE module kept rotary's forward while is_patched() said False.
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    m = transformers.LlamaForCausalLM(cfg).eval()
    rope = m.model.rotary_emb
    assert "forward" not in rope.__dict__
    rt.patch(m.model)
    with pytest.raises(RuntimeError, match=r"\[rotary\.patch\] LlamaForCausalLM: its RoPE module model\.rotary_emb is "
                                           r"already patched"):
        rt.patch(m)
    assert not rt.is_patched(m)
    rt.unpatch(m)
    rt.unpatch(m.model)
    assert "forward" not in rope.__dict__ and not rt.is_patched(m.model)
    rt.patch(m)  # patchable again once undone
    rt.unpatch(m)
    assert "forward" not in rope.__dict__


def test_a_refused_inplace_write_of_k_leaves_q_unwritten():
    # q (not a leaf) was rotated in place, and its history rewritten, before torch refused the write to k (a leaf
    # that requires grad): the failed call left q modified.
    spec = rotary.Spec(16)
    key = rt.spec_key(spec)
    cos, sin = torch.randn(8, 8), torch.randn(8, 8)
    calls = (lambda q, k: rt.apply_qk(q, k, 0, spec, inplace=True),
             lambda q, k: ops.apply_qk_(q, k, None, 0, key),
             lambda q, k: ops.apply_qk_cos_sin_(q, k, cos, sin, None, 0))
    for call in calls:
        a = torch.randn(1, 4, 2, 16, requires_grad=True)
        q, k = a * 1, torch.randn(1, 4, 1, 16, requires_grad=True)
        q0, k0 = q.detach().clone(), k.detach().clone()
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
            call(q, k)
        assert torch.equal(q, q0) and torch.equal(k.detach(), k0) and type(q.grad_fn).__name__ == "MulBackward0"


def test_apply_qk_of_two_dtypes_checks_k_before_writing_q():
    # q and k of different dtypes took two calls: q was rotated in place before k's call raised, and a k with
    # another sequence length than q's was accepted (one dtype raises the joint kernel's error).
    spec = rotary.Spec(16)
    q = torch.randn(1, 4, 2, 16)
    bad = {"k sequence length S must equal q's 4, got 5": torch.randn(1, 5, 1, 16, dtype=torch.bfloat16),
           "k head_dim must equal q's 16, got 8": torch.randn(1, 4, 1, 8, dtype=torch.bfloat16),
           "k batch size must equal q's 1, got 2": torch.randn(2, 4, 1, 16, dtype=torch.bfloat16),
           r"\[rotary_apply\] k stride of dim 2 is 0": torch.randn(1, 4, 1, 16).bfloat16().expand(1, 4, 2, 16)}
    for msg, k in bad.items():
        for inplace in (False, True):
            if "stride" in msg and not inplace:
                continue
            qi = q.clone()
            with pytest.raises(ValueError, match=msg):
                rt.apply_qk(qi, k, 0, spec, inplace=inplace)
            assert torch.equal(qi, q), (msg, inplace)
    k = torch.randn(1, 4, 1, 16, dtype=torch.bfloat16, requires_grad=True)
    qi = q.clone()
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        rt.apply_qk(qi, k, 0, spec, inplace=True)
    assert torch.equal(qi, q)
    k = k.detach()
    want = rt.apply(q, 3, spec), rt.apply(k, 3, spec)
    qi, ki = q.clone(), k.clone()
    out = rt.apply_qk(qi, ki, 3, spec, inplace=True)
    assert out[0] is qi and out[1] is ki
    torch.testing.assert_close((qi, ki), want, rtol=0, atol=0)


def test_inplace_rotation_of_an_inference_tensor_outside_inference_mode_is_refused():
    # torch refuses in-place updates to inference tensors outside inference_mode; rotary's in-place operators
    # wrote them (the dispatcher does not check custom operators).
    from rotary import _torch_composite

    spec = rotary.Spec(16)
    key = rt.spec_key(spec)
    cos, sin = torch.randn(8, 8), torch.randn(8, 8)
    with torch.inference_mode():
        q, k = torch.randn(1, 3, 2, 16), torch.randn(1, 3, 1, 16)
    calls = {"x": (lambda: rt.apply(q, 0, spec, inplace=True), lambda: ops.apply_(q, None, 0, key),
                   lambda: rt.apply_rotary_emb(q, cos, sin, inplace=True),
                   lambda: ops.apply_cos_sin_(q, cos, sin, None)),
             "k": (lambda: rt.apply_qk(k.clone(), k, 0, spec, inplace=True),
                   lambda: ops.apply_qk_(k.clone(), k, None, 0, key),
                   lambda: ops.apply_qk_cos_sin_(k.clone(), k, cos, sin, None))}
    q0, k0 = q.clone(), k.clone()
    for forced in (False, True):
        with _torch_composite.forced() if forced else contextlib.nullcontext():
            for name, fs in calls.items():
                for f in fs:
                    with pytest.raises(RuntimeError, match=rf"\[rotary_apply\] {name} must not be an inference"):
                        f()
    assert torch.equal(q, q0) and torch.equal(k, k0)
    with torch.inference_mode():
        rt.apply(q, 0, spec, inplace=True)  # inside inference_mode: allowed, as for torch's ops
    torch.testing.assert_close(q, rt.apply(q0, 0, spec), rtol=0, atol=0)


def test_errors_name_the_arguments_of_the_function_called():
    # The kernel calls the tensor it rotates q and the offsets positions.*: rotary.torch's functions named x as q,
    # flash-attn's seqlen_offsets as positions.batch_offsets; a list x raised AttributeError, cos_sin(-3) torch's
    # arange error, and RoPE's messages named no argument.
    spec = rotary.Spec(16)
    cos, sin = torch.randn(8, 8), torch.randn(8, 8)
    cases = [(lambda: rt.apply_rotary_emb(torch.zeros(1, 4, 2, 16, dtype=torch.long), cos, sin), TypeError,
              r"^\[rotary_apply\] x dtype must be floating"),
             (lambda: rt.apply_rotary_emb(torch.randn(4, 2, 16), cos, sin), ValueError,
              r"^\[rotary_apply\] x must have rank 4"),
             (lambda: rt.apply_rotary_emb(torch.randn(2, 4, 2, 16), cos, sin, seqlen_offsets=torch.tensor([0, 1, 2])),
              ValueError, r"^\[rotary_apply\] seqlen_offsets must have shape \[B\] = \[2\] \(or \[1\]\), got \[3\]"),
             (lambda: rt.apply_rotary_emb([[0.0]], cos, sin), TypeError,
              r"^\[rotary_apply\] x must be a torch.Tensor, got list"),
             (lambda: rt.apply_cos_sin(torch.randn(1, 4, 1, 16).expand(1, 4, 2, 16), cos, sin, inplace=True),
              ValueError, r"^\[rotary_apply\] x stride of dim 2 is 0"),
             (lambda: rt.apply(torch.randn(1, 4, 1, 16).expand(1, 4, 2, 16), 0, spec, inplace=True), ValueError,
              r"^\[rotary_apply\] x stride of dim 2 is 0"),
             (lambda: rt.cos_sin(-3, spec), ValueError, r"^\[rotary_cos_sin\] positions must be an int n >= 0 .* got -3"),
             (lambda: rt.RoPE(64)(torch.randn(2, 3, 32)), ValueError,
              r"^\[rotary\.RoPE\] x must have last dimension C = n_embed = 64, got 32 \(shape \[2,3,32\]\)"),
             (lambda: rt.RoPE(7), ValueError, r"^\[rotary\.RoPE\] n_embed must be a positive even int .*got 7"),
             (lambda: rt.RoPE(64)(torch.randn(64)), ValueError,
              r"^\[rotary\.RoPE\] x must have shape \(\.\.\., T, C\) for RoPE, got shape \[64\]"),
             # apply_qk of two dtypes: q's call named it x
             (lambda: rt.apply_qk(torch.randn(4, 2, 16, dtype=torch.bfloat16), torch.randn(1, 4, 1, 16), 0, spec),
              ValueError, r"^\[rotary_apply\] q must have rank 4"),
             (lambda: rt.apply_qk(torch.zeros(1, 4, 2, 16, dtype=torch.long), torch.randn(1, 4, 1, 16), 0, spec,
                                  inplace=True), TypeError, r"^\[rotary_apply\] q dtype must be floating")]
    for f, kind, msg in cases:
        with pytest.raises(kind, match=msg):
            f()
    torch.testing.assert_close(rt.RoPE(64.0)(torch.ones(1, 2, 64)), rt.RoPE(64)(torch.ones(1, 2, 64)))


def test_seqlen_offsets_errors_name_the_callers_index():
    # A tensor seqlen_offsets (or batch_offsets / seq_offsets) out of range was reported on the ids built from it
    # ("positions.ids[1,0] must be >= 0", "positions.ids[0] ..." for varlen): the error now names the entry the
    # caller gave, with its value, before anything is written.
    cos, sin = torch.randn(16, 4), torch.randn(16, 4)
    x = torch.randn(2, 3, 2, 8)
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    cases = [(x, {}, [0, -1], r"seqlen_offsets\[1\] must be >= 0 \(negative positions are invalid\), got -1$"),
             (x, {}, [0, 2**40], r"seqlen_offsets\[1\] must be < 2\^31, got 1099511627776$"),
             (x, {}, [2**31 - 2, 0], r"seqlen_offsets\[0\] must be <= 2147483645 \(its last position, \+ 2, must be "
                                     r"< 2\^31\), got 2147483646$"),
             (x[:1], {}, [-5], r"seqlen_offsets\[0\] must be >= 0 \(negative positions are invalid\), got -5$"),
             (x.reshape(6, 2, 8), dict(cu_seqlens=cu), [-3, 0],
              r"seqlen_offsets\[0\] must be >= 0 \(negative positions are invalid\), got -3$"),
             (x.reshape(6, 2, 8), dict(cu_seqlens=cu), [0, 2**40],
              r"seqlen_offsets\[1\] must be < 2\^31, got 1099511627776$"),
             (x.reshape(6, 2, 8), dict(cu_seqlens=cu), [0, 2**31 - 3],
              r"seqlen_offsets\[1\] must be <= 2147483644 \(its last position, \+ 3, must be < 2\^31\), "
              r"got 2147483645$")]
    for t, kw, offsets, msg in cases:
        for inplace, grad in ((False, False), (True, False), (True, True)):
            xi = t.clone().requires_grad_(grad)
            with pytest.raises(ValueError, match=r"^\[rotary_apply\] " + msg):
                rt.apply_rotary_emb(xi, cos, sin, inplace=inplace, seqlen_offsets=torch.tensor(offsets), **kw)
            assert torch.equal(xi, t)
    # rotary.torch's own functions name positions.batch_offsets / positions.seq_offsets, as rotary.apply does
    spec = rotary.Spec(8)
    with pytest.raises(ValueError, match=r"^\[rotary_apply\] positions.batch_offsets\[1\] must be >= 0 .*got -1$"):
        rt.apply(x, None, spec, batch_offsets=torch.tensor([0, -1]))
    with pytest.raises(ValueError, match=r"^\[rotary_apply\] positions.seq_offsets\[0\] must be >= 0 .*got -3$"):
        rt.apply_cos_sin(x.reshape(6, 2, 8), cos, sin, layout="thd", cu_seqlens=cu, seq_offsets=[-3, 0])
    # an int start added to them keeps every position >= 0: accepted, as before; an empty sequence has no position
    torch.testing.assert_close(rt.apply(x, 5, spec, batch_offsets=torch.tensor([0, -1])),
                               rt.apply(x, torch.tensor([[5, 6, 7], [4, 5, 6]]), spec), rtol=0, atol=0)
    rt.apply_rotary_emb(x.reshape(6, 2, 8), cos, sin, cu_seqlens=[0, 0, 6], seqlen_offsets=torch.tensor([-1, 0]))


def test_apply_qk_of_two_dtypes_in_place_under_compile_and_vmap():
    # The eager pre-checks of k's write (is_inference, _debug_has_internal_overlap) failed torch.compile(fullgraph)
    # ("Encountered tensor.is_inference() during tracing") and vmap ("Batching rule not implemented").
    spec = rotary.Spec(16)
    pos = torch.arange(4)[None]
    g = torch.Generator().manual_seed(6)
    q, k = torch.randn(3, 1, 4, 2, 16, generator=g).bfloat16(), torch.randn(3, 1, 4, 1, 16, generator=g)

    def fn(q, k):
        qq, kk = q.clone(), k.clone()
        rt.apply_qk(qq, kk, pos, spec, inplace=True)
        return qq, kk

    want = [fn(q[i], k[i]) for i in range(3)]
    torch.testing.assert_close(want[0], (rt.apply(q[0], pos, spec), rt.apply(k[0], pos, spec)), rtol=0, atol=0)
    got = torch.func.vmap(fn)(q, k)
    torch.testing.assert_close(got, tuple(torch.stack(w) for w in zip(*want)), rtol=0, atol=0)
    torch._dynamo.reset()
    try:
        got = torch.compile(fn, fullgraph=True, backend="aot_eager")(q[0], k[0])
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(got, want[0], rtol=0, atol=0)


def test_an_empty_q_or_k_with_zero_strides_leaves_the_other_output_right():
    # An empty tensor is contiguous to torch whatever its strides: the kernel asked for a copy of a zero-stride empty q,
    # .contiguous() returned it as it was, the second call declined again unchecked and k's output stayed
    # torch.empty_like garbage (1e38 / NaN). autograd's gradient of an unused 0-head output is such a tensor.
    spec = rotary.Spec(16)
    key = rt.spec_key(spec)
    g = torch.Generator().manual_seed(7)
    pos = torch.arange(5)
    x = torch.randn(2, 5, 3, 16, generator=g)
    want = torch.from_numpy(apply_bshd(x.numpy(), pos.numpy(), default_inv_freq(1e4, 16))).float()
    ang = pos[:, None].double() * torch.from_numpy(default_inv_freq(1e4, 16))
    cos, sin = ang.cos().float(), ang.sin().float()
    tol = dict(rtol=0, atol=1e-5)
    for empty in (torch.zeros(()).expand(2, 5, 0, 16), torch.empty_strided((2, 5, 0, 16), (5, 0, 7, 1))):
        for f in (lambda a, b: ops.apply_qk(a, b, pos, 0, key), lambda a, b: rt.apply_qk(a, b, pos, spec),
                  lambda a, b: ops.apply_qk_cos_sin(a, b, cos, sin, pos)):
            torch.testing.assert_close(f(empty, x)[1], want, **tol)
            torch.testing.assert_close(f(x, empty)[0], want, **tol)
    q = torch.randn(2, 5, 0, 16, requires_grad=True)
    k = x.clone().requires_grad_()
    w = torch.randn(2, 5, 3, 16, generator=g)
    torch._dynamo.reset()
    try:
        f = torch.compile(lambda q, k: ops.apply_qk(q, k, pos, 0, key), backend="aot_eager", dynamic=True)
        qo, ko = f(q, k)
        ((ko * w).sum() + qo.sum()).backward()
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(ko, want, **tol)
    grad = apply_bshd(w.numpy(), pos.numpy(), default_inv_freq(1e4, 16), inverse=True)
    torch.testing.assert_close(k.grad, torch.from_numpy(grad).float(), **tol)
    assert np.isfinite(k.grad.numpy()).all()


def test_a_kernel_that_still_declines_its_inputs_raises(monkeypatch):
    # No call returns outputs the kernel did not write: a second refusal raises.
    from rotary import _torch_ops

    monkeypatch.setattr(_torch_ops._native, "_torch_apply", lambda *a: 1)
    with pytest.raises(RuntimeError, match=r"^\[rotary_apply\] q must be readable by the kernel"):
        ops.apply(torch.randn(1, 2, 1, 8), None, 0, rt.spec_key(rotary.Spec(8)))


def test_an_offset_given_with_position_ids_is_refused():
    # torch.ops.rotary.apply(x, ids, 5, key) rotated by the ids alone: the offset was silently ignored.
    from rotary import _torch_composite

    spec = rotary.Spec(16)
    key = rt.spec_key(spec)
    cos, sin = rt.cos_sin(torch.arange(64), spec)
    ids = torch.arange(4)
    x0, k0 = torch.randn(1, 4, 2, 16), torch.randn(1, 4, 1, 16)
    calls = (lambda x, k: ops.apply(x, ids, 5, key), lambda x, k: ops.apply_(x, ids, 5, key),
             lambda x, k: ops.apply_qk(x, k, ids, 5, key), lambda x, k: ops.apply_qk_(x, k, ids, 5, key),
             lambda x, k: ops.apply_cos_sin(x, cos, sin, ids, 5), lambda x, k: ops.apply_cos_sin_(x, cos, sin, ids, 5),
             lambda x, k: ops.apply_qk_cos_sin(x, k, cos, sin, ids, 5),
             lambda x, k: ops.apply_qk_cos_sin_(x, k, cos, sin, ids, 5),
             lambda x, k: ops.apply_cos_sin(x.double(), cos.double(), sin.double(), ids, 5))
    for forced in (False, True):
        with _torch_composite.forced() if forced else contextlib.nullcontext():
            for f in calls:
                x, k = x0.clone(), k0.clone()
                with pytest.raises(ValueError, match=r"^\[rotary_apply\] offset must be 0 when positions are given"
                                                     r" .*got 5$"):
                    f(x, k)
                assert torch.equal(x, x0) and torch.equal(k, k0)
    # offset 0 with ids, and the ids moved by the offset, as before; the public functions never pass both
    want = torch.from_numpy(apply_bshd(x0.numpy(), (ids + 5).numpy(), default_inv_freq(1e4, 16))).float()
    for y in (ops.apply(x0, ids + 5, 0, key), rt.apply(x0, ids + 5, spec), rotary.apply(x0, ids + 5, spec),
              rt.apply(x0, 5, spec), ops.apply(x0, None, 5, key)):
        torch.testing.assert_close(y, want, rtol=0, atol=1e-5)


def test_out_that_torch_would_refuse_to_write_is_refused():
    # rotary.apply(x, out=leaf requiring grad) and out= an inference tensor outside inference mode were written;
    # torch's own out= functions (torch.mul(x, 2, out=leaf)) and rotary's in-place operators refuse both.
    spec = rotary.Spec(16)
    g = torch.Generator().manual_seed(8)
    x, k = torch.randn(1, 4, 2, 16, generator=g), torch.randn(1, 4, 1, 16, generator=g)
    cos, sin = rt.cos_sin(torch.arange(8), spec)
    freqs = rotary.mrope_frequencies(spec)
    fp8 = getattr(torch, "float8_e4m3fn", None)
    calls = [("out", lambda o, ko: rotary.apply(x, 0, spec, out=o)),
             ("out", lambda o, ko: rotary.apply_cos_sin(x, cos, sin, 0, out=o)),
             ("q_out", lambda o, ko: rotary.apply_qk(x, k, 0, spec, q_out=o, k_out=ko)),
             ("k_out", lambda o, ko: rotary.apply_qk(x, k, 0, spec, q_out=o.detach().clone(), k_out=ko)),
             ("q_out", lambda o, ko: rotary.apply_qk_cos_sin(x, k, cos, sin, 0, q_out=o, k_out=ko)),
             ("out", lambda o, ko: rotary.apply_axes(x, torch.arange(4)[None], freqs, out=o)),
             ("q", lambda o, ko: rotary.apply_qk(o, ko, 0, spec, inplace=True)),
             ("q", lambda o, ko: rotary.apply_qk_cos_sin(o, ko, cos, sin, 0, inplace=True))]
    prefix = {5: "rotary_apply_axes"}
    for i, (name, f) in enumerate(calls):
        where = prefix.get(i, "rotary_apply")
        o, ko = torch.zeros_like(x, requires_grad=True), torch.zeros_like(k, requires_grad=name == "k_out")
        if name != "q":  # (in place, a tensor requiring grad goes through autograd, recorded or refused by torch)
            with pytest.raises(RuntimeError, match=rf"^\[{where}\] {name} must not require grad"):
                f(o, ko)
            assert not o.detach().any() and not ko.detach().any()
            with torch.no_grad():  # torch writes such tensors without grad mode, as rotary does
                f(o, ko)
            assert o.detach().any() or ko.detach().any()
        with torch.inference_mode():
            o, ko = torch.zeros_like(x), torch.zeros_like(k)
        with pytest.raises(RuntimeError, match=rf"^\[{where}\] {name} must not be an inference tensor for an in-place"
                                               r" update outside InferenceMode"):
            f(o.clone() if name == "k_out" else o, ko.clone() if name == "q_out" else ko)
        assert not o.any() and not ko.any()
        with torch.inference_mode():
            f(o, ko)  # inside inference_mode: written, as torch writes them
    if fp8 is not None:
        with torch.inference_mode():
            o8 = torch.zeros(x.shape, dtype=fp8)
        with pytest.raises(RuntimeError, match=r"^\[rotary_apply\] out must not be an inference tensor"):
            rotary.apply(x, 0, spec, out=o8, out_scale=1.0)


def test_small_edges_of_the_torch_entries():
    # apply_qk of two dtypes failed torch.compile(fullgraph=True, dynamic=True) (its k check formatted k.shape before
    # checking: "Unsupported: tp_repr_impl"); vmap over an empty batch on the per-item path raised a bare
    # IndexError; threads=-2 was accepted; rt.apply(x, "abc", spec) raised torch's conversion TypeError.
    spec = rotary.Spec(16)
    g = torch.Generator().manual_seed(9)
    q, k = torch.randn(2, 4, 3, 16, generator=g), torch.randn(2, 4, 1, 16, generator=g).bfloat16()
    f = lambda q, k: rt.apply_qk(q, k, 2, spec)  # noqa: E731
    torch._dynamo.reset()
    try:
        got = torch.compile(f, fullgraph=True, dynamic=True, backend="aot_eager")(q, k)
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(got, f(q, k), rtol=0, atol=0)
    # ... and the positions check must not break compiling list or numpy positions (it read ndarray.dtype, which
    # dynamo cannot trace: "Unsupported ndarray attribute access").
    for pos in ([0, 2, 5, 1], np.array([3, 1, 4, 1])):
        fl = lambda q, k: rt.apply_qk(q, k, pos, spec)  # noqa: E731
        torch._dynamo.reset()
        try:
            got = torch.compile(fl, fullgraph=True, backend="aot_eager")(q, k)
        finally:
            torch._dynamo.reset()
        torch.testing.assert_close(got, fl(q, k), rtol=0, atol=0)
    specd = rotary.Spec(16, rope_type="dynamic", factor=2.0, max_position_embeddings=8)
    mrope = rotary.Spec(16, mrope_section=[2, 3, 3])
    xs, ps = torch.randn(0, 1, 4, 3, 16), torch.zeros(0, 1, 4, dtype=torch.long)
    assert torch.func.vmap(lambda a, p: rt.apply(a, p, specd))(xs, ps).shape == (0, 1, 4, 3, 16)
    qo, ko = torch.func.vmap(lambda a, b, p: ops.apply_qk(a, b, p, 0, rt.spec_key(specd)))(xs, xs[:, :, :, :1], ps)
    assert qo.shape == (0, 1, 4, 3, 16) and ko.shape == (0, 1, 4, 1, 16)
    c, s = torch.func.vmap(lambda p: ops.cos_sin(p, rt.spec_key(mrope)))(torch.zeros(0, 3, 2, 5, dtype=torch.long))
    assert c.shape == s.shape == (0, 2, 5, 8) and c.dtype == torch.float32
    x = torch.randn(1, 4, 2, 16, generator=g)
    cos, sin = rt.cos_sin(torch.arange(8), spec)
    for call in (lambda: ops.apply(x, None, 0, rt.spec_key(spec), "bshd", "", False, None, -2),
                 lambda: ops.apply_(x, None, 0, rt.spec_key(spec), "bshd", "", False, None, -2),
                 lambda: rt.apply(x, 0, spec, threads=-2), lambda: rt.apply_cos_sin(x, cos, sin, threads=-1),
                 lambda: rt.apply_qk(x, x, 0, spec, threads=-2)):
        x0 = x.clone()
        with pytest.raises(ValueError, match=r"^\[rotary_apply\] threads must be >= 0 .*got -[12]$"):
            call()
        assert torch.equal(x, x0)
    for bad in ("abc", ["a", "b", "c", "d"], [[0, 1], [2]]):
        with pytest.raises(TypeError, match=r"^\[rotary_apply\] positions must be an int, a tensor, or an integer"):
            rt.apply(x, bad, spec)
    torch.testing.assert_close(rt.apply(x, [0, 1, 2, 3], spec), rt.apply(x, 0, spec), rtol=0, atol=0)
