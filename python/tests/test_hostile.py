"""Hostile inputs at the Python boundary: each case asserts the exception type, that the message names the
argument and the offending value, and that in-place inputs are bit-identical afterwards."""
import json
import os

import numpy as np
import pytest

import rotary

D = 8


def spec(**kw):
    kw.setdefault("max_position_embeddings", 64)
    return rotary.Spec(D, **kw)


def x4(B=2, S=3, H=2, seed=0):
    return np.random.default_rng(seed).standard_normal((B, S, H, D)).astype(np.float32)


def _nested_dict(depth):
    d = {"head_dim": 8}
    inner = d
    for _ in range(depth):
        inner["x"] = {}
        inner = inner["x"]
    return d


class _ReprRaises:
    def __repr__(self):
        raise RuntimeError("no repr")


# Each case: (name, callable(x) that performs the call on x in place when possible, exception, needles)
def _shifted_out(x):
    buf = np.zeros(x.size + 8, dtype=np.float32)
    buf[: x.size] = x.ravel()
    xv = buf[: x.size].reshape(x.shape)
    out = buf[8:].reshape(x.shape)
    try:
        rotary.apply(xv, 0, spec(), out=out)
    finally:
        x[...] = xv  # report what happened to x's data


def _aliasing_qk(x):
    k = x[:, :, :1, :]  # a view of q's memory, rotated in place together with q
    rotary.apply_qk(x, k, 0, spec(), inplace=True)


def _mrope_ids(x):
    s = spec(mrope_section=[2, 1, 1])
    rotary.apply(x, np.zeros((2, 4), dtype=np.int64), s, out=x)  # neither [3, ...] nor [B, S] / [S]


_GEMMA3 = {"head_dim": D, "layer_types": ["sliding_attention", "full_attention"],
           "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}


def _caller_table_packed(x):
    xt = x.reshape(6, 2, D)
    cos, sin = np.ones((4, D // 2), np.float32), np.zeros((4, D // 2), np.float32)
    rotary.apply_cos_sin(xt, cos, sin, layout="thd", out=xt, cu_seqlens=np.array([0, 2, 6]), seq_offsets=1)


def _onnx_past_table(x):
    X = np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # [B, H, S, D]
    cos = np.ones((4, D // 2), np.float32)
    sin = np.zeros((4, D // 2), np.float32)
    rotary.onnx_rotary_embedding(X, cos, sin, np.array([[0, 1, 4], [0, 1, 2]], dtype=np.int64))


def _onnx_dtype(x):
    X = np.ascontiguousarray(x.transpose(0, 2, 1, 3))
    rotary.onnx_rotary_embedding(X, np.ones((8, 4), np.float32), np.zeros((8, 4), np.float64),
                                 np.zeros((2, 3), dtype=np.int64))


def _thd(x, cu, **kw):
    t = x.reshape(6, 2, D)
    rotary.apply(t, 0, spec(), layout="thd", out=t, cu_seqlens=np.asarray(cu), **kw)


def _out_holding(x, what):
    """x rotated into `out`, with one other input of the call living in out's memory (rows 1.. of out)."""
    buf = np.zeros(x.size + 64, np.float32)
    out = buf[: x.size].reshape(x.shape)
    if what == "positions":
        ids = buf[8:11]
        ids[:] = [0, 1, 2]  # fractional (f32) ids, zero-copy
        rotary.apply(x.copy(), ids, spec(), out=out)
    elif what == "batch_offsets":
        bo = buf[8:12].view(np.int64)
        bo[:] = [0, 1]
        rotary.apply(x.copy(), 0, spec(), out=out, batch_offsets=bo)
    elif what == "cu_seqlens":
        cu = buf[8:10].view(np.int32)
        cu[:] = [0, 6]
        t = x.reshape(6, 2, D)
        rotary.apply(t.copy(), 0, spec(), layout="thd", out=out.reshape(6, 2, D), cu_seqlens=cu)


def _torch_sparse(x):
    torch = pytest.importorskip("torch")
    rotary.apply(torch.from_numpy(x).to_sparse(), 0, spec())


def _float8(x):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rotary.apply(x.astype(ml_dtypes.float8_e4m3fn), 0, spec())


def _read_only_out(x):
    out = np.empty_like(x)
    out.setflags(write=False)
    rotary.apply(x, 0, spec(), out=out)


def _torch_neg_out(x, kind):
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x.copy())
    if kind == "neg":
        out = torch.empty_like(t)._neg_view()
    else:
        out = torch.zeros(x.shape, dtype=torch.complex64).conj().imag
    return rotary.apply(t, 3, spec(), out=out)


CASES = [
    ("x rank 3 for bshd", lambda x: rotary.apply(x.reshape(6, 2, D), 0, spec(), out=x.reshape(6, 2, D)),
     ValueError, ["rank 4", "got rank 3"]),
    ("out partially overlapping x", _shifted_out, ValueError,
     ["[rotary_apply] out must either be x itself", "not overlap x's memory, got out overlapping x"]),
    ("out with reversed strides", lambda x: rotary.apply(x.copy(), 0, spec(), out=np.empty_like(x)[:, ::-1]),
     ValueError, ["strides must be >= 0", "-"]),
    ("out dtype differs", lambda x: rotary.apply(x, 0, spec(), out=np.empty(x.shape, np.float64)),
     TypeError, ["[rotary_apply] out", "dtype", "float64"]),
    ("negative offset", lambda x: rotary.apply(x, -1, spec(), out=x), ValueError, ["positions.offset", "-1"]),
    ("offset 2^31", lambda x: rotary.apply(x, 2**31, spec(), out=x), ValueError, ["positions.offset", "2147483648"]),
    ("ids 2^31", lambda x: rotary.apply(x, np.array([0, 1, 2**31]), spec(), out=x), ValueError,
     ["positions.ids[2]", "2147483648"]),
    ("ids negative", lambda x: rotary.apply(x, np.array([[0, 1, 2], [3, -4, 5]]), spec(), out=x), ValueError,
     ["positions.ids[1,1]", "-4"]),
    ("ids uint64 beyond int64", lambda x: rotary.apply(x, np.array([0, 1, 2**63 + 5], dtype=np.uint64), spec(), out=x),
     ValueError, ["[rotary_apply] positions[2] must fit in int64", "9223372036854775813"]),
    ("fractional NaN", lambda x: rotary.apply(x, np.array([0.0, np.nan, 2.0]), spec(), out=x), ValueError,
     ["positions.ids[1]", "nan"]),
    ("fractional 3e9", lambda x: rotary.apply(x, np.array([0.0, 3e9, 2.0]), spec(), out=x), ValueError,
     ["positions.ids[1]", "2^31"]),
    ("ids shape", lambda x: rotary.apply(x, np.zeros((2, 4), np.int64), spec(), out=x), ValueError,
     ["positions.ids shape [2,4]"]),
    ("cu_seqlens not monotone", lambda x: _thd(x, [0, 4, 2, 6]), ValueError, ["non-decreasing", "cu_seqlens[2] = 2"]),
    ("cu_seqlens not matching T", lambda x: _thd(x, [0, 2, 5]), ValueError, ["cu_seqlens[2]", "T = 6", "got 5"]),
    ("cu_seqlens float", lambda x: _thd(x, [0.0, 6.0]), TypeError, ["cu_seqlens", "float64"]),
    ("seq_offsets negative", lambda x: _thd(x, [0, 6], seq_offsets=np.array([-3])), ValueError,
     ["positions.seq_offsets[0]", "-3"]),
    ("batch_offsets length", lambda x: rotary.apply(x, 0, spec(), out=x, batch_offsets=np.array([1, 2, 3])),
     ValueError, ["positions.batch_offsets", "[3]"]),
    ("M-RoPE spec with ids of no accepted shape", _mrope_ids, ValueError,
     ["positions.ids must have shape [3,B,S]", "for text-only positions", "[2,4]"]),
    ("M-RoPE [3,S] ids ambiguous at batch 3",
     lambda x: rotary.apply(np.zeros((3, 3, 2, D), np.float32), np.zeros((3, 3), np.int64), spec(mrope_section=[2, 1, 1])),
     ValueError, ["ambiguous with batch size 3", "[3,B,S] = [3,3,3]"]),
    ("caller table past its rows (packed)", _caller_table_packed, ValueError, ["position 4", "4 rows"]),
    ("caller table fractional ids",
     lambda x: rotary.apply_cos_sin(x, np.ones((8, 4), np.float32), np.zeros((8, 4), np.float32), np.zeros(3), out=x),
     TypeError, ["positions.ids dtype is f64", "fractional"]),
    ("spec ntk without factor", lambda x: rotary.Spec(D, rope_type="ntk"), ValueError,
     ["scaling.factor is required for rope_type ntk"]),
    ("spec dynamic alpha below 1", lambda x: spec(rope_type="dynamic", alpha=0.5), ValueError,
     ["scaling.alpha must be >= 1", "0.5"]),
    ("spec ntk mixed_b 0", lambda x: spec(rope_type="ntk", factor=2.0, mixed_b=0.0), ValueError,
     ["scaling.mixed_b must be > 0", "got 0"]),
    ("config nested per layer type", lambda x: rotary.Spec.from_hf_config(_GEMMA3), NotImplementedError,
     ["nested per layer type (full_attention, sliding_attention)", "rotary.LayerTypeSpecs.from_hf_config"]),
    ("layer type unknown", lambda x: rotary.LayerTypeSpecs.from_hf_config(_GEMMA3)["global"], ValueError,
     ["layer_type must be one of full_attention, sliding_attention", 'got "global"']),
    ("layer types not strings", lambda x: rotary.LayerTypeSpecs.from_hf_config({"head_dim": D, "layer_types": [1]}),
     ValueError, ["layer_types[0] must be a string", "got 1"]),
    ("q and k alias in place", _aliasing_qk, ValueError, ["overlap"]),
    ("k dtype differs", lambda x: rotary.apply_qk(x, x[:, :, :1].astype(np.float16), 0, spec()), TypeError,
     ["same dtype", "float16"]),
    ("k head_dim differs", lambda x: rotary.apply_qk(x, np.zeros((2, 3, 1, 4), np.float32), 0, spec()), ValueError,
     ["k head_dim", "got 4"]),
    ("x int32", lambda x: rotary.apply(np.zeros((2, 3, 2, D), np.int32), 0, spec()), TypeError, ["dtype", "i32"]),
    ("x longdouble", lambda x: rotary.apply(np.zeros((2, 3, 2, D), np.longdouble), 0, spec()), TypeError,
     ["x dtype must be float32, float16, bfloat16 or float64", "got float128"]),
    ("x head_dim below the spec's", lambda x: rotary.apply(np.zeros((2, 3, 2, 4), np.float32), 0, spec()),
     ValueError, ["x head_dim must equal the spec's head_dim 8", "got 4"]),
    ("layout", lambda x: rotary.apply(x, 0, spec(), layout="bsdh", out=x), ValueError, ["layout", "bsdh"]),
    ("pairing", lambda x: rotary.apply(x, 0, spec(), pairing="zigzag", out=x), ValueError, ["pairing", "zigzag"]),
    ("threads", lambda x: rotary.apply(x, 0, spec(), threads=-1, out=x), ValueError, ["threads", "-1"]),
    ("seq_len", lambda x: rotary.apply(x, 0, spec(), seq_len=0, out=x), ValueError, ["seq_len", "got 0"]),
    ("onnx id past the caller table", _onnx_past_table, ValueError, ["position_ids[0,2] is 4,", "4 rows"]),
    ("onnx cos/sin dtypes differ", _onnx_dtype, TypeError, ["sin_cache dtype", "f64"]),
    ("onnx position_ids an int", lambda x: rotary.onnx_rotary_embedding(x, np.ones((8, 4), np.float32),
                                                                        np.ones((8, 4), np.float32), 7),
     TypeError, ["position_ids must be a sequence or an array of integers, got int"]),
    ("out byte-swapped", lambda x: rotary.apply(x.astype(">f4"), 0, spec(), out=np.empty(x.shape, ">f4")), TypeError,
     ["out must have the machine's byte order", ">f4"]),
    # Outputs sharing memory with any other input of the call (read after rows are written): refused.
    ("out holding the positions", lambda x: _out_holding(x, "positions"), ValueError,
     ["[rotary_apply] out overlaps positions.ids", "before it is read"]),
    ("out holding the batch_offsets", lambda x: _out_holding(x, "batch_offsets"), ValueError,
     ["[rotary_apply] out overlaps positions.batch_offsets"]),
    ("out holding the cu_seqlens", lambda x: _out_holding(x, "cu_seqlens"), ValueError,
     ["[rotary_apply] out overlaps positions.cu_seqlens"]),
    # Empty calls are validated like any other (they used to return early, accepting all of these).
    ("empty x int32", lambda x: rotary.apply(np.zeros((0, 3, 2, D), np.int32), 0, spec()), TypeError, ["dtype", "i32"]),
    ("empty x head_dim 4", lambda x: rotary.apply(np.zeros((0, 3, 2, 4), np.float32), 0, spec()), ValueError,
     ["x head_dim must equal the spec's head_dim 8", "got 4"]),
    ("empty x rank 3 for bshd", lambda x: rotary.apply(np.zeros((0, 3, 8), np.float32), 0, spec()), ValueError,
     ["rank 4", "got rank 3"]),
    ("empty x offset -5", lambda x: rotary.apply(np.zeros((0, 3, 2, D), np.float32), -5, spec()), ValueError,
     ["positions.offset", "-5"]),
    ("empty x ids of shape [7]", lambda x: rotary.apply(np.zeros((0, 3, 2, D), np.float32), np.arange(7), spec()),
     ValueError, ["positions.ids shape [7]"]),
    ("empty x threads -1", lambda x: rotary.apply(np.zeros((0, 3, 2, D), np.float32), 0, spec(), threads=-1),
     ValueError, ["threads", "-1"]),
    ("empty q and k, k head_dim 4", lambda x: rotary.apply_qk(np.zeros((2, 0, 2, D), np.float32),
                                                               np.zeros((2, 0, 1, 4), np.float32), 0, spec()),
     ValueError, ["k head_dim", "got 4"]),
    # Arguments nanobind cannot convert get rotary's message, naming the argument and the value.
    ("read-only out", _read_only_out, ValueError, ["out must be writable", "read-only"]),
    ("broadcast (stride-0) out", lambda x: rotary.apply(x, 0, spec(), out=np.broadcast_to(x[:, :1], x.shape)),
     ValueError, ["out must be a writable array with one element per address", "broadcast"]),
    ("offset 2**70", lambda x: rotary.apply(x, 2**70, spec(), out=x), ValueError,
     ["positions.offset must be < 2^31", str(2**70)]),
    ("offset -2**70", lambda x: rotary.apply(x, -2**70, spec(), out=x), ValueError,
     ["positions.offset must be >= 0", str(-2**70)]),
    ("seq_len 2**64", lambda x: rotary.apply(x, 0, spec(), seq_len=2**64, out=x), ValueError,
     ["seq_len must be <= 2^31", str(2**64)]),
    ("threads -2**40", lambda x: rotary.apply(x, 0, spec(), threads=-2**40, out=x), ValueError,
     ["threads must be >= 0", str(-2**40)]),
    ("threads a float", lambda x: rotary.apply(x, 0, spec(), threads=2.5, out=x), TypeError,
     ["threads must be an int", "float"]),
    ("cp cu_seqlens on bshd", lambda x: rotary.apply_context_parallel(x, spec(), 0, 2, cu_seqlens=[0, 4, 8]),
     ValueError, ["cu_seqlens are the global boundaries of thd shards", "layout \"bshd\" takes none"]),
    ("cp offset 2**64", lambda x: rotary.apply_context_parallel(x, spec(), 0, 2, offset=2**64), ValueError,
     ["offset must be < 2^31", str(2**64)]),
    ("grid_positions 2**70 x 2", lambda x: rotary.grid_positions(2**70, 2), ValueError,
     ["height must fit in int64", str(2**70)]),
    ("cp_positions local_len 2**70", lambda x: rotary.cp_positions(0, 2, 2**70), ValueError,
     ["local_len must fit in int64", str(2**70)]),
    ("cp_positions_packed cu [0, 2**64]", lambda x: rotary.cp_positions_packed(0, 1, [0, 2**64]), ValueError,
     ["cu_seqlens[1] must fit in int64", str(2**64)]),
    ("onnx num_heads 2**70", lambda x: rotary.onnx_rotary_embedding(x.reshape(2, 3, 2 * D), np.ones((4, 4), np.float32),
                                                                    np.ones((4, 4), np.float32), np.zeros((2, 3), np.int64),
                                                                    num_heads=2**70),
     ValueError, ["num_heads must fit in int64", str(2**70)]),
    ("float8 input", _float8, TypeError, ["x dtype must be float32, float16, bfloat16 or float64", "float8_e4m3fn"]),
    ("torch sparse input", _torch_sparse, TypeError, ["x must be a dense (strided) tensor", "sparse"]),
    ("config dict holding NaN", lambda x: rotary.Spec.from_hf_config({"head_dim": 8, "rope_theta": float("nan")}),
     ValueError, ["rope_theta must be a number", "NaN"]),
    ("config dict holding -inf in a list",
     lambda x: rotary.Spec.from_hf_config({"head_dim": 8, "rope_scaling": {"type": "longrope",
                                                                           "short_factor": [1.0, float("-inf")]}}),
     ValueError, ["rope_scaling.short_factor", "-Infinity"]),
    ("config path with a lone surrogate", lambda x: rotary.Spec.from_hf_config("/nonexistent\udcff/config.json"),
     OSError, ["/nonexistent", "config.json"]),
    ("spec odd rotary_dim", lambda x: rotary.Spec(7), ValueError, ["rotary_dim must be even", "7"]),
    # Arguments of the wrong type or name: a TypeError naming the argument (not nanobind's list of signatures).
    ("spec mrope_section an int", lambda x: spec().replace(mrope_section=5), TypeError,
     ["[rotary_spec] mrope_section must be a sequence of ints or None, got int 5"]),
    ("spec head_dim a float", lambda x: rotary.Spec(8.5), TypeError, ["head_dim must be an int within int64, got float 8.5"]),
    ("spec base a str", lambda x: spec(base="1e4"), TypeError, ["base must be a float (64-bit), got str '1e4'"]),
    ("spec misspelt keyword", lambda x: spec(rope_tpye="yarn"), TypeError,
     ['unknown field "rope_tpye" (did you mean "rope_type"?)']),
    ("spec replace unknown field", lambda x: spec().replace(theta=5e5), TypeError, ['unknown field "theta"']),
    ("spec short_factor holding a str", lambda x: spec(short_factor=[1.0, "a"]), TypeError,
     ["short_factor must be a sequence of floats or None, got list [1.0, 'a']"]),
    ("spec rotary_dim twice", lambda x: rotary.Spec(8, 4, rotary_dim=4), TypeError, ["rotary_dim given twice"]),
    ("spec 4 positional arguments", lambda x: rotary.Spec(8, 8, 1e4, "half"), TypeError,
     ["at most 3 positional arguments", "got 4"]),
    ("spec base a long non-ASCII str (the repr cut by characters)", lambda x: spec(base="a" + "基" * 50), TypeError,
     ["base must be a float (64-bit), got str 'a" + "基" * 35 + "..."]),
    ("spec base whose repr raises", lambda x: spec(base=_ReprRaises()), TypeError,
     ["base must be a float (64-bit), got test_hostile._ReprRaises"]),
    ("spec mrope sum", lambda x: spec(mrope_section=[1, 1, 1]), ValueError, ["mrope.section", "4", "got 3"]),
    ("spec huge head_dim", lambda x: rotary.Spec(2**40), ValueError, ["head_dim", "1099511627776"]),
    ("spec negative base", lambda x: spec(base=-1.0), ValueError, ["base", "-1"]),
    ("config factor string",
     lambda x: rotary.Spec.from_hf_config({"head_dim": 8, "rope_scaling": {"type": "linear", "factor": "2"}}),
     ValueError, ["rope_scaling.factor", '"2"']),
    # Hostile depth and size: bounded work, short messages (a 100000-deep value used to overflow the stack).
    ("config text 100000 arrays deep",
     lambda x: rotary.Spec.from_hf_config('{"head_dim": ' + "[" * 100000 + "]" * 100000 + "}"),
     OSError, ["deeper than 64 levels"]),
    ("config dict 100 levels deep", lambda x: rotary.Spec.from_hf_config(_nested_dict(100)), OSError,
     ["config dict nests arrays/objects deeper than 64 levels"]),
    ("config head_dim a 1e6-element list", lambda x: rotary.Spec.from_hf_config({"head_dim": [1] * 1000000}),
     ValueError, ["head_dim must be an integer, got [1,1,1", "..."]),
    ("preset name of 1 MB", lambda x: rotary.Spec.preset("p" * (1 << 20)), ValueError, ["(1048576 bytes)"]),
    # Checked arithmetic in the helpers (these wrapped around silently).
    ("grid_positions 2^62 x 4", lambda x: rotary.grid_positions(2**62, 4), ValueError,
     ["height * width", "4611686018427387904 x 4"]),
    ("grid_positions 2^32 x 2^32", lambda x: rotary.grid_positions(2**32, 2**32), ValueError, ["must be < 2^31"]),
    ("cp_positions offset 2^63-1", lambda x: rotary.cp_positions(0, 1, 2, 2**63 - 1), ValueError,
     ["last global position", "9223372036854775807"]),
    ("cp_positions local_len 2^62", lambda x: rotary.cp_positions(0, 2, 2**62), ValueError,
     ["local_len * cp.size", "overflows int64"]),
    ("cp_positions_packed cu [0, 5, -2^63]", lambda x: rotary.cp_positions_packed(0, 1, [0, 5, -2**63]), ValueError,
     ["non-decreasing", "-9223372036854775808"]),
    ("ggml mrope sections overflow", lambda x: rotary.ggml_frequencies("mrope", 8, sections=[2**63 - 1, 2**63 - 1, 0, 0]),
     ValueError, ["sections[0] must be <= 65536"]),
    # Specs that validated and then failed (or gave inf/NaN) at first use: refused when built, naming the field.
    ("spec yarn base 1", lambda x: rotary.Spec(8, base=1.0, rope_type="yarn", factor=4.0,
                                               original_max_position_embeddings=4096),
     ValueError, ["base 1 with rotary_dim 8 and rope_type yarn", "inv_freq[0]"]),
    ("spec longrope original_max 1",
     lambda x: rotary.Spec(8, rope_type="longrope", max_position_embeddings=2, original_max_position_embeddings=1,
                           short_factor=[1] * 4, long_factor=[1] * 4),
     ValueError, ["scaling.original_max_position_embeddings 1", "attention_factor inf"]),
    ("spec yarn mscale_all_dim zero denominator",
     lambda x: rotary.Spec(8, rope_type="yarn", factor=2.718281828459045, original_max_position_embeddings=4096,
                           mscale=1.0, mscale_all_dim=-10.0),
     ValueError, ["scaling.mscale_all_dim -10", "attention_factor"]),
    # torch negative-bit views as outputs (their memory holds the negated values): refused, naming the argument
    ("torch out is a negative-bit view", lambda x: _torch_neg_out(x, "neg"), ValueError,
     ["out is a negative-bit view", "resolve_neg"]),
    ("torch out is z.conj().imag", lambda x: _torch_neg_out(x, "conj"), ValueError,
     ["out is a negative-bit view"]),
    ("spec dynamic factor 1e300", lambda x: spec(rope_type="dynamic", factor=1e300), ValueError,
     ["scaling.factor 1e+300 gives the dynamic NTK base"]),
    ("spec attention_factor 1e39", lambda x: rotary.Spec(8, rope_type="yarn", factor=2.0,
                                                         original_max_position_embeddings=4096, attention_factor=1e39),
     ValueError, ["scaling.attention_factor 1e+39", "f32 maximum"]),
]


@pytest.mark.parametrize("name,call,exc,needles", CASES, ids=[c[0] for c in CASES])
def test_hostile_case(name, call, exc, needles):
    x = x4()
    before = x.copy()
    with pytest.raises(exc) as info:
        call(x)
    msg = str(info.value)
    doc = os.environ.get("ROTARY_ERRORS_DOC")
    if doc:  # scripts/gen_errors_doc.py collects the real messages for docs/errors.md
        with open(doc, "a") as f:
            f.write(f"Python\t{name}\t{info.type.__name__}\t{' '.join(msg.split())}\n")
    assert msg.startswith(("[rotary", "[onnx_rotary_embedding]")), msg
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"
    assert x.tobytes() == before.tobytes(), "inputs changed by a failed call"


def test_hostile_battery_size():
    assert len(CASES) >= 30


def test_malformed_config_files(tmp_path):
    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"head_dim": 64, "rope_theta": 1e6,')
    with pytest.raises(OSError, match="not valid JSON"):
        rotary.Spec.from_hf_config(str(truncated))
    missing = tmp_path / "missing.json"
    with pytest.raises(OSError, match="missing.json"):
        rotary.Spec.from_hf_config(str(missing))
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"head_dim": 2**63 - 1}))
    with pytest.raises(ValueError, match="9223372036854775807"):
        rotary.Spec.from_hf_config(str(huge))


def test_torch_out_with_zero_stride_is_rejected_and_inputs_kept():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 3, 2, D)
    before = x.clone()
    out = torch.empty(1, 3, 1, D).expand(2, 3, 2, D)
    with pytest.raises(ValueError, match="stride of dim"):
        rotary.apply(x, 0, spec(), out=out)
    assert torch.equal(x, before)


def test_growable_table_beyond_and_exactness():
    # Positions far beyond any table are exact (on the fly), never the identity.
    s = spec()
    x = x4(B=1, S=2, H=1)
    ids = np.array([5, 2**31 - 1])
    y = rotary.apply(x, ids, s)
    y64 = rotary.apply(x.astype(np.float64), ids.astype(np.float64), s)
    assert not np.array_equal(y, x)
    np.testing.assert_allclose(y, y64, atol=1e-5)


def test_reversed_index_arrays_are_read_from_a_copy():
    # numpy views with negative strides (np.arange(S)[::-1], np.flip) are accepted wherever an index array is
    # taken, like reversed x views, and give the result of their contiguous copies. Before, they were refused.
    s = spec()
    x = x4()
    ids = np.arange(3)[::-1]
    np.testing.assert_array_equal(rotary.apply(x, ids, s), rotary.apply(x, ids.copy(), s))
    ids2 = np.flip(np.arange(6).reshape(2, 3), 1)
    np.testing.assert_array_equal(rotary.apply(x, ids2, s), rotary.apply(x, ids2.copy(), s))
    fids = np.linspace(0.0, 5.0, 6)[::-2]
    np.testing.assert_array_equal(rotary.apply(x, fids, s), rotary.apply(x, fids.copy(), s))
    bo = np.arange(2)[::-1]
    np.testing.assert_array_equal(rotary.apply(x, 0, s, batch_offsets=bo), rotary.apply(x, 0, s, batch_offsets=bo.copy()))
    t = x.reshape(6, 2, D)
    cu = np.array([6, 2, 0])[::-1]
    so = np.array([7, 3])[::-1]
    np.testing.assert_array_equal(rotary.apply(t, 0, s, layout="thd", cu_seqlens=cu, seq_offsets=so),
                                  rotary.apply(t, 0, s, layout="thd", cu_seqlens=cu.copy(), seq_offsets=so.copy()))
    q, k = rotary.apply_qk(x, x[:, :, :1].copy(), ids, s)
    np.testing.assert_array_equal(q, rotary.apply(x, ids.copy(), s))
    c, sn = rotary.cos_sin(s, np.arange(4)[::-1])
    c2, s2 = rotary.cos_sin(s, np.arange(4)[::-1].copy())
    np.testing.assert_array_equal(c, c2)
    np.testing.assert_array_equal(sn, s2)


def test_huge_thread_counts_are_capped_not_refused():
    # docs: counts above the usable cores are capped; 2**40 used to fail nanobind's int conversion.
    x = x4()
    np.testing.assert_array_equal(rotary.apply(x, 0, spec(), threads=2**40), rotary.apply(x, 0, spec(), threads=1))


def test_size_one_batch_ids_broadcast_over_the_batch():
    # HF-style position_ids [1, S] (M-RoPE [3, 1, S]) for batch > 1 equal the ids repeated per batch row.
    x = x4(B=3)
    ids = np.array([[4, 0, 7]])
    np.testing.assert_array_equal(rotary.apply(x, ids, spec()), rotary.apply(x, np.repeat(ids, 3, 0), spec()))
    m = spec(mrope_section=[2, 1, 1])
    ids3 = np.array([[[4, 0, 7]], [[1, 2, 3]], [[9, 9, 1]]])
    np.testing.assert_array_equal(rotary.apply(x, ids3, m), rotary.apply(x, np.repeat(ids3, 3, 1), m))
    q, k = rotary.apply_qk(x, x[:, :, :1].copy(), ids, spec())
    np.testing.assert_array_equal(k, rotary.apply(x[:, :, :1].copy(), np.repeat(ids, 3, 0), spec()))
    af = rotary.mrope_frequencies(m)
    np.testing.assert_array_equal(rotary.apply_axes(x, ids3, af), rotary.apply_axes(x, np.repeat(ids3, 3, 1), af))


def test_byte_swapped_inputs_are_read_as_their_values():
    """A big-endian array ('>f4': from a file, a network buffer) got nanobind's argument-list dump; inputs are
    read through a native copy (the result native), and a native out takes a byte-swapped input."""
    x = np.random.default_rng(5).standard_normal((1, 3, 2, D)).astype(np.float32)
    want = rotary.apply(x, 2, spec())
    np.testing.assert_array_equal(rotary.apply(x.astype(">f4"), 2, spec()), want)
    out = np.empty_like(x)
    rotary.apply(x.astype(">f4"), 2, spec(), out=out)
    np.testing.assert_array_equal(out, want)
    c, s = rotary.cos_sin(spec(), 8)
    np.testing.assert_array_equal(rotary.apply_cos_sin(x, c.astype(">f4"), s.astype(">f4"), 2),
                                  rotary.apply_cos_sin(x, c, s, 2))
    X = np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # ONNX [B, H, S, D]
    ids = np.arange(3)[None]
    y = rotary.onnx_rotary_embedding(X.astype(">f4"), c, s, ids)
    assert y.dtype == np.float32 and y.dtype.isnative
    np.testing.assert_array_equal(y, rotary.onnx_rotary_embedding(X, c, s, ids))


def test_torch_float8_input_gets_a_rotary_message():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8")
    with pytest.raises(TypeError, match=r"^\[rotary_apply\] x dtype must be float32, float16, bfloat16 or float64, got "
                                        r"torch.float8_e4m3fn"):
        rotary.apply(torch.ones(1, 2, 1, D).to(torch.float8_e4m3fn), 0, spec())


def test_spec_converts_what_its_fields_casters_take():
    # Spec's catch-all overload (the TypeErrors above) must still let through what needs a conversion: numpy
    # scalars, ints where floats are expected, numpy arrays for the factor lists; the Spec equals the plain one.
    plain = rotary.Spec(64, 32, 5e5, rope_type="longrope", short_factor=[1.0] * 16, long_factor=[2.0] * 16,
                        max_position_embeddings=4096, original_max_position_embeddings=2048)
    converted = rotary.Spec(np.int64(64), rotary_dim=np.int32(32), base=np.float32(5e5), rope_type="longrope",
                            short_factor=[1] * 16, long_factor=np.full(16, 2.0), max_position_embeddings=np.int64(4096),
                            original_max_position_embeddings=2048, truncate=np.True_)
    assert converted == plain
    assert plain.replace(base=np.float64(1e4)) == rotary.Spec(64, 32, 1e4, rope_type="longrope", short_factor=[1.0] * 16,
                                                              long_factor=[2.0] * 16, max_position_embeddings=4096,
                                                              original_max_position_embeddings=2048)
