"""rotary.apply / apply_qk / cos_sin on numpy arrays and torch tensors vs the float64 reference."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import rotary
from reference import apply_bshd, default_inv_freq, rotate

# Max abs error of a rotated output with |x| ~ N(0, 1) vs float64 truth, by dtype (one output rounding
# plus f32 arithmetic; cf. tests/testing/tolerances.h): f32 2e-6 (positions < 2^12), f16 half-ulp of 4,
# bf16 half-ulp of 4, f64 from f32 cos/sin values (~6e-8 per value).
TOL = {"float32": 4e-6, "float16": 2.5e-3, "bfloat16": 1.6e-2, "float64": 5e-7}


def _ml_bf16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return np.dtype(ml_dtypes.bfloat16)


def _np_dtype(name):
    return _ml_bf16() if name == "bfloat16" else np.dtype(name)


def _expected(x64, positions, spec, layout="bshd", pairing=None, inverse=False, seq_len=None):
    inv, af = spec.frequencies(seq_len)
    pairing = pairing or spec.pairing
    if layout == "bhsd":
        xb = np.swapaxes(x64, 1, 2)
        return np.swapaxes(apply_bshd(xb, positions, inv, pairing=pairing, scale=af, inverse=inverse), 1, 2)
    if layout == "thd":
        return apply_bshd(x64[None], positions, inv, pairing=pairing, scale=af, inverse=inverse)[0]
    return apply_bshd(x64, positions, inv, pairing=pairing, scale=af, inverse=inverse)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_numpy_all_dtypes_against_reference(rng, dtype, pairing):
    spec = rotary.Spec(64, 48, base=10000.0, pairing=pairing)  # partial rotary: 16 channels pass through
    x64 = rng.standard_normal((2, 37, 3, 64))
    x = x64.astype(_np_dtype(dtype))
    y = rotary.apply(x, 5, spec)
    assert type(y) is np.ndarray and y.dtype == x.dtype and y.shape == x.shape
    want = _expected(x.astype(np.float64), np.arange(5, 42), spec)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=0, atol=TOL[dtype])
    np.testing.assert_array_equal(y[..., 48:], x[..., 48:])  # pass-through is bit-exact


@pytest.mark.parametrize("layout", ["bshd", "bhsd", "thd"])
def test_layouts_and_position_arrays(rng, layout):
    spec = rotary.Spec(32, base=5e5)
    shape = {"bshd": (2, 9, 4, 32), "bhsd": (2, 4, 9, 32), "thd": (9, 4, 32)}[layout]
    x = rng.standard_normal(shape).astype(np.float32)
    pos1 = rng.integers(0, 3000, 9)
    for positions in (pos1, pos1.astype(np.int32), list(map(int, pos1))):
        y = rotary.apply(x, positions, spec, layout=layout)
        np.testing.assert_allclose(y, _expected(x.astype(np.float64), np.asarray(positions), spec, layout), atol=TOL["float32"])
    if layout != "thd":
        pos2 = rng.integers(0, 3000, (2, 9))
        y = rotary.apply(x, pos2, spec, layout=layout)
        np.testing.assert_allclose(y, _expected(x.astype(np.float64), pos2, spec, layout), atol=TOL["float32"])


def test_fractional_positions_are_exact(rng):
    spec = rotary.Spec(64)
    x = rng.standard_normal((1, 6, 2, 64))
    pos = np.array([0.0, 0.5, 1.25, 7.75, 1000.5, 12345.125])
    y = rotary.apply(x, pos, spec)
    np.testing.assert_allclose(y, _expected(x, pos, spec), atol=TOL["float64"])


def test_fractional_positions_give_length_dependent_specs_hf_s_fractional_length(rng):
    """HF's length for the scaling is max(position) + 1 as it is: 4095.5 + 1 > 4096 switches LongRoPE to its long
    factors, and dynamic NTK's base is continuous in it. rotary took floor(max) + 1 (the short factors at 4095.5;
    a dynamic base 6.5e-2 off in the output). Truth: HF's formulas in float64 at the fractional length."""
    D, h = 32, 16

    def want(x, pos, inv):
        ang = pos[:, None] * inv[None]
        c, s = np.cos(ang)[None, :, None], np.sin(ang)[None, :, None]
        return np.concatenate([x[..., :h] * c - x[..., h:] * s, x[..., :h] * s + x[..., h:] * c], axis=-1)

    pf = 10000.0 ** (np.arange(0, D, 2) / D)
    long_f = np.linspace(1.0, 8.0, h)
    lr = rotary.Spec(D, rope_type="longrope", max_position_embeddings=131072, original_max_position_embeddings=4096,
                     short_factor=[1.0] * h, long_factor=list(long_f), attention_factor=1.0)
    x = rng.standard_normal((1, 4, 2, D))
    for top, factors in ((4095.5, long_f), (4095.0, np.ones(h))):
        pos = np.array([0.0, 1.0, 100.25, top])
        np.testing.assert_allclose(rotary.apply(x, pos, lr), want(x, pos, 1.0 / (factors * pf)), atol=TOL["float64"])
    dyn = rotary.Spec(D, rope_type="dynamic", factor=2.0, max_position_embeddings=16)
    x = rng.standard_normal((1, 20, 2, D))
    pos = np.arange(20) + 0.5  # HF's seq_len: 20.5
    base = 10000.0 * ((2.0 * 20.5 / 16) - 1.0) ** (D / (D - 2))
    np.testing.assert_allclose(rotary.apply(x, pos, dyn), want(x, pos, 1.0 / base ** (np.arange(0, D, 2) / D)),
                               atol=TOL["float64"])


def test_strided_views_in_and_out(rng):
    spec = rotary.Spec(16)
    big = rng.standard_normal((3, 10, 6, 40)).astype(np.float32)
    x = big[::2, 1::2, ::3, 4:20]  # non-contiguous in every axis
    assert not x.flags.c_contiguous
    out_base = np.zeros((2, 5, 2, 32), np.float32)
    out = out_base[:, :, :, ::2]
    y = rotary.apply(x, 3, spec, out=out)
    assert y is out
    np.testing.assert_allclose(out, _expected(x.astype(np.float64), np.arange(3, 8), spec), atol=TOL["float32"])
    assert np.all(out_base[..., 1::2] == 0), "writes outside the out view"


def test_readonly_broadcast_and_reversed_inputs(rng):
    spec = rotary.Spec(16)
    x = rng.standard_normal((1, 4, 2, 16)).astype(np.float32)
    want = rotary.apply(x, 0, spec)
    ro = x.copy()
    ro.flags.writeable = False
    np.testing.assert_array_equal(rotary.apply(ro, 0, spec), want)
    rev = np.ascontiguousarray(x[:, ::-1])[:, ::-1]  # same values, negative stride on axis 1
    np.testing.assert_allclose(rotary.apply(rev, 0, spec), want, rtol=0, atol=TOL["float32"])
    bcast = np.broadcast_to(x[:, :, :1], x.shape)  # zero stride on the head axis
    np.testing.assert_allclose(rotary.apply(bcast, 0, spec), rotary.apply(np.ascontiguousarray(bcast), 0, spec),
                               rtol=0, atol=TOL["float32"])
    with pytest.raises(ValueError):
        rotary.apply(x, 0, spec, out=np.empty_like(x)[:, ::-1])  # outputs are never silently copied


def test_inplace_inverse_roundtrip_and_table_cache(rng):
    spec = rotary.Spec(128, base=1e6)
    assert spec.table_positions == 0
    x = rng.standard_normal((2, 64, 4, 128)).astype(np.float32)
    y = x.copy()
    r = rotary.apply(y, 0, spec, out=y)
    assert r is y
    np.testing.assert_allclose(y, _expected(x.astype(np.float64), np.arange(64), spec), atol=TOL["float32"])
    cached = spec.table_positions
    assert cached >= 64  # the table was built once and is held by the Spec
    back = rotary.apply(y, 0, spec, inverse=True)
    np.testing.assert_allclose(back, x, atol=1e-5)
    assert spec.table_positions == cached  # reused, not rebuilt


def test_pairing_override_and_spec_pairing(rng):
    x = rng.standard_normal((1, 4, 2, 16))
    half = rotary.Spec(16)
    inter = half.replace(pairing="interleaved")
    np.testing.assert_allclose(rotary.apply(x, 0, half, pairing="interleaved"), rotary.apply(x, 0, inter), atol=0)
    assert not np.allclose(rotary.apply(x, 0, half), rotary.apply(x, 0, inter))


def test_backends_agree(rng):
    spec = rotary.Spec(64, base=1e4, rope_type="llama3", factor=8.0, original_max_position_embeddings=256,
                       max_position_embeddings=4096)
    x = rng.standard_normal((2, 33, 3, 64)).astype(np.float32)
    a = rotary.apply(x, 100, spec, backend="cpu", threads=2)
    b = rotary.apply(x, 100, spec, backend="reference", threads=1)
    np.testing.assert_allclose(a, b, atol=TOL["float32"])
    np.testing.assert_allclose(a, _expected(x.astype(np.float64), np.arange(100, 133), spec), atol=TOL["float32"])


def test_dynamic_seq_len_defaults_to_max_position_plus_one(rng):
    spec = rotary.Spec(32, rope_type="dynamic", factor=4.0, max_position_embeddings=64)
    x = rng.standard_normal((1, 20, 1, 32))
    pos = np.arange(100, 120)
    y = rotary.apply(x, pos, spec)
    np.testing.assert_allclose(y, _expected(x, pos, spec, seq_len=120), atol=TOL["float64"])
    y2 = rotary.apply(x, pos, spec, seq_len=500)
    np.testing.assert_allclose(y2, _expected(x, pos, spec, seq_len=500), atol=TOL["float64"])
    assert not np.allclose(y, y2)


def test_apply_qk_gqa_and_inplace(rng):
    spec = rotary.Spec(64, base=5e5)
    q = rng.standard_normal((2, 7, 8, 64)).astype(np.float32)
    k = rng.standard_normal((2, 7, 2, 64)).astype(np.float32)
    pos = rng.integers(0, 500, (2, 7))
    qo, ko = rotary.apply_qk(q, k, pos, spec)
    np.testing.assert_allclose(qo, _expected(q.astype(np.float64), pos, spec), atol=TOL["float32"])
    np.testing.assert_allclose(ko, _expected(k.astype(np.float64), pos, spec), atol=TOL["float32"])
    q2, k2 = q.copy(), k.copy()
    r = rotary.apply_qk(q2, k2, pos, spec, inplace=True)
    assert r[0] is q2 and r[1] is k2
    np.testing.assert_array_equal(q2, qo)
    np.testing.assert_array_equal(k2, ko)


def test_packed_thd_positions(rng):
    spec = rotary.Spec(32)
    x = rng.standard_normal((10, 2, 32))
    cu = np.array([0, 3, 10])
    y = rotary.apply(x, None, spec, layout="thd", cu_seqlens=cu)
    pos = np.array([0, 1, 2, 0, 1, 2, 3, 4, 5, 6])
    np.testing.assert_allclose(y, _expected(x, pos, spec, "thd"), atol=TOL["float64"])


def test_cos_sin_values(rng):
    spec = rotary.Spec(64, base=1e4, rope_type="yarn", factor=4.0, original_max_position_embeddings=128,
                       max_position_embeddings=512)
    pos = np.array([[0, 5, 77], [500, 3, 2]])
    c, s = rotary.cos_sin(spec, pos)
    assert c.shape == (2, 3, 32) and c.dtype == np.float32
    inv, af = spec.frequencies()
    ang = pos[..., None] * inv
    np.testing.assert_allclose(c, np.cos(ang) * af, atol=1.5e-7)
    np.testing.assert_allclose(s, np.sin(ang) * af, atol=1.5e-7)
    c3, s3 = rotary.cos_sin(spec, 3)  # an int n means positions 0..n-1
    assert c3.shape == (3, 32)
    np.testing.assert_array_equal(c3[0], c[0, 0])
    np.testing.assert_allclose(s3, np.sin(np.arange(3)[:, None] * inv) * af, atol=1.5e-7)


def test_cos_sin_far_positions_build_no_table():
    # One row at a far position is computed, not looked up in a table built up to it (before: 100 MB here,
    # 2 GB and 21 s at position 4e6). Same rows as the table would give.
    spec = rotary.Spec.preset("llama-3.1-8b")
    c, s = rotary.cos_sin(spec, np.array([200_000, 3]))
    assert spec.table_positions < 10_000
    inv, af = spec.frequencies(seq_len=200_001)
    np.testing.assert_allclose(c, np.cos(np.array([200_000, 3])[:, None] * inv) * af, atol=1.5e-7)
    np.testing.assert_allclose(s, np.sin(np.array([200_000, 3])[:, None] * inv) * af, atol=1.5e-7)


def test_threads_are_capped_at_usable_cores():
    # threads=10**6 used to leave ~10**6 parked pool threads (capped at 1023 by chunks) in the process.
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("needs /proc")
    x = np.ones((1, 4096, 32, 128), np.float32)  # 64 MiB
    before = len(os.listdir("/proc/self/task"))
    rotary.apply(x, 0, rotary.Spec(128), out=x, threads=10**6)
    assert len(os.listdir("/proc/self/task")) - before <= len(os.sched_getaffinity(0)) - 1


def test_empty_arrays_are_returned_untouched():
    spec = rotary.Spec(16)
    x = np.zeros((2, 0, 3, 16), np.float32)
    y = rotary.apply(x, 0, spec)
    assert y.shape == x.shape


def test_errors_carry_the_core_message(rng):
    spec = rotary.Spec(16)
    x = rng.standard_normal((1, 4, 2, 16)).astype(np.float32)
    with pytest.raises(TypeError, match="dtype"):
        rotary.apply(x.astype(np.int32), 0, spec)
    with pytest.raises(ValueError):
        rotary.apply(rng.standard_normal((1, 4, 2, 14)).astype(np.float32), 0, spec)  # head_dim < rotary_dim
    with pytest.raises(ValueError, match="layout"):
        rotary.apply(x, 0, spec, layout="sbhd")
    with pytest.raises(ValueError):
        rotary.apply(x, np.array([0, 1, -5, 2]), spec)  # negative position
    with pytest.raises(ValueError):
        rotary.apply(x, np.arange(5), spec)  # wrong number of positions
    with pytest.raises(TypeError):
        rotary.apply(x, 0, spec, out=np.empty_like(x, dtype=np.float64))
    with pytest.raises(TypeError):
        rotary.apply([[1.0]], 0, spec)
    with pytest.raises(ValueError, match="rotary_dim"):
        rotary.Spec(16, 7)
    with pytest.raises(ValueError):
        rotary.Spec(16, pairing="zigzag")
    with pytest.raises(ValueError):
        rotary.Spec.preset("no-such-model")


def test_gil_is_released_and_threads_agree(rng):
    spec = rotary.Spec(128)
    x = rng.standard_normal((4, 256, 8, 128)).astype(np.float32)
    want = rotary.apply(x, 0, spec, threads=1)
    results = [None] * 4

    def work(i):
        results[i] = rotary.apply(x, 0, spec, threads=1)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for r in results:
        np.testing.assert_array_equal(r, want)


# ---------------------------------------------------------------------------- torch tensors

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_torch_tensors_all_dtypes(rng, dtype):
    spec = rotary.Spec(64, base=1e4)
    x64 = rng.standard_normal((2, 11, 3, 64))
    x = torch.from_numpy(x64).to(getattr(torch, dtype))
    y = rotary.apply(x, torch.arange(3, 14), spec)
    assert isinstance(y, torch.Tensor) and y.dtype == x.dtype and y.shape == x.shape
    want = _expected(x.double().numpy(), np.arange(3, 14), spec)
    np.testing.assert_allclose(y.double().numpy(), want, atol=TOL[dtype])


def test_torch_strided_and_inplace(rng):
    spec = rotary.Spec(32)
    base = torch.randn(2, 4, 9, 32)
    x = base.transpose(1, 2)  # [2, 9, 4, 32] non-contiguous bshd view of a bhsd buffer
    want = _expected(x.double().numpy(), np.arange(9), spec)
    y = rotary.apply(x, 0, spec)
    np.testing.assert_allclose(y.double().numpy(), want, atol=TOL["float32"])
    rotary.apply(x, 0, spec, out=x)  # in place through the view
    np.testing.assert_allclose(base.transpose(1, 2).double().numpy(), want, atol=TOL["float32"])


def test_torch_requires_grad_goes_through_autograd(rng):
    spec = rotary.Spec(16)
    x = torch.randn(1, 5, 2, 16, dtype=torch.float64, requires_grad=True)
    y = rotary.apply(x, 0, spec)
    assert y.requires_grad
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_numpy_bf16_roundtrip_matches_torch_bf16(rng):
    bf16 = _ml_bf16()
    spec = rotary.Spec(32)
    x64 = rng.standard_normal((1, 6, 2, 32))
    yn = rotary.apply(x64.astype(bf16), 0, spec)
    yt = rotary.apply(torch.from_numpy(x64).to(torch.bfloat16), 0, spec)
    np.testing.assert_array_equal(yn.astype(np.float32), yt.float().numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int64])
def test_empty_is_cache_line_aligned(dtype):
    for shape in [(0,), 7, (3, 5), (4096, 8, 128), (2, 0, 3)]:
        a = rotary.empty(shape, dtype)
        expect = (shape,) if isinstance(shape, int) else shape
        assert a.shape == expect and a.dtype == np.dtype(dtype) and a.flags.c_contiguous and a.flags.writeable
        if a.size:
            assert a.ctypes.data % 64 == 0
    with pytest.raises(ValueError, match="non-negative"):
        rotary.empty((2, -1))


def test_outputs_are_aligned_and_out_of_place_into_aligned_or_numpy_arrays_agree(rng):
    spec = rotary.Spec(128, base=500000.0)
    q = rng.standard_normal((64, 8, 128)).astype(np.float32)
    k = rng.standard_normal((64, 2, 128)).astype(np.float32)
    q_rot, k_rot = rotary.apply_qk(q, k, 3, spec, layout="thd")
    assert q_rot.ctypes.data % 64 == 0 and k_rot.ctypes.data % 64 == 0  # rotary allocated them
    like = rotary.empty_like(q)
    assert like.shape == q.shape and like.dtype == q.dtype and like.ctypes.data % 64 == 0
    # every misalignment of the output (numpy's own is 16 bytes): identical results
    for shift in (0, 4, 16, 36):
        raw = np.zeros(q.size * 4 + 128, np.uint8)
        start = (-raw.ctypes.data) % 64 + shift
        q_out = raw[start:start + q.nbytes].view(np.float32).reshape(q.shape)
        k_out = rotary.empty_like(k)
        rotary.apply_qk(q, k, 3, spec, layout="thd", q_out=q_out, k_out=k_out)
        np.testing.assert_array_equal(q_out, q_rot)
        np.testing.assert_array_equal(k_out, k_rot)


def test_numpy_calls_skip_the_torch_checks(rng, monkeypatch):
    # The torch-only checks of the array functions (_needs_grad: a derivative is needed; _check_torch_write: an out=
    # torch would refuse) looked torch up for numpy arrays and None too (per-call overhead): they return first.
    import rotary._arrays as arrays

    looked_up = []
    monkeypatch.setattr(arrays, "_torch_module", lambda: looked_up.append(1))
    x = rng.standard_normal((1, 3, 2, 8)).astype(np.float32)
    assert not arrays._needs_grad(x) and not arrays._needs_grad(None)
    arrays._check_torch_write(x, "out", "rotary_apply")
    arrays._check_torch_write(None, "out", "rotary_apply")
    assert not looked_up
    spec = rotary.Spec(8)
    want = apply_bshd(x.astype(np.float64), np.arange(3), default_inv_freq(1e4, 8))
    for got in (rotary.apply(x, 0, spec, out=np.empty_like(x)), rotary.apply_qk(x, x.copy(), 0, spec, inplace=True)[1]):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert not looked_up


def test_argument_errors_of_the_public_functions_name_their_entry_point():
    # These said "[rotary] ..." (the shared converters' generic prefix, or literal messages of the entry points),
    # where the project's format names the function called: rotary.apply's family [rotary_apply], cos_sin
    # [rotary_cos_sin], apply_axes [rotary_apply_axes], empty [rotary_empty], onnx_rotary_embedding its own.
    ml_dtypes = pytest.importorskip("ml_dtypes")
    torch = pytest.importorskip("torch")
    import rotary.torch as rt

    spec = rotary.Spec(8)
    x = np.ones((1, 3, 2, 8), np.float32)
    ro = x.copy()
    ro.flags.writeable = False
    cos, sin = rotary.cos_sin(spec, 4)
    f8 = np.zeros(x.shape, ml_dtypes.float8_e4m3fn)
    f8_ro = f8.copy()
    f8_ro.flags.writeable = False
    cases = [
        (lambda: rotary.apply(x, 0, "spec"), TypeError, "[rotary_apply] spec must be a rotary.Spec, got str"),
        (lambda: rotary.apply(x, True, spec), TypeError, "[rotary_apply] positions must be an int or an array, got bool"),
        (lambda: rotary.apply(x, 1.5, spec), TypeError, "[rotary_apply] a scalar position must be an int"),
        (lambda: rotary.apply(x, 0, spec, out=ro), ValueError, "[rotary_apply] out must be writable, got a read-only"),
        (lambda: rotary.apply(x.astype(np.longdouble), 0, spec, out=x), TypeError,
         "[rotary_apply] x dtype must be float32"),
        (lambda: rotary.apply([1.0], 0, spec), TypeError, "[rotary_apply] x must be a numpy array or a torch CPU"),
        (lambda: rotary.apply(x, 0, spec, out=f8_ro, out_scale=1.0), ValueError,
         "[rotary_apply] out must be writable, got a read-only array"),
        (lambda: rotary.apply(x, 0, spec, out=f8), ValueError,
         "[rotary_apply] out_scale (the per-tensor scale) is required for an fp8 out"),
        (lambda: rotary.apply_qk(x, x.astype(np.float64), 0, spec), TypeError,
         "[rotary_apply] q and k must have the same dtype, got float32 and float64"),
        (lambda: rotary.apply_qk(x, x, 0, spec, inplace=True, q_out=x), ValueError,
         "[rotary_apply] inplace=True cannot be combined with q_out=/k_out="),
        (lambda: rotary.apply_cos_sin(x, cos.astype(ml_dtypes.bfloat16), sin), TypeError,
         "[rotary_apply] cos and sin must have the same dtype"),
        (lambda: rotary.apply_cos_sin(x, cos, sin, np.array([0, 1, 2]), cu_seqlens=[0, 3]), ValueError,
         "[rotary_apply] positions ids cannot be combined with cu_seqlens="),
        (lambda: rotary.apply_cos_sin(x[0], cos, sin, layout="thd", seq_offsets=2), ValueError,
         "[rotary_apply] an int seq_offsets needs cu_seqlens"),
        (lambda: rotary.apply_cos_sin(x, cos, sin, out_scale=1.0), ValueError,
         "[rotary_apply] out_scale is for an fp8 out, got no out"),
        (lambda: rotary.apply_axes(x, np.zeros((1, 3), np.int64), "freqs"), TypeError,
         "[rotary_apply_axes] freqs must be a rotary.AxisFrequencies, got str"),
        (lambda: rotary.cos_sin(spec, np.array([1 + 2j])), TypeError,
         "[rotary_cos_sin] positions must be an integer or float array, got dtype complex128"),
        (lambda: rotary.onnx_rotary_embedding(x, cos, sin, 3), TypeError,
         "[onnx_rotary_embedding] position_ids must be a sequence or an array of integers, got int"),
        (lambda: rotary.empty((2, -1)), ValueError, "[rotary_empty] shape must be non-negative, got (2, -1)"),
        (lambda: rt.cos_sin(-3, spec), ValueError, "[rotary_cos_sin] positions must be an int n >= 0"),
        (lambda: rt.cos_sin(torch.zeros(2, 4), rotary.Spec(8, mrope_section=[2, 1, 1])), ValueError,
         "[rotary_cos_sin] M-RoPE positions must be [3, ...] (t, h, w), got shape (2, 4)"),
        (lambda: rt.apply(torch.from_numpy(x), True, spec), TypeError,
         "[rotary_apply] positions must be an int or a tensor, got bool"),
        (lambda: rt.apply(torch.from_numpy(x), torch.tensor([True, False, True]), spec), TypeError,
         "[rotary_apply] positions must be an integer or float tensor, got dtype torch.bool"),
        (lambda: rt.apply(torch.from_numpy(x), 0, spec, backend="reference"), ValueError,
         "[rotary_apply] backend must be \"auto\", \"cpu\" or \"cuda\""),
        (lambda: rt.apply(x, 0, spec), TypeError, "[rotary_apply] x must be a torch.Tensor, got ndarray"),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind) as info:
            call()
        assert str(info.value).startswith(message), str(info.value)
    assert not f8.view(np.uint8).any()


def test_layout_pairing_and_backend_names_are_refused_in_the_entry_points_words():
    # The core's name parsers serve every adapter and said "[rotary] layout must be ...": a misspelt layout, pairing
    # or backend, the commonest slip, now names the Python function called, on every path (numpy fast path, array
    # path, torch, fp8 out, caller tables, apply_axes, the prologue family, Spec, vision frequencies, permutation).
    torch = pytest.importorskip("torch")
    import rotary.torch as rt

    spec = rotary.Spec(8)
    x = np.ones((1, 2, 1, 8), np.float32)
    t = torch.ones(1, 2, 1, 8)
    ids = np.array([0, 1])
    cos, sin = rotary.cos_sin(spec, 4)
    kc = np.zeros((1, 4, 1, 8), np.float32)
    fr = rotary.mrope_frequencies(spec)
    f8 = np.zeros(x.shape, np.uint8)
    names = {"layout": 'layout must be bshd, bhsd or thd, got "bsdh"', "pairing":
             'pairing must be half or interleaved, got "zigzag"', "backend":
             'backend must be auto, cpu, reference or cuda, got "gpu"'}
    values = {"layout": "bsdh", "pairing": "zigzag", "backend": "gpu"}
    calls = [  # (entry point, call, the names it takes: rt.apply's backends have their own message)
        ("rotary_apply", lambda kw: rotary.apply(x, 0, spec, **kw), names),
        ("rotary_apply", lambda kw: rotary.apply(x.astype(np.float16), ids, spec, **kw), names),
        ("rotary_apply", lambda kw: rotary.apply_qk(x, x, ids, spec, **kw), names),
        ("rotary_apply", lambda kw: rotary.apply(t, ids, spec, **kw), names),
        ("rotary_apply", lambda kw: rotary.apply_cos_sin(x, cos, sin, ids, **kw), names),
        ("rotary_apply", lambda kw: rt.apply(t, ids, spec, **kw), ("layout", "pairing")),
        ("rotary_apply_axes", lambda kw: rotary.apply_axes(x, np.zeros((3, 2), np.int64), fr, **kw), names),
    ]
    for where, call, taken in calls:
        for name in taken:
            with pytest.raises(ValueError) as info:
                call({name: values[name]})
            assert str(info.value) == f"[{where}] {names[name]}", (where, name, str(info.value))
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(ValueError, match=r'^\[rotary_apply\] layout must be bshd, bhsd or thd, got "bsdh"$'):
        rotary.apply(x, 0, spec, out=f8.view(ml_dtypes.float8_e4m3fn), out_scale=1.0, layout="bsdh")
    for call, message in (
            (lambda: rotary.prologue(x, x, x, 0, spec, k_cache=kc, v_cache=kc.copy(), slot_mapping=ids, layout="bsdh"),
             '[rotary_prologue] layout must be bshd, bhsd or thd, got "bsdh"'),
            (lambda: rotary.rerotate_cache(kc, ids, ids, ids, spec, backend="gpu"),
             '[rotary_rerotate_cache] backend must be auto, cpu, reference or cuda, got "gpu"'),
            (lambda: rotary.Spec(8, pairing="zigzag"), '[rotary_spec] pairing must be half or interleaved, got "zigzag"'),
            (lambda: rotary.vision_frequencies("qwen2vl", 16, pairing="zigzag"),
             '[rotary_vision] pairing must be half or interleaved, got "zigzag"'),
            (lambda: rotary.permute_qk_weight(np.ones((8, 8), np.float32), 1, 8, src="zigzag"),
             '[rotary_permute_qk] src must be half or interleaved, got "zigzag"')):
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value) == message
    assert (kc == 0).all()
