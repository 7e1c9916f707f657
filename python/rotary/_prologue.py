"""The attention prologue for numpy arrays and torch CPU tensors: rotary.prologue and rotary.rerotate_cache.

One pass per token: optional RMSNorm of the q and k heads, RoPE, q in place (or into q_out), and the rotated k
and v written into a KV cache, paged (vLLM/FlashInfer NHD or HND, addressed by slot_mapping, -1 = skip) or
contiguous (bshd, or bhsd as Hugging Face's StaticCache, from cache_positions). Caches may be float32, float16,
bfloat16, int8 (with a float32 scale per row and head, written by the call) or fp8 e4m3/e5m2 (ml_dtypes' or
torch's float8 types, with a per-tensor scale). docs/prologue.md describes the layouts and the rounding.
"""
from __future__ import annotations

import math
import re
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import _rotary
from ._arrays import (_I32_MAX, ArrayLike, _as_core_array, _carries_tangent, _check_torch_write, _float_arg,
                      _has_broadcast_axis, _index_array, _empty_like, _inference_write_error, _is_torch, _mark_written,
                      _seq_len_arg, _table_arrays, _threads_arg, _torch_module)
from ._positions import _offset_arrays, _split_positions, _table_positions
from ._rotary import Spec

__all__ = ["prologue", "rerotate_cache"]

# ml_dtypes' numpy types by scalar type name -> rotary DType value of the raw bits passed to the core
_NUMPY_BITS = {"bfloat16": 2, "float8_e4m3fn": 7, "float8_e5m2": 8}


def _core(x: Any, what: str, where: str, readonly: bool = False):
    """(array for the core, rotary DType value of its raw bits or -1); errors in the words of the entry point
    `where`."""
    if isinstance(x, np.ndarray) and (x.dtype.kind == "V" or x.dtype.type.__name__ in _NUMPY_BITS):
        # ml_dtypes' types (float8_e5m2 reports kind "f", the others "V"): their raw bits
        code = _NUMPY_BITS.get(x.dtype.type.__name__)
        if code is None:
            raise TypeError(f"[{where}] {what} has an unsupported dtype {x.dtype}")
        if not readonly and not x.flags.writeable:
            raise ValueError(f"[{where}] {what} must be writable, got a read-only array (shape {x.shape})")
        if readonly and not x.flags.c_contiguous and _has_broadcast_axis(x):
            x = np.ascontiguousarray(x)
        return x.view(np.uint16 if code == 2 else np.uint8), code
    if _is_torch(x):
        torch = _torch_module()
        f8 = {getattr(torch, "float8_e4m3fn", None): 7, getattr(torch, "float8_e5m2", None): 8}
        if x.dtype.is_floating_point and x.dtype.itemsize == 1 and x.dtype not in f8:
            raise TypeError(f"[{where}] {what} has an unsupported dtype {x.dtype} (fp8 caches: "
                            "torch.float8_e4m3fn or torch.float8_e5m2)")
        if x.dtype in f8:
            if x.device.type != "cpu":
                raise ValueError(f"[{where}] {what} is on device '{x.device}'; rotary's Python kernels run on CPU "
                                 "tensors")
            if not readonly:
                _mark_written(x)
            return x.detach().view(torch.uint8), f8[x.dtype]
    return _as_core_array(x, what, readonly=readonly, where=where)[0], -1


def _group(arrays):
    """Converts named arrays (name, array, read only) that must share one element type; returns (converted, bits
    code). A read-only array with a broadcast (stride-0) axis is copied (the core takes one element per address)."""
    out, code, first = [], None, None
    for name, a, readonly in arrays:
        if a is None:
            out.append(None)
            continue
        v, c = _core(a, name, "rotary_prologue", readonly)
        if code is None:
            code, first = c, (name, a)
        elif c != code:
            raise TypeError(f"[rotary_prologue] {name} dtype must equal {first[0]} dtype {first[1].dtype}, got {a.dtype}")
        out.append(v)
    return out, (-1 if code is None else code)


def _is_int8(x: Any) -> bool:
    return x is not None and str(x.dtype) in ("int8", "torch.int8")


# Floats below this round to a finite float32 (the largest one, 3.4028235e+38, up to half a unit above it).
_F32_FINITE_BELOW = 2.0**128 - 2.0**103


def _f32_scale(s: Any, what: str, where: str) -> float:
    """An fp8 per-tensor scale (a Python, numpy or torch number) as a float that is finite and > 0 as a float32;
    nan, <= 0, past the float32 maximum or under its smallest subnormal is refused naming the value passed (a
    float32 conversion would show inf or 0, with numpy's overflow warning)."""
    number = f"[{where}] {what} must be a number (the fp8 per-tensor scale), got {type(s).__name__}"
    if isinstance(s, (bool, np.bool_, str, bytes)):  # float() would take True, "2", b"2"
        raise TypeError(number)
    try:
        v = float(s)
    except OverflowError:  # an int past the float range
        v = math.inf
    except (TypeError, ValueError):  # not a number, or an array of more than one element
        shape = getattr(s, "shape", None)
        raise TypeError(number + (f" of shape {list(shape)}" if shape is not None else "")) from None
    if not 0.0 < v < _F32_FINITE_BELOW or np.float32(v) == 0.0:  # nan fails the comparison
        try:
            shown = str(s) if isinstance(s, (int, np.integer)) else repr(v)
        except ValueError:  # an int of more digits than str() converts
            shown = f"an int of {s.bit_length()} bits"
        raise ValueError(f"[{where}] {what} must be finite, > 0 and representable as a float32 (at most "
                         f"3.4028235e+38), got {shown:.60}")
    return v


def _scale(s: Any, what: str, written: bool, where: str):
    """A float (fp8 per-tensor scale, checked by _f32_scale) as a one-element float32 array, or the array (int8
    scales, `written` by the call) itself; errors in the words of the entry point `where`."""
    if s is None:
        return None
    if isinstance(s, (int, float, np.floating, np.integer)) and not isinstance(s, bool):
        return np.array([_f32_scale(s, what, where)], dtype=np.float32)
    if _is_torch(s):
        if written and s.device.type == "cpu":
            _mark_written(s)
        return s.detach() if s.device.type == "cpu" else s.detach().cpu()
    if isinstance(s, np.ndarray):
        if not s.dtype.isnative:  # the binding reads (and for int8 writes) native float32
            raise TypeError(f"[{where}] {what} must have the machine's byte order, got dtype {s.dtype.str} (convert "
                            f"it with astype(np.float32))")
        if not s.flags.writeable:
            if written:
                raise ValueError(f"[{where}] {what} must be writable (the int8 cache's scales are written), "
                                 f"got a read-only array (shape {s.shape})")
            return s.copy()  # only read (an fp8 per-tensor scale); the binding takes writable arrays
        return s
    raise TypeError(f"[{where}] {what} must be a float (fp8 per-tensor scale) or a float32 array (int8 row "
                    f"scales), got {type(s).__name__}")


# The core's words for the frequency arguments -> the Python calls' (spec, spec_index, seq_len; from_seq_len, to_seq_len,
# to_spec); the C and C++ APIs keep the core's (sources, source_index, sources[i].seq_len; from.seq_len, to.seq_len).
_SOURCE_SEQ_LEN = re.compile(r"\bsources\[(\d+)\]\.seq_len\b")
_PYTHON_WORDS = {
    "rotary_prologue": ((re.compile(r"\bsources\[(\d+)\]"), r"spec[\1]"), (re.compile(r"\bsource_index\b"), "spec_index"),
                        (re.compile(r"\bsources is empty\b"), "spec is None (no rotation)"),
                        (re.compile(r"\bwhen sources has\b"), "when spec has"),
                        (re.compile(r"\(the number of sources\)"), "(the number of specs)"),
                        (re.compile(r"\(the source of each sequence\)"), "(the spec of each sequence)"),
                        (re.compile(r"^sources must hold at most (\d+) frequency sources"), r"spec must hold at most \1 specs")),
    "rotary_rerotate_cache": ((re.compile(r"\b(from|to)\.seq_len\b"), r"\1_seq_len"), (re.compile(r"\bto's spec\b"), "to_spec"),
                              (re.compile(r"\bfrom's spec\b"), "spec")),
}


def _in_words_of(e: Exception, where: str, seq_len_list: bool = False) -> Exception:
    """The call's error (prefix `where`: its converters and the core name the call) with the core's names of the
    frequency arguments replaced by the Python call's (seq_len[i] where seq_len is a list); any other error
    unchanged."""
    msg = str(e)
    if not msg.startswith(f"[{where}] "):
        return e
    msg = msg[len(where) + 3:]
    if where == "rotary_prologue":
        msg = _SOURCE_SEQ_LEN.sub(r"seq_len[\1]" if seq_len_list else "seq_len", msg)
    for pattern, words in _PYTHON_WORDS.get(where, ()):
        msg = pattern.sub(words, msg)
    msg = f"[{where}] " + msg
    return e if msg == str(e) else type(e)(msg)


def _specs(spec: Any, seq_len: Any, spec_index: Any):
    """(specs, seq_lens) for the binding; a list of specs needs spec_index and one seq_len per spec."""
    if spec is None:
        if seq_len is not None:
            raise ValueError(f"[rotary_prologue] seq_len is the length a spec's scaling sees, but spec is None (no "
                             f"rotation), got seq_len {seq_len!r}")
        return [], []
    many = isinstance(spec, (list, tuple))
    specs = list(spec) if many else [spec]
    for i, s in enumerate(specs):
        if not isinstance(s, Spec):
            raise TypeError(f"[rotary_prologue] spec[{i}] must be a rotary.Spec, got {type(s).__name__}")
    if many and not specs:
        raise ValueError("[rotary_prologue] spec must hold at least one rotary.Spec (None means no rotation), got an "
                         "empty list")
    if len(specs) > 1 and spec_index is None:
        raise ValueError(f"[rotary_prologue] spec_index (the spec of each sequence) is needed with a list of "
                         f"{len(specs)} specs, got None")
    if isinstance(seq_len, (list, tuple)):
        lens = list(seq_len)
    elif seq_len is None or len(specs) == 1:
        lens = [seq_len] * len(specs)
    else:
        raise ValueError(f"[rotary_prologue] seq_len must be a list with one entry per spec ({len(specs)}) or None, "
                         f"got {seq_len!r}")
    if len(lens) != len(specs):
        raise ValueError(f"[rotary_prologue] seq_len must have one entry per spec ({len(specs)}), got {len(lens)}")
    named = isinstance(seq_len, (list, tuple))
    return specs, [_seq_len_arg(n, "rotary_prologue", f"seq_len[{i}]" if named else "seq_len") for i, n in enumerate(lens)]


def _indices(a: Any, what: str):
    return None if a is None else _index_array(a, what, False, "rotary_prologue")


def prologue(
    q: Optional[ArrayLike],
    k: ArrayLike,
    v: Optional[ArrayLike],
    positions: Any,
    spec: Union[Spec, Sequence[Spec], None],
    *,
    k_cache: Optional[ArrayLike],
    v_cache: Optional[ArrayLike],
    slot_mapping: Optional[ArrayLike] = None,
    cache_positions: Optional[ArrayLike] = None,
    cache_layout: str = "nhd",
    q_norm_weight: Optional[ArrayLike] = None,
    k_norm_weight: Optional[ArrayLike] = None,
    norm_eps: float = 1e-6,
    norm_offset: float = 0.0,
    k_scale: Any = None,
    v_scale: Any = None,
    q_out: Optional[ArrayLike] = None,
    layout: str = "thd",
    threads: int = 0,
    cu_seqlens: Optional[ArrayLike] = None,
    seq_offsets: Optional[ArrayLike] = None,
    batch_offsets: Optional[ArrayLike] = None,
    spec_index: Optional[ArrayLike] = None,
    seq_len: Any = None,
    k_out: Optional[ArrayLike] = None,
    backend: str = "auto",
) -> Optional[ArrayLike]:
    """RMSNorm (optional) -> RoPE -> KV-cache write for a batch of new tokens, in one pass; returns the rotated q.

    q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, Dv] for layout "thd" ([B, S, H, D] "bshd", [B, H, S, D] "bhsd");
      any strides (e.g. the slices of one fused QKV buffer); float32, float16 or bfloat16. q may be None.
    positions: as in rotary.apply (an int offset, per-token ids, M-RoPE [3, T] ids); with cu_seqlens /
      seq_offsets for packed sequences (an int positions with cu_seqlens: every sequence's start), batch_offsets
      for bshd/bhsd; arguments of two schemes at once raise ValueError.
    spec: a rotary.Spec; a list of Specs with spec_index [N] (the Spec of each sequence: per-request scaling);
      or None (no rotation: a NoPE layer). seq_len: the length dynamic/longrope scaling sees (one per spec).
    k_cache / v_cache: cache_layout "nhd" [num_blocks, block_size, Hkv, D] or "hnd" [num_blocks, Hkv,
      block_size, D] with slot_mapping [T] (slot = block * block_size + offset; -1 = skip the token), or
      "bshd" [B, S_max, Hkv, D] / "bhsd" [B, Hkv, S_max, D] with cache_positions [N] (start row of each
      sequence; None = 0). None (both): k is written to k_out, or in place.
    q_norm_weight / k_norm_weight [D]: x * r * (w + norm_offset), r = 1 / sqrt(mean(x^2) + norm_eps), in float32
      (norm_offset=1.0 is Gemma's x * (1 + w)).
    k_scale / v_scale: int8 caches, float32 arrays shaped like the cache without its last axis (written: one
      scale per row and head); fp8 caches, a float (the per-tensor scale). q_out: None writes q in place.
    Errors name the argument ("[rotary_prologue] ...") and are raised before anything is written.
    """
    _refuse_inference((q if q_out is None else None, q_out, k_out,
                       k if k_cache is None and v_cache is None and k_out is None else None,
                       k_cache, v_cache, k_scale, v_scale), _WRITTEN)
    if _transforms_active():  # before the C++ entry, which would read a dual tensor's primal
        _refuse_transformed(list(zip(GRAD_REFUSED, (q, k, v, q_out, k_out, q_norm_weight, k_norm_weight, k_cache,
                                                    v_cache, k_scale, v_scale))) + [("positions", positions),
                                                                                   ("slot_mapping", slot_mapping)],
                            "rotary_prologue")
    try:
        # Plain floats and an int thread count in range are what the converters would return (~0.6 us a call).
        eps = norm_eps if type(norm_eps) is float else _float_arg(norm_eps, "rotary_prologue", "norm_eps")
        offset_w = norm_offset if type(norm_offset) is float else _float_arg(norm_offset, "rotary_prologue", "norm_offset")
        if not (type(threads) is int and 0 <= threads <= _I32_MAX):
            threads = _threads_arg(threads, "rotary_prologue")
        if (type(spec) is Spec and seq_len is None and k_out is None and backend == "auto" and type(layout) is str
                and type(cache_layout) is str
                and cu_seqlens is None and seq_offsets is None and batch_offsets is None and spec_index is None
                and k_scale is None and v_scale is None and not isinstance(q, np.ndarray)
                # torch tensors read in C++ (the entry declines, returning 1, any call it cannot take as is)
                and _rotary._torch_prologue(q, k, v, q_out, positions, spec, cache_layout, k_cache, v_cache, slot_mapping,
                                            cache_positions, q_norm_weight, k_norm_weight, eps, offset_w, layout,
                                            threads) == 0):
            _mark_written(q_out if q_out is not None else q, k_cache, v_cache)  # it takes torch q, k, v and both caches
            return q_out if q_out is not None else q
        if k is None:  # the core's own words (its binding takes no None for k)
            raise ValueError("[rotary_prologue] k must be given (the prologue writes k, and v, into the cache), got none")
        given = dict(q=q, k=k, v=v, q_out=q_out, k_out=k_out, q_norm_weight=q_norm_weight, k_norm_weight=k_norm_weight,
                     k_cache=k_cache, v_cache=v_cache, k_scale=k_scale, v_scale=v_scale)
        _refuse_autograd([(name, given[name]) for name in GRAD_REFUSED])
        # Inputs only read (v; q with q_out; k with a cache or k_out) may be broadcast views (copied).
        k_read = k_cache is not None or v_cache is not None or k_out is not None
        (qv, kv, vv, qov, kov), act = _group([("q", q, q_out is not None), ("k", k, k_read), ("v", v, True),
                                              ("q_out", q_out, False), ("k_out", k_out, False)])
        (kcv, vcv), cache_bits = _group([("k_cache", k_cache, False), ("v_cache", v_cache, False)])
        (wq, wk), w_bits = _group([("q_norm_weight", q_norm_weight, True), ("k_norm_weight", k_norm_weight, True)])
        offset, ids = _split_positions(positions, "rotary_prologue")
        specs, lens = _specs(spec, seq_len, spec_index)
        ks = _scale(k_scale, "k_scale", _is_int8(k_cache), "rotary_prologue")
        vs = _scale(v_scale, "v_scale", _is_int8(v_cache), "rotary_prologue")
        _rotary._prologue(qv, kv, vv, q_out=qov, k_out=kov, offset=offset, ids=ids, cu_seqlens=_indices(cu_seqlens, "cu_seqlens"),
                          seq_offsets=_indices(seq_offsets, "seq_offsets"), batch_offsets=_indices(batch_offsets, "batch_offsets"),
                          specs=specs, seq_lens=lens, source_index=_indices(spec_index, "spec_index"), cache_layout=cache_layout,
                          k_cache=kcv, v_cache=vcv, slot_mapping=_indices(slot_mapping, "slot_mapping"),
                          cache_positions=_indices(cache_positions, "cache_positions"), k_scale=ks, v_scale=vs,
                          q_norm_weight=wq, k_norm_weight=wk, norm_eps=eps, norm_offset=offset_w,
                          layout=layout, threads=threads, backend=backend, act_bits=act, cache_bits=cache_bits,
                          weight_bits=w_bits)
        return q_out if q_out is not None else q
    except (TypeError, ValueError, IndexError) as e:  # the core's names of the frequency arguments: the call's own
        raise _in_words_of(e, "rotary_prologue", isinstance(seq_len, (list, tuple))) from None


# The arguments whose gradient the prologue cannot give (rotary.prologue's keywords, torch.ops.rotary.prologue's
# schema names alike).
GRAD_REFUSED = ("q", "k", "v", "q_out", "k_out", "q_norm_weight", "k_norm_weight", "k_cache", "v_cache", "k_scale",
                "v_scale")


# Why each caller's writes have no gradient, and what to do instead.
_NOT_DIFFERENTIABLE = {
    "rotary_prologue": "the prologue is not differentiable (it writes q, in place or to q_out, and k, v into a cache): call it "
                       "under torch.no_grad() or torch.inference_mode(); for training, rotate with rotary.torch.apply_qk",
    "rotary_rerotate_cache": "re-rotating a cache is not differentiable (it rewrites the cache in place): call it "
                             "under torch.no_grad() or torch.inference_mode()",
}


def _refuse_autograd(named: Sequence[Any], where: str = "rotary_prologue") -> None:
    """RuntimeError (torch's kind for autograd misuse) when grad mode is on and a torch tensor of the call requires
    grad: the prologue writes q (in place or to q_out) and k, v into a cache, and re-rotation rewrites a cache, through no
    autograd formula, so a gradient through them would be silently wrong. Likewise a tensor that carries a forward-mode
    tangent (it would keep its tangent unrotated) or is a torch.func transform's tensor (vmap, jvp: no rule)."""
    for name, x in named:
        if x is not None and _is_torch(x) and x.requires_grad and _torch_module().is_grad_enabled():
            raise RuntimeError(f"[{where}] {name} requires grad, but {_NOT_DIFFERENTIABLE[where]}")
    if _transforms_active():
        _refuse_transformed(named, where)


def _transforms_active() -> bool:
    """Forward-mode AD or a torch.func transform is active (cheap: two global reads)."""
    torch = _torch_module()
    return torch is not None and (torch.autograd.forward_ad._current_level >= 0
                                  or torch._C._functorch.peek_interpreter_stack() is not None)


def _refuse_transformed(named: Sequence[Any], where: str) -> None:
    torch = _torch_module()
    for name, x in named:
        if x is None or not isinstance(x, torch.Tensor):
            continue
        if _carries_tangent(x):
            raise RuntimeError(f"[{where}] {name} carries a forward-mode tangent, but the call has no derivative (it "
                               "writes in place through no formula: the tangent would stay unrotated); pass the "
                               f"primal (torch.autograd.forward_ad.unpack_dual({name}).primal)")
        if torch._C._functorch.is_functorch_wrapped_tensor(x):
            raise RuntimeError(f"[{where}] {name} must not be a torch.func transform's tensor (vmap, grad, jvp: the "
                               "call writes in place through no transform rule; call it outside the transform), got "
                               "one")


_WRITTEN = ("q", "q_out", "k_out", "k", "k_cache", "v_cache", "k_scale", "v_scale")  # _refuse_inference's names


def _refuse_inference(written: Sequence[Any], names: Sequence[str], where: str = "rotary_prologue") -> None:
    """RuntimeError before anything is written when a torch tensor the call writes (`written`, named by `names`; None
    where not written) is an inference tensor outside torch.inference_mode(): torch refuses such in-place updates
    (rotary's in-place kernels do too). About 1 us per call (a decode step's prologue takes ~9 us)."""
    torch = _torch_module()
    if torch is None:
        return
    tensor = torch.Tensor
    for x in written:
        if x is not None and isinstance(x, tensor) and x.is_inference():
            break
    else:
        return
    if torch.is_inference_mode_enabled():
        return
    for name, x in zip(names, written):
        if isinstance(x, tensor) and x.is_inference():
            raise _inference_write_error(where, name)


def rerotate_cache(
    k_cache: ArrayLike,
    slots: ArrayLike,
    from_positions: ArrayLike,
    to_positions: ArrayLike,
    spec: Spec,
    *,
    to_spec: Optional[Spec] = None,
    cache_layout: str = "nhd",
    k_scale: Any = None,
    threads: int = 0,
    from_seq_len: Optional[int] = None,
    to_seq_len: Optional[int] = None,
    backend: str = "auto",
) -> ArrayLike:
    """Re-rotates cached keys in place from (spec, from_positions) to (to_spec or spec, to_positions); returns k_cache.

    slots [N]: the rows (paged: block * block_size + offset; contiguous bshd/bhsd: b * S_max + s; -1 = skip the
    row, whose positions are then not read).
    The difference angle b * theta_B - a * theta_A is formed in double ((b - a) * theta for one spec), so a
    round trip A -> B -> A returns the keys to float32 rounding. int8 caches are dequantised, rotated and
    requantised with fresh scales (k_scale, written); fp8 keep their per-tensor scale (a float). Rows whose
    rotation is the identity (angle 0 for every pair, equal attention factors) keep their bits and scales.
    from_seq_len / to_seq_len: the lengths dynamic/longrope scaling sees (e.g. dynamic NTK's base switch);
    None: the largest position of the rows not skipped, + 1.
    """
    if not isinstance(spec, Spec) or (to_spec is not None and not isinstance(to_spec, Spec)):
        raise TypeError("[rotary_rerotate_cache] spec and to_spec must be rotary.Spec objects")
    try:
        _refuse_autograd([("k_cache", k_cache), ("k_scale", k_scale)], "rotary_rerotate_cache")
        if _transforms_active():  # index arrays under vmap: no rule either
            _refuse_transformed([("slots", slots), ("from_positions", from_positions), ("to_positions", to_positions)],
                                "rotary_rerotate_cache")
        _refuse_inference((k_cache, k_scale), ("k_cache", "k_scale"), "rotary_rerotate_cache")
        where = "rotary_rerotate_cache"
        kcv, bits = _core(k_cache, "k_cache", where)
        _rotary._rerotate_cache(kcv, _index_array(slots, "slots", False, where),
                                _index_array(from_positions, "from_positions", False, where),
                                _index_array(to_positions, "to_positions", False, where), spec, to_spec=to_spec,
                                from_seq_len=_seq_len_arg(from_seq_len, "rotary_rerotate_cache", "from_seq_len"),
                                to_seq_len=_seq_len_arg(to_seq_len, "rotary_rerotate_cache", "to_seq_len"),
                                cache_layout=cache_layout, k_scale=_scale(k_scale, "k_scale", _is_int8(k_cache), where),
                                threads=_threads_arg(threads, "rotary_rerotate_cache"), backend=backend,
                                cache_bits=bits)
    except (TypeError, ValueError, IndexError) as e:
        raise _in_words_of(e, "rotary_rerotate_cache") from None
    return k_cache


def _fp8_code(x: Any) -> Optional[int]:
    """The rotary DType value (7 e4m3fn, 8 e5m2) of an fp8 numpy (ml_dtypes) or torch array, else None."""
    if isinstance(x, np.ndarray):
        return _NUMPY_BITS.get(x.dtype.type.__name__) if x.dtype.itemsize == 1 else None
    if _is_torch(x):
        torch = _torch_module()
        return {getattr(torch, "float8_e4m3fn", None): 7, getattr(torch, "float8_e5m2", None): 8}.get(x.dtype)
    return None


def _fp8_rotation(spec: Spec, q: ArrayLike, q_out: Optional[ArrayLike], q_scale: Optional[float], k: Optional[ArrayLike],
               k_out: Optional[ArrayLike], k_scale: Optional[float], positions: Any, *, layout: str, pairing: Optional[str],
               inverse: bool, seq_len: Optional[int], threads: int, backend: str, cu_seqlens: Any, seq_offsets: Any,
               batch_offsets: Any, tables: Optional[Tuple[Any, Any]] = None) -> None:
    """rotary.apply / apply_qk with an fp8 q_out and/or k_out: fp8(fl32(y / scale)), saturating, nearest even.
    With `tables` (cos, sin) and spec None: rotary.apply_cos_sin / apply_qk_cos_sin's caller tables instead."""
    def conv(x, what, scale_name, scale):
        if x is None:
            return None, -1, 1.0
        _check_torch_write(x, what, "rotary_apply")
        code = _fp8_code(x)
        if code is None:
            if scale is not None:
                raise ValueError(f"[rotary_apply] {scale_name} is only for an fp8 {what}, got {what} dtype {x.dtype}")
            return _as_core_array(x, what, where="rotary_apply")[0], -1, 1.0
        if scale is None:
            raise ValueError(f"[rotary_apply] {scale_name} (the per-tensor scale) is required for an fp8 {what}")
        return _core(x, what, "rotary_apply") + (_f32_scale(scale, scale_name, "rotary_apply"),)
    if (q_out is not None and q_out is q) or (k_out is not None and k_out is k):
        raise ValueError("[rotary_apply] an fp8 output cannot be its input (rotate in place needs one dtype)")
    qv, act = _core(q, "x" if k is None else "q", "rotary_apply", readonly=True)
    kv = _core(k, "k", "rotary_apply", readonly=True)[0] if k is not None else None
    qov, qob, qos = conv(q_out, "out" if k is None else "q_out", "out_scale" if k is None else "q_out_scale", q_scale)
    kov, kob, kos = conv(k_out, "k_out", "k_out_scale", k_scale)

    table_kw: dict = {}
    if tables is not None:
        cv, sv, cbf16 = _table_arrays(*tables)
        offset, ids, cu, so, bo = _table_positions(positions, cu_seqlens, seq_offsets, batch_offsets, "rotary_apply")
        table_kw = dict(cos=cv, sin=sv, table_bf16_bits=cbf16)
    else:
        offset, ids = _split_positions(positions, "rotary_apply")
        cu, so, bo = _offset_arrays(cu_seqlens, seq_offsets, batch_offsets, "rotary_apply")
    _rotary._apply_fp8(spec, qv, q_out=qov, k=kv, k_out=kov, offset=offset, ids=ids, cu_seqlens=cu, seq_offsets=so,
                       batch_offsets=bo, layout=layout, pairing=pairing, inverse=bool(inverse), seq_len=seq_len,
                       threads=int(threads), backend=backend, act_bits=act, q_out_bits=qob, k_out_bits=kob,
                       q_out_scale=qos, k_out_scale=kos, **table_kw)


def _fp8_qk(q_out: Any, k_out: Any, q_scale: Optional[float], k_scale: Optional[float]) -> bool:
    """Whether an apply_qk-style call writes fp8: a scale given, or an fp8 q_out / k_out."""
    return q_scale is not None or k_scale is not None or _fp8_code(q_out) is not None or _fp8_code(k_out) is not None


def _apply_qk_fp8(spec: Optional[Spec], q: ArrayLike, k: ArrayLike, q_out: Optional[ArrayLike], k_out: Optional[ArrayLike],
                  q_scale: Optional[float], k_scale: Optional[float], positions: Any, inplace: bool,
                  **kw: Any) -> Tuple[ArrayLike, ArrayLike]:
    """rotary.apply_qk / apply_qk_cos_sin with fp8 outputs (allocated like q / k when not given): (q_out, k_out)."""
    if inplace:
        raise ValueError("[rotary_apply] inplace=True cannot write fp8 outputs")
    q_out = _empty_like(q) if q_out is None else q_out
    k_out = _empty_like(k) if k_out is None else k_out
    _fp8_rotation(spec, q, q_out, q_scale, k, k_out, k_scale, positions, **kw)
    return q_out, k_out
