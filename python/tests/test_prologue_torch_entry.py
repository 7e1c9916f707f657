"""rotary.prologue's direct entry for torch CPU tensors (no __dlpack__: torch's exchange table or attribute reads): which
calls take it, and that they give the numpy path's bytes and the generic path's errors, with either way of reading."""
from __future__ import annotations

import numpy as np
import pytest

import rotary

ml_dtypes = pytest.importorskip("ml_dtypes")  # the numpy twins of bf16/fp8 tensors


@pytest.fixture(autouse=True, params=["table", "attributes"])
def reads(request):
    """Every test twice: tensors read through torch's DLPack exchange table (where torch has one), and attribute by
    attribute (as on a torch without it, and for subclasses and other devices)."""
    pytest.importorskip("torch")
    was = rotary._rotary._torch_table_reads(request.param == "table")
    yield request.param
    rotary._rotary._torch_table_reads(was)


def test_plain_cpu_tensors_are_read_through_the_exchange_table_where_torch_has_one(reads):
    torch = pytest.importorskip("torch")
    table = reads == "table" and hasattr(torch.Tensor, "__dlpack_c_exchange_api__")

    class Sub(torch.Tensor):
        pass

    x = torch.randn(4, 64)
    taken = [x, x.t(), x.bfloat16()[:, ::2], x.half(), x.double(), torch.tensor([1, 2]), torch.tensor([1, 2], dtype=torch.int32),
             torch.nn.Parameter(torch.ones(64)), x.expand(2, 4, 64), x._neg_view(), torch.tensor(3.0)]
    declined = [x.as_subclass(Sub), x.to(torch.int8), x.to(torch.float8_e4m3fn), torch.ones(2, dtype=torch.bool),
                torch.empty(2, 64, device="meta"), x.to_sparse(), torch.randn(3, dtype=torch.complex64)]
    assert [rotary._rotary._torch_read_by_table(t) for t in taken] == [table] * len(taken)
    assert not any(rotary._rotary._torch_read_by_table(t) for t in declined)


def test_negative_bit_inputs_are_read_as_their_values_and_parameters_directly(monkeypatch):
    # The exchange table exports a negative-bit view (the .imag of a conjugate) as its raw memory: the entry must
    # still send it to the generic path, which materialises its value. A Parameter norm weight (HF's, under
    # no_grad) is read directly. The bytes equal those of the plain tensors.
    torch = pytest.importorskip("torch")
    import rotary._prologue as rp

    calls = []
    real = rp._rotary._torch_prologue
    monkeypatch.setattr(rp._rotary, "_torch_prologue", lambda *a: calls.append(real(*a)) or calls[-1])
    g = torch.Generator().manual_seed(13)
    q, k, v = (torch.randn(3, h, 64, generator=g) for h in (4, 2, 2))
    w = 1.0 + 0.2 * torch.randn(64, generator=g)
    spec = rotary.Spec(64)
    slots = torch.tensor([6, 1, 3])

    def run(kk, ww):
        qt, kc, vc = q.clone(), torch.zeros(2, 4, 2, 64), torch.zeros(2, 4, 2, 64)
        with torch.no_grad():
            rotary.prologue(qt, kk, v, 17, spec, k_cache=kc, v_cache=vc, slot_mapping=slots, q_norm_weight=ww,
                            k_norm_weight=ww, threads=1)
        return qt, kc, vc

    want = run(k, w)
    neg_k = torch.complex(torch.zeros_like(k), -k).conj().imag  # value k, memory -k
    assert neg_k.is_neg() and torch.equal(neg_k, k)
    calls.clear()
    for got in (run(neg_k, w), run(k, torch.nn.Parameter(w.clone())), run(k, w._neg_view()._neg_view())):
        for a, b in zip(got, want):
            assert torch.equal(a, b)
    assert calls == [1, 0, 0]


@pytest.mark.parametrize("dtype,cache,layout,norm", [("float32", "float32", "nhd", False), ("bfloat16", "bfloat16", "nhd", True),
                                                  ("bfloat16", "float32", "hnd", True), ("float16", "float16", "bshd", False),
                                                  ("bfloat16", "int8", "nhd", True), ("float32", "float8_e4m3fn", "hnd", False)])
def test_torch_calls_take_the_direct_path_and_give_numpys_bytes(monkeypatch, dtype, cache, layout, norm):
    # Torch CPU tensors of one Spec and an int offset go to _rotary._torch_prologue (tensors read field by field, no
    # DLPack); int8/fp8 caches (raw bits, scales) and views it cannot read go the generic way. Either way the
    # caches and q hold exactly what the numpy call writes.
    torch = pytest.importorskip("torch")
    import rotary._prologue as rp

    calls = []
    real = rp._rotary._torch_prologue

    def spy(*args):
        calls.append(real(*args))
        return calls[-1]

    monkeypatch.setattr(rp._rotary, "_torch_prologue", spy)
    tdt = getattr(torch, dtype)
    T_, HQ_, HK_, D_, NB_, BS_ = 3, 4, 2, 64, 2, 4
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(T_, h, D_, generator=g).to(tdt) for h in (HQ_, HK_, HK_))
    paged = layout in ("nhd", "hnd")
    shape = {"nhd": (NB_, BS_, HK_, D_), "hnd": (NB_, HK_, BS_, D_), "bshd": (2, 8, HK_, D_)}[layout]
    ctype = getattr(torch, cache)
    kc, vc = torch.zeros(shape, dtype=torch.float32).to(ctype), torch.zeros(shape, dtype=torch.float32).to(ctype)
    scales = {}
    if cache == "int8":
        scales = dict(k_scale=torch.zeros(shape[:3]), v_scale=torch.zeros(shape[:3]))
    elif cache.startswith("float8"):
        scales = dict(k_scale=0.05, v_scale=0.05)
    w = (1.0 + 0.2 * torch.randn(D_, generator=g)).to(tdt) if norm else None
    addr = dict(slot_mapping=torch.tensor([6, 1, 3])) if paged else dict(cache_positions=torch.tensor([2]))
    spec = rotary.Spec(D_)
    qt = q.clone()
    out = rotary.prologue(qt, k, v, 17, spec, k_cache=kc, v_cache=vc, cache_layout=layout, q_norm_weight=w,
                          k_norm_weight=w, threads=1, **addr, **scales)
    assert out is qt
    direct = cache in ("float32", "bfloat16", "float16")
    assert calls == ([0] if direct else [])  # scales (int8, fp8 caches) go the generic way before the direct entry

    def np_of(t):  # the numpy twin of a tensor (bf16 as ml_dtypes, fp8 as its raw bytes viewed back)
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
        if t.dtype == torch.float8_e4m3fn:
            return t.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn).copy()
        return t.numpy().copy()

    qn, kcn, vcn = np_of(q), np_of(torch.zeros_like(kc)), np_of(torch.zeros_like(vc))
    sn = {key: (val if isinstance(val, float) else np.zeros(val.shape, np.float32)) for key, val in scales.items()}
    rotary.prologue(qn, np_of(k), np_of(v), 17, spec, k_cache=kcn, v_cache=vcn, cache_layout=layout,
                    q_norm_weight=None if w is None else np_of(w), k_norm_weight=None if w is None else np_of(w),
                    threads=1, **{key: val.numpy() for key, val in addr.items()}, **sn)
    as_bytes = lambda a: np.asarray(a).view(np.uint8)  # noqa: E731
    np.testing.assert_array_equal(as_bytes(np_of(qt)), as_bytes(qn))
    np.testing.assert_array_equal(as_bytes(np_of(kc)), as_bytes(kcn))
    np.testing.assert_array_equal(as_bytes(np_of(vc)), as_bytes(vcn))
    for key, val in scales.items():
        if not isinstance(val, float):
            np.testing.assert_array_equal(val.numpy(), sn[key])
    # A broadcast k (an expanded head axis) is left to the generic path, which copies it (k is only read).
    if direct:
        calls.clear()
        kb = k[:, :1].expand(T_, HK_, D_)
        caches = [torch.zeros_like(kc) for _ in range(4)]
        rotary.prologue(q.clone(), kb, v, 17, spec, k_cache=caches[0], v_cache=caches[1], cache_layout=layout,
                        threads=1, **addr)
        assert calls == [1]
        rotary.prologue(q.clone(), kb.contiguous(), v, 17, spec, k_cache=caches[2], v_cache=caches[3],
                        cache_layout=layout, threads=1, **addr)
        assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])


@pytest.mark.parametrize("layout", ["thd", "bshd"])
def test_torch_position_ids_take_the_direct_path_and_give_numpys_bytes(monkeypatch, layout):
    # Position ids as a torch tensor (as rotary.torch's patched attention layers pass them) go to the direct entry
    # too; a 0-d tensor (an offset), a negative offset and a list go the generic way. Same bytes either way.
    torch = pytest.importorskip("torch")
    import rotary._prologue as rp

    calls = []
    real = rp._rotary._torch_prologue
    monkeypatch.setattr(rp._rotary, "_torch_prologue", lambda *a: calls.append(real(*a)) or calls[-1])
    HQ_, HK_, D_ = 4, 2, 64
    g = torch.Generator().manual_seed(11)
    lead = (4,) if layout == "thd" else (2, 2)
    q, k, v = (torch.randn(*lead, h, D_, generator=g) for h in (HQ_, HK_, HK_))
    ids = torch.tensor([5, 9, 2, 700]).reshape(lead)
    spec = rotary.Spec(D_, base=10000.0)
    if layout == "thd":
        shape, addr = (3, 4, HK_, D_), dict(slot_mapping=torch.tensor([6, 1, -1, 11]), cache_layout="nhd")
    else:
        shape, addr = (2, HK_, 8, D_), dict(cache_positions=torch.tensor([3, 1]), cache_layout="bhsd")
    kc, vc = torch.zeros(shape), torch.zeros(shape)
    w = 1.0 + 0.2 * torch.randn(D_, generator=g)
    qt = q.clone()
    rotary.prologue(qt, k, v, ids, spec, k_cache=kc, v_cache=vc, q_norm_weight=w, k_norm_weight=w, layout=layout,
                    threads=1, **addr)
    assert calls == [0]
    qn, kcn, vcn = q.numpy().copy(), np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    rotary.prologue(qn, k.numpy(), v.numpy(), ids.numpy(), spec, k_cache=kcn, v_cache=vcn, q_norm_weight=w.numpy(),
                    k_norm_weight=w.numpy(), layout=layout, threads=1, **{n: (a if isinstance(a, str) else a.numpy())
                                                                           for n, a in addr.items()})
    np.testing.assert_array_equal(qt.numpy(), qn)
    np.testing.assert_array_equal(kc.numpy(), kcn)
    np.testing.assert_array_equal(vc.numpy(), vcn)
    # A 0-d tensor means an offset, as an int does; both give the same bytes, the tensor by the generic way.
    calls.clear()
    outs = []
    for pos in (7, torch.tensor(7)):
        qt, kc2, vc2 = q.clone(), torch.zeros(shape), torch.zeros(shape)
        rotary.prologue(qt, k, v, pos, spec, k_cache=kc2, v_cache=vc2, layout=layout, threads=1, **addr)
        outs.append((qt, kc2, vc2))
    assert calls == [0, 1]
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    calls.clear()
    with pytest.raises((ValueError, TypeError), match=r"\[rotary"):
        rotary.prologue(q.clone(), k, v, -3, spec, k_cache=torch.zeros(shape), v_cache=torch.zeros(shape), layout=layout,
                        threads=1, **addr)
    assert calls == [1]


def test_torch_direct_path_reports_errors_as_the_generic_path_does(monkeypatch):
    torch = pytest.importorskip("torch")
    import rotary._prologue as rp

    calls = []
    real = rp._rotary._torch_prologue

    def spy(*a):  # "raised" stays when the entry raises
        calls.append("raised")
        calls[-1] = real(*a)
        return calls[-1]

    monkeypatch.setattr(rp._rotary, "_torch_prologue", spy)
    spec = rotary.Spec(64)
    q, k, v = torch.zeros(1, 4, 64), torch.zeros(1, 2, 64), torch.zeros(1, 2, 64)
    kc, vc = torch.zeros(2, 4, 2, 64), torch.zeros(2, 4, 2, 64)
    with pytest.raises(ValueError, match=r"\[rotary_prologue\] slot_mapping\[0\] must be -1 \(skip\) or in \[0, "):
        rotary.prologue(q, k, v, 3, spec, k_cache=kc, v_cache=vc, slot_mapping=torch.tensor([8]))
    with pytest.raises(ValueError, match=r"\[rotary_prologue\] q_norm_weight must have shape \[D\] = \[64\]"):
        rotary.prologue(q, k, v, 3, spec, k_cache=kc, v_cache=vc, slot_mapping=torch.tensor([1]),
                        q_norm_weight=torch.ones(62))
    assert calls == ["raised", "raised"]  # both errors raised by the direct entry's call into the core
    # Mixed dtypes are left to the generic path (the entry declines them), whose message names both dtypes.
    calls.clear()
    with pytest.raises(TypeError, match=r"\[rotary_prologue\] k dtype must equal q dtype f32, got f16"):
        rotary.prologue(q, k.half(), v, 3, spec, k_cache=kc, v_cache=vc, slot_mapping=torch.tensor([1]))
    with pytest.raises(TypeError, match=r"\[rotary_prologue\] v_cache dtype must equal k_cache dtype f32, got bf16"):
        rotary.prologue(q, k, v, 3, spec, k_cache=kc, v_cache=vc.bfloat16(), slot_mapping=torch.tensor([1]))
    assert calls == [1, 1]
    # bf16 position ids: the core takes integer and f32/f64 ids only; the generic path converts them (same result).
    calls.clear()
    outs = []
    for ids in (torch.tensor([3]), torch.tensor([3]).bfloat16()):
        kc2, vc2 = torch.zeros_like(kc), torch.zeros_like(vc)
        q2 = torch.randn(1, 4, 64, generator=torch.Generator().manual_seed(2))
        rotary.prologue(q2, k + 1, v + 1, ids, spec, k_cache=kc2, v_cache=vc2, slot_mapping=torch.tensor([1]))
        outs.append((q2, kc2, vc2))
    assert calls == [0, 1]
    for x, y in zip(*outs):
        assert torch.equal(x, y)
    # positions None (offset 0) and a missing k: the generic path's result and error.
    calls.clear()
    kc2, vc2 = torch.zeros_like(kc), torch.zeros_like(vc)
    rotary.prologue(q + 1, k + 1, v + 1, None, spec, k_cache=kc2, v_cache=vc2, slot_mapping=torch.tensor([1]))
    kc3, vc3 = torch.zeros_like(kc), torch.zeros_like(vc)
    rotary.prologue(q + 1, k + 1, v + 1, 0, spec, k_cache=kc3, v_cache=vc3, slot_mapping=torch.tensor([1]))
    assert torch.equal(kc2, kc3) and torch.equal(vc2, vc3) and kc2.any()
    with pytest.raises(ValueError, match=r"\[rotary_prologue\] k must be given"):
        rotary.prologue(q, None, v, 3, spec, k_cache=kc, v_cache=vc, slot_mapping=torch.tensor([1]))
    assert calls == [1, 0, 1]
    assert not kc.any() and not vc.any() and not q.any()
