"""fp8 e4m3/e5m2 outputs of rotary.apply / apply_qk (numpy ml_dtypes and torch float8) with a per-tensor scale."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import rotary
from reference import apply_bshd, default_inv_freq

ml_dtypes = pytest.importorskip("ml_dtypes")  # the fp8/bf16 numpy dtypes (a bare venv without it skips)

FP8 = {"e4m3": (ml_dtypes.float8_e4m3fn, 448.0), "e5m2": (ml_dtypes.float8_e5m2, 57344.0)}


def _encode(y32: np.ndarray, scale: float, kind: str) -> np.ndarray:
    """The documented rule with ml_dtypes' own RNE conversion: saturate fl32(y / scale), then round."""
    dt, mx = FP8[kind]
    return np.clip((y32 / np.float32(scale)).astype(np.float32), -mx, mx).astype(dt)


@pytest.mark.parametrize("kind", ["e4m3", "e5m2"])
@pytest.mark.parametrize("in_dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_fp8_out_is_the_rounded_f32_result(kind, in_dtype, pairing):
    rng = np.random.default_rng(1)
    spec = rotary.Spec(64, pairing=pairing)
    x = rng.standard_normal((2, 5, 3, 64)).astype(np.float32).astype(in_dtype)
    out = np.zeros(x.shape, FP8[kind][0])
    got = rotary.apply(x, 17, spec, out=out, out_scale=0.03)
    assert got is out
    y32 = rotary.apply(x.astype(np.float32), 17, spec)  # rotary's own f32 result (bf16 widens exactly)
    np.testing.assert_array_equal(out.view(np.uint8), _encode(y32, 0.03, kind).view(np.uint8))
    truth = apply_bshd(x.astype(np.float64), np.arange(17, 22), default_inv_freq(10000.0, 64), pairing=pairing)
    mant = 3 if kind == "e4m3" else 2
    tol = np.maximum(np.abs(truth) * 2.0 ** -mant, 0.03 * 2.0 ** (-9 if kind == "e4m3" else -16)) + 1e-5
    assert (np.abs(out.astype(np.float64) * 0.03 - truth) <= tol).all()


def test_apply_qk_fp8_q_and_k_saturate_and_torch_gives_the_same_bytes():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    spec = rotary.Spec(128)
    q = (rng.standard_normal((4, 8, 128)) * 100).astype(np.float32)
    k = rng.standard_normal((4, 2, 128)).astype(np.float32)
    qo = np.zeros(q.shape, ml_dtypes.float8_e4m3fn)
    ko = np.zeros(k.shape, ml_dtypes.float8_e5m2)
    rotary.apply_qk(q, k, 3, spec, layout="thd", q_out=qo, k_out=ko, q_out_scale=0.1, k_out_scale=0.01)
    yq, yk = rotary.apply_qk(q, k, 3, spec, layout="thd")
    np.testing.assert_array_equal(qo.view(np.uint8), _encode(yq, 0.1, "e4m3").view(np.uint8))
    np.testing.assert_array_equal(ko.view(np.uint8), _encode(yk, 0.01, "e5m2").view(np.uint8))
    assert (np.abs(qo.astype(np.float32)) == 448).any() and not np.isnan(qo.astype(np.float32)).any()
    tq = torch.zeros(q.shape, dtype=torch.float8_e4m3fn)
    tk = torch.zeros(k.shape, dtype=torch.float8_e5m2)
    rotary.apply_qk(torch.from_numpy(q), torch.from_numpy(k), 3, spec, layout="thd", q_out=tq, k_out=tk,
                    q_out_scale=0.1, k_out_scale=0.01)
    np.testing.assert_array_equal(tq.view(torch.uint8).numpy(), qo.view(np.uint8))
    np.testing.assert_array_equal(tk.view(torch.uint8).numpy(), ko.view(np.uint8))


def test_fp8_out_errors_name_the_argument_and_write_nothing():
    spec = rotary.Spec(64)
    x = np.ones((1, 2, 2, 64), np.float32)
    out = np.full(x.shape, 3.0, ml_dtypes.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"out_scale .*required"):
        rotary.apply(x, 0, spec, out=out)
    with pytest.raises(ValueError, match=r"^\[rotary_apply\] out_scale must be finite, > 0 and representable as a "
                                         r"float32 \(at most 3.4028235e\+38\), got -1.0"):
        rotary.apply(x, 0, spec, out=out, out_scale=-1.0)
    with pytest.raises(ValueError, match=r"^\[rotary_apply\] positions"):
        rotary.apply(x, np.array([0, -3]), spec, out=out, out_scale=1.0)
    assert (out.astype(np.float32) == 3.0).all()
    with pytest.raises(ValueError, match="out_scale is only for an fp8"):
        rotary.apply(x, 0, spec, out=np.zeros_like(x), out_scale=2.0)


def test_fp8_out_refuses_uint64_positions_past_int64_in_rotary_apply_words():
    # The fp8 path said "[rotary] positions[3] must fit in int64" where every other path of rotary.apply (and of
    # apply_cos_sin, whose core checks are rotary_apply's) says "[rotary_apply] ...".
    spec = rotary.Spec(16)
    x = np.ones((1, 4, 2, 16), np.float32)
    out = np.full(x.shape, 3.0, ml_dtypes.float8_e4m3fn)
    big = np.array([0, 1, 2, 2**64 - 1], np.uint64)
    cos, sin = rotary.cos_sin(spec, 8)
    for call in (lambda: rotary.apply(x, big, spec, out=out, out_scale=1.0),
                 lambda: rotary.apply_cos_sin(x, cos, sin, big, out=out, out_scale=1.0),
                 lambda: rotary.apply_qk(x, x, big, spec, q_out=out, k_out=out.copy(), q_out_scale=1.0,
                                         k_out_scale=1.0)):
        with pytest.raises(ValueError, match=r"^\[rotary_apply\] positions\[3\] must fit in int64, got "
                                             r"18446744073709551615$"):
            call()
    assert (out.astype(np.float32) == 3.0).all()


@pytest.mark.parametrize("scale,shown", [(1e39, "1e+39"), (1e-50, "1e-50"), (float("nan"), "nan"), (0, "0"),
                                         (10**400, "1" + "0" * 59)],
                         ids=["huge", "tiny", "nan", "zero", "int-past-float"])
def test_fp8_out_scale_float32_cannot_hold_is_refused_naming_the_value_passed(scale, shown):
    # float32(1e39) is inf and float32(1e-50) is 0: the message shows what the caller passed, with no numpy warning
    spec = rotary.Spec(64)
    x = np.ones((1, 2, 2, 64), np.float32)
    out = np.full(x.shape, 3.0, ml_dtypes.float8_e4m3fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"^\[rotary_apply\] out_scale must be finite, > 0 .*, got "
                                             + re.escape(shown)):
            rotary.apply(x, 0, spec, out=out, out_scale=scale)
        with pytest.raises(ValueError, match=r"^\[rotary_apply\] k_out_scale must be finite, > 0 .*, got "
                                             + re.escape(shown)):
            rotary.apply_qk(x, x, 0, spec, q_out=out, k_out=out.copy(), q_out_scale=1.0, k_out_scale=scale)
    assert (out.astype(np.float32) == 3.0).all()
    rotary.apply(x, 0, spec, out=out, out_scale=3.4028235e38)  # the float32 maximum itself is a scale


@pytest.mark.parametrize("scale,what", [(True, "bool"), ("2", "str"), (np.array([2.0, 3.0]), "ndarray of shape [2]")],
                         ids=["bool", "str", "array"])
def test_fp8_out_scale_must_be_a_number(scale, what):
    spec = rotary.Spec(64)
    x = np.ones((1, 2, 2, 64), np.float32)
    out = np.full(x.shape, 3.0, ml_dtypes.float8_e4m3fn)
    with pytest.raises(TypeError, match=r"^\[rotary_apply\] out_scale must be a number \(the fp8 per-tensor scale\), "
                                        r"got " + re.escape(what)):
        rotary.apply(x, 0, spec, out=out, out_scale=scale)
    assert (out.astype(np.float32) == 3.0).all()


@pytest.mark.parametrize("kind", ["e4m3", "e5m2"])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_caller_table_fp8_outputs_are_the_rounded_f32_result(kind, pairing):
    # FlashInfer's rope_quantize_fp8: a caller cos_sin_cache, fp8 outputs (quant_scale = 1 / out_scale).
    rng = np.random.default_rng(3)
    T, R, D = 6, 48, 64
    theta = rng.uniform(-3.0, 3.0, (4096, R // 2))
    cos, sin = np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)
    q = (rng.standard_normal((T, 4, D)) * 60).astype(ml_dtypes.bfloat16)
    k = rng.standard_normal((T, 2, D)).astype(ml_dtypes.bfloat16)
    pos = np.array([5, 0, 4095, 77, 5, 1000])
    out = np.zeros(q.shape, FP8[kind][0])
    got = rotary.apply_cos_sin(q, cos, sin, pos, layout="thd", pairing=pairing, out=out, out_scale=0.25)
    assert got is out
    y32 = rotary.apply_cos_sin(q.astype(np.float32), cos, sin, pos, layout="thd", pairing=pairing)
    np.testing.assert_array_equal(out.view(np.uint8), _encode(y32, 0.25, kind).view(np.uint8))
    np.testing.assert_array_equal(y32[..., R:], q[..., R:].astype(np.float32))  # channels past R pass through
    assert (np.abs(out.astype(np.float32)) == FP8[kind][1]).any() == (kind == "e4m3")  # e4m3 saturates here
    qo, ko = np.zeros(q.shape, FP8[kind][0]), np.zeros(k.shape, ml_dtypes.float8_e4m3fn)
    rotary.apply_qk_cos_sin(q, k, cos, sin, pos, layout="thd", pairing=pairing, q_out=qo, k_out=ko,
                            q_out_scale=0.25, k_out_scale=0.01)
    yk = rotary.apply_cos_sin(k.astype(np.float32), cos, sin, pos, layout="thd", pairing=pairing)
    np.testing.assert_array_equal(qo.view(np.uint8), out.view(np.uint8))
    np.testing.assert_array_equal(ko.view(np.uint8), _encode(yk, 0.01, "e4m3").view(np.uint8))
    # Packed sequences (flash-attn's varlen form): positions from cu_seqlens and seq_offsets.
    cu = np.array([0, 2, 6])
    pk = np.zeros(q.shape, FP8[kind][0])
    rotary.apply_cos_sin(q, cos, sin, layout="thd", pairing=pairing, out=pk, out_scale=0.25, cu_seqlens=cu,
                         seq_offsets=np.array([10, 3]))
    ypk = rotary.apply_cos_sin(q.astype(np.float32), cos, sin, np.array([10, 11, 3, 4, 5, 6]), layout="thd",
                               pairing=pairing)
    np.testing.assert_array_equal(pk.view(np.uint8), _encode(ypk, 0.25, kind).view(np.uint8))


def test_caller_table_fp8_with_torch_and_its_errors():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    cos_sin = torch.from_numpy(rng.standard_normal((512, 32)).astype(np.float32))
    cos, sin = cos_sin[:, :16], cos_sin[:, 16:]  # FlashInfer's cos_sin_cache halves, as views
    q = torch.from_numpy(rng.standard_normal((3, 2, 32)).astype(np.float32)).to(torch.bfloat16)
    qo = torch.zeros(q.shape, dtype=torch.float8_e4m3fn)
    rotary.apply_cos_sin(q, cos, sin, torch.tensor([0, 7, 511]), layout="thd", out=qo, out_scale=0.5)
    y = rotary.apply_cos_sin(q.float(), cos, sin, torch.tensor([0, 7, 511]), layout="thd")
    np.testing.assert_array_equal(qo.view(torch.uint8).numpy(), _encode(y.numpy(), 0.5, "e4m3").view(np.uint8))
    before = qo.clone()
    with pytest.raises(ValueError, match=r"out_scale \(the per-tensor scale\) is required for an fp8 out"):
        rotary.apply_cos_sin(q, cos, sin, 0, layout="thd", out=qo)
    with pytest.raises(ValueError, match=r"out_scale is for an fp8 out, got no out"):
        rotary.apply_cos_sin(q, cos, sin, 0, layout="thd", out_scale=0.5)
    with pytest.raises(ValueError, match=r"positions\.ids\[0\] must be < 512|512"):
        rotary.apply_cos_sin(q, cos, sin, torch.tensor([512, 0, 1]), layout="thd", out=qo, out_scale=0.5)
    with pytest.raises(ValueError, match="inplace=True cannot write fp8 outputs"):
        rotary.apply_qk_cos_sin(q, q.clone(), cos, sin, 0, layout="thd", inplace=True, q_out_scale=0.5)
    assert torch.equal(qo.view(torch.uint8), before.view(torch.uint8))  # nothing written on error


def test_fp8_scales_with_tensors_requiring_grad_are_refused_not_ignored():
    # The autograd path returns the input's dtype: an fp8 scale there would be silently dropped.
    torch = pytest.importorskip("torch")
    x = torch.ones((1, 3, 2, 16), requires_grad=True)
    cos, sin = torch.ones((8, 8)), torch.zeros((8, 8))
    spec = rotary.Spec(16)
    for call in (lambda: rotary.apply(x, 0, spec, out_scale=0.5),
                 lambda: rotary.apply_qk(x, x, 0, spec, q_out_scale=0.5),
                 lambda: rotary.apply_qk(x, x, 0, spec, k_out_scale=0.5),
                 lambda: rotary.apply_cos_sin(x, cos, sin, 0, out_scale=0.5),
                 lambda: rotary.apply_qk_cos_sin(x, x, cos, sin, 0, q_out_scale=0.5),
                 lambda: rotary.apply_qk_cos_sin(x, x, cos, sin, 0, k_out_scale=0.5)):
        with pytest.raises(ValueError, match=r"out_scale=.* not supported for tensors requiring grad"):
            call()
