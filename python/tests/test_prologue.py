"""rotary.prologue / rotary.rerotate_cache (numpy and torch CPU tensors) against an fp64 numpy composition (norm -> rotate -> store)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import rotary
from reference import default_inv_freq, rotate

ml_dtypes = pytest.importorskip("ml_dtypes")  # the fp8/bf16 numpy dtypes (a bare venv without it skips)

T, HQ, HKV, D, DV, NB, BS, SMAX = 5, 4, 2, 64, 24, 4, 4, 8
CU = np.array([0, 3, 5], dtype=np.int32)        # two packed sequences: 3 + 2 tokens
SEQ_OFF = np.array([7, 100], dtype=np.int64)    # their first positions
SLOTS = np.array([5, 0, 14, -1, 9], dtype=np.int64)  # paged rows (block * BS + offset); token 3 is padding
STARTS = np.array([1, 3], dtype=np.int64)       # contiguous: start rows of the two sequences
POS = np.array([7, 8, 9, 100, 101])
NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
                "i8": np.int8, "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
FP8_SCALE = {"k": 0.05, "v": 0.04}


def _norm(x, w, eps, offset):
    """Per-head RMSNorm in float64 of the float32 inputs: x * r * (w + offset)."""
    x = x.astype(np.float64)
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x * r * (w.astype(np.float64) + np.float32(offset))


def _truth(q, k, spec_base, pairing, wq=None, wk=None, eps=1e-5, offset=0.0, inv_freq=None):
    inv = default_inv_freq(spec_base, D) if inv_freq is None else inv_freq
    ang = POS[:, None, None].astype(np.float64) * inv[None, None, :]
    qn = _norm(q, wq, eps, offset) if wq is not None else q.astype(np.float64)
    kn = _norm(k, wk, eps, offset) if wk is not None else k.astype(np.float64)
    return rotate(qn, ang, pairing=pairing), rotate(kn, ang, pairing=pairing)


def _cache(layout, dtype, dim):
    paged = layout in ("nhd", "hnd")
    major, minor = (NB, BS) if paged else (2, SMAX)
    shape = (major, HKV, minor, dim) if layout in ("hnd", "bhsd") else (major, minor, HKV, dim)
    return np.zeros(shape, dtype=NUMPY_DTYPES[dtype])


def _rows(layout, cache, t):
    """The [Hkv, dim] cache rows of token t (None when the token is not written), and the row index tuple."""
    if layout in ("nhd", "hnd"):
        if SLOTS[t] < 0:
            return None
        major, minor = divmod(int(SLOTS[t]), BS)
    else:
        major = 0 if t < 3 else 1
        minor = int(STARTS[major]) + (t if t < 3 else t - 3)
    if layout in ("hnd", "bhsd"):
        return cache[major, :, minor, :], (major, slice(None), minor)
    return cache[major, minor, :, :], (major, minor, slice(None))


def _decoded(rows, dtype, scale):
    """The values a cache row stands for (dequantised) in float64."""
    if dtype == "i8":
        return rows.astype(np.float64) * scale[..., None].astype(np.float64)
    if dtype in ("e4m3", "e5m2"):
        return rows.astype(np.float64) * scale
    return rows.astype(np.float64)


def _tol(dtype, want, scale):
    """Per element: the storage step of the dtype around the true value (fp64 truth vs f32 math + one rounding)."""
    a = np.abs(want)
    if dtype == "f32":
        return 2e-6 * np.maximum(a, 1.0)
    if dtype == "f16":
        return np.maximum(a * 2.0 ** -10, 2.0 ** -24) + 1e-6
    if dtype == "bf16":
        return a * 2.0 ** -7 + 1e-6
    if dtype == "i8":
        return scale[..., None] * 0.5001 + 1e-6
    mant = 3 if dtype == "e4m3" else 2
    sub = 2.0 ** (-9 if dtype == "e4m3" else -16)
    return (np.maximum(a / scale * 2.0 ** -mant, sub) * scale) + 1e-6


def _call(inp, cache_dtype, layout, pairing, norm, q_out, lib=np):
    rng = np.random.default_rng(11)
    base = 10000.0
    spec = rotary.Spec(D, base=base, pairing=pairing)
    dt = NUMPY_DTYPES[inp]
    q = rng.standard_normal((T, HQ, D)).astype(np.float32).astype(dt)
    k = rng.standard_normal((T, HKV, D)).astype(np.float32).astype(dt)
    v = rng.standard_normal((T, HKV, DV)).astype(np.float32).astype(dt)
    wq = (1.0 + 0.3 * rng.standard_normal(D)).astype(np.float32)
    wk = (1.0 + 0.3 * rng.standard_normal(D)).astype(np.float32)
    kc, vc = _cache(layout, cache_dtype, D), _cache(layout, cache_dtype, DV)
    scale_shape = kc.shape[:-1]
    if cache_dtype == "i8":
        ks, vs = np.zeros(scale_shape, np.float32), np.zeros(scale_shape, np.float32)
    elif cache_dtype in ("e4m3", "e5m2"):
        ks, vs = FP8_SCALE["k"], FP8_SCALE["v"]
    else:
        ks = vs = None
    paged = layout in ("nhd", "hnd")
    qo = np.zeros_like(q) if q_out else None
    q_in, k_in, v_in = q.copy(), k.copy(), v.copy()
    kw = dict(k_cache=kc, v_cache=vc, cache_layout=layout, slot_mapping=SLOTS if paged else None,
              cache_positions=None if paged else STARTS, k_scale=ks, v_scale=vs, q_out=qo,
              cu_seqlens=CU, seq_offsets=SEQ_OFF, threads=1, norm_eps=1e-5, norm_offset=1.0 if norm == 2 else 0.0)
    if norm:
        kw.update(q_norm_weight=wq, k_norm_weight=wk)
    out = rotary.prologue(q_in, k_in, v_in, 0, spec, **kw)
    wq64 = wq if norm else None
    wk64 = wk if norm else None
    tq, tk = _truth(q.astype(np.float32), k.astype(np.float32), base, pairing, wq64, wk64,
                    offset=1.0 if norm == 2 else 0.0)
    return dict(q=q, k=k, v=v, out=out, q_in=q_in, qo=qo, kc=kc, vc=vc, ks=ks, vs=vs, tq=tq, tk=tk)


GRID = list(itertools.product(["f32", "bf16", "f16"], ["f32", "f16", "bf16", "i8", "e4m3", "e5m2"],
                              ["nhd", "hnd", "bshd", "bhsd"], ["half", "interleaved"], [0, 1, 2]))


@pytest.mark.parametrize("inp,cache_dtype,layout,pairing,norm",
                         [g for i, g in enumerate(GRID) if i % 5 == 0 or g[1] in ("i8", "e4m3") and g[4] == 2])
def test_prologue_matches_the_fp64_composition(inp, cache_dtype, layout, pairing, norm):
    r = _call(inp, cache_dtype, layout, pairing, norm, q_out=(norm == 1))
    q_got = (r["qo"] if r["qo"] is not None else r["q_in"]).astype(np.float64)
    assert r["out"] is (r["qo"] if r["qo"] is not None else r["q_in"])
    np.testing.assert_array_less(np.abs(q_got - r["tq"]), _tol(inp, r["tq"], None) + 1e-30)
    if r["qo"] is not None:
        np.testing.assert_array_equal(r["q_in"], r["q"])  # q_out given: q is only read
    for t in range(T):
        for name, cache, truth, scale in (("k", r["kc"], r["tk"][t], r["ks"]), ("v", r["vc"], r["v"][t].astype(np.float64), r["vs"])):
            got = _rows(layout, cache, t)
            if got is None:
                continue
            rows, idx = got
            s = scale[idx] if cache_dtype == "i8" else scale
            if cache_dtype == "i8":  # one scale per (token, head): amax / 127
                np.testing.assert_allclose(s, np.abs(truth).max(axis=-1) / 127.0, rtol=1e-5)
            dec = _decoded(rows, cache_dtype, s)
            err = np.abs(dec - truth)
            tol = _tol(cache_dtype, truth, s)
            assert (err <= tol).all(), f"{name} token {t}: max err {err.max()} tol {tol.min()}"


@pytest.mark.parametrize("layout", ["nhd", "hnd"])
def test_skipped_slots_and_other_rows_are_untouched(layout):
    r = _call("f32", "f32", layout, "half", 0, q_out=False)
    written = np.zeros(r["kc"].shape[:-1], bool)
    for t in range(T):
        got = _rows(layout, r["kc"], t)
        if got is not None:
            written[got[1]] = True
    assert written.sum() == HKV * (T - 1)
    assert (r["kc"][~written] == 0).all() and (r["vc"][~written] == 0).all()


def test_int8_rows_are_bit_exact_to_the_documented_rounding_of_the_f32_result():
    r = _call("f32", "i8", "nhd", "half", 1, q_out=False)
    # the kernel's f32 result equals the truth to f32 rounding; rebuild the stored codes from that f32 value
    for t in range(T):
        got = _rows("nhd", r["kc"], t)
        if got is None:
            continue
        rows, idx = got
        y = r["tk"][t].astype(np.float32)
        scale = (np.abs(y).max(axis=-1) / np.float32(127.0)).astype(np.float32)
        np.testing.assert_allclose(r["ks"][idx], scale, rtol=2e-6)
        want = np.clip(np.rint(y / r["ks"][idx][:, None]), -127, 127)
        assert np.abs(rows.astype(np.int32) - want).max() <= 1  # a tie may flip with the last f32 bit
        assert (rows.astype(np.int32) == want).mean() > 0.99


def test_fp8_encoding_equals_ml_dtypes_of_the_scaled_value():
    # v is stored without rotation: the cache must hold exactly ml_dtypes' RNE of fl32(v / scale), saturated
    r = _call("f32", "e4m3", "nhd", "half", 0, q_out=False)
    big = np.float32(1e4)
    for t in range(T):
        got = _rows("nhd", r["vc"], t)
        if got is None:
            continue
        rows, _ = got
        want = np.clip(r["v"][t] / np.float32(FP8_SCALE["v"]), -448, 448).astype(ml_dtypes.float8_e4m3fn)
        np.testing.assert_array_equal(rows.view(np.uint8), want.view(np.uint8))
    # saturation: a value far beyond 448 * scale stores the largest finite code, never NaN
    spec = rotary.Spec(D)
    kc = np.zeros((1, 4, 1, D), ml_dtypes.float8_e5m2)
    vc = np.zeros((1, 4, 1, D), ml_dtypes.float8_e5m2)
    k = np.full((1, 1, D), big, np.float32)
    v = np.full((1, 1, D), -big, np.float32)
    rotary.prologue(None, k, v, 0, None, k_cache=kc, v_cache=vc, slot_mapping=np.array([2]), k_scale=0.01, v_scale=0.01)
    assert (vc[0, 2, 0].astype(np.float32) == -57344).all() and (kc[0, 2, 0].astype(np.float32) == 57344).all()
    del spec


def test_per_sequence_specs_use_each_sequences_frequencies():
    rng = np.random.default_rng(3)
    specs = [rotary.Spec(D, base=10000.0), rotary.Spec(D, base=10000.0, rope_type="linear", factor=4.0)]
    q = rng.standard_normal((T, HQ, D)).astype(np.float32)
    k = rng.standard_normal((T, HKV, D)).astype(np.float32)
    v = rng.standard_normal((T, HKV, DV)).astype(np.float32)
    kc, vc = _cache("nhd", "f32", D), _cache("nhd", "f32", DV)
    q_in = q.copy()
    rotary.prologue(q_in, k, v, 0, specs, spec_index=np.array([1, 0]), k_cache=kc, v_cache=vc, slot_mapping=SLOTS,
                    cu_seqlens=CU, seq_offsets=SEQ_OFF)
    inv = default_inv_freq(10000.0, D)
    for t in range(T):
        f = inv / 4.0 if t < 3 else inv  # sequence 0 -> spec 1 (linear 4), sequence 1 -> spec 0
        ang = np.float64(POS[t]) * f
        np.testing.assert_allclose(q_in[t], rotate(q[t].astype(np.float64), ang[None, :]), atol=2e-5)
        rows = _rows("nhd", kc, t)
        if rows is not None:
            np.testing.assert_allclose(rows[0], rotate(k[t].astype(np.float64), ang[None, :]), atol=2e-5)


def test_torch_cpu_tensors_and_fp8_types_are_accepted():
    torch = pytest.importorskip("torch")
    r = _call("f32", "f32", "bhsd", "half", 1, q_out=False)
    rng = np.random.default_rng(11)
    spec = rotary.Spec(D)
    q = torch.from_numpy(r["q"].copy())
    kc = torch.zeros((2, HKV, SMAX, D), dtype=torch.float8_e4m3fn)
    vc = torch.zeros((2, HKV, SMAX, DV), dtype=torch.float8_e4m3fn)
    wq = torch.from_numpy((1.0 + 0.3 * rng.standard_normal(D)).astype(np.float32))
    out = rotary.prologue(q, torch.from_numpy(r["k"]), torch.from_numpy(r["v"]), 0, spec, k_cache=kc, v_cache=vc,
                          cache_layout="bhsd", cache_positions=torch.tensor(STARTS), k_scale=0.05, v_scale=0.04,
                          cu_seqlens=torch.tensor(CU), seq_offsets=torch.tensor(SEQ_OFF))
    assert out is q
    kn = np.zeros(kc.shape, ml_dtypes.float8_e4m3fn)
    vn = np.zeros(vc.shape, ml_dtypes.float8_e4m3fn)
    rotary.prologue(r["q"].copy(), r["k"], r["v"], 0, spec, k_cache=kn, v_cache=vn, cache_layout="bhsd",
                    cache_positions=STARTS, k_scale=0.05, v_scale=0.04, cu_seqlens=CU, seq_offsets=SEQ_OFF)
    np.testing.assert_array_equal(kc.view(torch.uint8).numpy(), kn.view(np.uint8))  # torch and numpy: same bytes
    np.testing.assert_array_equal(vc.view(torch.uint8).numpy(), vn.view(np.uint8))
    assert wq is not None


ERRORS = [
    ("slot_mapping", dict(slot_mapping=np.array([5, 0, 99, -1, 9])), "slot_mapping"),
    ("duplicate slot", dict(slot_mapping=np.array([5, 0, 5, -1, 9])), "slot_mapping"),
    ("v width", dict(v=np.zeros((T, HKV, DV + 2), np.float32)), "v"),
    ("cache dtype", dict(v_cache=np.zeros((NB, BS, HKV, DV), np.float16)), "v_cache"),
    ("missing scale", dict(k_cache=np.zeros((NB, BS, HKV, D), np.int8), v_cache=np.zeros((NB, BS, HKV, DV), np.int8)),
     "k_scale"),
    ("norm weight", dict(q_norm_weight=np.ones(D - 2, np.float32)), "q_norm_weight"),
]


@pytest.mark.parametrize("case,override,arg", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_name_the_argument_and_leave_everything_untouched(case, override, arg):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((T, HQ, D)).astype(np.float32)
    k = rng.standard_normal((T, HKV, D)).astype(np.float32)
    v = rng.standard_normal((T, HKV, DV)).astype(np.float32)
    kc = np.full((NB, BS, HKV, D), 7.0, np.float32)
    vc = np.full((NB, BS, HKV, DV), 7.0, np.float32)
    args = dict(q=q, k=k, v=v, k_cache=kc, v_cache=vc, slot_mapping=SLOTS)
    args.update(override)
    before = {n: a.copy() for n, a in args.items() if isinstance(a, np.ndarray)}
    with pytest.raises((ValueError, TypeError)) as e:
        rotary.prologue(args.pop("q"), args.pop("k"), args.pop("v"), 0, rotary.Spec(D), cu_seqlens=CU,
                        seq_offsets=SEQ_OFF, **args)
    assert str(e.value).startswith("[rotary_prologue] ") and arg in str(e.value), str(e.value)
    for n, a in before.items():
        cur = override[n] if n in override else {"q": q, "k": k, "v": v, "k_cache": kc, "v_cache": vc}.get(n)
        if cur is not None:
            np.testing.assert_array_equal(cur, a, err_msg=f"{n} changed on error")


POSITION_CONFLICTS = [
    ("ids with cu_seqlens", dict(positions=np.arange(5), cu_seqlens=np.array([0, 2, 5])), "cu_seqlens"),
    ("seq_offsets without cu_seqlens", dict(positions=0, seq_offsets=np.array([3, 4])), "seq_offsets needs cu_seqlens"),
    ("offset and seq_offsets", dict(positions=7, cu_seqlens=np.array([0, 2, 5]), seq_offsets=np.array([3, 4])),
     "not both"),
    ("cu_seqlens with batch_offsets", dict(positions=0, cu_seqlens=np.array([0, 2, 5]), batch_offsets=np.array([1])),
     "batch_offsets"),
    ("ids with batch_offsets", dict(positions=np.arange(5), batch_offsets=np.array([1])), "batch_offsets"),
]


@pytest.mark.parametrize("case,kw,needle", POSITION_CONFLICTS, ids=[c[0] for c in POSITION_CONFLICTS])
def test_position_arguments_of_two_schemes_are_refused_not_ignored(case, kw, needle):
    # Each scheme alone means something else (ids: absolute; cu_seqlens: restart per sequence at seq_offsets);
    # dropping one silently rotated keys at the wrong positions into the cache.
    rng = np.random.default_rng(9)
    q = rng.standard_normal((5, 2, 16)).astype(np.float32)
    k = rng.standard_normal((5, 1, 16)).astype(np.float32)
    kc = np.full((2, 4, 1, 16), 7.0, np.float32)
    vc = kc.copy()
    kw = dict(kw)
    positions = kw.pop("positions")
    q0 = q.copy()
    with pytest.raises(ValueError) as e:
        rotary.prologue(q, k, k.copy(), positions, rotary.Spec(16), k_cache=kc, v_cache=vc,
                        slot_mapping=np.arange(5), **kw)
    assert str(e.value).startswith("[rotary_prologue] ") and needle in str(e.value), str(e.value)
    np.testing.assert_array_equal(q, q0)
    assert (kc == 7.0).all() and (vc == 7.0).all()
    with pytest.raises(ValueError, match=r"^\[rotary_apply\] "):
        rotary.apply(q.copy(), positions, rotary.Spec(16), layout="thd", **kw)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_broadcast_k_and_v_inputs_equal_their_contiguous_copies(lib):
    # k and v are only read when a cache is written: a broadcast (stride-0) view is an input like any other.
    rng = np.random.default_rng(11)
    q = rng.standard_normal((3, 2, 16)).astype(np.float32)
    k1 = rng.standard_normal((1, 1, 16)).astype(np.float32)
    v1 = rng.standard_normal((3, 1, 1)).astype(np.float32)
    kb, vb = np.broadcast_to(k1, (3, 1, 16)), np.broadcast_to(v1, (3, 1, 16))
    want = [np.zeros((2, 4, 1, 16), np.float32) for _ in range(2)]
    qw = rotary.prologue(q.copy(), np.ascontiguousarray(kb), np.ascontiguousarray(vb), 5, rotary.Spec(16),
                         k_cache=want[0], v_cache=want[1], slot_mapping=np.arange(3))
    if lib == "torch":
        torch = pytest.importorskip("torch")
        q, kb, vb = torch.from_numpy(q), torch.from_numpy(k1).expand(3, 1, 16), torch.from_numpy(v1).expand(3, 1, 16)
    got = [np.zeros((2, 4, 1, 16), np.float32) for _ in range(2)]
    qg = rotary.prologue(q, kb, vb, 5, rotary.Spec(16), k_cache=got[0], v_cache=got[1], slot_mapping=np.arange(3))
    np.testing.assert_array_equal(np.asarray(qg), qw)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_a_negative_int_offset_with_cu_seqlens_is_named_and_packed_arguments_need_no_grad():
    k = np.ones((5, 1, 16), np.float32)
    with pytest.raises(ValueError, match=r"^\[rotary_apply\] positions.offset must be >= 0, got -2"):
        rotary.apply(k, -2, rotary.Spec(16), layout="thd", cu_seqlens=np.array([0, 2, 5]))
    torch = pytest.importorskip("torch")
    x = torch.ones((1, 4, 1, 16), requires_grad=True)
    with pytest.raises(ValueError, match="seq_offsets= .*not supported for tensors requiring grad"):
        rotary.apply(x, 0, rotary.Spec(16), seq_offsets=np.array([5]))
    with pytest.raises(ValueError, match="seq_offsets=.*not supported for tensors requiring grad"):
        rotary.apply_qk(x, x.detach().clone().requires_grad_(), 0, rotary.Spec(16), seq_offsets=np.array([5]))


def test_an_int_offset_with_cu_seqlens_starts_every_packed_sequence_there():
    rng = np.random.default_rng(10)
    k = rng.standard_normal((5, 1, 16)).astype(np.float32)
    cu, ids = np.array([0, 2, 5]), np.array([40, 41, 40, 41, 42])
    spec = rotary.Spec(16)
    np.testing.assert_array_equal(rotary.apply(k.copy(), 40, spec, layout="thd", cu_seqlens=cu),
                                  rotary.apply(k.copy(), ids, spec, layout="thd"))
    caches = [np.zeros((2, 4, 1, 16), np.float32) for _ in range(4)]
    rotary.prologue(None, k.copy(), k.copy(), 40, spec, k_cache=caches[0], v_cache=caches[1],
                    slot_mapping=np.arange(5), cu_seqlens=cu)
    rotary.prologue(None, k.copy(), k.copy(), ids, spec, k_cache=caches[2], v_cache=caches[3],
                    slot_mapping=np.arange(5))
    np.testing.assert_array_equal(caches[0], caches[2])


def test_rerotate_equals_rotating_from_scratch_and_round_trips():
    rng = np.random.default_rng(9)
    a_spec, b_spec = rotary.Spec(D, base=10000.0), rotary.Spec(D, base=10000.0, rope_type="linear", factor=2.0)
    k = rng.standard_normal((6, HKV, D)).astype(np.float32)
    slots = np.array([1, 4, 6, 9, 10, 15])
    a_pos, b_pos = np.array([10, 11, 12, 300, 301, 302]), np.array([4, 5, 6, 200, 201, 9000])
    kc = np.zeros((NB, BS, HKV, D), np.float32)
    vc = np.zeros((NB, BS, HKV, D), np.float32)
    rotary.prologue(None, k, k, a_pos, a_spec, k_cache=kc, v_cache=vc, slot_mapping=slots)
    original = kc.copy()
    rotary.rerotate_cache(kc, slots, a_pos, b_pos, a_spec, to_spec=b_spec)
    inv = default_inv_freq(10000.0, D)
    for i, s in enumerate(slots):
        want = rotate(k[i].astype(np.float64), (b_pos[i] * inv / 2.0)[None, :])
        np.testing.assert_allclose(kc.reshape(-1, HKV, D)[s], want, atol=3e-5)
    rotary.rerotate_cache(kc, slots, b_pos, a_pos, b_spec, to_spec=a_spec)
    np.testing.assert_allclose(kc, original, atol=2e-6)  # A -> B -> A: back to f32 rounding
    untouched = np.ones(NB * BS, bool)
    untouched[slots] = False
    assert (kc.reshape(-1, HKV, D)[untouched] == 0).all()


def test_rerotate_per_head_positions_through_a_view_of_the_cache():
    # kvpress-style pruning keeps other tokens in each head and moves each kept key to its own new index. A slot is a
    # token's row of every head, so per-head positions take a view whose rows are single heads (docs/prologue.md):
    # a bhsd cache [B, H, S, D] as [B*H, 1, S, D] (slot (b*H + h)*S + s), a paged nhd cache [N, bs, H, D] as
    # [N, bs*H, 1, D] (slot slot*H + h).
    rng = np.random.default_rng(21)
    spec, inv = rotary.Spec(D), default_inv_freq(10000.0, D)
    B, H, S = 2, 3, 8
    keys = rng.standard_normal((B, H, S, D))
    old, new = rng.integers(0, 500, (B, H, S)), rng.integers(0, 500, (B, H, S))
    cache = rotate(keys, old[..., None] * inv).astype(np.float32)
    rotary.rerotate_cache(cache.reshape(B * H, 1, S, D), np.arange(B * H * S), old.reshape(-1), new.reshape(-1), spec,
                          cache_layout="bhsd")
    np.testing.assert_allclose(cache, rotate(keys, new[..., None] * inv), atol=3e-5)
    N, bs = 2, 4
    keys = rng.standard_normal((N * bs, H, D))
    old, new = rng.integers(0, 500, (N * bs, H)), rng.integers(0, 500, (N * bs, H))
    rows = rotate(keys, old[..., None] * inv)
    cache = rows.astype(np.float32).reshape(N, bs, H, D)
    rotary.rerotate_cache(cache.reshape(N, bs * H, 1, D), np.arange(N * bs * H), old.reshape(-1), new.reshape(-1), spec)
    np.testing.assert_allclose(cache.reshape(N * bs, H, D), rotate(keys, new[..., None] * inv), atol=3e-5)
    scale = (np.abs(rows).max(-1) / 127).astype(np.float32)  # int8 with its [N, bs, H] scales viewed alike
    q8 = np.rint(rows / scale[..., None]).astype(np.int8).reshape(N, bs, H, D)
    scale = scale.reshape(N, bs, H)
    rotary.rerotate_cache(q8.reshape(N, bs * H, 1, D), np.arange(N * bs * H), old.reshape(-1), new.reshape(-1), spec,
                          k_scale=scale.reshape(N, bs * H, 1))
    got = q8.reshape(N * bs, H, D) * scale.reshape(N * bs, H)[..., None].astype(np.float64)
    np.testing.assert_allclose(got, rotate(keys, new[..., None] * inv), atol=3 * float(scale.max()))


def test_rerotate_int8_cache_requantises_with_fresh_scales():
    rng = np.random.default_rng(4)
    spec = rotary.Spec(D)
    k = rng.standard_normal((4, HKV, D)).astype(np.float32)
    slots = np.array([0, 1, 2, 3])
    kc = np.zeros((1, BS, HKV, D), np.int8)
    vc = np.zeros((1, BS, HKV, D), np.int8)
    ks, vs = np.zeros((1, BS, HKV), np.float32), np.zeros((1, BS, HKV), np.float32)
    rotary.prologue(None, k, k, 0, spec, k_cache=kc, v_cache=vc, slot_mapping=slots, k_scale=ks, v_scale=vs)
    rotary.rerotate_cache(kc, slots, np.arange(4), np.arange(4) + 50, spec, k_scale=ks)
    inv = default_inv_freq(10000.0, D)
    for i in range(4):
        want = rotate(k[i].astype(np.float64), ((i + 50) * inv)[None, :])
        np.testing.assert_allclose(ks[0, i], np.abs(want).max(axis=-1) / 127, rtol=0.02)
        # two int8 roundings (the prologue's and the requantisation's): within one and a half steps
        assert (np.abs(kc[0, i] * ks[0, i][:, None] - want) <= 1.5 * ks[0, i][:, None] + 1e-6).all()
    with pytest.raises(ValueError, match=r"^\[rotary_rerotate_cache\] .*k_scale"):
        rotary.rerotate_cache(kc, slots, np.arange(4), np.arange(4), spec)


def test_rerotate_by_a_zero_angle_keeps_the_bits():
    # Same positions, same spec: the rows keep their bits (-0, NaN payloads, inf; rotating by cos 1 / sin 0
    # turned -0 into +0 and x * 0 into NaN), and int8 rows their values and scales (not requantised).
    spec = rotary.Spec(D)
    slots, pos = np.array([0, 5, 6, 15]), np.array([0, 3, 7, 70000])
    bits = np.array([0x80000000, 0, 0x7FC00001, 0xFF800001, 0x7F800000, 0xFF800000, 1, 0xC0100000], np.uint32)
    kc = np.tile(bits, NB * BS * HKV * D // bits.size).view(np.float32).reshape(NB, BS, HKV, D)
    before = kc.copy()
    rotary.rerotate_cache(kc, slots, pos, pos, spec)
    np.testing.assert_array_equal(kc.view(np.uint32), before.view(np.uint32))
    kq = (np.arange(NB * BS * HKV * D) % 201 - 100).astype(np.int8).reshape(NB, BS, HKV, D)
    ks = np.full((NB, BS, HKV), 0.01, np.float32)
    kq0, ks0 = kq.copy(), ks.copy()
    rotary.rerotate_cache(kq, slots, pos, pos, spec, k_scale=ks)
    np.testing.assert_array_equal(kq, kq0)
    np.testing.assert_array_equal(ks.view(np.uint32), ks0.view(np.uint32))


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_prologue_equals_transformers_own_composition_in_the_peer_benchmark(phase):
    """The peer benchmark's two implementations compute the same thing: HF Qwen3 q_norm/k_norm + apply_rotary_pos_emb +
    StaticCache index_copy_ (transformers' code) vs one rotary.prologue call."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from rotary import _bench_prologue as bp

    inp = bp.Inputs(phase, "f32")
    if phase == "prefill":  # a shorter prefill keeps the test fast; same code path
        inp.q, inp.k, inp.v, inp.positions = inp.q[:, :64], inp.k[:, :64], inp.v[:, :64], inp.positions[:64]
    want_q = bp.make_torch_eager(inp, 1)()                       # [1, Hq, T, D]
    want_k, want_v = inp.k_cache.clone(), inp.v_cache.clone()
    inp.k_cache.zero_()
    inp.v_cache.zero_()
    got_q = bp.make_rotary(inp, 1).q                             # [1, T, Hq, D], rotated in place by its warm-up
    # transformers forms the angle p * theta in f32: at p = 12345 (decode) that angle is off by up to ~1e-3 rad,
    # where rotary's angles are exact (docs/accuracy.md); at the prefill's small positions both agree to f32 rounding
    atol = 2e-5 if phase == "prefill" else 4e-3
    torch.testing.assert_close(got_q.transpose(1, 2), want_q, rtol=0, atol=atol)
    torch.testing.assert_close(inp.k_cache, want_k, rtol=0, atol=atol)
    assert torch.equal(inp.v_cache, want_v)
    assert inp.k_cache[0, :, inp.offset].abs().sum() > 0


def test_peer_benchmark_inputs_stay_normal_over_many_timed_calls():
    """rotary's timed call normalises and rotates q in place: thousands of calls must not drive q to subnormals or
    zeros (unequal q weights did: 903 zeros and 3129 values below 1e-30 of 4096 after 20 000 decode calls)."""
    torch = pytest.importorskip("torch")
    from rotary import _bench_prologue as bp

    run = bp.make_rotary(bp.Inputs("decode", "f32"), 1)
    for _ in range(20000):
        run()
    q = run.q.abs()
    assert torch.isfinite(q).all() and int((q < 1e-6).sum()) == 0, (int((q == 0).sum()), float(q.min()))


def test_peer_benchmark_prologue_rows(tmp_path):
    import json
    import subprocess
    import sys

    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-m", "rotary.bench", "--peers", "--json", "--quick", "--case", "prologue",
                          "--threads", "1"], capture_output=True, text=True, check=True, timeout=600)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert {(r["phase"], r["dtype"], r["impl"]) for r in rows} == {
        (p, d, i) for p in ("prefill", "decode") for d in ("f32", "bf16") for i in ("rotary", "torch-eager")}
    assert all(r["case"] == "prologue" and r["threads"] == 1 and r["ms"] > 0 for r in rows), rows
    # the two implementations alternate in rounds; ms is the median of a row's rounds
    assert all(len(r["rounds_ms"]) == 3 and r["ms"] == sorted(r["rounds_ms"])[1] for r in rows), rows
    assert "speedup of rotary.prologue over the torch eager composition" in out.stderr
