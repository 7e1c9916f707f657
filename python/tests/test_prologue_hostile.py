"""Hostile inputs to the prologue's and the ops' Python/torch adapters: meta beside real tensors, negative-bit views, version counters, read-only arrays, uint64 slots."""
from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import rotary  # noqa: E402
from rotary import _torch_ops, prologue_torch  # noqa: E402
from prologue_ops import op_args  # noqa: E402
from reference import default_inv_freq, rotate  # noqa: E402

SPEC = rotary.Spec(64)
KEY = prologue_torch.spec_key(SPEC)


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn((3, h, 64), generator=g) for h in (4, 2, 2))
    return q, k, v, torch.zeros((2, 4, 2, 64)), torch.zeros((2, 4, 2, 64))


def _op_args(q, k, v, kc, vc, **over):
    return op_args(q, k, v, kc, vc, KEY, **over)


def test_a_meta_tensor_beside_real_ones_is_refused_not_a_silent_no_op():
    # The dispatcher runs the Meta (fake) kernel when ANY argument is on 'meta': it returned uninitialised CPU memory
    # (apply) or wrote nothing without an error (the prologue, re-rotation), also through patched layers' call.
    q, k, v, kc, vc = _inputs()
    q0 = q.clone()
    key = _torch_ops.spec_key(SPEC)
    meta_pos = torch.arange(3, device="meta")
    x = torch.randn((1, 3, 2, 64))
    for call in (lambda: torch.ops.rotary.apply(x, meta_pos, 0, key),
                 lambda: torch.ops.rotary.apply_(x, meta_pos, 0, key),
                 lambda: rotary.torch.apply(x, meta_pos, SPEC)):
        with pytest.raises(RuntimeError, match=r"^\[rotary_apply\] positions is on device 'meta' but x is on 'cpu'"):
            call()
    for call in (torch.ops.rotary.prologue, prologue_torch._call_prologue):
        with pytest.raises(RuntimeError, match=r"^\[rotary_prologue\] k_cache is on device 'meta' but q is on 'cpu'"):
            call(*_op_args(q, k, v, torch.zeros((2, 4, 2, 64), device="meta"), vc))
    assert torch.equal(q, q0) and not vc.any()
    with pytest.raises(RuntimeError, match=r"^\[rotary_rerotate_cache\] from_positions is on device 'meta'"):
        torch.ops.rotary.rerotate_cache(kc, torch.tensor([1]), torch.tensor([0], device="meta"), torch.tensor([3]),
                                        KEY, None, "nhd", None, 1.0, 1)
    # every tensor on 'meta': shapes only, as before
    out = torch.ops.rotary.apply(x.to("meta"), meta_pos, 0, key)
    assert out.device.type == "meta" and out.shape == x.shape
    torch.ops.rotary.prologue(*_op_args(*(t.to("meta") for t in (q, k, v, kc, vc)),
                                        positions=meta_pos, slot_mapping=torch.tensor([5, -1, 2], device="meta")))


@pytest.mark.parametrize("arg", ["k_cache", "q", "q_out"])
def test_a_negative_bit_view_to_write_is_named_by_the_op_before_any_write(arg):
    # torch's Negative fallback materialised it, ran the kernel on copies (q rotated, v_cache written) and then failed
    # with "Expected Tensor but got None" (the op returns nothing).
    q, k, v, kc, vc = _inputs(1)
    over = {arg: torch.zeros_like(q)._neg_view() if arg == "q_out" else None}
    if arg == "k_cache":
        kc = kc._neg_view()
    if arg == "q":
        q = q._neg_view()
    q0 = q.clone()
    with pytest.raises(ValueError, match=rf"^\[rotary_prologue\] {arg} is a negative-bit view"):
        torch.ops.rotary.prologue(*_op_args(q, k, v, kc, vc, q_out=over["q_out"] if arg == "q_out" else None))
    assert torch.equal(q, q0) and not vc.any() and not kc.any()
    with pytest.raises(ValueError, match=r"^\[rotary_rerotate_cache\] k_cache is a negative-bit view"):
        torch.ops.rotary.rerotate_cache(torch.ones((2, 4, 2, 64))._neg_view(), torch.tensor([1]), torch.tensor([0]),
                                        torch.tensor([3]), KEY, None, "nhd", None, 1.0, 1)


def test_negative_bit_position_tensors_are_read_by_value():
    # z.conj().imag holds -value in memory: read raw, [3, 4, 5] was refused as negative (and negative values whose
    # memory is positive would have been taken).
    pos = torch.tensor([3, 4, 5])
    neg = torch.tensor([-3, -4, -5])._neg_view()
    assert neg.is_neg() and neg.tolist() == [3, 4, 5]
    results = []
    for p in (neg, pos):
        q, k, v, kc, vc = _inputs(2)
        rotary.prologue(q, k, v, p, SPEC, k_cache=kc, v_cache=vc, slot_mapping=torch.tensor([5, -1, 2]), layout="thd")
        results.append((q, kc))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
    caches = []
    for p in (neg, pos):
        kc = torch.ones((2, 4, 2, 64))
        rotary.rerotate_cache(kc, torch.tensor([1, 2, 3]), torch.tensor([0, 0, 0]), p, SPEC)
        caches.append(kc)
    assert torch.equal(caches[0], caches[1])


def test_writes_bump_the_version_counter_so_a_stale_saved_tensor_fails_backward():
    # torch's in-place ops bump the counters of what they write; without it, a cache saved for backward and then
    # overwritten gave a gradient computed from the new contents, silently.
    w = torch.ones((2, 4, 2, 64), requires_grad=True)
    q, k, v, kc, vc = _inputs(3)
    for write in (lambda: rotary.prologue(q, k, v, torch.tensor([10, 11, 12]), SPEC, k_cache=kc, v_cache=vc,
                                          slot_mapping=torch.tensor([5, -1, 2]), layout="thd"),
                  lambda: rotary.prologue(q, k, v, torch.tensor([10, 11, 12]), SPEC, k_cache=kc, v_cache=vc,
                                          slot_mapping=torch.tensor([5, -1, 2]), layout="thd", seq_len=64),
                  lambda: rotary.rerotate_cache(kc, torch.tensor([5]), torch.tensor([0]), torch.tensor([2]), SPEC)):
        loss = (w * kc).sum()  # saves kc
        before = kc._version
        write()
        assert kc._version > before
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
    x = torch.randn((1, 3, 2, 64))
    for write in (lambda: rotary.apply(x, 0, SPEC, out=x), lambda: rotary.apply_qk(x, x.clone(), 0, SPEC, inplace=True)):
        before = x._version
        write()
        assert x._version > before


def test_re_rotation_refuses_a_cache_that_needs_a_gradient():
    for call in (lambda kc: rotary.rerotate_cache(kc, torch.tensor([1]), torch.tensor([0]), torch.tensor([3]), SPEC),
                 lambda kc: torch.ops.rotary.rerotate_cache(kc, torch.tensor([1]), torch.tensor([0]), torch.tensor([3]),
                                                            KEY, None, "nhd", None, 1.0, 1)):
        kc = torch.ones((2, 4, 2, 64), requires_grad=True)
        with pytest.raises(RuntimeError, match=r"^\[rotary_rerotate_cache\] k_cache requires grad"):
            call(kc)
        assert torch.equal(kc.detach(), torch.ones((2, 4, 2, 64)))
        with torch.no_grad():
            call(kc)
        assert not torch.equal(kc.detach(), torch.ones((2, 4, 2, 64)))


def test_read_only_raw_bits_caches_and_int8_scales_get_a_named_error():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    g = np.random.default_rng(4)
    k, v = (g.standard_normal((1, 2, 64), dtype=np.float32) for _ in range(2))
    for dt in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn):
        kc, vc = np.zeros((2, 4, 2, 64), dt), np.zeros((2, 4, 2, 64), dt)
        kc.flags.writeable = False
        fp8 = dt is ml_dtypes.float8_e4m3fn
        with pytest.raises(ValueError, match=r"^\[rotary_prologue\] k_cache must be writable"):
            rotary.prologue(None, k, v, 0, SPEC, k_cache=kc, v_cache=vc, slot_mapping=np.array([3]), layout="thd",
                            k_scale=1.0 if fp8 else None, v_scale=1.0 if fp8 else None)
        with pytest.raises(ValueError, match=r"^\[rotary_rerotate_cache\] k_cache must be writable"):
            rotary.rerotate_cache(kc, np.array([3]), np.array([0]), np.array([1]), SPEC, k_scale=1.0 if fp8 else None)
        assert not vc.view(np.uint8).any()
    kc, vc = np.zeros((2, 4, 2, 64), np.int8), np.zeros((2, 4, 2, 64), np.int8)
    ks, vs = np.zeros((2, 4, 2), np.float32), np.zeros((2, 4, 2), np.float32)
    ks.flags.writeable = False
    with pytest.raises(ValueError, match=r"\[rotary_prologue\] k_scale must be writable"):
        rotary.prologue(None, k, v, 0, SPEC, k_cache=kc, v_cache=vc, slot_mapping=np.array([3]), layout="thd",
                        k_scale=ks, v_scale=vs)
    assert not vc.any() and not vs.any()
    # an fp8 per-tensor scale is only read: a read-only array of it is fine
    f8 = np.zeros((2, 4, 2, 64), ml_dtypes.float8_e4m3fn)
    one = np.ones(1, np.float32)
    one.flags.writeable = False
    rotary.prologue(None, k, v, 0, SPEC, k_cache=f8, v_cache=f8.copy(), slot_mapping=np.array([3]), layout="thd",
                    k_scale=one, v_scale=one)
    assert f8.view(np.uint8).any()


def test_uint64_slots_beyond_int64_are_refused_not_wrapped_to_skips():
    # astype(int64) made 2**64 - 1 a -1 (the token silently skipped) and 2**63 a negative in the message.
    k = np.ones((2, 2, 64), np.float32)
    kc, vc = np.zeros((2, 4, 2, 64), np.float32), np.zeros((2, 4, 2, 64), np.float32)
    for slot in (2**64 - 1, 2**63):
        with pytest.raises(ValueError, match=rf"^\[rotary_prologue\] slot_mapping\[1\] must fit in int64, got {slot}"):
            rotary.prologue(None, k, k, 0, SPEC, k_cache=kc, v_cache=vc, layout="thd",
                            slot_mapping=np.array([0, slot], np.uint64))
    assert not kc.any()
    rotary.prologue(None, k, k, 0, SPEC, k_cache=kc, v_cache=vc, slot_mapping=np.array([3, 1], np.uint64), layout="thd")
    inv = default_inv_freq(10000.0, 64)
    np.testing.assert_allclose(kc.reshape(-1, 2, 64)[3], rotate(k[0].astype(np.float64), (0 * inv)[None, :]), atol=1e-6)


def test_a_call_without_rotation_takes_any_head_dim():
    # No source: norm and cache write only; D = 1 was refused with "rotary_dim must be <= head_dim 1, got 2".
    for d in (1, 3):
        k = np.arange(1, 1 + 2 * d, dtype=np.float32).reshape(1, 2, d)
        kc, vc = np.zeros((1, 4, 2, d), np.float32), np.zeros((1, 4, 2, d), np.float32)
        rotary.prologue(None, k, -k, 0, None, k_cache=kc, v_cache=vc, slot_mapping=np.array([2]), layout="thd")
        np.testing.assert_array_equal(kc[0, 2], k[0])
        np.testing.assert_array_equal(vc[0, 2], -k[0])


def test_text_only_ids_of_an_mrope_spec_are_the_same_position_on_every_axis():
    # [T] ids for an M-RoPE spec, as rotary.apply takes them (transformers' and vLLM's text tokens): the prologue
    # refused them; they must equal the [3, T] ids with one row per axis, bit for bit, and apply's rotation.
    spec = rotary.Spec(64, mrope_section=[8, 12, 12])
    r = np.random.default_rng(0)
    q, k = (r.standard_normal((5, h, 64)).astype(np.float32) for h in (4, 2))
    ids = np.array([3, 9, 1, 0, 100])
    outs = []
    for pos in (ids, np.tile(ids, (3, 1))):
        kc, vc = np.zeros((2, 4, 2, 64), np.float32), np.zeros((2, 4, 2, 64), np.float32)
        outs.append((rotary.prologue(q.copy(), k, k, pos, spec, k_cache=kc, v_cache=vc, slot_mapping=np.arange(5)),
                     kc))
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])
    assert np.array_equal(outs[0][0], rotary.apply(q, ids, spec, layout="thd"))
    ang = ids[:, None].astype(np.float64) * default_inv_freq(10000.0, 64)[None, :]
    np.testing.assert_allclose(outs[0][0], rotate(q.astype(np.float64), ang[:, None, :]), atol=2e-5)


@pytest.mark.parametrize("kw,needle", [
    (dict(spec=[SPEC, rotary.Spec(64, base=500.0)]), r"spec_index \(the spec of each sequence\) is needed with a list of 2"),
    (dict(spec=[]), r"spec must hold at least one rotary\.Spec \(None means no rotation\), got an empty list"),
    (dict(spec=[SPEC, SPEC], spec_index=np.array([0]), seq_len=9), r"seq_len must be a list with one entry per spec \(2\)"),
    (dict(spec=None, seq_len=9), r"seq_len is the length a spec's scaling sees, but spec is None"),
])
def test_a_spec_list_without_what_gives_it_meaning_is_refused(kw, needle):
    # These were accepted silently: the first spec for every sequence, no rotation, one length for every spec.
    r = np.random.default_rng(1)
    q, k = (r.standard_normal((3, h, 64)).astype(np.float32) for h in (4, 2))
    kc = np.zeros((2, 4, 2, 64), np.float32)
    q0, args = q.copy(), dict(k_cache=kc, v_cache=kc.copy(), slot_mapping=np.arange(3))
    spec = kw.pop("spec")
    with pytest.raises(ValueError, match=r"^\[rotary_prologue\] " + needle):
        rotary.prologue(q, k, k, 0, spec, **args, **kw)
    assert np.array_equal(q, q0) and not kc.any()


def test_converter_errors_carry_the_call_s_prefix_and_name_the_written_tensor():
    T, D = 4, 16
    spec = rotary.Spec(D)
    buf = np.zeros(T * D * 4, np.uint8)
    k = buf.view(np.float32).reshape(T, 1, D)
    k[:] = 1.0
    pos = buf[-8 * T:].view(np.int64)
    pos[:] = [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"^\[rotary_prologue\] k \(rotated in place\) overlaps positions\.ids"):
        rotary.prologue(None, k, None, pos, spec, k_cache=None, v_cache=None)  # there is no q: k is written
    kc, q = np.zeros((1, 4, 1, D), np.float32), np.ones((T, 1, D), np.float32)
    with pytest.raises(ValueError, match=r"^\[rotary_prologue\] cache_layout must be nhd, hnd, bshd or bhsd"):
        rotary.prologue(q.copy(), q, q, 0, spec, k_cache=kc, v_cache=kc.copy(), slot_mapping=np.arange(T),
                        cache_layout="xyz")
    with pytest.raises(TypeError, match=r"^\[rotary_rerotate_cache\] to_positions must be an integer array"):
        rotary.rerotate_cache(kc, np.arange(T), np.arange(T), np.arange(T) + 0.5, spec)
    fnuz = getattr(torch, "float8_e4m3fnuz", None)
    if fnuz is not None:
        t = torch.ones(T, 1, D)
        with pytest.raises(TypeError, match=r"^\[rotary_prologue\] k_cache has an unsupported dtype torch\.float8_e4m3fnuz"):
            rotary.prologue(t.clone(), t, t, 0, spec, k_cache=torch.zeros(1, 4, 1, D, dtype=fnuz),
                            v_cache=torch.zeros(1, 4, 1, D, dtype=fnuz), slot_mapping=torch.arange(T), k_scale=1.0,
                            v_scale=1.0)
    # fp8 caches kept as raw bytes (older vLLM allocates them as uint8): refused with the view to pass instead.
    t, u8 = torch.ones(T, 1, D), torch.zeros(1, 4, 1, D, dtype=torch.uint8)
    for cache, view in ((u8, r"cache\.view\(torch\.float8_e4m3fn\)"), (u8.numpy(), r"ml_dtypes\.float8_e4m3fn")):
        with pytest.raises(TypeError, match=r"^\[rotary_prologue\] k_cache has an unsupported dtype .*fp8 bytes held as "
                                            r"uint8: pass a float8 view of them, e\.g\. .*" + view):
            rotary.prologue(t.clone(), t, t, 0, spec, k_cache=cache, v_cache=cache, slot_mapping=torch.arange(T),
                            k_scale=1.0, v_scale=1.0)
    assert not u8.any()


def test_torch_uint64_slots_are_read_by_value_and_refused_past_int64():
    q, k, v, kc, vc = _inputs()
    want_kc = kc.clone()
    rotary.prologue(q.clone(), k, v, 0, SPEC, k_cache=want_kc, v_cache=vc.clone(), slot_mapping=torch.tensor([3, 1, 6]))
    rotary.prologue(q.clone(), k, v, 0, SPEC, k_cache=kc, v_cache=vc,
                    slot_mapping=torch.tensor([3, 1, 6], dtype=torch.uint64))
    assert torch.equal(kc, want_kc)
    with pytest.raises(ValueError, match=r"^\[rotary_prologue\] slot_mapping\[1\] must fit in int64"):
        rotary.prologue(q.clone(), k, v, 0, SPEC, k_cache=kc, v_cache=vc,
                        slot_mapping=torch.tensor([3, 2**63 + 5, 6], dtype=torch.uint64))


def test_caches_as_disjoint_column_ranges_of_one_row_buffer_are_accepted():
    # vLLM's MLA cache [blocks, block_size, 1, L + P]: the latent (v here) in [..., :L], the rope part (k) in
    # [..., L:]. They share no byte; they were refused as sharing memory whenever L != P.
    L, P, T = 16, 8, 3
    rng = np.random.default_rng(0)
    k = rng.standard_normal((T, 1, P)).astype(np.float32)
    v = rng.standard_normal((T, 1, L)).astype(np.float32)
    spec, slots = rotary.Spec(P), np.array([0, 5, 6])
    for k_first in (False, True):
        buf = rng.standard_normal((2, 4, 1, L + P + 2)).astype(np.float32)
        want = buf.copy()
        kc = buf[..., :P] if k_first else buf[..., L:L + P]
        vc = buf[..., P:P + L] if k_first else buf[..., :L]
        assert not np.shares_memory(kc, vc)
        rotary.prologue(None, k, v, 10, spec, k_cache=kc, v_cache=vc, slot_mapping=slots)
        ks, vs = np.zeros((2, 4, 1, P), np.float32), np.zeros((2, 4, 1, L), np.float32)
        rotary.prologue(None, k, v, 10, spec, k_cache=ks, v_cache=vs, slot_mapping=slots)
        wk = want[..., :P] if k_first else want[..., L:L + P]
        wv = want[..., P:P + L] if k_first else want[..., :L]
        for s in slots:
            wk[s // 4, s % 4], wv[s // 4, s % 4] = ks[s // 4, s % 4], vs[s // 4, s % 4]
        assert np.array_equal(buf, want)  # the padding columns and unaddressed rows kept too
    with pytest.raises(ValueError, match=r"^\[rotary_prologue\] k_cache must not share memory with v_cache"):
        buf = np.zeros((2, 4, 1, 2 * P), np.float32)
        rotary.prologue(None, k, k.copy(), 10, spec, k_cache=buf[..., P - 1:2 * P - 1], v_cache=buf[..., :P],
                        slot_mapping=slots)


def test_q_and_k_in_one_buffer_are_only_read_with_a_cache_and_q_out():
    T, D = 3, 8
    spec = rotary.Spec(D)
    x = np.random.default_rng(1).standard_normal((T, 1, D)).astype(np.float32)
    args = lambda: dict(k_cache=np.zeros((1, 4, 1, D), np.float32), v_cache=np.zeros((1, 4, 1, D), np.float32),
                        slot_mapping=np.arange(T))
    got, want = args(), args()
    qo, qo2 = np.zeros_like(x), np.zeros_like(x)
    rotary.prologue(x, x, x, 3, spec, q_out=qo, **got)  # refused before: "k (rotated in place) overlaps input q"
    rotary.prologue(x.copy(), x.copy(), x.copy(), 3, spec, q_out=qo2, **want)
    assert np.array_equal(qo, qo2) and np.array_equal(got["k_cache"], want["k_cache"])
    x0 = x.copy()
    with pytest.raises(ValueError, match=r"^\[rotary_prologue\] q \(rotated in place\) overlaps input k"):
        rotary.prologue(x, x, x, 3, spec, **args())
    assert np.array_equal(x, x0)


def test_re_rotation_errors_carry_its_own_prefix():
    D = 8
    spec, slots = rotary.Spec(D), np.arange(3)
    kc = np.zeros((1, 4, 1, D), np.int8)
    scale = np.zeros((1, 4, 1), np.float32)
    scale.flags.writeable = False
    with pytest.raises(ValueError, match=r"^\[rotary_rerotate_cache\] k_scale must be writable"):
        rotary.rerotate_cache(kc, slots, slots, slots + 1, spec, k_scale=scale)
    with pytest.raises(TypeError, match=r"^\[rotary_rerotate_cache\] k_scale must be a float"):
        rotary.rerotate_cache(kc, slots, slots, slots + 1, spec, k_scale="1")
    fnuz = getattr(torch, "float8_e4m3fnuz", None)
    if fnuz is not None:
        with pytest.raises(TypeError, match=r"^\[rotary_rerotate_cache\] k_cache has an unsupported dtype"):
            rotary.rerotate_cache(torch.zeros(1, 4, 1, D, dtype=fnuz), slots, slots, slots + 1, spec, k_scale=1.0)


def test_scalars_out_of_the_binding_s_range_get_named_errors_or_are_capped():
    T, D = 3, 8
    spec, slots = rotary.Spec(D), np.arange(T)
    k = np.ones((T, 1, D), np.float32)
    caches = lambda lib=np: dict(k_cache=lib.zeros((1, 4, 1, D), dtype=lib.float32),
                                 v_cache=lib.zeros((1, 4, 1, D), dtype=lib.float32))
    # threads: as rotary.apply, counts above the cores are capped (nanobind's argument dump before)
    rotary.prologue(None, k, k.copy(), 0, spec, **caches(), slot_mapping=slots, threads=2**31)
    rotary.prologue(k.copy(), k, k.copy(), 0, spec, **caches(), slot_mapping=slots, threads=2**31)
    t = torch.ones(T, 1, D)
    rotary.prologue(t.clone(), t, t, 0, spec, **caches(torch), slot_mapping=torch.arange(T), threads=2**31)
    rotary.rerotate_cache(np.zeros((1, 4, 1, D), np.float32), slots, slots, slots + 1, spec, threads=2**31)
    with pytest.raises(ValueError, match=r"^\[rotary_prologue\] seq_len must be <= 2\^31"):
        rotary.prologue(None, k, k.copy(), 0, spec, **caches(), slot_mapping=slots, seq_len=2**63)
    with pytest.raises(ValueError, match=r"^\[rotary_rerotate_cache\] from_seq_len must be <= 2\^31"):
        rotary.rerotate_cache(np.zeros((1, 4, 1, D), np.float32), slots, slots, slots + 1, spec, from_seq_len=2**63)
    with pytest.raises(ValueError, match=r"^\[rotary_prologue\] norm_eps must be a finite float"):
        rotary.prologue(None, k, k.copy(), 0, spec, **caches(), slot_mapping=slots, norm_eps=10**400)
    kc8 = np.zeros((1, 4, 1, D), np.int8)
    with pytest.raises(TypeError, match=r"^\[rotary_prologue\] k_scale must have the machine's byte order"):
        rotary.prologue(None, k, k.copy(), 0, spec, k_cache=kc8, v_cache=kc8.copy(), slot_mapping=slots,
                        k_scale=np.zeros((1, 4, 1), ">f4"), v_scale=np.zeros((1, 4, 1), np.float32))
    assert not kc8.any()


def test_scalar_arguments_take_numpy_and_torch_scalars_and_refuse_inexact_values_by_name():
    T, D = 3, 8
    spec, k = rotary.Spec(D), np.ones((T, 1, D), np.float32)
    caches = lambda: dict(k_cache=np.zeros((1, 4, 1, D), np.float32), v_cache=np.zeros((1, 4, 1, D), np.float32),
                          slot_mapping=np.arange(T))
    want = caches()
    rotary.prologue(None, k, k.copy(), 0, spec, **want, norm_eps=1e-6, threads=1, seq_len=8)
    for kw in (dict(norm_eps=torch.tensor(1e-6, dtype=torch.float64), threads=torch.tensor(1), seq_len=torch.tensor(8)),
               dict(norm_eps=np.array(1e-6), threads=np.array(1), seq_len=np.int64(8)), dict(seq_len=8.0)):
        got = caches()
        rotary.prologue(None, k, k.copy(), 0, spec, **got, **kw)
        assert np.array_equal(got["k_cache"], want["k_cache"])
    for kw, exc, needle in ((dict(seq_len=5.7), ValueError, "seq_len must be an int or None, got 5.7"),
                            (dict(seq_len=float("inf")), ValueError, "seq_len must be an int or None, got inf"),
                            (dict(seq_len="12"), TypeError, "seq_len must be an int or None, got str"),
                            (dict(threads=1.0), TypeError, "threads must be an int, got float"),
                            (dict(norm_eps="x"), TypeError, "norm_eps must be a real number, got str")):
        with pytest.raises(exc, match=r"^\[rotary_prologue\] " + needle):
            rotary.prologue(None, k, k.copy(), 0, spec, **caches(), **kw)
    with pytest.raises(ValueError, match=r"^\[rotary_rerotate_cache\] to_seq_len must be an int or None, got inf"):
        rotary.rerotate_cache(np.zeros((1, 4, 1, D), np.float32), np.arange(T), np.arange(T), np.arange(T) + 1, spec,
                              to_seq_len=float("inf"))


def test_seq_len_past_2_31_is_refused_naming_the_python_argument_before_any_write():
    # Was accepted by the prologue (any spec) and by re-rotation with a length-independent spec; re-rotation with a
    # dynamic spec said "[rotary_freqs] seq_len ...".
    D, T = 8, 2
    q, k = np.ones((T, 1, D), np.float32), np.ones((T, 1, D), np.float32)
    tail = r" must be <= 2\^31 \(positions are < 2\^31\), got "
    for spec in (rotary.Spec(D), rotary.Spec(D, rope_type="dynamic", factor=2.0, max_position_embeddings=8)):
        kc, q0 = np.zeros((1, 4, 1, D), np.float32), q.copy()
        rotary.prologue(q.copy(), k, None, 0, spec, k_cache=kc.copy(), v_cache=None, slot_mapping=np.arange(T),
                        seq_len=2**31)
        for kw, name in ((dict(seq_len=2**31 + 1), "seq_len"), (dict(seq_len=[8, 2**31 + 1]), r"seq_len\[1\]")):
            many = isinstance(kw["seq_len"], list)
            with pytest.raises(ValueError, match=r"^\[rotary_prologue\] " + name + tail + r"2147483649$"):
                rotary.prologue(q, k, None, 0, [spec, spec] if many else spec, k_cache=kc, v_cache=None,
                                slot_mapping=np.arange(T), spec_index=np.array([0]) if many else None, **kw)
            assert np.array_equal(q, q0) and not kc.any()
        kc[:] = 1.0
        for name in ("from_seq_len", "to_seq_len"):
            rotary.rerotate_cache(kc.copy(), np.array([0]), np.array([0]), np.array([1]), spec, **{name: 2**31})
            with pytest.raises(ValueError, match=r"^\[rotary_rerotate_cache\] " + name + tail + r"1099511627776$"):
                rotary.rerotate_cache(kc, np.array([0]), np.array([0]), np.array([1]), spec, **{name: 2**40})
            assert (kc == 1.0).all()


def test_prologue_errors_name_the_python_arguments_not_the_core_s_fields():
    # The core's sources / source_index / sources[i].seq_len are the Python call's spec / spec_index / seq_len.
    D = 8
    s, s2 = rotary.Spec(D), rotary.Spec(D, base=500.0)
    q, k = np.ones((4, 2, D), np.float32), np.ones((4, 1, D), np.float32)
    kc = np.zeros((4, 2, 1, D), np.float32)
    cases = [(dict(spec=[s, s2], spec_index=np.array([2])), r"spec_index\[0\] must be in \[0, 2\) \(the number of specs\), got 2"),
             (dict(spec=[s, s2], spec_index=np.array([0, 1])), r"spec_index must have shape \[N\] = \[1\]"),
             (dict(spec=[s, rotary.Spec(16)], spec_index=np.array([0])),
              r"spec\[1\] must share head_dim 8, .* with spec\[0\], got head_dim 16"),
             (dict(spec=s, seq_len=0), r"seq_len must be > 0 when given, got 0"),
             (dict(spec=[s, s2], spec_index=np.array([0]), seq_len=[8, 0]), r"seq_len\[1\] must be > 0 when given, got 0"),
             (dict(spec=None, spec_index=np.array([0])), r"spec_index is given but spec is None")]
    for kw, needle in cases:
        q0, spec = q.copy(), kw.pop("spec")
        with pytest.raises(ValueError, match=r"^\[rotary_prologue\] " + needle):
            rotary.prologue(q, k, k, 0, spec, k_cache=kc, v_cache=kc.copy(), slot_mapping=np.arange(4), **kw)
        assert np.array_equal(q, q0) and not kc.any()
    k8 = np.zeros((4, 2, 1, D), np.int8)
    ks = np.zeros((4, 2, 1), np.float32)
    index = ks.reshape(-1).view(np.int32)[:1]  # spec_index [0] in k_scale's memory
    with pytest.raises(ValueError, match=r"^\[rotary_prologue\] k_scale must not share memory with spec_index "):
        rotary.prologue(q.copy(), k, k, 0, [s, s2], k_cache=k8, v_cache=k8.copy(), slot_mapping=np.arange(4),
                        k_scale=ks, v_scale=np.zeros((4, 2, 1), np.float32), spec_index=index)
    assert not k8.any()
    for name in ("from_seq_len", "to_seq_len"):
        with pytest.raises(ValueError, match=r"^\[rotary_rerotate_cache\] " + name + " must be > 0 when given, got 0"):
            rotary.rerotate_cache(kc, np.array([0]), np.array([0]), np.array([1]), s, **{name: 0})


@pytest.mark.parametrize("scale,shown", [(1e39, r"1e\+39"), (float("inf"), "inf"), (float("nan"), "nan"), (0.0, "0.0"),
                                         (-2, "-2"), (1e-50, r"1e-50"), (np.float64(1e39), r"1e\+39"), (10**400, "1000")],
                         ids=["1e39", "inf", "nan", "0.0", "-2", "1e-50", "np.float64(1e39)", "10**400"])
def test_an_fp8_scale_a_float32_cannot_hold_is_refused_by_its_value_without_a_numpy_warning(scale, shown):
    # 1e39 became inf in float32 (with numpy's overflow RuntimeWarning, an error under -W error), reported as "got inf".
    import warnings

    D = 8
    spec, k = rotary.Spec(D), np.ones((2, 1, D), np.float32)
    for lib in ("numpy", "torch"):
        kc = (np.zeros((1, 4, 1, D), np.uint8).view(__import__("ml_dtypes").float8_e4m3fn) if lib == "numpy"
              else torch.zeros((1, 4, 1, D), dtype=torch.float8_e4m3fn))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(ValueError, match=r"^\[rotary_prologue\] k_scale must be finite, > 0 and representable "
                                                 r"as a float32 \(at most 3\.4028235e\+38\), got " + shown):
                rotary.prologue(None, k, None, 0, spec, k_cache=kc, v_cache=None, slot_mapping=np.arange(2),
                                k_scale=scale)
            with pytest.raises(ValueError, match=r"^\[rotary_rerotate_cache\] k_scale must be finite, > 0 and "
                                                 r"representable as a float32 \(at most 3\.4028235e\+38\), got " + shown):
                rotary.rerotate_cache(kc, np.array([0]), np.array([0]), np.array([1]), spec, k_scale=scale)
        assert not (kc.view(np.uint8) if lib == "numpy" else kc.view(torch.uint8)).any()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for ok in (3.4028235e38, float(np.finfo(np.float32).max), 1e-45):  # the message's bound; the extremes
                rotary.prologue(None, k, None, 0, spec, k_cache=kc, v_cache=None, slot_mapping=np.arange(2), k_scale=ok)


def test_the_ops_name_a_malformed_spec_text():
    # It raised a bare JSONDecodeError (or a TypeError for JSON that is not an object).
    q, k, v, kc, vc = _inputs()
    q0 = q.clone()
    for bad in ("{not json", "[1, 2]", '{"head_dim": 8, "no_such_field": 1}', '{"head_dim": "eight"}'):
        with pytest.raises(ValueError, match=r"^\[rotary_prologue\] spec must be a Spec's JSON text \(an object, "
                                             r"prologue_torch\.spec_key\(spec\)\), got " + re.escape(repr(bad))) as e:
            torch.ops.rotary.prologue(*_op_args(q, k, v, kc, vc, spec=bad))
        assert type(e.value) is ValueError
        for args, name in (((bad, None), "spec"), ((KEY, bad), "to_spec")):
            with pytest.raises(ValueError, match=r"^\[rotary_rerotate_cache\] " + name + " must be a Spec's JSON text"):
                torch.ops.rotary.rerotate_cache(kc, torch.tensor([1]), torch.tensor([0]), torch.tensor([3]), *args, "nhd",
                                                None, 1.0, 1)
    assert torch.equal(q, q0) and not kc.any() and not vc.any()


def test_the_ops_name_their_fp8_scale_arguments():
    # Their errors named rotary.prologue's k_scale / v_scale.
    q, k, v, _, _ = _inputs()
    q0 = q.clone()
    f8 = lambda: torch.zeros((2, 4, 2, 64), dtype=torch.float8_e4m3fn)
    kc8, vc8 = f8(), f8()
    for call in (torch.ops.rotary.prologue, prologue_torch._call_prologue):
        for over, needle in ((dict(fp8_k_scale=float("nan")), "fp8_k_scale must be finite, > 0 .*, got nan"),
                             (dict(fp8_v_scale=1e39), r"fp8_v_scale must be finite, > 0 .*, got 1e\+39")):
            with pytest.raises(ValueError, match=r"^\[rotary_prologue\] " + needle):
                call(*_op_args(q, k, v, kc8, vc8, **over))
    with pytest.raises(ValueError, match=r"^\[rotary_rerotate_cache\] fp8_scale must be finite, > 0 .*, got inf"):
        torch.ops.rotary.rerotate_cache(kc8, torch.tensor([1]), torch.tensor([0]), torch.tensor([3]), KEY, None, "nhd",
                                        None, float("inf"), 1)
    assert torch.equal(q, q0) and not kc8.view(torch.uint8).any() and not vc8.view(torch.uint8).any()
