"""Array plumbing shared by rotary's Python modules: numpy/torch views handed to the core without copies,
cache-line-aligned outputs, output checks and index arrays. No module of the package is imported here, so
rotary/__init__.py and rotary/multimodal.py both import from it (no import cycle)."""
from __future__ import annotations

import functools
import math
import operator
import re
import sys
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

ArrayLike = Any  # numpy.ndarray or torch.Tensor (CPU)

_INT_KINDS = ("i", "u")


def _torch_module():
    """The torch module if it is already imported (an array can only be a tensor then), else None."""
    return sys.modules.get("torch")


def _inference_write_error(where: str, name: str) -> RuntimeError:
    """The error of an in-place write into a torch inference tensor outside inference mode (torch refuses those;
    the dispatcher does not check custom operators, so rotary's writers do)."""
    return RuntimeError(f"[{where}] {name} must not be an inference tensor for an in-place update outside "
                        "InferenceMode (torch: \"Inplace update to inference tensor outside InferenceMode is not "
                        "allowed\"; clone it first), got an inference tensor")


def _is_torch(x: Any) -> bool:
    torch = _torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def _same_array_type(a: Any, b: Any) -> bool:
    """a and b are both numpy arrays or both torch tensors (or both neither); subclasses count as their base."""
    if type(a) is type(b):
        return True
    return isinstance(a, np.ndarray) == isinstance(b, np.ndarray) and _is_torch(a) == _is_torch(b)


def _is_numpy_bf16(a: np.ndarray) -> bool:
    # ml_dtypes' bfloat16 is the only kind-'V' dtype we accept. Its scalar type's name, not dtype.name,
    # which ml_dtypes builds on each access (1.4 us, four times per apply_qk call).
    return a.dtype.kind == "V" and a.dtype.type.__name__ == "bfloat16"


def _mark_written(*tensors: Any) -> None:
    """Bumps the version counters of torch tensors the call writes, as torch's own in-place ops do (before their
    kernel, error or not): autograd then refuses a backward through a value saved before the write, instead of
    computing it from the new contents."""
    _torch_module()._C._increment_version(list(tensors))  # the list form: the single-tensor one costs ~10x (3 us)


def _check_torch_cpu(t: Any, what: str, where: str) -> None:
    if t.device.type != "cpu":
        raise ValueError(f"[{where}] {what} is on device '{t.device}'; rotary's Python kernels run on CPU tensors")


_NUMERIC_KINDS = ("f", "i", "u", "c")  # others (ml_dtypes float8, bool, objects) never reach the extension


def _check_torch_strided(t: Any, what: str, where: str) -> None:
    torch = _torch_module()
    if t.layout != torch.strided:
        raise TypeError(f"[{where}] {what} must be a dense (strided) tensor, got layout {t.layout}")
    if t.dtype.is_floating_point and t.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise TypeError(f"[{where}] {what} dtype must be float32, float16, bfloat16 or float64, got {t.dtype}")


def _has_broadcast_axis(x: Any) -> bool:
    """True if an axis longer than 1 has a zero (broadcast) or negative (reversed numpy view) stride."""
    strides = x.strides if isinstance(x, np.ndarray) else x.stride()
    return any(st <= 0 and n > 1 for st, n in zip(strides, x.shape))


_MAX_RANK = 4  # rotary::kMaxRank: the most axes a core TensorView holds


def _check_rank(x: Any, what: str, where: str) -> None:
    """An array of more axes than the core holds, refused in the words of the entry point `where` with its shape
    (before the extension's own conversion, whose message gives no shape)."""
    ndim = getattr(x, "ndim", None)
    if isinstance(ndim, int) and ndim > _MAX_RANK:
        raise ValueError(f"[{where}] {what} must have rank <= {_MAX_RANK}, got rank {ndim} "
                         f"(shape [{','.join(str(int(n)) for n in x.shape)}])")


def _as_core_array(x: Any, what: str, readonly: bool = False, *, where: str) -> Tuple[Any, bool]:
    """(object the extension can import without copying, is-bf16-as-uint16-bits).

    The core takes non-negative strides and rejects zero strides on axes longer than 1 (they would alias
    outputs); such an *input* (readonly=True: a broadcast gradient of a sum, a reversed numpy view) is
    materialised first. Outputs are never copied, so such an `out` raises ValueError. More than 4 axes raise
    ValueError naming `where`, the entry point.
    """
    _check_rank(x, what, where)
    if isinstance(x, np.ndarray):
        if (x.dtype.kind not in _NUMERIC_KINDS and not _is_numpy_bf16(x)) or (x.dtype.kind == "f" and x.dtype.itemsize > 8):
            # (np.longdouble, kind 'f', reached the extension's argument matching and its signature dump)
            raise TypeError(f"[{where}] {what} dtype must be float32, float16, bfloat16 or float64, got {x.dtype}")
        if not readonly and not x.flags.writeable:
            if _has_broadcast_axis(x):
                raise ValueError(f"[{where}] {what} must be a writable array with one element per address, got a "
                                 f"read-only broadcast view (shape {x.shape}, strides {x.strides})")
            raise ValueError(f"[{where}] {what} must be writable, got a read-only array (shape {x.shape})")
        if not x.dtype.isnative:  # byte-swapped ('>f4' on a little-endian machine): the kernels read native values
            if not readonly:
                raise TypeError(f"[{where}] {what} must have the machine's byte order, got dtype {x.dtype.str} "
                                f"(write into a native array, e.g. x.astype(x.dtype.newbyteorder('=')), and copy back)")
            x = x.astype(x.dtype.newbyteorder("="))
        # C-contiguous arrays (the common case, checked first: it is cheap) have no such axis.
        if readonly and not x.flags.c_contiguous and _has_broadcast_axis(x):
            x = np.ascontiguousarray(x)
        if _is_numpy_bf16(x):
            return x.view(np.uint16), True
        return x, False
    if _is_torch(x):
        _check_torch_cpu(x, what, where)
        _check_torch_strided(x, what, where)
        if not readonly:
            _mark_written(x)
        x = x.detach()
        if x.is_neg():  # a negative-bit view (t._neg_view(), z.conj().imag): its memory holds -value
            if not readonly:
                raise ValueError(f"[{where}] {what} is a negative-bit view (its memory holds the negated values); "
                                 f"pass a tensor without it (e.g. {what}.resolve_neg()) and copy back")
            x = x.resolve_neg()
        if readonly and _has_broadcast_axis(x):
            x = x.contiguous()
        return x, False
    raise TypeError(f"[{where}] {what} must be a numpy array or a torch CPU tensor, got {type(x).__name__}")


_ALIGN = 64  # bytes: one cache line on x86 and most Arm cores


def empty(shape: Union[int, Sequence[int]], dtype: Any = np.float32) -> np.ndarray:
    """An uninitialised C-contiguous numpy array whose data starts on a 64-byte cache line.

    numpy's own large arrays start 16 bytes past a line; rotary writes aligned outputs with whole-line
    non-temporal stores, so out-of-place calls into arrays from here (or rotary's own outputs, which
    are allocated this way) run faster (measured in docs/performance.md). Any dtype numpy knows.
    """
    dt = np.dtype(dtype)
    shape_t = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
    if any(n < 0 for n in shape_t):
        raise ValueError(f"[rotary_empty] shape must be non-negative, got {shape_t}")
    nbytes = int(np.prod(shape_t, dtype=np.int64)) * dt.itemsize
    raw = np.empty(nbytes + _ALIGN, dtype=np.uint8)
    start = (-raw.ctypes.data) % _ALIGN
    return raw[start:start + nbytes].view(dt).reshape(shape_t)


def empty_like(x: ArrayLike) -> ArrayLike:
    """rotary.empty with x's shape and dtype (numpy); torch tensors get torch.empty_like (already aligned)."""
    if isinstance(x, np.ndarray):
        return empty(x.shape, x.dtype)
    return _torch_module().empty_like(x)


def _empty_like(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        dtype = x.dtype.newbyteorder("=")  # a byte-swapped input still gets a native result
        if _has_broadcast_axis(x) or x.flags.c_contiguous:
            return empty(x.shape, dtype)  # cache-line aligned (see rotary.empty)
        return np.empty_like(x, dtype=dtype)  # keeps x's memory order (e.g. a transposed view stays transposed)
    return _torch_module().empty_like(x, memory_format=_torch_module().preserve_format)


def _carries_tangent(t: Any) -> bool:
    """A torch tensor t carries a forward-mode tangent (inside a forward_ad.dual_level)."""
    fwd = _torch_module().autograd.forward_ad
    return fwd._current_level >= 0 and fwd.unpack_dual(t).tangent is not None


def _needs_grad(x: Any) -> bool:
    """x is a torch tensor that needs a derivative: it requires grad (grad mode on), carries a forward-mode AD tangent,
    or is a torch.func transform's tensor. Such inputs go through rotary.torch, which records both modes."""
    if x is None or type(x) is np.ndarray:  # the common cases, without a torch look-up (per-call overhead)
        return False
    torch = _torch_module()
    if torch is None or not isinstance(x, torch.Tensor):
        return False
    if x.requires_grad and torch.is_grad_enabled():
        return True
    return torch._C._functorch.is_functorch_wrapped_tensor(x) or _carries_tangent(x)


def _derivative_reason(named: Sequence[Tuple[str, Any]]) -> str:
    """Why _needs_grad routed a call to rotary.torch, in words naming the first argument that did it: a torch.func
    transform's tensor, then one carrying a forward-mode tangent, then one that requires grad."""
    torch = _torch_module()
    tensors = [(n, t) for n, t in named if torch is not None and isinstance(t, torch.Tensor)]
    for n, t in tensors:
        if torch._C._functorch.is_functorch_wrapped_tensor(t):
            return f"{n} is a torch.func transform's tensor (vmap, grad, jvp: out= has no transform rule)"
    for n, t in tensors:
        if _carries_tangent(t):
            return f"{n} carries a forward-mode tangent (out= would get no tangent)"
    return next((f"{n} requires grad (autograd records no write into out)" for n, t in tensors if t.requires_grad),
                "a tensor needs a derivative")


def _position_derivative_error(where: str, how: str) -> RuntimeError:
    return RuntimeError(f"[{where}] positions {how}, but rotary gives no derivative with respect to the positions "
                        "(only to the rotated tensors; a silent None would read as a zero gradient): pass "
                        "positions.detach(), or rotate by a differentiable torch formula")


def _refuse_position_derivative(p: Any, where: str, plain: bool = False) -> None:
    """Positions (a torch tensor) that would need a derivative: they require grad (grad mode on) or carry a
    forward-mode tangent (torch.func.grad / jvp over them included). plain: refuse any torch.func transform's tensor
    too (the numpy kernels cannot take one; rotary.torch transforms torch tensors)."""
    if p is None or type(p) is np.ndarray or type(p) is int:  # the common cases, without a torch look-up
        return
    torch = _torch_module()
    if torch is None or not isinstance(p, torch.Tensor):
        return
    if p.requires_grad and torch.is_grad_enabled():
        raise _position_derivative_error(where, "requires grad")
    if _carries_tangent(p):
        raise _position_derivative_error(where, "carries a forward-mode tangent")
    if plain and torch._C._functorch.is_functorch_wrapped_tensor(p):
        if where == "rotary_cos_sin":  # no rotated arrays here: it returns numpy rows, which no transform follows
            raise TypeError("[rotary_cos_sin] positions must be a plain tensor (rotary.cos_sin returns numpy rows, "
                            "which torch.func cannot transform), got a torch.func transform's tensor (use "
                            "rotary.torch.cos_sin: it transforms torch positions)")
        raise TypeError(f"[{where}] positions must be a plain tensor when the rotated arrays are not torch tensors, "
                        "got a torch.func transform's tensor (pass torch tensors: rotary.torch transforms them)")


def _routes_positions(x: Any, positions: Any, where: str) -> bool:
    """Torch positions that a transform sees (torch.func.vmap over them) go through rotary.torch with a torch x; a
    derivative with respect to them is refused (_refuse_position_derivative), as is a transform's tensor with numpy x."""
    if positions is None or type(positions) is int or type(positions) is np.ndarray or not _needs_grad(positions):
        return False
    _refuse_position_derivative(positions, where, plain=not _is_torch(x))
    return True


def _check_torch_write(out: Any, what: str, where: str) -> None:
    """A torch tensor the call writes (out=, or x in place) that torch itself would refuse to write: an inference
    tensor outside inference mode, or (grad mode on) one that requires grad, as torch's out= functions refuse."""
    if out is None or type(out) is np.ndarray:  # the common cases, without a torch look-up (per-call overhead)
        return
    torch = _torch_module()
    if torch is None or not isinstance(out, torch.Tensor):
        return
    if out.is_inference() and not torch.is_inference_mode_enabled():
        raise _inference_write_error(where, what)
    if out.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(f"[{where}] {what} must not require grad (functions with out= arguments don't support "
                           "automatic differentiation, as torch's own; use the returned tensor, or write under "
                           "torch.no_grad()), got a tensor that requires grad")
    if _carries_tangent(out):  # its tangent would be left stale
        raise RuntimeError(f"[{where}] {what} must not carry a forward-mode tangent (functions with out= arguments "
                           "don't support forward-mode AD, as torch's own; use the returned tensor), got a dual tensor")
    if torch._C._functorch.is_functorch_wrapped_tensor(out):
        raise RuntimeError(f"[{where}] {what} must not be a torch.func transform's tensor (functions with out= "
                           "arguments have no transform rule; use the returned tensor), got one")


def _check_out(out: Any, x: Any, what: str, where: str = "rotary_apply") -> None:
    _check_torch_write(out, what, where)
    x_numpy = isinstance(x, np.ndarray)
    if not _same_array_type(out, x):
        raise TypeError(f"[{where}] {what} must be the same array type as its input ({type(x).__name__}), "
                        f"got {type(out).__name__}")
    if tuple(out.shape) != tuple(x.shape):
        raise ValueError(f"[{where}] {what} must have the input's shape {tuple(x.shape)}, got {tuple(out.shape)}")
    same = out.dtype == x.dtype or (x_numpy and out.dtype == x.dtype.newbyteorder("="))  # a byte-swapped input takes a native out
    if not same:
        raise TypeError(f"[{where}] {what} must have the input's dtype {x.dtype}, got {out.dtype}")


def _torch_wide_unsigned(torch: Any) -> Tuple[Any, ...]:
    """torch's uint16/uint32/uint64 (torch >= 2.3; absent before)."""
    return tuple(d for d in (getattr(torch, n, None) for n in ("uint16", "uint32", "uint64")) if d is not None)


def _index_array(a: Any, what: str, allow_float: bool, where: str) -> Any:
    """Positions-like input -> numpy/torch array of int32/int64 (or float32/float64 if allowed). `where`: the entry
    point whose words its errors are in (a value past int64, a dtype that is not an index)."""
    if isinstance(a, (list, tuple)):
        a = np.asarray(a)
    if isinstance(a, np.ndarray):
        if not a.flags.c_contiguous and any(st < 0 for st in a.strides):
            a = np.ascontiguousarray(a)  # a reversed view (np.arange(S)[::-1], np.flip): read from a copy
        if a.dtype.kind in _INT_KINDS:
            if a.dtype == np.uint64 and a.size and int(a.max()) > _I64_MAX:  # astype would wrap it to a negative
                at = np.unravel_index(int(np.argmax(a > _I64_MAX)), a.shape)
                index = ",".join(str(int(i)) for i in at)
                raise ValueError(f"[{where}] {what}[{index}] must fit in int64, got {int(a[at])}")
            return a if a.dtype in (np.int32, np.int64) else a.astype(np.int64)
        if a.dtype.kind == "f" and allow_float:
            return a if a.dtype in (np.float32, np.float64) else a.astype(np.float64)
        if a.dtype.kind == "b":
            raise TypeError(f"[{where}] {what} must be integers, got dtype bool")
        raise TypeError(f"[{where}] {what} must be an integer{' or float' if allow_float else ''} array, "
                        f"got dtype {a.dtype}")
    if _is_torch(a):
        torch = _torch_module()
        _check_torch_cpu(a, what, where)
        _check_torch_strided(a, what, where)
        a = a.detach()
        if a.is_neg():  # a negative-bit view (z.conj().imag): its memory holds the negated values
            a = a.resolve_neg()
        if a.dtype in (torch.int32, torch.int64):
            return a
        if a.dtype in (torch.uint8, torch.int8, torch.int16):
            return a.to(torch.int64)
        if a.dtype in _torch_wide_unsigned(torch):  # values past int64 refused, as for numpy's uint64
            return torch.from_numpy(_index_array(a.contiguous().numpy(), what, allow_float, where))
        if allow_float and a.dtype in (torch.float32, torch.float64):
            return a
        if allow_float and a.dtype in (torch.float16, torch.bfloat16):
            return a.to(torch.float64)
        raise TypeError(f"[{where}] {what} must be an integer{' or float' if allow_float else ''} tensor, "
                        f"got dtype {a.dtype}")
    raise TypeError(f"[{where}] {what} must be a sequence or an array of {'numbers' if allow_float else 'integers'}, "
                    f"got {type(a).__name__}")


def _input_and_out(x: Any, out: Any, what: str = "x", out_what: str = "out",
                   where: str = "rotary_apply") -> Tuple[Any, bool, Any, Any]:
    """(core view of x, x is bf16 bits, the output array, its core view): `out`, checked against x, or a new one."""
    xv, bf16 = _as_core_array(x, what, readonly=True, where=where)
    if out is None:
        out = _empty_like(x)
    else:
        _check_out(out, x, out_what, where)
    ov, _ = _as_core_array(out, out_what, where=where)
    return xv, bf16, out, ov


_I64_MIN, _I64_MAX, _I32_MAX = -(2**63), 2**63 - 1, 2**31 - 1


def _offset_arg(v: Any, what: str, where: str = "rotary_apply") -> int:
    """An int offset for the core (int64): out-of-range values get the core's message instead of nanobind's; a
    float (truncated before), bool or other non-integer raises TypeError."""
    if (isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "iu") or (
            _is_torch(v) and v.dim() == 0 and not v.is_floating_point() and not v.is_complex()
            and v.dtype != _torch_module().bool):
        v = int(v)  # a 0-dim integer array or tensor
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"[{where}] {what} must be an int, got {type(v).__name__}")
    v = int(v)
    if v < _I64_MIN:
        raise ValueError(f"[{where}] {what} must be >= 0, got {v}")
    if v > _I64_MAX:
        raise ValueError(f"[{where}] {what} must be < 2^31, got {v}")
    return v


def _whole(x: Any, where: str, name: str, what: str) -> int:
    """An integer argument: ints and anything with __index__ (numpy integers, 0-d integer arrays and tensors), or
    a finite whole float; not a bool. TypeError / ValueError naming the argument otherwise."""
    if isinstance(x, (bool, np.bool_, str, bytes)):
        raise TypeError(f"[{where}] {name} must be {what}, got {type(x).__name__}")
    try:
        return operator.index(x)
    except TypeError:
        pass
    try:
        f = float(x)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"[{where}] {name} must be {what}, got {type(x).__name__}") from None
    if not math.isfinite(f) or f != int(f):
        raise ValueError(f"[{where}] {name} must be {what}, got {f!r}")
    return int(f)


def _threads_arg(threads: Any, where: str = "rotary_apply") -> int:
    """threads for the core (int32): counts above the usable cores are capped there, so any huge count is too."""
    if isinstance(threads, (bool, np.bool_, float, np.floating)):
        raise TypeError(f"[{where}] threads must be an int, got {type(threads).__name__}")
    t = _whole(threads, where, "threads", "an int")
    if t < 0:
        if t < -_I32_MAX:
            raise ValueError(f"[{where}] threads must be >= 0 (0 = all usable cores), got {t}")
        return t  # the core's message names the value
    return min(t, _I32_MAX)


def _seq_len_arg(seq_len: Any, where: str = "rotary_apply", name: str = "seq_len") -> Any:
    """seq_len for the core (int64; the core checks the range and names the value); None stays None."""
    if seq_len is None:
        return None
    v = _whole(seq_len, where, name, "an int or None")
    if v > _I64_MAX:
        raise ValueError(f"[{where}] {name} must be <= 2^31 (positions are < 2^31), got {v}")
    if v < _I64_MIN:
        raise ValueError(f"[{where}] {name} must be > 0 when given, got {v}")
    return v


def _float_arg(x: Any, where: str, name: str) -> float:
    """A real number argument as a Python float (anything float() takes but a bool or a string), with values a
    float cannot hold refused naming the argument."""
    if isinstance(x, (bool, np.bool_, str, bytes)):
        raise TypeError(f"[{where}] {name} must be a real number, got {type(x).__name__}")
    try:
        return float(x)
    except OverflowError:
        raise ValueError(f"[{where}] {name} must be a finite float, got {x!r:.60}") from None
    except (TypeError, ValueError):
        raise TypeError(f"[{where}] {name} must be a real number, got {type(x).__name__}") from None


def _int64_checked(fn: Any, where: str, names: Sequence[str]) -> Any:
    """fn, an extension function taking int64 arguments (`names`, in order), with a Python int outside int64
    (also inside a list argument) refused as a ValueError naming the argument and the value, instead of
    nanobind's "incompatible function arguments" dump."""

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        for name, v in list(zip(names, args)) + list(kwargs.items()):
            seq = isinstance(v, (list, tuple))
            for i, e in enumerate(v if seq else (v,)):
                if isinstance(e, int) and not _I64_MIN <= e <= _I64_MAX:
                    raise ValueError(f"[{where}] {name}{f'[{i}]' if seq else ''} must fit in int64, got {e}")
        return fn(*args, **kwargs)

    return checked


def _table_arrays(cos: ArrayLike, sin: ArrayLike, where: str = "rotary_apply") -> Tuple[Any, Any, bool]:
    cv, cbf16 = _as_core_array(cos, "cos", readonly=True, where=where)
    sv, sbf16 = _as_core_array(sin, "sin", readonly=True, where=where)
    if cbf16 != sbf16:
        raise TypeError(f"[{where}] cos and sin must have the same dtype")
    return cv, sv, cbf16


_AS_X = (("q_out", "out"), ("q", "x"))  # the core's names of a one-array call's arrays (rotary.apply's x and out)


def _in_words(e: Exception, where: str, *, names: Sequence[Tuple[str, str]] = (),
              to_where: Optional[str] = None) -> Exception:
    """e, an error "[where] ..." of a call made for the caller, in the caller's words: prefixed [to_where] when given,
    and each whole word old of `names` ((old, new) pairs) as new throughout the message, not inside a word, after a
    dot or in quotes (with ("q", "x"): q's and q itself change; seq, q_out, a.q and got "q" do not). Any other
    error, or one these words leave as it is, is returned as e."""
    msg = str(e)
    if not msg.startswith(f"[{where}] "):
        return e
    body = msg[len(where) + 3:]
    if names:
        new = dict(names)
        alternatives = "|".join(re.escape(old) for old in sorted(new, key=len, reverse=True))  # q_out before q
        body = re.sub(rf'(?<![\w."])(?:{alternatives})(?![\w"])', lambda m: new[m.group(0)], body)
    named = f"[{to_where or where}] {body}"
    return e if named == msg else type(e)(named)
