"""rotary.onnx_rotary_embedding vs the ONNX conformance data, onnx.reference and onnxruntime (opset 23)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import rotary
from conftest import reference_data_dir
from reference import onnx_rotary_embedding as onnx_ref64

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ONNX_ABS_TOL = 1e-6  # fp32 data in [0, 1): rotary computes in f32 and rounds once (< 1.2e-7 from numpy's f32)


def _conformance_cases():
    root = reference_data_dir() / "onnx"
    manifest = json.loads((root / "manifest.json").read_text())
    return [(root / t["dir"], t) for t in manifest["tests"]]


CASES = _conformance_cases()


def test_conformance_data_present():
    assert len(CASES) >= 5


@pytest.mark.parametrize("case", CASES, ids=[c[1]["dir"] for c in CASES])
def test_onnx_conformance_case(case):
    path, meta = case
    model = onnx.load(str(path / "model.onnx"))
    attrs = dict(meta.get("attributes") or {})
    for node in model.graph.node:
        if node.op_type == "RotaryEmbedding":
            attrs.update({a.name: helper.get_attribute_value(a) for a in node.attribute})
    names = [i.name for i in model.graph.input]
    inputs = {}
    for i, name in enumerate(names):
        t = TensorProto()
        t.ParseFromString((path / "test_data_set_0" / f"input_{i}.pb").read_bytes())
        inputs[name] = numpy_helper.to_array(t)
    out = TensorProto()
    out.ParseFromString((path / "test_data_set_0" / "output_0.pb").read_bytes())
    expected = numpy_helper.to_array(out)
    x, cos, sin = (inputs[n] for n in names[:3])
    pos = inputs[names[3]] if len(names) > 3 else None
    y = rotary.onnx_rotary_embedding(x, cos, sin, pos, interleaved=int(attrs.get("interleaved", 0)),
                                     rotary_embedding_dim=int(attrs.get("rotary_embedding_dim", 0)),
                                     num_heads=int(attrs.get("num_heads", 0)))
    assert y.dtype == expected.dtype and y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=0, atol=ONNX_ABS_TOL)


# ----------------------------------------------------------------------------- random cases, live runtimes

_NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}


def _model(x, cos, pos, attrs):
    et = _NP_TO_ONNX[x.dtype]
    inputs = [helper.make_tensor_value_info("X", et, list(x.shape)),
              helper.make_tensor_value_info("cos_cache", et, list(cos.shape)),
              helper.make_tensor_value_info("sin_cache", et, list(cos.shape))]
    node_inputs = ["X", "cos_cache", "sin_cache"]
    if pos is not None:
        inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, list(pos.shape)))
        node_inputs.append("position_ids")
    node = helper.make_node("RotaryEmbedding", node_inputs, ["Y"], **attrs)
    graph = helper.make_graph([node], "rope", inputs, [helper.make_tensor_value_info("Y", et, list(x.shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


def _random_case(r, rank, interleaved, partial, with_pos, dtype):
    B, N, S, H = int(r.integers(1, 4)), int(r.integers(1, 5)), int(r.integers(1, 9)), int(r.choice([8, 16, 32]))
    R = H // 2 if partial else H
    x = r.standard_normal((B, N, S, H)) if rank == 4 else r.standard_normal((B, S, N * H))
    if with_pos:
        max_pos = 64
        ang = np.arange(max_pos)[:, None] * (1.0 / 10000 ** (np.arange(0, R, 2) / R))[None]
        cos, sin = np.cos(ang), np.sin(ang)
        pos = r.integers(0, max_pos, (B, S)).astype(np.int64)
    else:
        cos, sin = r.uniform(-1, 1, (B, S, R // 2)), r.uniform(-1, 1, (B, S, R // 2))
        pos = None
    attrs = {"interleaved": int(interleaved)}
    if partial:
        attrs["rotary_embedding_dim"] = R
    if rank == 3:
        attrs["num_heads"] = N
    return x.astype(dtype), cos.astype(dtype), sin.astype(dtype), pos, attrs


GRID = [(rank, il, partial, with_pos) for rank in (3, 4) for il in (0, 1) for partial in (False, True)
        for with_pos in (True, False)]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("rank,interleaved,partial,with_pos", GRID)
def test_random_cases_vs_onnx_reference_and_onnxruntime(rank, interleaved, partial, with_pos, dtype):
    from onnx.reference import ReferenceEvaluator

    r = np.random.default_rng(1000 * rank + 100 * interleaved + 10 * partial + with_pos)
    for _ in range(3):
        x, cos, sin, pos, attrs = _random_case(r, rank, interleaved, partial, with_pos, np.dtype(dtype))
        feeds = {"X": x, "cos_cache": cos, "sin_cache": sin}
        if pos is not None:
            feeds["position_ids"] = pos
        model = _model(x, cos, pos, attrs)
        ours = rotary.onnx_rotary_embedding(x, cos, sin, pos, **attrs)
        assert ours.dtype == x.dtype and ours.shape == x.shape
        truth = onnx_ref64(x, cos, sin, pos, **attrs)
        # f32: one rounding of |y| <= ~4; f16: rotary rounds once (half ulp of 4 = 2e-3), the ONNX reference
        # rounds products and sums in f16 (up to ~3 half-ulps).
        tol_ours, tol_peer = (2e-6, 2e-6) if dtype == "float32" else (2.5e-3, 8e-3)
        np.testing.assert_allclose(ours.astype(np.float64), truth, rtol=0, atol=tol_ours)
        ref_out = ReferenceEvaluator(model).run(None, feeds)[0]
        np.testing.assert_allclose(ours.astype(np.float64), ref_out.astype(np.float64), rtol=0,
                                   atol=tol_ours + tol_peer)
        ort_out = _run_ort(model, feeds)
        if ort_out is not None:
            np.testing.assert_allclose(ours.astype(np.float64), ort_out.astype(np.float64), rtol=0,
                                       atol=tol_ours + tol_peer)


_ORT_UNSUPPORTED = set()


def _run_ort(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    key = feeds["X"].dtype.name
    if key in _ORT_UNSUPPORTED:
        return None
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - ORT reports missing kernels as generic failures
        if key == "float32":
            raise
        _ORT_UNSUPPORTED.add(key)  # e.g. no float16 CPU kernel in this ORT build
        print(f"onnxruntime has no CPU RotaryEmbedding for {key}: {e}")
        return None
    return sess.run(None, feeds)[0]


def test_onnx_errors_and_torch_inputs():
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(7)
    x, cos, sin, pos, attrs = _random_case(r, 4, 0, False, True, np.dtype("float32"))
    bad = pos.copy()
    bad[0, 0] = cos.shape[0]  # one past the cache: an error, never an identity rotation
    with pytest.raises(ValueError):
        rotary.onnx_rotary_embedding(x, cos, sin, bad, **attrs)
    x3 = x.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1)
    with pytest.raises(ValueError, match="num_heads"):
        rotary.onnx_rotary_embedding(x3, cos, sin, pos)
    y = rotary.onnx_rotary_embedding(torch.from_numpy(x), torch.from_numpy(cos), torch.from_numpy(sin),
                                     torch.from_numpy(pos), **attrs)
    assert isinstance(y, torch.Tensor)
    np.testing.assert_allclose(y.numpy(), onnx_ref64(x, cos, sin, pos, **attrs), atol=2e-6)
    # 3-D input equals the 4-D result re-laid out
    y3 = rotary.onnx_rotary_embedding(x3, cos, sin, pos, num_heads=x.shape[1])
    np.testing.assert_array_equal(y3, y.numpy().transpose(0, 2, 1, 3).reshape(y3.shape))


def test_onnx_errors_name_the_nodes_inputs():
    """Errors of the mapped apply call are reported in the node's names (X, Y, position_ids, cos_cache,
    sin_cache) under [onnx_rotary_embedding], as docs/api.md promises; they used to name q, positions.ids, cos."""
    x = np.ones((1, 2, 3, 8), np.float32)
    cos, sin = np.ones((5, 4), np.float32), np.zeros((5, 4), np.float32)
    ids = np.zeros((1, 3), np.int64)
    cases = [
        (lambda: rotary.onnx_rotary_embedding(x.astype(np.int32), cos, sin, ids), TypeError,
         "[onnx_rotary_embedding] X dtype must be floating"),
        (lambda: rotary.onnx_rotary_embedding(x, cos, sin, np.array([[0, -1, 2]])), ValueError,
         "[onnx_rotary_embedding] position_ids[0,1] must be >= 0"),
        # the id past the caches named by its index (it said "position 5 is out of range", not where)
        (lambda: rotary.onnx_rotary_embedding(x, cos, sin, np.array([[0, 5, 2]])), ValueError,
         "[onnx_rotary_embedding] position_ids[0,1] is 5, out of range for cos_cache/sin_cache with 5 rows"),
        (lambda: rotary.onnx_rotary_embedding(np.ones((2, 2, 3, 8), np.float32), cos, sin,
                                              np.array([[0, 1, 2], [3, 7, 5]])), ValueError,
         "[onnx_rotary_embedding] position_ids[1,1] is 7, out of range for cos_cache/sin_cache with 5 rows"),
        # ranks the operator does not take (ONNX: X is 3-D with num_heads or 4-D), in its words at every rank: past
        # 4 it said "[rotary] X must have rank <= 4" (the extension's conversion)
        (lambda: rotary.onnx_rotary_embedding(x[None], cos, sin, ids), ValueError,
         "[onnx_rotary_embedding] X must have rank 3 [batch, seq, hidden] (with num_heads) or 4 "
         "[batch, num_heads, seq, head_size], got rank 5"),
        (lambda: rotary.onnx_rotary_embedding(x[0, 0], cos, sin, ids), ValueError,
         "[onnx_rotary_embedding] X must have rank 3 [batch, seq, hidden] (with num_heads) or 4 "
         "[batch, num_heads, seq, head_size], got rank 2 (shape [3,8])"),
        (lambda: rotary.onnx_rotary_embedding(x, cos[None, None, None, None], sin[None, None, None, None], ids),
         ValueError, "[onnx_rotary_embedding] cos_cache must have rank <= 4, got rank 6"),
        (lambda: rotary.onnx_rotary_embedding(x, cos, sin, ids[None, None, None]), ValueError,
         "[onnx_rotary_embedding] position_ids must be 2-D [batch, seq], got rank 5"),
        (lambda: rotary.onnx_rotary_embedding(x, cos, sin, np.zeros((1, 4), np.int64)), ValueError,
         "[onnx_rotary_embedding] position_ids shape [1,4] does not match"),
    ]
    for call, exc, message in cases:
        with pytest.raises(exc) as info:
            call()
        assert message in str(info.value), str(info.value)
        for internal in ("[rotary_apply]", "[rotary]", "positions.ids", " q ", "q dtype"):
            assert internal not in str(info.value), str(info.value)


def test_an_odd_head_with_an_even_partial_rotation_and_int_attributes_only():
    # The function body splits [R, head - R]: head 7 with R 6 rotates six channels and passes one through (onnx.reference
    # and onnxruntime agree); rotary refused every odd head. A fractional attribute was truncated by int().
    from onnx.reference import ReferenceEvaluator

    r = np.random.default_rng(11)
    x = r.standard_normal((2, 3, 4, 7)).astype(np.float32)
    ang = np.arange(9)[:, None] * (1.0 / 10000 ** (np.arange(0, 6, 2) / 6))[None]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    pos = r.integers(0, 9, (2, 4)).astype(np.int64)
    for interleaved in (0, 1):
        attrs = {"interleaved": interleaved, "rotary_embedding_dim": 6}
        ours = rotary.onnx_rotary_embedding(x, cos, sin, pos, **attrs)
        feeds = {"X": x, "cos_cache": cos, "sin_cache": sin, "position_ids": pos}
        ref = ReferenceEvaluator(_model(x, cos, pos, attrs)).run(None, feeds)[0]
        np.testing.assert_allclose(ours, ref, rtol=0, atol=2e-6)
        np.testing.assert_array_equal(ours[..., 6], x[..., 6])
    with pytest.raises(ValueError, match="head_size must be even when rotary_embedding_dim is 0"):
        rotary.onnx_rotary_embedding(x, cos, sin, pos)
    for name, value in (("interleaved", 1.5), ("rotary_embedding_dim", 6.0), ("num_heads", 2.99)):
        with pytest.raises(TypeError, match=rf"\[onnx_rotary_embedding\] {name} must be an int"):
            rotary.onnx_rotary_embedding(x, cos, sin, pos, **{"rotary_embedding_dim": 6, name: value})


@pytest.mark.parametrize("rank,interleaved,partial,with_pos", GRID)
def test_a_torch_x_that_requires_grad_gets_the_operators_gradient(rank, interleaved, partial, with_pos):
    """Y was returned detached from X (no grad_fn), so a loss through Y and another path gave X the other path's
    gradient only. The truth: the Jacobian of the float64 reference, column by column (caches of any values)."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(7 + 8 * rank + 4 * interleaved + 2 * partial + with_pos)
    x, cos, sin, pos, attrs = _random_case(r, rank, interleaved, partial, with_pos, "float64")
    cos, sin = (c.astype(np.float32).astype(np.float64) for c in (cos, sin))  # the kernels hold caches in f32
    g = r.standard_normal(x.shape)
    flat = np.eye(x.size)
    jac = np.stack([onnx_ref64(e.reshape(x.shape), cos, sin, pos, **attrs).ravel() for e in flat], axis=1)
    want = (jac.T @ g.ravel()).reshape(x.shape)
    for inverse in (False, True):
        xt = torch.tensor(x, requires_grad=True)
        y = rotary.onnx_rotary_embedding(xt, torch.tensor(cos), torch.tensor(sin),
                                         None if pos is None else torch.tensor(pos), inverse=inverse, **attrs)
        assert y.requires_grad and y.grad_fn is not None
        (y * torch.tensor(g)).sum().backward()
        if not inverse:
            np.testing.assert_allclose(y.detach().numpy(), onnx_ref64(x, cos, sin, pos, **attrs), rtol=0, atol=1e-12)
            np.testing.assert_allclose(xt.grad.numpy(), want, rtol=0, atol=1e-12)
        else:  # the inverse rotation's gradient is the forward rotation
            fwd = rotary.onnx_rotary_embedding(torch.tensor(g), torch.tensor(cos), torch.tensor(sin),
                                               None if pos is None else torch.tensor(pos), **attrs)
            np.testing.assert_allclose(xt.grad.numpy(), fwd.numpy(), rtol=0, atol=0)


def test_caches_that_require_grad_are_refused_not_left_out_of_the_graph():
    torch = pytest.importorskip("torch")
    x = torch.randn(1, 2, 3, 8, dtype=torch.float64, requires_grad=True)
    cos, sin = torch.rand(1, 3, 4, dtype=torch.float64), torch.rand(1, 3, 4, dtype=torch.float64)
    for name, kw in (("cos_cache", {"cos_cache": cos.clone().requires_grad_()}),
                     ("sin_cache", {"sin_cache": sin.clone().requires_grad_()})):
        args = {"cos_cache": cos, "sin_cache": sin, **kw}
        with pytest.raises(ValueError, match=rf"^\[onnx_rotary_embedding\] {name} must not require grad"):
            rotary.onnx_rotary_embedding(x.detach(), args["cos_cache"], args["sin_cache"])
        with torch.no_grad():  # nothing is recorded, so nothing is left out
            y = rotary.onnx_rotary_embedding(x, args["cos_cache"], args["sin_cache"])
        assert not y.requires_grad
    y = rotary.onnx_rotary_embedding(x, cos, sin)
    (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|does not require grad|doesn't require grad"):
        torch.autograd.grad(gx.sum(), x)
