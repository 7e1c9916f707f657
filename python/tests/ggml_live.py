"""Access to live ggml (PyPI's libggml-python, driven by rotary._bench_ggml; ggml_rope_multi driven here) for the peer tests (skips if absent)."""
from __future__ import annotations

import ctypes
from types import ModuleType

import numpy as np
import pytest


def ggml_or_skip() -> ModuleType:
    """rotary._bench_ggml with ggml's libraries loaded, or skip the test."""
    from rotary import _bench_ggml

    try:
        _bench_ggml._libs()
    except _bench_ggml.GgmlUnavailable as e:
        pytest.skip(f"ggml not runnable here: {e}")
    return _bench_ggml


def rope_multi(x: np.ndarray, positions: np.ndarray, n_dims: int, sections, mode: int, freq_base: float = 10000.0,
               *, n_ctx_orig: int = 0, freq_scale: float = 1.0, ext_factor: float = 0.0, attn_factor: float = 1.0,
               beta_fast: float = 32.0, beta_slow: float = 1.0) -> np.ndarray:
    """ggml_rope_multi (MROPE 8, VISION 24, IMROPE 40) of x [T, H, D] float32 at positions [4, T] (ggml's rows t, h,
    w, e), computed by ggml's CPU backend with one thread; returns a copy of the result."""
    base, cpu = ggml_or_skip()._libs()
    P, I, F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    base.ggml_rope_multi.restype = P
    base.ggml_rope_multi.argtypes = [P, P, P, P, I, ctypes.POINTER(I), I, I, F, F, F, F, F, F]
    cpu.ggml_graph_compute_with_ctx.restype = I
    cpu.ggml_graph_compute_with_ctx.argtypes = [P, P, I]
    from rotary._bench_ggml import _InitParams

    x = np.ascontiguousarray(x, dtype=np.float32)
    pos = np.ascontiguousarray(positions, dtype=np.int32)
    tokens, heads, dim = x.shape
    assert pos.shape == (4, tokens)
    mem = 4 * x.nbytes + pos.nbytes + 64 * base.ggml_tensor_overhead() + base.ggml_graph_overhead() + (8 << 20)
    ctx = base.ggml_init(_InitParams(mem, None, False))
    try:
        gx = base.ggml_new_tensor_3d(ctx, 0, dim, heads, tokens)  # GGML_TYPE_F32, ne0 fastest
        gp = base.ggml_new_tensor_1d(ctx, 26, 4 * tokens)  # GGML_TYPE_I32
        for tensor, arr in ((gx, x), (gp, pos)):
            assert base.ggml_nbytes(tensor) == arr.nbytes
            ctypes.memmove(base.ggml_get_data(tensor), arr.ctypes.data, arr.nbytes)
        sect = (I * 4)(*[int(s) for s in sections])
        out = base.ggml_rope_multi(ctx, gx, gp, None, n_dims, sect, mode, n_ctx_orig, freq_base, freq_scale,
                                   ext_factor, attn_factor, beta_fast, beta_slow)
        graph = base.ggml_new_graph(ctx)
        base.ggml_build_forward_expand(graph, out)
        assert cpu.ggml_graph_compute_with_ctx(ctx, graph, 1) == 0
        buf = (ctypes.c_uint8 * x.nbytes).from_address(base.ggml_get_data(out))
        return np.frombuffer(bytes(buf), dtype=np.float32).reshape(x.shape).copy()
    finally:
        base.ggml_free(ctx)
