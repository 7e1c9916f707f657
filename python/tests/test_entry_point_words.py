"""Errors of the extension's shared conversions and of rotary's shared helpers name the function called, not "[rotary]"."""
from __future__ import annotations

import re

import numpy as np
import pytest

import rotary

SPEC = rotary.Spec(8)


def _check(cases):
    for call, kind, pattern in cases:
        with pytest.raises(kind, match=pattern):
            call()


def test_the_array_conversion_names_the_function_called():
    # The extension's numpy/DLPack conversion said "[rotary] x has an unsupported dtype (code 0, 16 bits)" for an
    # array of a dtype it has no view of, whichever function it served (rotary.prologue and rotary.rerotate_cache
    # already reworded it: their cases guard against a regression).
    x = np.ones((1, 3, 2, 8), np.float32)
    i16 = x.astype(np.int16)
    cos, sin = rotary.cos_sin(SPEC, 4)
    unsupported = r" has an unsupported dtype \(code \d+, \d+ bits\); expected float32"
    _check([
        (lambda: rotary.apply(i16, 0, SPEC), TypeError, r"^\[rotary_apply\] x" + unsupported),
        (lambda: rotary.apply(x.astype(np.complex64), 0, SPEC), TypeError, r"^\[rotary_apply\] x" + unsupported),
        (lambda: rotary.apply_cos_sin(x, cos.astype(np.int16), sin.astype(np.int16)), TypeError,
         r"^\[rotary_apply\] cos" + unsupported),
        (lambda: rotary.onnx_rotary_embedding(i16, cos, sin), TypeError, r"^\[onnx_rotary_embedding\] X" + unsupported),
        (lambda: rotary.apply_axes(i16, np.zeros((3, 1, 3), np.int64), rotary.mrope_frequencies(SPEC)), TypeError,
         r"^\[rotary_apply_axes\] x" + unsupported),
        (lambda: rotary.permute_qk_weight(np.zeros((16, 4), np.int16), 2, 8), TypeError,
         r"^\[rotary_permute_qk\] w" + unsupported),
        (lambda: rotary.prologue(i16[0], i16[0], i16[0], 0, SPEC, k_cache=None, v_cache=None), TypeError,
         r"^\[rotary_prologue\] q" + unsupported),
        (lambda: rotary.rerotate_cache(np.zeros((1, 4, 2, 8), np.complex64), [0], [0], [1], SPEC), TypeError,
         r"^\[rotary_rerotate_cache\] k_cache" + unsupported),
    ])


def test_shared_argument_helpers_name_the_function_called():
    # rotary.prologue's positions went through rotary.apply's helpers and said "[rotary_apply] positions.offset ..."
    # (and "[rotary_apply] positions requires grad" below); rotary.cos_sin's seq_len and onnx_rotary_embedding's
    # threads said "[rotary_apply] ..." too.
    q = np.ones((2, 1, 8), np.float32)
    x = np.ones((1, 2, 3, 8), np.float32)
    cos, sin = rotary.cos_sin(SPEC, 4)
    _check([
        (lambda: rotary.prologue(q, q.copy(), q.copy(), 2**63, SPEC, k_cache=None, v_cache=None), ValueError,
         r"^\[rotary_prologue\] positions\.offset must be < 2\^31, got 9223372036854775808$"),
        (lambda: rotary.cos_sin(SPEC, 3, seq_len="4"), TypeError,
         r"^\[rotary_cos_sin\] seq_len must be an int or None, got str$"),
        (lambda: rotary.onnx_rotary_embedding(x, cos, sin, threads=1.5), TypeError,
         r"^\[onnx_rotary_embedding\] threads must be an int, got float$"),
    ])


def test_the_torch_conversion_and_spec_keys_name_the_function_called():
    # The torch entries' field-by-field conversion said "[rotary] x has dtype torch.int16", and a spec that is no
    # Spec (or no spec key, given to the operators) "[rotary] spec must be ...", from every function of rotary.torch.
    torch = pytest.importorskip("torch")
    import rotary.torch as rt

    t = torch.ones(1, 3, 2, 8)
    cos, sin = rt.cos_sin(4, SPEC)
    q = torch.ones(2, 1, 8)
    ops = torch.ops.rotary
    _check([
        (lambda: rt.apply(t.to(torch.int16), 0, SPEC), TypeError,
         r"^\[rotary_apply\] x has dtype torch\.int16; expected torch\.float32"),
        (lambda: rt.apply(t.to(torch.complex64), 0, SPEC), TypeError,
         r"^\[rotary_apply\] x has dtype torch\.complex64; expected torch\.float32"),
        (lambda: rt.apply_cos_sin(t, cos.to(torch.int16), sin.to(torch.int16)), TypeError,
         r"^\[rotary_apply\] cos has dtype torch\.int16"),
        (lambda: rt.apply(t, 0, "spec"), TypeError, r"^\[rotary_apply\] spec must be a rotary\.Spec, got str$"),
        (lambda: rt.apply_qk(t, t, 0, None), TypeError, r"^\[rotary_apply\] spec must be a rotary\.Spec, got NoneType$"),
        (lambda: rt.cos_sin(3, "spec"), TypeError, r"^\[rotary_cos_sin\] spec must be a rotary\.Spec, got str$"),
        (lambda: ops.apply(t, None, 0, "{not a key", "bshd"), ValueError,
         r"^\[rotary_apply\] spec must be a key made by rotary\.torch\.spec_key, got '\{not a key'$"),
        (lambda: ops.cos_sin(torch.arange(3), "{not a key"), ValueError,
         r"^\[rotary_cos_sin\] spec must be a key made by rotary\.torch\.spec_key"),
        # positions that need a derivative, given to the prologue with numpy arrays
        (lambda: rotary.prologue(q.numpy(), q.numpy(), q.numpy(), torch.arange(2.0).requires_grad_(), SPEC,
                                 k_cache=None, v_cache=None), RuntimeError,
         r"^\[rotary_prologue\] positions requires grad"),
    ])


def test_an_in_place_operator_under_vmap_names_rotary_apply():
    # The vmap rule of the in-place operators said "[rotary] vmap: ..." for a rotated tensor the transform does not
    # batch (only the positions batched).
    torch = pytest.importorskip("torch")
    import rotary.torch as rt

    x = torch.zeros(1, 3, 2, 8)
    key = rt.spec_key(SPEC)
    with pytest.raises(ValueError, match=r"^\[rotary_apply\] vmap: an in-place rotation needs its tensors batched$"):
        torch.func.vmap(lambda p: torch.ops.rotary.apply_(x, p, 0, key, "bshd"))(torch.arange(6).reshape(2, 1, 3))
    assert not x.any()


def test_context_parallel_reports_what_it_delegates_in_its_own_words():
    # rotary.apply_context_parallel calls rotary.apply with the shard's positions; its errors said "[rotary_apply] ..."
    # (an int16 x: "[rotary] x ..." before the converters named their caller).
    x = np.ones((1, 4, 2, 8), np.float32)
    _check([
        (lambda: rotary.apply_context_parallel(x.astype(np.int16), SPEC, 0, 2), TypeError,
         r"^\[rotary_apply_context_parallel\] x has an unsupported dtype \(code \d+, \d+ bits\); expected float32"),
        (lambda: rotary.apply_context_parallel(x, SPEC, 0, 2, threads=1.5), TypeError,
         r"^\[rotary_apply_context_parallel\] threads must be an int, got float$"),
    ])


def _overlapping_out(shape=(2, 3, 2, 8)):
    """(x, out): out a view of x's memory one row further on (neither x itself nor apart from it)."""
    n = int(np.prod(shape))
    buf = np.zeros(n + shape[-1], np.float32)
    return buf[:n].reshape(shape), buf[shape[-1]:].reshape(shape)


def test_apply_on_arrays_names_x_and_out_as_rotary_torch_apply_does():
    # On arrays (numpy, or tensors that need no derivative) rotary.apply passed on the core's words for its arguments,
    # "[rotary_apply] q head_dim ..." and "q_out must either be q itself ...", where rotary.torch.apply says x; and
    # apply_qk's array conversion called q "x".
    x6 = np.zeros((1, 2, 2, 6), np.float32)
    head_dim = r"^\[rotary_apply\] x head_dim must equal the spec's head_dim 8, got 6$"
    overlap = (r"^\[rotary_apply\] out must either be x itself \(same data and strides: in place\) or not overlap x's "
               r"memory, got out overlapping x, starting 32 bytes after it with strides \[48,16,8,1\] vs x's "
               r"\[48,16,8,1\]$")
    x, out = _overlapping_out()
    cos, sin = rotary.cos_sin(SPEC, 4)
    one_array = [
        (lambda: rotary.apply(x6, 0, SPEC), ValueError, head_dim),  # the general path
        (lambda: rotary.apply(x6, 0, SPEC, out=x6), ValueError, head_dim),  # the numpy fast path
        (lambda: rotary.apply(x, 0, SPEC, out=out), ValueError, overlap),
        (lambda: rotary.apply(x, np.arange(3), SPEC, out=out), ValueError, overlap),
        (lambda: rotary.apply_cos_sin(x, cos, sin, out=out), ValueError, overlap),
        (lambda: rotary.apply_context_parallel(np.zeros((1, 4, 2, 6), np.float32), SPEC, 0, 2), ValueError,
         r"^\[rotary_apply_context_parallel\] x head_dim must equal the spec's head_dim 8, got 6$"),
    ]
    q = np.zeros((1, 2, 2, 8), np.complex64)
    unsupported = r"^\[rotary_apply\] q has an unsupported dtype \(code \d+, \d+ bits\); expected float32"
    qk = [(lambda: rotary.apply_qk(q, q.copy(), 0, SPEC), TypeError, unsupported),
          (lambda: rotary.apply_qk_cos_sin(q, q.copy(), cos, sin), TypeError, unsupported)]
    _check_one_array(one_array)
    _check(qk)
    ml_dtypes = pytest.importorskip("ml_dtypes")  # the fp8 outputs' path
    f8 = np.zeros(x6.shape, ml_dtypes.float8_e4m3fn)
    _check_one_array([(lambda: rotary.apply(x6, 0, SPEC, out=f8, out_scale=1.0), ValueError, head_dim)])
    _check([(lambda: rotary.apply_qk(q, q.copy(), 0, SPEC, q_out=f8, k_out=f8.copy(), q_out_scale=1.0,
                                     k_out_scale=1.0), TypeError, unsupported)])


def _check_one_array(cases):
    """_check for calls of one array x (and out): no word of the core's names q and q_out is left either."""
    for call, kind, pattern in cases:
        with pytest.raises(kind, match=pattern) as info:
            call()
        assert not re.search(r"\bq\b|q_out", str(info.value)), str(info.value)
