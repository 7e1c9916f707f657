"""ggml peer for rotary.bench: drives ggml_rope_ext through ctypes on the libraries of PyPI's libggml-python.

libggml-python ships ggml's prebuilt shared libraries and headers but no Python API, so this module
declares the few C functions it needs: a context holding the q/k tensors, their outputs and the
positions; one graph with two ggml_rope_ext nodes (mode NEOX = half-split, plain RoPE: no YaRN, no
frequency factors); a persistent ggml threadpool, as llama.cpp keeps one, so that a call does not pay
thread start-up. Each call computes the graph once (out of place, into the same output tensors).
"""
from __future__ import annotations

import ctypes
import os
from typing import Optional

import numpy as np

GGML_TYPE = {"f32": 0, "f16": 1}  # ggml_type; ggml's CPU rope has no bf16 kernel (it aborts)
GGML_ROPE_TYPE_NEOX = 2
_THREADPOOL_PARAMS_BYTES = 4096  # >= sizeof(struct ggml_threadpool_params) (512 + 20 bytes in ggml 0.20)


class GgmlUnavailable(Exception):
    pass


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


class _CPlan(ctypes.Structure):  # struct ggml_cplan (ggml-cpu.h)
    _fields_ = [("work_size", ctypes.c_size_t), ("work_data", ctypes.c_void_p), ("n_threads", ctypes.c_int),
                ("threadpool", ctypes.c_void_p), ("abort_callback", ctypes.c_void_p),
                ("abort_callback_data", ctypes.c_void_p), ("use_ref", ctypes.c_bool)]


_LIBS: Optional[tuple] = None


def _libs():
    """(libggml-base, libggml-cpu) with the prototypes used here; raises GgmlUnavailable."""
    global _LIBS
    if _LIBS is not None:
        return _LIBS
    try:
        import libggml
    except Exception as e:
        raise GgmlUnavailable(f"libggml-python (PyPI's prebuilt ggml libraries) not installed: {e}")
    libdir = os.path.join(os.path.dirname(libggml.__file__), "lib64")
    try:
        base = ctypes.CDLL(os.path.join(libdir, "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
        cpu = ctypes.CDLL(os.path.join(libdir, "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise GgmlUnavailable(f"cannot load ggml from {libdir}: {e}")
    P, I, F, Z = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_size_t
    protos = [
        (base, "ggml_init", P, [_InitParams]),
        (base, "ggml_free", None, [P]),
        (base, "ggml_new_tensor_3d", P, [P, I, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]),
        (base, "ggml_new_tensor_1d", P, [P, I, ctypes.c_int64]),
        (base, "ggml_get_data", P, [P]),
        (base, "ggml_nbytes", Z, [P]),
        (base, "ggml_tensor_overhead", Z, []),
        (base, "ggml_graph_overhead", Z, []),
        (base, "ggml_rope_ext", P, [P, P, P, P, I, I, I, F, F, F, F, F, F]),
        (base, "ggml_new_graph", P, [P]),
        (base, "ggml_build_forward_expand", None, [P, P]),
        (base, "ggml_threadpool_params_init", None, [P, I]),
        (cpu, "ggml_threadpool_new", P, [P]),
        (cpu, "ggml_threadpool_free", None, [P]),
        (cpu, "ggml_graph_plan", _CPlan, [P, I, P]),
        (cpu, "ggml_graph_compute", I, [P, ctypes.POINTER(_CPlan)]),
    ]
    for lib, name, restype, argtypes in protos:
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    _LIBS = (base, cpu)
    return _LIBS


class GgmlRope:
    """One q+k rotation per call with ggml_rope_ext (half-split), out of place.

    `outputs` (also returned by each call) are numpy views of the ggml context's output tensors: they
    are valid only while this object lives (its destructor frees the context)."""

    def __init__(self, q: np.ndarray, k: np.ndarray, first_position: int, base_freq: float, dtype: str,
                 threads: int, *, positions: Optional[np.ndarray] = None, mode: int = GGML_ROPE_TYPE_NEOX,
                 n_dims: Optional[int] = None, n_ctx_orig: int = 0, freq_scale: float = 1.0,
                 ext_factor: float = 0.0, attn_factor: float = 1.0, beta_fast: float = 32.0,
                 beta_slow: float = 1.0, freq_factors: Optional[np.ndarray] = None):
        """q [T, Hq, D], k [T, Hk, D]; positions first_position.. (or `positions`, T int32 values);
        the keyword arguments are ggml_rope_ext's own (defaults: plain RoPE over the whole head);
        freq_factors: ggml's optional `c` tensor (float32, one per rotated pair)."""
        if dtype not in GGML_TYPE:
            raise GgmlUnavailable(f"ggml's CPU rope has no {dtype} kernel (f32 and f16 only)")
        self._base, self._cpu = base, cpu = _libs()
        tokens, hq, dim = q.shape
        hk = k.shape[1]
        ff = None if freq_factors is None else np.ascontiguousarray(freq_factors, dtype=np.float32)
        data_bytes = 2 * (q.nbytes + k.nbytes) + 4 * tokens + 4096 + (0 if ff is None else ff.nbytes)
        mem = data_bytes + 16 * base.ggml_tensor_overhead() + base.ggml_graph_overhead() + (1 << 20)
        self._ctx = base.ggml_init(_InitParams(mem, None, False))
        if not self._ctx:
            raise GgmlUnavailable(f"ggml_init failed for {mem} bytes")
        self._pool = None
        t = GGML_TYPE[dtype]
        gq = base.ggml_new_tensor_3d(self._ctx, t, dim, hq, tokens)  # ne0 fastest: [T, H, D] row-major
        gk = base.ggml_new_tensor_3d(self._ctx, t, dim, hk, tokens)
        pos = base.ggml_new_tensor_1d(self._ctx, 26, tokens)  # GGML_TYPE_I32
        if positions is None:
            positions = np.arange(first_position, first_position + tokens)
        gff = None if ff is None else base.ggml_new_tensor_1d(self._ctx, 0, ff.size)  # GGML_TYPE_F32
        pairs = [(gq, q), (gk, k), (pos, np.asarray(positions, dtype=np.int32))] + ([] if ff is None else [(gff, ff)])
        for tensor, arr in pairs:
            src = np.ascontiguousarray(arr)
            assert base.ggml_nbytes(tensor) == src.nbytes
            ctypes.memmove(base.ggml_get_data(tensor), src.ctypes.data, src.nbytes)
        rope = lambda x: base.ggml_rope_ext(self._ctx, x, pos, gff, dim if n_dims is None else n_dims, mode,
                                            n_ctx_orig, base_freq, freq_scale, ext_factor, attn_factor,
                                            beta_fast, beta_slow)
        self._outs = [rope(gq), rope(gk)]
        self._graph = base.ggml_new_graph(self._ctx)
        for o in self._outs:
            base.ggml_build_forward_expand(self._graph, o)
        params = ctypes.create_string_buffer(_THREADPOOL_PARAMS_BYTES)
        base.ggml_threadpool_params_init(params, threads)
        self._pool = cpu.ggml_threadpool_new(params)
        self._plan = cpu.ggml_graph_plan(self._graph, threads, self._pool)
        self._work = None
        if self._plan.work_size:
            self._work = ctypes.create_string_buffer(self._plan.work_size)
            self._plan.work_data = ctypes.cast(self._work, ctypes.c_void_p)
        np_dtype = np.float32 if dtype == "f32" else np.float16
        self.outputs = [np.ctypeslib.as_array(ctypes.cast(base.ggml_get_data(o), ctypes.POINTER(ctypes.c_uint8)),
                                              shape=(a.nbytes,)).view(np_dtype).reshape(a.shape)
                        for o, a in zip(self._outs, (q, k))]

    def __call__(self):
        status = self._cpu.ggml_graph_compute(self._graph, ctypes.byref(self._plan))
        if status != 0:
            raise RuntimeError(f"ggml_graph_compute returned status {status}")
        return self.outputs

    def __del__(self):
        if getattr(self, "_pool", None):
            self._cpu.ggml_threadpool_free(self._pool)
            self._pool = None
        if getattr(self, "_ctx", None):
            self._base.ggml_free(self._ctx)
            self._ctx = None
