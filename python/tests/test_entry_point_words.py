"""Errors of the extension's shared conversions and of rotary's shared helpers name the function called, not "[rotary]"."""
from __future__ import annotations

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
