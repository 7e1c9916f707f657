"""rotary.torch's position arguments -> what the operators take: an int offset, or an ids tensor built with torch
ops on the positions' device (packed cu_seqlens / seq_offsets and per-batch batch_offsets), checked as
rotary.apply checks them wherever the values may be read on the host."""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np
import torch

_peek_functorch = torch._C._functorch.peek_interpreter_stack


def _functorch_active() -> bool:
    """True inside torch.func transforms (never while torch.compile traces: the check is folded away there)."""
    return not torch.compiler.is_compiling() and _peek_functorch() is not None


def _int_tensor(a: Any, name: str, device: Any) -> torch.Tensor:
    """An index argument as int64 on `device`; float, complex and bool values raise (they were truncated)."""
    t = torch.as_tensor(a, device=device)
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"[rotary_apply] positions.{name} must be an integer tensor, got dtype {t.dtype}")
    if t.dtype == getattr(torch, "uint64", None) and _host_readable(t):  # .long() would wrap past int64
        from ._arrays import _index_array

        _index_array(t.contiguous().numpy(), f"positions.{name}", False, "rotary_apply")
    return t.long()


def _n_tokens(x: torch.Tensor, layout: str) -> int:
    if layout == "thd":
        return x.shape[0]
    return x.shape[1] if layout == "bshd" else x.shape[2]


def _positions(positions: Any, x: torch.Tensor, layout: str, cu_seqlens: Any = None, seq_offsets: Any = None,
               batch_offsets: Any = None) -> Tuple[Optional[torch.Tensor], int]:
    """(positions tensor or None, offset) for the operators; packed and per-batch schemes become ids (torch ops,
    on the positions' device: nothing is read on the host)."""
    _check_schemes(positions, layout, cu_seqlens, seq_offsets, batch_offsets)
    if cu_seqlens is not None:
        return _packed_ids(x, positions, cu_seqlens, seq_offsets), 0
    if batch_offsets is not None:
        bo = _int_tensor(batch_offsets, "batch_offsets", x.device)
        if bo.dim() != 1 or bo.shape[0] not in (1, x.shape[0]):
            raise ValueError(f"[rotary_apply] positions.batch_offsets must have shape [B] = [{x.shape[0]}] (or [1]), "
                             f"got {list(bo.shape)}")
        start = 0 if positions is None else int(positions)
        return bo[:, None] + (start + torch.arange(_n_tokens(x, layout), device=x.device)), 0
    if positions is None:
        return None, 0
    if isinstance(positions, torch.Tensor):
        if positions.dim() == 0 and not positions.is_floating_point():
            return positions + torch.arange(_n_tokens(x, layout), device=positions.device), 0
        return positions, 0
    if isinstance(positions, (bool, np.bool_)):
        raise TypeError("[rotary_apply] positions must be an int or a tensor, got bool")
    if isinstance(positions, (int, np.integer)):
        return None, int(positions)
    if isinstance(positions, float):
        raise TypeError("[rotary_apply] a scalar position must be an int (the start offset); pass a tensor for "
                        "fractional positions")
    # No dtype inspection on the way that works: torch.compile traces np.asarray + as_tensor, not ndarray attributes.
    try:
        return torch.as_tensor(np.asarray(positions)), 0
    except (ValueError, TypeError, RuntimeError):  # str, bytes, ragged or object: torch's error named nothing
        try:
            dtype = np.asarray(positions).dtype
        except (ValueError, TypeError):
            dtype = "ragged"
        raise TypeError(f"[rotary_apply] positions must be an int, a tensor, or an integer or float array or list, "
                        f"got {type(positions).__name__} (numpy dtype {dtype})") from None


def _int_scalar(positions: Any) -> bool:
    return (isinstance(positions, (int, np.integer)) and not isinstance(positions, (bool, np.bool_))) or (
        isinstance(positions, torch.Tensor) and positions.dim() == 0 and not positions.is_floating_point())


def _check_schemes(positions: Any, layout: str, cu_seqlens: Any, seq_offsets: Any, batch_offsets: Any) -> None:
    """One position scheme per call, as rotary.apply checks it (an int `positions` may start packed or per-batch
    sequences: it is added)."""
    if seq_offsets is not None and cu_seqlens is None:
        raise ValueError("[rotary_apply] seq_offsets needs cu_seqlens (the starts of packed thd sequences), got "
                         "seq_offsets alone")
    if cu_seqlens is not None:
        if layout != "thd":
            raise ValueError(f"[rotary_apply] cu_seqlens packs sequences along the tokens of layout \"thd\", got "
                             f"layout \"{layout}\"")
        if batch_offsets is not None:
            raise ValueError("[rotary_apply] batch_offsets cannot be combined with cu_seqlens (packed sequences "
                             "start at seq_offsets), got both")
    if (cu_seqlens is not None or batch_offsets is not None) and positions is not None and not _int_scalar(positions):
        other = "cu_seqlens" if cu_seqlens is not None else "batch_offsets"
        raise ValueError(f"[rotary_apply] positions ids cannot be combined with {other}: give one scheme (an int "
                         f"positions is the start added to it), got both")


def _host_readable(t: torch.Tensor) -> bool:
    """A real CPU tensor whose values may be read now: not on a device, not traced (torch.compile, make_fx with
    fake or symbolic tensors), not under a functorch transform."""
    if t.device.type != "cpu" or torch.compiler.is_compiling() or _functorch_active():
        return False
    return torch._guards.detect_fake_mode(t) is None


_LIMIT = 1 << 31  # positions are < 2^31


def raise_offsets_error(e: Exception, x: torch.Tensor, layout: str, positions: Any, cu_seqlens: Any, seq_offsets: Any,
                        batch_offsets: Any) -> None:
    """After the kernel refused an entry of the ids built from batch_offsets / seq_offsets (before any write): raises
    the error naming the caller's own entry and value; returns when there is none. Read only then, so a valid call
    pays nothing."""
    named = _offsets_error(e, x, layout, positions, cu_seqlens, seq_offsets, batch_offsets)
    if named is not None:
        raise named from None


def _offsets_error(e: Exception, x: torch.Tensor, layout: str, positions: Any, cu_seqlens: Any, seq_offsets: Any,
                   batch_offsets: Any) -> Optional[ValueError]:
    """raise_offsets_error's error, or None."""
    if "positions.ids" not in str(e) or (batch_offsets is None and seq_offsets is None):
        return None
    try:
        start = 0 if positions is None else int(positions)
        if batch_offsets is not None:
            bo = _int_tensor(batch_offsets, "batch_offsets", x.device)
            if _host_readable(bo):
                _check_starts(bo.tolist(), "batch_offsets", start, [_n_tokens(x, layout)] * bo.shape[0])
        elif cu_seqlens is not None:
            so, cu = _int_tensor(seq_offsets, "seq_offsets", x.device), _int_tensor(cu_seqlens, "cu_seqlens", x.device)
            if _host_readable(so) and _host_readable(cu):
                c = cu.tolist()
                _check_starts(so.tolist(), "seq_offsets", start, [c[i + 1] - c[i] for i in range(len(c) - 1)])
    except ValueError as named:
        return named
    return None


def _check_starts(starts: list, name: str, start: int, lengths: list) -> None:
    """Per-sequence first positions read on the host (batch_offsets, seq_offsets; `start`: an int positions added):
    every position start + starts[i] + s (s < lengths[i]) must be in [0, 2^31), as rotary.apply checks them. The
    errors name the caller's index and value (the kernel would name an entry of the ids built from them)."""
    for i, (v, n) in enumerate(zip(starts, lengths)):
        if n <= 0:
            continue  # no position of this sequence exists
        if v + start < 0:
            raise ValueError(f"[rotary_apply] positions.{name}[{i}] must be >= {-start} (negative positions are "
                             f"invalid), got {v}")
        extra = start + n - 1
        if v + extra >= _LIMIT:
            bound = (f"< {'2^31' if start == 0 else _LIMIT - start}" if v + start >= _LIMIT else
                     f"<= {_LIMIT - 1 - extra} (its last position, + {extra}, must be < 2^31)")
            raise ValueError(f"[rotary_apply] positions.{name}[{i}] must be {bound}, got {v}")


def _packed_ids(x: torch.Tensor, positions: Any, cu_seqlens: Any, seq_offsets: Any) -> torch.Tensor:
    """thd positions of packed sequences: t - cu_seqlens[n] + seq_offsets[n] (+ an int `positions` offset).
    cu_seqlens on the CPU is checked as rotary.apply checks it (device tensors are not read on the host, nor are
    tensors being traced by torch.compile)."""
    cu = _int_tensor(cu_seqlens, "cu_seqlens", x.device)
    if cu.dim() != 1 or cu.shape[0] < 1:
        raise ValueError(f"[rotary_apply] positions.cu_seqlens must have shape [N+1], got {list(cu.shape)}")
    so = None
    if seq_offsets is not None:
        so = _int_tensor(seq_offsets, "seq_offsets", x.device)
        if so.dim() != 1 or so.shape[0] != cu.shape[0] - 1:
            raise ValueError(f"[rotary_apply] positions.seq_offsets must have shape [N] = [{cu.shape[0] - 1}], "
                             f"got {list(so.shape)}")
    if _host_readable(cu):
        c = cu.tolist()
        if c[0] != 0:
            raise ValueError(f"[rotary_apply] positions.cu_seqlens[0] must be 0, got {c[0]}")
        for i in range(1, len(c)):
            if c[i] < c[i - 1]:
                raise ValueError(f"[rotary_apply] positions.cu_seqlens must be non-decreasing, got cu_seqlens[{i}] = "
                                 f"{c[i]} < cu_seqlens[{i - 1}] = {c[i - 1]}")
        if c[-1] != x.shape[0]:
            raise ValueError(f"[rotary_apply] positions.cu_seqlens[{len(c) - 1}] (the last entry) must equal the "
                             f"token count T = {x.shape[0]}, got {c[-1]}")
    t = torch.arange(x.shape[0], device=x.device)
    seq = torch.bucketize(t, cu[1:], right=True)
    ids = t - cu[seq]
    if so is not None:
        ids = ids + so[seq]
    if positions is not None:
        ids = ids + int(positions)
    return ids
