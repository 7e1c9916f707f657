"""rotary: rotary position embeddings (RoPE) over a C++ core, for numpy arrays and PyTorch CPU tensors.

    import numpy as np, rotary
    spec = rotary.Spec.from_hf_config("config.json")      # or rotary.Spec.preset("llama-3.1-8b")
    q = np.random.randn(2, 128, 32, 128).astype(np.float32)  # [batch, seq, heads, head_dim]
    q_rot = rotary.apply(q, 0, spec)                          # positions 0..127

Arrays cross into the core without copies (numpy via the buffer protocol, torch via DLPack), in float32,
float16, bfloat16 (torch.bfloat16 or ml_dtypes.bfloat16) or float64, contiguous or strided. Functions
return the array type and dtype they were given. Errors from the core arrive as ValueError (bad value,
shape or position), TypeError (dtype) or OSError (unreadable config), carrying the core's message.
The GIL is released while kernels run. PyTorch integration (autograd, drop-in modules, transformers
patching) lives in rotary.torch, which imports torch only when used.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import numpy as np

from . import _rotary
from ._arrays import (_AS_X, ArrayLike, _as_core_array, _check_out, _check_rank, _check_torch_write, _empty_like,
                      _in_words, _index_array, _inference_write_error, _input_and_out, _int64_checked, _is_torch,
                      _needs_grad, _offset_arg, _refuse_position_derivative, _routes_positions, _same_array_type,
                      _seq_len_arg, _threads_arg, _table_arrays, _torch_module, empty, empty_like)
from ._positions import PositionsLike, _offset_arrays, _split_positions, _table_positions
from ._rotary import Spec, default_inv_freq, preset_config_json, preset_description, presets

__version__: str = _rotary.__version__
_ndarray = np.ndarray

__all__ = [
    "Spec",
    "apply",
    "apply_context_parallel",
    "apply_qk",
    "apply_cos_sin",
    "apply_qk_cos_sin",
    "cos_sin",
    "default_inv_freq",
    "empty",
    "empty_like",
    "onnx_rotary_embedding",
    "preset_config_json",
    "preset_description",
    "presets",
]  # + the multimodal / cross-framework names of rotary.multimodal, appended at the end of this file


def _spec_from_dict(d: dict) -> Spec:
    """Rebuilds a Spec from Spec.to_dict() (used by pickling)."""
    return Spec(**d)


def apply(
    x: ArrayLike,
    positions: PositionsLike,
    spec: Spec,
    *,
    layout: str = "bshd",
    pairing: Optional[str] = None,
    inverse: bool = False,
    out: Optional[ArrayLike] = None,
    seq_len: Optional[int] = None,
    threads: int = 0,
    backend: str = "auto",
    cu_seqlens: Optional[ArrayLike] = None,
    seq_offsets: Optional[ArrayLike] = None,
    batch_offsets: Optional[ArrayLike] = None,
    out_scale: Optional[float] = None,
) -> ArrayLike:
    """Rotates x by RoPE and returns the result as the same array type and dtype.

    x: [B, S, H, D] (layout "bshd"), [B, H, S, D] ("bhsd") or [T, H, D] ("thd"); any strides.
    positions: an int (start offset: token s sits at position offset + s), a 1-D [S] / 2-D [B, S]
      ([T] for thd) integer array, a float array (fractional positions, computed exactly on the fly),
      or for M-RoPE specs an array [3, B, S] / [3, T] of (t, h, w) positions. None means 0.
    spec: the rotary.Spec; its cos/sin table is cached on the Spec and reused across calls.
    pairing: "half" or "interleaved"; None uses spec.pairing.
    inverse: rotate by -angle (the backward pass / un-rotation).
    out: destination (same shape, dtype and array type); may be x itself for in-place. None allocates.
    seq_len: length seen by dynamic / longrope scaling; None means max(position) + 1.
    threads: 0 = all usable cores (the affinity mask), 1 = calling thread only; larger counts are capped at the
      usable cores. backend: "auto", "cpu", "reference" or "cuda".
    cu_seqlens / seq_offsets: packed thd positions (position = t - cu_seqlens[n] + seq_offsets[n]); an int
      `positions` with cu_seqlens is every sequence's start (the same as seq_offsets); position ids,
      batch_offsets or both starts given with cu_seqlens, or seq_offsets without it, raise ValueError.
    batch_offsets: per-batch start offsets [B] added to an int `positions`.
    out_scale: with an fp8 `out` (ml_dtypes float8_e4m3fn / float8_e5m2, torch.float8_e4m3fn / float8_e5m2), its
      per-tensor scale: out holds fp8(fl32(y / out_scale)) of the f32 result y, nearest even, saturating.
    A torch tensor requiring grad, carrying a forward-mode tangent or wrapped by torch.func is routed through
    rotary.torch (both AD modes).
    """
    try:  # the core's q and q_out are x and out here (rotary.torch, which names them so, is called below)
        # Fast path: plain numpy float arrays, an int offset and an output array (x itself = in place).
        if (type(x) is _ndarray and type(out) is _ndarray and type(positions) is int and type(threads) is int
                and type(spec) is Spec and pairing is None and not inverse and seq_len is None and backend == "auto"
                and cu_seqlens is None and seq_offsets is None and batch_offsets is None and out_scale is None
                and _rotary._apply_numpy(spec, x, None, None if out is x else out, None, positions, layout, threads)):
            return out
        if not isinstance(spec, Spec):
            raise TypeError(f"[rotary_apply] spec must be a rotary.Spec, got {type(spec).__name__}")
        if not (_needs_grad(x) or _routes_positions(x, positions, "rotary_apply")):
            if out_scale is not None or (out is not None and _prologue._fp8_code(out) is not None):
                _prologue._fp8_rotation(spec, x, out, out_scale, None, None, None, positions, layout=layout,
                                        pairing=pairing, inverse=inverse, seq_len=seq_len, threads=threads,
                                        backend=backend, cu_seqlens=cu_seqlens, seq_offsets=seq_offsets,
                                        batch_offsets=batch_offsets)
                return out
            xv, bf16, out, ov = _input_and_out(x, out)
            offset, ids = _split_positions(positions, "rotary_apply")
            cu, so, bo = _offset_arrays(cu_seqlens, seq_offsets, batch_offsets, "rotary_apply")
            _rotary._apply(spec, xv, q_out=ov, offset=offset, ids=ids, cu_seqlens=cu, seq_offsets=so,
                           batch_offsets=bo, layout=layout, pairing=pairing, inverse=bool(inverse),
                           seq_len=_seq_len_arg(seq_len), threads=_threads_arg(threads), backend=backend,
                           bf16_bits=bf16)
            return out
    except (TypeError, ValueError, NotImplementedError) as e:
        if (named := _in_words(e, "rotary_apply", names=_AS_X)) is e:
            raise
        raise named from None
    if (out is not None or cu_seqlens is not None or seq_offsets is not None or batch_offsets is not None
            or out_scale is not None):
        raise ValueError("[rotary_apply] out=, out_scale=, cu_seqlens=, seq_offsets= and batch_offsets= are not "
                         "supported for tensors requiring grad; use rotary.torch.apply")
    from . import torch as rotary_torch

    return rotary_torch.apply(x, positions, spec, layout=layout, pairing=pairing, inverse=inverse,
                              seq_len=seq_len, threads=threads, backend=backend)


def apply_qk(
    q: ArrayLike,
    k: ArrayLike,
    positions: PositionsLike,
    spec: Spec,
    *,
    layout: str = "bshd",
    pairing: Optional[str] = None,
    inverse: bool = False,
    inplace: bool = False,
    q_out: Optional[ArrayLike] = None,
    k_out: Optional[ArrayLike] = None,
    seq_len: Optional[int] = None,
    threads: int = 0,
    backend: str = "auto",
    cu_seqlens: Optional[ArrayLike] = None,
    seq_offsets: Optional[ArrayLike] = None,
    batch_offsets: Optional[ArrayLike] = None,
    q_out_scale: Optional[float] = None,
    k_out_scale: Optional[float] = None,
) -> Tuple[ArrayLike, ArrayLike]:
    """Rotates q and k (same batch/sequence/head_dim, own head counts: GQA) in one call; returns (q, k).

    inplace=True writes into q and k themselves; otherwise q_out/k_out are used or allocated.
    q_out_scale / k_out_scale: per-tensor scales of fp8 q_out / k_out (as rotary.apply's out_scale).
    Other arguments as in rotary.apply.
    """
    # Fast path (a decode step): plain numpy float arrays, an int offset, outputs given or in place.
    if (type(q) is _ndarray and type(k) is _ndarray and type(positions) is int and type(threads) is int
            and type(spec) is Spec and pairing is None and not inverse and seq_len is None and backend == "auto"
            and cu_seqlens is None and seq_offsets is None and batch_offsets is None and q_out_scale is None
            and k_out_scale is None):
        if inplace:
            if q_out is None and k_out is None and _rotary._apply_numpy(spec, q, k, None, None, positions, layout,
                                                                        threads):
                return q, k
        elif type(q_out) is _ndarray and type(k_out) is _ndarray and _rotary._apply_numpy(
                spec, q, k, q_out, k_out, positions, layout, threads):
            return q_out, k_out
    if not isinstance(spec, Spec):
        raise TypeError(f"[rotary_apply] spec must be a rotary.Spec, got {type(spec).__name__}")
    numpy_qk = isinstance(q, np.ndarray) and isinstance(k, np.ndarray)  # the common case: no torch checks
    if not numpy_qk and not _same_array_type(q, k):
        raise TypeError(f"[rotary_apply] q and k must be the same array type, got {type(q).__name__} and {type(k).__name__}")
    if not numpy_qk and (_needs_grad(q) or _needs_grad(k) or _routes_positions(q, positions, "rotary_apply")):
        if (q_out is not None or k_out is not None or cu_seqlens is not None or seq_offsets is not None
                or batch_offsets is not None or q_out_scale is not None or k_out_scale is not None):
            raise ValueError("[rotary_apply] q_out=/k_out=/q_out_scale=/k_out_scale=/cu_seqlens=/seq_offsets=/batch_offsets= "
                             "are not supported for tensors requiring grad; use rotary.torch.apply_qk")
        from . import torch as rotary_torch

        # In place too: recorded for autograd as torch records its in-place ops (a leaf requiring grad raises).
        return rotary_torch.apply_qk(q, k, positions, spec, layout=layout, pairing=pairing, inverse=inverse,
                                     seq_len=seq_len, threads=threads, inplace=inplace, backend=backend)
    if q.dtype != k.dtype:
        raise TypeError(f"[rotary_apply] q and k must have the same dtype, got {q.dtype} and {k.dtype}")
    if _prologue._fp8_qk(q_out, k_out, q_out_scale, k_out_scale):
        return _prologue._apply_qk_fp8(spec, q, k, q_out, k_out, q_out_scale, k_out_scale, positions, inplace,
                                       layout=layout, pairing=pairing, inverse=inverse, seq_len=seq_len,
                                       threads=threads, backend=backend, cu_seqlens=cu_seqlens,
                                       seq_offsets=seq_offsets, batch_offsets=batch_offsets)
    qv, bf16 = _as_core_array(q, "q", readonly=True, where="rotary_apply")
    kv, _ = _as_core_array(k, "k", readonly=True, where="rotary_apply")
    if inplace:
        if q_out is not None or k_out is not None:
            raise ValueError("[rotary_apply] inplace=True cannot be combined with q_out=/k_out=")
        _check_torch_write(q, "q", "rotary_apply")
        _check_torch_write(k, "k", "rotary_apply")
        q_out, k_out = q, k
    else:
        q_out = _empty_like(q) if q_out is None else q_out
        k_out = _empty_like(k) if k_out is None else k_out
        _check_out(q_out, q, "q_out")
        _check_out(k_out, k, "k_out")
    qov, _ = _as_core_array(q_out, "q_out", where="rotary_apply")
    kov, _ = _as_core_array(k_out, "k_out", where="rotary_apply")
    offset, ids = _split_positions(positions, "rotary_apply")
    cu, so, bo = _offset_arrays(cu_seqlens, seq_offsets, batch_offsets, "rotary_apply")
    _rotary._apply(spec, qv, q_out=qov, k=kv, k_out=kov, offset=offset, ids=ids, cu_seqlens=cu, seq_offsets=so,
                   batch_offsets=bo, layout=layout, pairing=pairing, inverse=bool(inverse), seq_len=_seq_len_arg(seq_len),
                   threads=_threads_arg(threads), backend=backend, bf16_bits=bf16)
    return q_out, k_out


def cos_sin(spec: Spec, positions: Union[int, ArrayLike], *, seq_len: Optional[int] = None
            ) -> Tuple[np.ndarray, np.ndarray]:
    """Exact float32 cos/sin values (attention factor folded in, as HF does) for positions.

    positions: an int n (positions 0..n-1) or an int/float array of any shape.
    Returns (cos, sin), each of shape positions.shape + (rotary_dim // 2,), from the spec's cached table
    where possible. seq_len as in rotary.apply (None = max(position) + 1).
    M-RoPE specs (mrope_section) take [3, ...] ids (one row per axis t, h, w; an int n is not taken) and return
    shape positions.shape[1:] + (rotary_dim // 2,), each frequency from its section's axis, as rotary.torch.cos_sin.
    """
    if isinstance(positions, (int, np.integer)) and not isinstance(positions, (bool, np.bool_)):
        if positions < 0:
            raise ValueError(f"[rotary_cos_sin] the number of positions must be >= 0, got {positions}")
        if spec.mrope_section:
            raise ValueError("[rotary_cos_sin] M-RoPE specs take [3, ...] position ids (t, h, w), got an int")
        positions = np.arange(int(positions), dtype=np.int64)
    _refuse_position_derivative(positions, "rotary_cos_sin", plain=True)  # numpy rows: no derivative, no transform
    p = _index_array(positions, "positions", allow_float=True, where="rotary_cos_sin")
    if _is_torch(p):
        p = p.numpy()
    if spec.mrope_section:
        return _mrope_cos_sin(spec, p, seq_len)
    shape = p.shape
    c, s = _rotary._cos_sin(spec, np.ascontiguousarray(p).reshape(-1), _seq_len_arg(seq_len, "rotary_cos_sin"))
    half = c.shape[1]
    return c.reshape(shape + (half,)), s.reshape(shape + (half,))


def _mrope_cos_sin(spec: Spec, p: np.ndarray, seq_len: Optional[int]) -> Tuple[np.ndarray, np.ndarray]:
    """M-RoPE rows: ids [3, ...] -> rows for ids.shape[1:], frequency j from its section's axis."""
    if p.ndim < 1 or p.shape[0] != 3:
        raise ValueError(f"[rotary_cos_sin] M-RoPE positions must be [3, ...] (t, h, w), got shape {p.shape}")
    c, s = cos_sin(spec.replace(mrope_section=None, mrope_interleaved=False), p, seq_len=seq_len)  # [3, ..., R/2]
    axis = np.asarray(_rotary._mrope_frequencies(spec, None)[1], dtype=np.int64)
    idx = np.broadcast_to(axis, c.shape[1:])[None]
    return np.take_along_axis(c, idx, 0)[0], np.take_along_axis(s, idx, 0)[0]


def apply_context_parallel(x: ArrayLike, spec: Spec, rank: int, cp_size: int, *, layout: str = "bshd", offset: int = 0,
                           cu_seqlens: Optional[ArrayLike] = None, pairing: Optional[str] = None, inverse: bool = False,
                           threads: int = 0, backend: str = "auto") -> ArrayLike:
    """Rotates one context-parallel shard x (this rank's tokens, TransformerEngine dual-chunk order).

    bshd/bhsd: x holds local_len = S tokens per sequence; positions are cp_positions(rank, cp_size, S, offset).
    thd: cu_seqlens are the GLOBAL (padded) boundaries, as TransformerEngine takes them; offset starts every
    sequence there (TransformerEngine's RotaryPositionEmbedding(offset=)).
    Length-dependent scaling sees the global length (the C++ rule, rotary::cp_shard), so the result equals
    the matching rows of the unsharded rotary.apply bit-exactly.
    """
    if layout not in ("bshd", "bhsd", "thd"):
        raise ValueError(f"[rotary_apply_context_parallel] layout must be bshd, bhsd or thd, got {layout!r}")
    offset = _offset_arg(offset, "offset", "rotary_apply_context_parallel")
    if layout == "thd":
        if cu_seqlens is None:
            raise ValueError("[rotary_apply_context_parallel] thd shards need the global cu_seqlens")
        ids, seq_len = _rotary._cp_shard_packed(rank, cp_size, [int(v) for v in np.asarray(cu_seqlens).reshape(-1)])
        if offset:  # every sequence starts there, as TransformerEngine's RotaryPositionEmbedding(offset=)
            if offset < 0 or offset > (1 << 31) - seq_len:
                raise ValueError(f"[rotary_apply_context_parallel] offset + the longest global sequence ({seq_len}) "
                                 f"must be in [0, 2^31], got offset {offset}")
            ids, seq_len = ids + offset, seq_len + offset
    else:
        if cu_seqlens is not None:
            raise ValueError(f"[rotary_apply_context_parallel] cu_seqlens are the global boundaries of thd shards; "
                             f"layout \"{layout}\" takes none, got cu_seqlens")
        ndim = getattr(x, "ndim", None)
        if isinstance(ndim, int) and ndim != 4:  # (x.shape[1] raised a bare IndexError for rank 0 and 1)
            form = "[B,S,H,D]" if layout == "bshd" else "[B,H,S,D]"
            raise ValueError(f"[rotary_apply_context_parallel] x must have rank 4 {form} for layout {layout}, got "
                             f"rank {ndim} (shape [{','.join(str(int(n)) for n in x.shape)}])")
        local_len = int(x.shape[1] if layout == "bshd" else x.shape[2])
        ids, seq_len = _rotary._cp_shard(rank, cp_size, local_len, offset)
    if _is_torch(x):
        ids = _torch_module().from_numpy(ids)
    try:
        return apply(x, ids, spec, layout=layout, pairing=pairing, inverse=inverse, seq_len=seq_len, threads=threads,
                     backend=backend)
    except (TypeError, ValueError, NotImplementedError) as e:  # rotary.apply's errors in this function's words
        if (named := _in_words(e, "rotary_apply", to_where="rotary_apply_context_parallel")) is e:
            raise
        raise named from None


def _torch_tables(cos: ArrayLike, sin: ArrayLike) -> Tuple[Any, Any]:
    """numpy cos/sin as torch tensors (rotary.torch's operators take tensors; the array path takes either)."""
    torch = _torch_module()
    return tuple(torch.from_numpy(np.ascontiguousarray(t)) if isinstance(t, np.ndarray) and t.dtype.kind == "f" else t
                 for t in (cos, sin))


_apply_cos_sin = _int64_checked(_rotary._apply_cos_sin, "rotary_apply", ())  # an offset beyond int64: named


def apply_cos_sin(
    x: ArrayLike,
    cos: ArrayLike,
    sin: ArrayLike,
    positions: PositionsLike = None,
    *,
    layout: str = "bshd",
    pairing: str = "half",
    inverse: bool = False,
    out: Optional[ArrayLike] = None,
    threads: int = 0,
    backend: str = "auto",
    cu_seqlens: Optional[ArrayLike] = None,
    seq_offsets: Union[int, ArrayLike, None] = None,
    batch_offsets: Optional[ArrayLike] = None,
    out_scale: Optional[float] = None,
) -> ArrayLike:
    """Rotates x with caller-supplied cos/sin tables (their values used as given) and returns the result.

    cos/sin: [max_pos, R/2] rows indexed by position (the flash-attn / ONNX cache), or [B, S, R/2] already
      gathered per token (then positions must be None or 0); any float dtype; R/2 = the table width, channels
      R.. pass through. A position at or past max_pos raises ValueError (never an identity rotation).
    positions (rank-2 tables): an int offset (token s at offset + s), ids [S] / [B, S] / [T] (integers),
      batch_offsets [B] added per batch row (flash-attn's seqlen_offsets tensor), or for layout "thd"
      cu_seqlens [N+1] with seq_offsets (an int for every sequence, or [N]: sequence n starts there; an int
      `positions` with cu_seqlens means the same).
    layout, pairing ("half" / "interleaved"), inverse (rotate by -angle: the backward pass), out (x itself for
    in place), threads, backend, out_scale (an fp8 `out`'s per-tensor scale: FlashInfer's rope_quantize_fp8 with
    quant_scale = 1 / out_scale): as in rotary.apply. A torch x, cos or sin requiring grad or carrying a
    forward-mode tangent (torch.func included) goes through rotary.torch.apply_cos_sin (differentiable with respect
    to x, cos and sin).
    """
    if _needs_grad(x) or (type(x) is not np.ndarray and (_needs_grad(cos) or _needs_grad(sin))) or _routes_positions(
            x, positions, "rotary_apply"):
        if out is not None or out_scale is not None:
            raise ValueError("[rotary_apply] out= and out_scale= are not supported for tensors requiring grad; use "
                             "rotary.torch.apply_cos_sin")
        from . import torch as rotary_torch

        cos, sin = _torch_tables(cos, sin)
        return rotary_torch.apply_cos_sin(x, cos, sin, positions, layout=layout, pairing=pairing, inverse=inverse,
                                          threads=threads, backend=backend, cu_seqlens=cu_seqlens,
                                          seq_offsets=seq_offsets, batch_offsets=batch_offsets)
    try:  # the core's q and q_out are x and out here
        if out_scale is not None or (out is not None and _prologue._fp8_code(out) is not None):
            if out is None:
                raise ValueError("[rotary_apply] out_scale is for an fp8 out, got no out")
            _prologue._fp8_rotation(None, x, out, out_scale, None, None, None, positions, layout=layout,
                                    pairing=pairing, inverse=inverse, seq_len=None, threads=threads, backend=backend,
                                    cu_seqlens=cu_seqlens, seq_offsets=seq_offsets, batch_offsets=batch_offsets,
                                    tables=(cos, sin))
            return out
        xv, bf16, out, ov = _input_and_out(x, out)
        cv, sv, cbf16 = _table_arrays(cos, sin)
        offset, ids, cu, so, bo = _table_positions(positions, cu_seqlens, seq_offsets, batch_offsets, "rotary_apply")
        _apply_cos_sin(cv, sv, xv, q_out=ov, offset=offset, ids=ids, cu_seqlens=cu, seq_offsets=so,
                       batch_offsets=bo, layout=layout, pairing=pairing, inverse=bool(inverse),
                       threads=_threads_arg(threads), backend=backend, bf16_bits=bf16, table_bf16_bits=cbf16)
        return out
    except (TypeError, ValueError, NotImplementedError) as e:
        if (named := _in_words(e, "rotary_apply", names=_AS_X)) is e:
            raise
        raise named from None


def apply_qk_cos_sin(
    q: ArrayLike,
    k: ArrayLike,
    cos: ArrayLike,
    sin: ArrayLike,
    positions: PositionsLike = None,
    *,
    layout: str = "bshd",
    pairing: str = "half",
    inverse: bool = False,
    inplace: bool = False,
    q_out: Optional[ArrayLike] = None,
    k_out: Optional[ArrayLike] = None,
    threads: int = 0,
    backend: str = "auto",
    cu_seqlens: Optional[ArrayLike] = None,
    seq_offsets: Union[int, ArrayLike, None] = None,
    batch_offsets: Optional[ArrayLike] = None,
    q_out_scale: Optional[float] = None,
    k_out_scale: Optional[float] = None,
) -> Tuple[ArrayLike, ArrayLike]:
    """Rotates q and k (own head counts: GQA) with caller cos/sin in one call; returns (q, k).

    inplace=True writes into q and k; otherwise q_out/k_out are used or allocated. q_out_scale / k_out_scale:
    per-tensor scales of fp8 q_out / k_out (as rotary.apply_qk's). Other arguments as in rotary.apply_cos_sin.
    """
    if not _same_array_type(q, k):
        raise TypeError(f"[rotary_apply] q and k must be the same array type, got {type(q).__name__} and {type(k).__name__}")
    needs = _needs_grad(q) or _needs_grad(k) or (
        type(q) is not np.ndarray and (_needs_grad(cos) or _needs_grad(sin))) or _routes_positions(  # tables too
        q, positions, "rotary_apply")
    if needs:  # rotary.torch.apply_cos_sin rotates q and k one at a time: it would call q "x"
        for t, what in ((q, "q"), (k, "k"), (cos, "cos"), (sin, "sin")):
            _check_rank(t, what, "rotary_apply")
    if needs and not inplace:
        if q_out is not None or k_out is not None or q_out_scale is not None or k_out_scale is not None:
            raise ValueError("[rotary_apply] q_out=/k_out=/q_out_scale=/k_out_scale= are not supported for tensors requiring "
                             "grad; use rotary.torch.apply_cos_sin")
        from . import torch as rotary_torch

        cos, sin = _torch_tables(cos, sin)
        kw = dict(layout=layout, pairing=pairing, inverse=inverse, threads=threads, backend=backend,
                  cu_seqlens=cu_seqlens, seq_offsets=seq_offsets, batch_offsets=batch_offsets)
        return (rotary_torch.apply_cos_sin(q, cos, sin, positions, **kw),
                rotary_torch.apply_cos_sin(k, cos, sin, positions, **kw))
    if q.dtype != k.dtype:
        raise TypeError(f"[rotary_apply] q and k must have the same dtype, got {q.dtype} and {k.dtype}")
    if _prologue._fp8_qk(q_out, k_out, q_out_scale, k_out_scale):
        return _prologue._apply_qk_fp8(None, q, k, q_out, k_out, q_out_scale, k_out_scale, positions, inplace,
                                       layout=layout, pairing=pairing, inverse=inverse, seq_len=None,
                                       threads=threads, backend=backend, cu_seqlens=cu_seqlens,
                                       seq_offsets=seq_offsets, batch_offsets=batch_offsets, tables=(cos, sin))
    if inplace:
        if q_out is not None or k_out is not None:
            raise ValueError("[rotary_apply] inplace=True cannot be combined with q_out=/k_out=")
        if needs:  # rotary.torch rotates both out of place (each validated), then copy_ records the writes in both
            # AD modes; a write torch refuses (a leaf requiring grad, an inference tensor) goes first: neither changes
            from . import torch as rotary_torch
            from ._torch_ops import write_all

            cos, sin = _torch_tables(cos, sin)

            for name, t in (("q", q), ("k", k)):
                if t.is_inference() and not _torch_module().is_inference_mode_enabled():
                    raise _inference_write_error("rotary_apply", name)
            kw = dict(layout=layout, pairing=pairing, inverse=inverse, threads=threads, backend=backend,
                      cu_seqlens=cu_seqlens, seq_offsets=seq_offsets, batch_offsets=batch_offsets)
            # clones: the tables' gradient saves the rotated input, which copy_ below must not change under it
            qy = rotary_torch.apply_cos_sin(q.clone(), cos, sin, positions, **kw)
            ky = rotary_torch.apply_cos_sin(k.clone(), cos, sin, positions, **kw)
            write_all((q, k), (qy, ky))
            return q, k
        _check_torch_write(q, "q", "rotary_apply")
        _check_torch_write(k, "k", "rotary_apply")
        q_out, k_out = q, k
    qv, bf16, q_out, qov = _input_and_out(q, q_out, "q", "q_out")
    kv, _, k_out, kov = _input_and_out(k, k_out, "k", "k_out")
    cv, sv, cbf16 = _table_arrays(cos, sin)
    offset, ids, cu, so, bo = _table_positions(positions, cu_seqlens, seq_offsets, batch_offsets, "rotary_apply")
    _apply_cos_sin(cv, sv, qv, q_out=qov, k=kv, k_out=kov, offset=offset, ids=ids, cu_seqlens=cu,
                   seq_offsets=so, batch_offsets=bo, layout=layout, pairing=pairing, inverse=bool(inverse),
                   threads=_threads_arg(threads), backend=backend, bf16_bits=bf16, table_bf16_bits=cbf16)
    return q_out, k_out


from ._onnx_rotary import onnx_rotary_embedding  # noqa: E402


from . import multimodal as _multimodal  # noqa: E402
from .multimodal import *  # noqa: E402,F401,F403

__all__ += _multimodal.__all__

from .layer_types import LayerTypeSpecs  # noqa: E402

__all__ += ["LayerTypeSpecs"]

from . import parity as _parity  # noqa: E402
from .parity import CheckResult, ExportedTables, check, export_tables  # noqa: E402,F401

__all__ += _parity.__all__

from . import _prologue  # noqa: E402
from ._prologue import prologue, rerotate_cache  # noqa: E402,F401

__all__ += _prologue.__all__
