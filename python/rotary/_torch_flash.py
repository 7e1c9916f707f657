"""flash-attn's packed in-place rotations (apply_rotary_emb_qkv_, apply_rotary_emb_kv_) on rotary.torch.apply_rotary_emb.

Exported by rotary.torch; the rotation itself, its checks and its gradient are apply_rotary_emb's.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import numpy as np
import torch

from rotary._torch_positions import _functorch_active


def _check_packed(t: torch.Tensor, name: str) -> None:
    """A packed tensor written in place: a tensor whose elements are not shared between indices (an expanded axis,
    checked everywhere; other overlaps outside torch.compile, which cannot trace torch's own test: a graph break
    there split the call into graphs torch could not compile, and outside torch.func's transforms, which have no
    batching rule for it). Shared elements would be rotated twice."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"[rotary_apply] {name} must be a torch.Tensor, got {type(t).__name__}")
    if any(n > 1 and st == 0 for n, st in zip(t.shape, t.stride())) or (
            not torch.compiler.is_compiling() and not _functorch_active() and torch._debug_has_internal_overlap(t) == 1):
        raise ValueError(f"[rotary_apply] {name} must not have internally overlapping elements (it is written in "
                         f"place), got strides {list(t.stride())} for shape {list(t.shape)}")


def _qkv_parts(qkv: torch.Tensor, num_heads_q: Optional[int]) -> Callable[[torch.Tensor], Tuple[torch.Tensor, ...]]:
    """Checks a packed [B, S, 3, H, D] qkv, or [B, S, Hq + 2 Hk, D] with num_heads_q = Hq; returns the function
    giving the (q, k, v) views of it or of a tensor of its shape (a copy)."""
    _check_packed(qkv, "qkv")
    shape = list(qkv.shape)
    if qkv.dim() == 5:
        if shape[2] != 3:
            raise ValueError(f"[rotary_apply] qkv of rank 5 must have shape [B, S, 3, H, D], got {shape}")
        return lambda t: (t[:, :, 0], t[:, :, 1], t[:, :, 2])
    if qkv.dim() == 4:
        if num_heads_q is None:
            raise ValueError(f"[rotary_apply] num_heads_q must be given for a qkv of shape [B, S, Hq + 2*Hk, D], "
                             f"got none (shape {shape})")
        if isinstance(num_heads_q, bool) or not isinstance(num_heads_q, (int, np.integer)):
            raise TypeError(f"[rotary_apply] num_heads_q must be an int, got {type(num_heads_q).__name__}")
        hq = int(num_heads_q)
        hk2 = shape[2] - hq
        if hq <= 0 or hk2 <= 0 or hk2 % 2 != 0:
            raise ValueError(f"[rotary_apply] qkv's {shape[2]} heads must be num_heads_q = {hq} plus twice a "
                             f"positive k head count, got {hk2} more (shape {shape})")
        hk = hk2 // 2
        return lambda t: (t[:, :, :hq], t[:, :, hq:hq + hk], t[:, :, hq + hk:])
    raise ValueError(f"[rotary_apply] qkv must have rank 5 [B, S, 3, H, D] or rank 4 [B, S, Hq + 2*Hk, D], "
                     f"got rank {qkv.dim()} (shape {shape})")


def _tracks_grad(*tensors: Optional[torch.Tensor]) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _write_views_compiled(pairs: Tuple[Tuple[torch.Tensor, torch.Tensor], ...]) -> None:
    """Under torch.compile: each (view, rotated) pair written by an aten copy. Inductor (torch <= 2.15 at least,
    pytorch/pytorch#198068) rebuilds a view of a graph input that a custom op mutates at storage offset 0 when the
    offset is symbolic (dynamic shapes), so k's rows, rotated in place, landed on q's; copies it places right."""
    for view, rotated in pairs:
        view.copy_(rotated)


def apply_rotary_emb_qkv_(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cos_k: Optional[torch.Tensor] = None,
                          sin_k: Optional[torch.Tensor] = None, interleaved: bool = False, seqlen_offsets: Any = 0,
                          num_heads_q: Optional[int] = None) -> torch.Tensor:
    """flash-attn's apply_rotary_emb_qkv_: q and k of a packed qkv rotated in place (v untouched).

    qkv: [B, S, 3, H, D], or [B, S, Hq + 2*Hk, D] (GQA/MQA) with num_heads_q = Hq. cos/sin: [max_pos, R/2]
    (R <= D; channels R.. pass through); cos_k/sin_k: k's own tables (default: cos/sin). interleaved and
    seqlen_offsets (an int or [B]) as in apply_rotary_emb. Returns the rotated qkv: qkv itself, or, when a
    gradient is tracked (qkv or a table requires grad, grad mode on), a tensor equal to the written qkv that
    carries the gradient (as apply_rotary_emb with inplace=True). A qkv whose elements overlap (an expanded
    tensor) is refused; an error (k's own tables included) comes before anything is written.
    """
    from rotary.torch import apply_rotary_emb

    parts = _qkv_parts(qkv, num_heads_q)
    q, k, v = parts(qkv)
    own_k = cos_k is not None or sin_k is not None
    cos_k = cos if cos_k is None else cos_k
    sin_k = sin if sin_k is None else sin_k
    if not _tracks_grad(qkv, cos, sin, cos_k, sin_k):
        if torch.compiler.is_compiling():
            kr = apply_rotary_emb(k, cos_k, sin_k, interleaved, False, seqlen_offsets)
            qr = apply_rotary_emb(q, cos, sin, interleaved, False, seqlen_offsets)
            _write_views_compiled(((q, qr), (k, kr)))
            return qkv
        if not own_k:  # k's call reads what q's read (same tables, offsets and tokens): it cannot fail after q's
            apply_rotary_emb(q, cos, sin, interleaved, True, seqlen_offsets)
            apply_rotary_emb(k, cos_k, sin_k, interleaved, True, seqlen_offsets)
            return qkv
        kr = apply_rotary_emb(k, cos_k, sin_k, interleaved, False, seqlen_offsets)  # k's errors before any write
        apply_rotary_emb(q, cos, sin, interleaved, True, seqlen_offsets)
        k.copy_(kr)
        return qkv
    # Recorded out of place, then written into qkv outside autograd; the gradient flows through the result.
    # Tables that need gradients, and torch.func's transforms (whose Function saves its input), read q's and k's
    # values: from a copy, which the write leaves alone.
    if _tracks_grad(cos, sin, cos_k, sin_k) or _functorch_active():
        q, k, v = parts(qkv.clone())
    qr = apply_rotary_emb(q, cos, sin, interleaved, False, seqlen_offsets)
    kr = apply_rotary_emb(k, cos_k, sin_k, interleaved, False, seqlen_offsets)
    y = torch.stack([qr, kr, v], dim=2) if qkv.dim() == 5 else torch.cat([qr, kr, v], dim=2)
    with torch.no_grad():
        qkv.copy_(y)
    return y


def apply_rotary_emb_kv_(kv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False,
                         seqlen_offsets: Any = 0) -> torch.Tensor:
    """flash-attn's apply_rotary_emb_kv_: k of a packed kv [B, S, 2, H, D] rotated in place (v untouched).

    cos/sin, interleaved and seqlen_offsets as in apply_rotary_emb_qkv_. Returns kv itself, or, when a gradient
    is tracked, a tensor equal to the written kv that carries the gradient.
    """
    from rotary.torch import apply_rotary_emb

    _check_packed(kv, "kv")
    if kv.dim() != 5 or kv.shape[2] != 2:
        raise ValueError(f"[rotary_apply] kv must have shape [B, S, 2, H, D], got {list(kv.shape)}")
    if not _tracks_grad(kv, cos, sin):
        if torch.compiler.is_compiling():
            _write_views_compiled(((kv[:, :, 0], apply_rotary_emb(kv[:, :, 0], cos, sin, interleaved, False, seqlen_offsets)),))
        else:
            apply_rotary_emb(kv[:, :, 0], cos, sin, interleaved, True, seqlen_offsets)
        return kv
    src = kv.clone() if _tracks_grad(cos, sin) or _functorch_active() else kv
    kr = apply_rotary_emb(src[:, :, 0], cos, sin, interleaved, False, seqlen_offsets)
    y = torch.stack([kr, src[:, :, 1]], dim=2)
    with torch.no_grad():
        kv.copy_(y)
    return y
