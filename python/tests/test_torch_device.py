"""The device path of rotary's torch operators (the torch composite used for device tensors until the CUDA
backend is present), run on the CPU against the CPU kernels; CUDA tensors and graph capture where a GPU is lent."""
from __future__ import annotations

import contextlib
import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from rotary import _torch_composite  # noqa: E402
from test_apply import TOL  # noqa: E402
from test_torch_ops import KEY, SHAPES, SPEC, _positions  # noqa: E402

ops = torch.ops.rotary


class _NoHostRead(torch.utils._python_dispatch.TorchDispatchMode):
    """Fails on any read of tensor values by the host (.item(), int(t), bool(t), .tolist(), .cpu() of data)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.equal.default):
            raise AssertionError(f"host read of tensor values: {func}")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("layout", ["bshd", "bhsd", "thd"])
def test_composite_device_path_matches_kernel(layout):
    """The composite kernels (used for device tensors until rotary's CUDA backend is present) equal the CPU
    kernels, and read no tensor value on the host once their tables exist."""
    torch.manual_seed(1)
    specs = [SPEC, rotary.Spec(16, base=1e4, pairing="interleaved", rope_type="yarn", factor=4.0,
                                original_max_position_embeddings=64, max_position_embeddings=256),
             rotary.Spec(16, base=1e4, rope_type="longrope", short_factor=[1.0] * 8, long_factor=[2.0] * 8,
                         original_max_position_embeddings=32, max_position_embeddings=128)]
    q = torch.randn(SHAPES[layout](4))
    k = torch.randn(SHAPES[layout](2))
    for spec, pos in itertools.product(specs, (_positions(layout), _positions(layout) + 40, None)):
        key = rt.spec_key(spec)
        args = (pos, 7 if pos is None else 0, key, layout)
        cos, sin = ops.cos_sin(torch.arange(64), key)
        tables = (cos, sin, pos, 7 if pos is None else 0, layout)
        want = [ops.apply(q, *args), *ops.apply_qk(q, k, *args), ops.apply_cos_sin(q, *tables)]
        with _torch_composite.forced():
            got = [ops.apply(q, *args), *ops.apply_qk(q, k, *args), ops.apply_cos_sin(q, *tables)]
            with _NoHostRead():
                again = [ops.apply(q, *args), *ops.apply_qk(q, k, *args), ops.apply_cos_sin(q, *tables)]
            qi, ki = q.clone(), k.clone()
            ops.apply_qk_(qi, ki, *args)
        for g, a, w in zip(got, again, want):
            torch.testing.assert_close(g, w, rtol=0, atol=TOL["float32"])
            torch.testing.assert_close(a, g, rtol=0, atol=0)
        torch.testing.assert_close(qi, want[1], rtol=0, atol=TOL["float32"])
        torch.testing.assert_close(ki, want[2], rtol=0, atol=TOL["float32"])
    mrope = rotary.Spec(16, mrope_section=[2, 3, 3])
    p3 = torch.randint(0, 50, (3, 2, 3)) if layout != "thd" else torch.randint(0, 50, (3, 3))
    want = ops.apply(q, p3, 0, rt.spec_key(mrope), layout)
    with _torch_composite.forced():
        torch.testing.assert_close(ops.apply(q, p3, 0, rt.spec_key(mrope), layout), want, rtol=0,
                                   atol=TOL["float32"])


def test_composite_device_path_refuses_positions_outside_the_table():
    """Negative positions used to wrap around to the table's last rows on the device path (torch indexing), where
    the CPU kernel raises: host-known offsets raise its ValueError, device ids outside [0, 2^31) fail the device
    assertion."""
    x = torch.randn(1, 4, 2, 8)
    cos, sin = torch.rand(20, 4), torch.rand(20, 4)
    key = rt.spec_key(rotary.Spec(8))
    with _torch_composite.forced():
        with pytest.raises(ValueError, match=r"\[rotary_apply\] positions.offset must be >= 0, got -2"):
            ops.apply(x, None, -2, key, "bshd")
        with pytest.raises(ValueError, match=r"\[rotary_apply\] positions.offset must be >= 0, got -1"):
            ops.apply_cos_sin(x, cos, sin, None, -1, "bshd")
        with pytest.raises(ValueError, match=r"position 20 is out of range for cos/sin with 20 rows"):
            ops.apply_cos_sin(x, cos, sin, None, 17, "bshd")
        for bad in (-1, 20):
            with pytest.raises(RuntimeError, match=r"\[rotary_apply\] a position is outside the cos/sin rows \[0, 20\)"):
                ops.apply_cos_sin(x, cos, sin, torch.tensor([0, 1, bad, 2]), 0, "bshd")
        for bad in (-1, 2**31):  # the CPU kernel refuses them; other positions past the table are computed
            with pytest.raises(RuntimeError, match=r"\[rotary_apply\] a position is outside \[0, 2\^31\)"):
                ops.apply(x, torch.tensor([0, 1, bad, 2]), 0, key, "bshd")
            with pytest.raises(RuntimeError, match=r"\[rotary_cos_sin\] a position is outside \[0, 2\^31\)"):
                ops.cos_sin(torch.tensor([bad]), key)
        # fractional positions: the CPU kernels compute them, the device path refuses them naming the entry point
        with pytest.raises(NotImplementedError, match=r"^\[rotary_apply\] fractional positions on device tensors"):
            ops.apply(x, torch.tensor([0.0, 1.5, 2.0, 3.0]), 0, key, "bshd")
        with pytest.raises(NotImplementedError, match=r"^\[rotary_cos_sin\] fractional positions on device tensors"):
            ops.cos_sin(torch.tensor([0.5]), key)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_and_graph_capture():  # pragma: no cover - runs where a GPU is lent
    spec = rotary.Spec.preset("llama-3.1-8b")
    q = torch.randn(1, 7, 32, 128, device="cuda")
    k = torch.randn(1, 7, 8, 128, device="cuda")
    pos = torch.arange(100, 107, device="cuda")
    want = rt.apply_qk(q.cpu(), k.cpu(), pos.cpu(), spec)
    got = rt.apply_qk(q, k, pos, spec)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, rtol=0, atol=TOL["float32"])
    qs, ks = q.clone(), k.clone()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        rt.apply_qk(qs, ks, pos, spec, inplace=True)
    qs.copy_(q)
    ks.copy_(k)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(qs.cpu(), want[0], rtol=0, atol=TOL["float32"])


def test_composite_mrope_axes_follow_each_specs_sections():
    """The device path cached each frequency's axis per (head_dim, base): the first M-RoPE spec used decided the
    sections of every later one (Qwen2-VL's then an interleaved Qwen3-VL's gave cos/sin off by ~2)."""
    specs = [rotary.Spec(16, mrope_section=[2, 3, 3]), rotary.Spec(16, mrope_section=[4, 2, 2]),
             rotary.Spec(16, mrope_section=[2, 3, 3], mrope_interleaved=True)]
    p = torch.randint(0, 40, (3, 2, 5), generator=torch.Generator().manual_seed(0))
    x = torch.randn(2, 5, 2, 16, generator=torch.Generator().manual_seed(1))
    want = [(ops.cos_sin(p, rt.spec_key(s))[0], rt.apply(x, p, s)) for s in specs]
    with _torch_composite.forced():
        got = [(ops.cos_sin(p, rt.spec_key(s))[0], rt.apply(x, p, s)) for s in specs]
    for (gc, gy), (wc, wy) in zip(got, want):
        torch.testing.assert_close(gc, wc, rtol=0, atol=TOL["float32"])
        torch.testing.assert_close(gy, wy, rtol=0, atol=TOL["float32"])


def test_composite_takes_text_only_mrope_ids_as_the_kernel_does():
    """Text-only M-RoPE ids ([S], [B, S], [1, S], thd [T]: the same position on every axis) were read as [3, ...]
    axis rows on the device path (wrong rotations, or an index error); its shape errors are the kernel's."""
    mr = rotary.Spec(16, mrope_section=[2, 3, 3])
    x, xt = torch.randn(2, 5, 2, 16), torch.randn(7, 2, 16)
    s = torch.tensor([3, 4, 5, 6, 7])
    cases = [(x, s, "bshd"), (x, torch.stack((s, s + 10)), "bshd"), (x, s[None], "bshd"),
             (x.transpose(1, 2), torch.stack((s, s + 10)), "bhsd"), (xt, torch.arange(7) + 2, "thd"),
             (x, torch.randint(0, 30, (3, 5)), "bshd")]
    for t, p, layout in cases:
        want = rt.apply(t, p, mr, layout=layout)
        with _torch_composite.forced():
            torch.testing.assert_close(rt.apply(t, p, mr, layout=layout), want, rtol=0, atol=TOL["float32"])
    for t, p, layout in ((torch.randn(3, 3, 2, 16), torch.zeros(3, 3), "bshd"), (x, torch.zeros(2, 4), "bshd"),
                         (xt, torch.zeros(2, 7), "thd")):
        with pytest.raises(ValueError) as cpu:
            rt.apply(t, p.long(), mr, layout=layout)
        with _torch_composite.forced(), pytest.raises(ValueError) as dev:
            rt.apply(t, p.long(), mr, layout=layout)
        assert str(dev.value) == str(cpu.value)


def test_composite_dynamic_ntk_past_max_position_embeddings():
    """Dynamic NTK exists for positions past max_position_embeddings: the device path read the length from the ids
    but sized its table before, so those positions failed the device assertion (the CPU kernel computes them)."""
    spec = rotary.Spec(16, rope_type="dynamic", factor=2.0, max_position_embeddings=8)
    x, pos = torch.randn(1, 12, 2, 16), torch.arange(12)[None]
    want = rt.cos_sin(pos, spec), rt.apply(x, pos, spec), rt.apply(x, pos + 3, spec)
    with _torch_composite.forced():
        got = rt.cos_sin(pos, spec), rt.apply(x, pos, spec), rt.apply(x, pos + 3, spec)
    torch.testing.assert_close(got, want, rtol=0, atol=TOL["float32"])


FAR = [0, 3, 63, 64, 1000, 2**20 + 7, 2**24 - 3, 2**31 - 1]  # in the table (< 64), past it, up to the last position
PAST_TABLE = [
    ("default", rotary.Spec(16, max_position_embeddings=64), None),
    ("linear", rotary.Spec(16, rope_type="linear", factor=4.0, max_position_embeddings=64), None),
    ("yarn", rotary.Spec(16, base=1e4, pairing="interleaved", rope_type="yarn", factor=4.0,
                         original_max_position_embeddings=16, max_position_embeddings=64), None),
    ("llama3", rotary.Spec(16, base=5e5, rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                           original_max_position_embeddings=16, max_position_embeddings=64), None),
    ("longrope", rotary.Spec(16, base=1e4, rope_type="longrope", short_factor=[1.0 + 0.1 * i for i in range(8)],
                             long_factor=[2.0 + 0.5 * i for i in range(8)], original_max_position_embeddings=32,
                             max_position_embeddings=64), None),  # long rows (max(position) + 1 > 32)
    ("longrope-short", rotary.Spec(16, base=1e4, rope_type="longrope", short_factor=[1.0 + 0.1 * i for i in range(8)],
                                   long_factor=[2.0 + 0.5 * i for i in range(8)], original_max_position_embeddings=32,
                                   max_position_embeddings=64), 32),  # seq_len = 32: the short rows for any position
    ("dynamic-seq_len", rotary.Spec(16, rope_type="dynamic", factor=2.0, max_position_embeddings=64), 100),
    ("mrope", rotary.Spec(16, mrope_section=[2, 3, 3], max_position_embeddings=64), None),
    ("mrope-interleaved", rotary.Spec(16, mrope_section=[2, 3, 3], mrope_interleaved=True,
                                      max_position_embeddings=64), None),
]


def _ids(spec, shape=None):
    ids = torch.tensor(FAR)
    if spec.mrope_section:  # a different position on each axis
        ids = torch.stack((ids, ids.flip(0), ids.roll(3)))
    return ids if shape is None else ids.reshape(shape)


def _assert_within_one_ulp(got, want):
    g, w = got.numpy(), want.numpy()
    ulp = np.spacing(np.maximum(np.abs(g), np.abs(w)))
    assert (np.abs(g - w) <= ulp).all(), np.abs(g - w).max()


@pytest.mark.parametrize("name,spec,seq_len", PAST_TABLE, ids=[c[0] for c in PAST_TABLE])
def test_composite_computes_positions_past_its_table(name, spec, seq_len):
    """Device ids at or past the device table failed a device assertion on the device path (a poisoned CUDA context),
    where the CPU kernel computes any position < 2^31: rows past the table are now computed on the device from the
    spec's double frequencies (within 1 ulp of rotary.cos_sin), with no host read; rows inside stay bit-exact."""
    key = rt.spec_key(spec)
    ids = _ids(spec)
    want = ops.cos_sin(ids, key, seq_len)
    inside = (ids < 64) if not spec.mrope_section else (ids < 64).all(0)
    with _torch_composite.forced():
        got = ops.cos_sin(ids, key, seq_len)
        with _NoHostRead():
            again = ops.cos_sin(ids, key, seq_len)
    for g, a, w in zip(got, again, want):
        assert g.dtype == torch.float32 and g.shape == w.shape
        assert torch.equal(g[inside], w[inside])
        _assert_within_one_ulp(g, w)
        assert torch.equal(a, g)
    # the rotations: apply, apply_qk and apply_qk_ with these ids, and text-only ids for M-RoPE
    gen = torch.Generator().manual_seed(2)
    q, k = torch.randn(1, len(FAR), 4, 16, generator=gen), torch.randn(1, len(FAR), 2, 16, generator=gen)
    for pos in (ids, torch.tensor(FAR)[None]) if spec.mrope_section else (ids, ids[None]):
        args = (pos, 0, key, "bshd", "", False, seq_len)
        want = [ops.apply(q, *args), *ops.apply_qk(q, k, *args)]
        with _torch_composite.forced():
            with _NoHostRead():
                got = [ops.apply(q, *args), *ops.apply_qk(q, k, *args)]
            qi, ki = q.clone(), k.clone()
            ops.apply_qk_(qi, ki, *args)
        for g, w in zip(got + [qi, ki], want + want[1:]):
            torch.testing.assert_close(g, w, rtol=0, atol=TOL["float32"])


def test_composite_positions_past_its_table_compile():
    """A compiled function (fullgraph) calling the operators on the device path takes positions past the table."""
    spec = PAST_TABLE[4][1]  # longrope: short or long rows chosen on the device
    key = rt.spec_key(spec)
    q = torch.randn(1, len(FAR), 2, 16, generator=torch.Generator().manual_seed(3))

    def fn(p, t):
        c, s = ops.cos_sin(p, key)
        return c * 2, s, ops.apply(t, p, 0, key, "bshd")

    ids = torch.tensor(FAR)
    want = fn(ids, q)
    torch._dynamo.reset()
    try:
        with _torch_composite.forced():
            got = torch.compile(fn, fullgraph=True, backend="aot_eager")(ids, q)
    finally:
        torch._dynamo.reset()
    for g, w in zip(got[:2], want[:2]):
        _assert_within_one_ulp(g, w)
    torch.testing.assert_close(got[2], want[2], rtol=0, atol=TOL["float32"])


def _tables(key):
    return [e for k, e in _torch_composite._TABLES.items() if k[0] == key]


def test_composite_keeps_one_table_per_frequency_set():
    """Dynamic NTK (device ids) and LongRoPE (offset positions) keyed a new table by every call's length, so each
    decode step built and kept one: now lengths with the spec's own frequencies share its table, dynamic lengths past
    max_position_embeddings have none (rows computed) and LongRoPE keeps its short and long tables only."""
    dyn = rotary.Spec(16, rope_type="dynamic", factor=2.0, max_position_embeddings=64)
    lr = PAST_TABLE[4][1]
    q = torch.randn(1, 1, 2, 16, generator=torch.Generator().manual_seed(4))
    for spec, steps in ((dyn, range(50, 90)), (lr, range(20, 50))):
        key = rt.spec_key(spec)
        for step in steps:
            for pos, off in ((torch.tensor([[step]]), 0), (None, step)):
                want = ops.apply(q, pos, off, key, "bshd", "", False, None)
                with _torch_composite.forced():
                    got = ops.apply(q, pos, off, key, "bshd", "", False, None)
                torch.testing.assert_close(got, want, rtol=0, atol=TOL["float32"])
        assert len(_tables(key)) <= (2 if spec is lr else 1)


def test_composite_tables_are_capped(monkeypatch):
    """A far dynamic position (2^31 - 1) or a large seq_len (2^31) made the device path build a table of that many
    rows (MemoryError; 200000 rows for one call at 200000): tables now hold max(max_position_embeddings or 8192, the
    offset positions seen) rows, at most 512 MiB, and positions past them are computed, offset positions included."""
    dyn = rotary.Spec(16, rope_type="dynamic", factor=2.0, max_position_embeddings=64)
    plain = rotary.Spec(16, max_position_embeddings=64)
    for spec, ids, seq_len in ((dyn, [0, 200_000], None), (dyn, [0, 2**31 - 1], None), (plain, [0, 5], 300_000),
                               (plain, [0, 5, 2**31 - 1], 2**31)):
        key = rt.spec_key(spec)
        want = ops.cos_sin(torch.tensor(ids), key, seq_len)
        with _torch_composite.forced():
            got = ops.cos_sin(torch.tensor(ids), key, seq_len)
        for g, w in zip(got, want):
            _assert_within_one_ulp(g, w)
        assert max(e[0] for e in _tables(key)) <= 64
    monkeypatch.setattr(_torch_composite, "_TABLE_BYTES", 100 * 64)  # 100 rows of R = 16
    spec = rotary.Spec(16, max_position_embeddings=1000)  # capped below max_position_embeddings
    key = rt.spec_key(spec)
    x = torch.randn(1, 4, 2, 16, generator=torch.Generator().manual_seed(5))
    for off in (0, 98, 5000, 2**31 - 4):
        want = ops.apply(x, None, off, key, "bshd", "", False, None)
        with _torch_composite.forced():
            got = ops.apply(x, None, off, key, "bshd", "", False, None)
        torch.testing.assert_close(got, want, rtol=0, atol=TOL["float32"])
    assert max(e[0] for e in _tables(key)) == 100


_FAKE_CHECKS = ("test_schema", "test_autograd_registration", "test_faketensor")


@pytest.mark.parametrize("forced", [False, True], ids=["kernel", "composite"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_permuted_inputs_get_the_fake_kernels_strides(dtype, forced):
    """A permuted x (transformers' q.view(...).transpose(1, 2)) got a contiguous result from the composite (the CUDA
    kernel without rotary's CUDA backend) and from the CPU kernels of float64 tables, while the fake kernels return
    torch.empty_like(x)'s strides: opcheck failed on strides and inductor's code raised "expected size ... stride".
    cos_sin of transposed positions got non-contiguous rows from the composite. Every path now returns the fake's."""
    g = torch.Generator().manual_seed(8)
    q = torch.randn(2, 4, 3, 16, dtype=dtype, generator=g).transpose(1, 2)  # [B, S, H, D] view of [B, H, S, D]
    k = torch.randn(2, 2, 3, 16, dtype=dtype, generator=g).transpose(1, 2)
    qh = torch.randn(2, 3, 4, 16, dtype=dtype, generator=g).transpose(1, 2)  # [B, H, S, D] view (bhsd)
    cos, sin = torch.randn(10, 6, dtype=dtype, generator=g), torch.randn(10, 6, dtype=dtype, generator=g)
    pos = _positions("bshd")
    cases = [(ops.apply, (q, pos, 0, KEY, "bshd")), (ops.apply, (qh, None, 2, KEY, "bhsd")),
             (ops.apply_qk, (q, k, pos, 0, KEY, "bshd")), (ops.apply_qk, (qh, qh, None, 1, KEY, "bhsd")),
             (ops.apply_cos_sin, (q, cos, sin, pos, 0, "bshd")), (ops.apply_cos_sin, (qh, cos, sin, None, 3, "bhsd")),
             (ops.apply_qk_cos_sin, (q, k, cos, sin, None, 2, "bshd")),
             (ops.apply_qk_cos_sin, (qh, qh, cos, sin, pos, 0, "bhsd", "interleaved"))]
    mrope = rt.spec_key(rotary.Spec(16, mrope_section=[2, 3, 3]))
    positions = (torch.arange(12).view(3, 4).t(), torch.arange(5)[None].expand(3, 5),
                 torch.randint(0, 99, (2, 5, 3), generator=g).permute(2, 0, 1))
    with _torch_composite.forced() if forced else contextlib.nullcontext():
        for op, args in cases:
            n = 2 if op in (ops.apply_qk, ops.apply_qk_cos_sin) else 1
            outs = op(*args)
            for t, out in zip(args[:n], outs if n == 2 else (outs,)):
                assert out.stride() == torch.empty_like(t).stride(), op
            torch.library.opcheck(op.default, args, test_utils=_FAKE_CHECKS)
        for p in positions:
            key = mrope if p.dim() == 3 else KEY
            assert all(t.is_contiguous() for t in ops.cos_sin(p, key))
            torch.library.opcheck(ops.cos_sin.default, (p, key), test_utils=_FAKE_CHECKS)


def test_permuted_float64_compiles_with_inductor():
    """A float64 q/k permuted as transformers makes them (a float64 LlamaForCausalLM patched with rt.patch) and a
    flash-attn x of [B, H, S, D] memory: inductor's code (fullgraph) checks the operators' strides against the
    fake kernels' ("expected size 4==4, stride 40==8" before)."""
    g = torch.Generator().manual_seed(9)
    q = torch.randn(1, 3, 4, 8, dtype=torch.float64, generator=g).transpose(1, 2)  # [B, H, S, D] views
    k = torch.randn(1, 3, 2, 8, dtype=torch.float64, generator=g).transpose(1, 2)
    x = torch.randn(1, 2, 3, 8, dtype=torch.float64, generator=g).transpose(1, 2)  # [B, S, H, D] view
    ang = torch.randn(1, 3, 4, dtype=torch.float64, generator=g)
    cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
    table_cos, table_sin = torch.randn(10, 4, dtype=torch.float64), torch.randn(10, 4, dtype=torch.float64)

    def fn(q, k, x):
        qo, ko = rt.apply_rotary_pos_emb(q, k, cos, sin)
        return qo + 1, ko + 1, rt.apply_rotary_emb(x, table_cos, table_sin, seqlen_offsets=2) + 1

    want = fn(q, k, x)
    torch._dynamo.reset()
    try:
        got = torch.compile(fn, fullgraph=True)(q, k, x)
    finally:
        torch._dynamo.reset()
    for g_, w in zip(got, want):
        torch.testing.assert_close(g_, w, rtol=0, atol=1e-12)
