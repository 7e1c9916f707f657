"""rotary.torch's checks around kernel calls: inputs it reads, k against q where two calls rotate them, named errors.

The kernel calls the tensor it rotates q and the offsets positions.*; rotary.torch's functions re-raise its errors
with their own argument names (x, k, flash-attn's seqlen_offsets / cu_seqlens)."""
from __future__ import annotations

from typing import Optional, Tuple

import torch


def readable(t: torch.Tensor) -> torch.Tensor:
    """t as memory the core reads as its value: no negative bit, no broadcast axis. An empty tensor is contiguous to
    torch whatever its strides (.contiguous() returns it as it is, zero strides included): it becomes a fresh one."""
    if t.numel() == 0:
        return torch.empty(t.shape, dtype=t.dtype, device=t.device)
    return t.resolve_neg().contiguous() if t.is_neg() else t.contiguous()


_POSITION_DTYPES = {torch.int32, torch.int64, torch.float32, torch.float64}
_MAX_RANK = 4  # rotary::kMaxRank: the most axes a core TensorView holds


def kernel_positions(p: Optional[torch.Tensor], where: str = "rotary_apply", flat: bool = False
                     ) -> Optional[torch.Tensor]:
    """Positions as the CPU kernel takes them: int32/int64/float32/float64 on the CPU (other integer and float dtypes
    converted); a rank past 4 (with the shape), a bool or complex dtype and a uint64 id past int64 refused in the
    words of `where`. flat: the caller flattens them (any rank)."""
    if p is None:
        return None
    if not flat and p.dim() > _MAX_RANK:
        raise ValueError(f"[{where}] positions must have rank <= {_MAX_RANK}, got rank {p.dim()} "
                         f"(shape {dims(p.shape)})")
    if p.dtype not in _POSITION_DTYPES:
        if p.dtype == getattr(torch, "uint64", None):  # to(int64) would wrap an id past int64 to a negative one
            from ._arrays import _index_array

            return torch.from_numpy(_index_array(p.cpu().contiguous().numpy(), "positions", False, where))
        if p.dtype == torch.bool or p.is_complex():
            raise TypeError(f"[{where}] positions must be an integer or float tensor, got dtype {p.dtype}")
        p = p.to(torch.float64 if p.is_floating_point() else torch.int64)
    if not p.is_cpu:
        p = p.cpu()  # CPU tensors with device positions: the only host copy, and the caller's choice
    return p


def unread_error(status: int) -> RuntimeError:
    """The error of a kernel call that still declines inputs once they were materialised (status: the kernel's copy
    requests, 1 q, 2 k, 4 positions, 8 cos, 16 sin): its outputs are unwritten, so the call must not return them."""
    names = [n for bit, n in ((1, "q"), (2, "k"), (4, "positions"), (8, "cos"), (16, "sin")) if status & bit]
    return RuntimeError(f"[rotary_apply] {', '.join(names)} must be readable by the kernel once materialised, "
                        f"got a tensor it still declines (status {status}); nothing was written")


def threads_error(threads: int) -> ValueError:
    return ValueError(f"[rotary_apply] threads must be >= 0 (0 = torch.get_num_threads()), got {threads}")


def raise_named(e: Exception, names: Tuple[Tuple[str, str], ...], where: str = "rotary_apply") -> None:
    """Raises the kernel's error e with the argument it names renamed (old, new): the kernel calls the tensor it
    rotates q and the offsets positions.*; returns if e names none of them. `where`: the call's prefix (the
    prologue ops' scales are fp8_k_scale / fp8_v_scale / fp8_scale where rotary.prologue's are k_scale / v_scale)."""
    msg = str(e)
    for old, new in names:
        head = f"[{where}] {old}"
        if msg.startswith(head) and msg[len(head):len(head) + 1] in (" ", "["):
            raise type(e)(f"[{where}] {new}{msg[len(head):]}") from None


AS_X = (("q", "x"),)
AS_K = (("x", "k"),)  # apply's errors, which name x
AS_Q = (("x", "q"),)  # apply's errors for q (apply_qk of two dtypes)
FLASH = (("positions.batch_offsets", "seqlen_offsets"), ("positions.seq_offsets", "seqlen_offsets"),
          ("positions.offset", "seqlen_offsets"), ("positions.cu_seqlens", "cu_seqlens"))


def named(names: Tuple[Tuple[str, str], ...], fn, *args, **kwargs):
    """fn(*args, **kwargs), its errors naming the arguments as `names` says (see raise_named)."""
    try:
        return fn(*args, **kwargs)
    except (ValueError, TypeError) as e:
        raise_named(e, names)
        raise


def dims(shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


RANKS = {"bshd": (4, "[B,S,H,D]"), "bhsd": (4, "[B,H,S,D]"), "thd": (3, "[T,H,D]")}


def check_k_like_q(q: torch.Tensor, k: torch.Tensor, layout: str) -> None:
    """The joint kernel's checks of k against q (rank, batch, tokens, head_dim), for q and k of different dtypes."""
    rank, form = RANKS.get(layout, (0, ""))
    if q.dim() != rank:
        return  # q's own call reports it
    if k.dim() != rank:
        raise ValueError(f"[rotary_apply] k must have rank {rank} {form} for layout {layout}, got rank {k.dim()} "
                         f"(shape {dims(k.shape)})")
    axes = ((0, "token count T"),) if layout == "thd" else ((0, "batch size"), (2 if layout == "bhsd" else 1,
                                                                                "sequence length S"))
    for axis, what in axes + ((-1, "head_dim"),):
        if k.shape[axis] != q.shape[axis]:  # the message is built on failure only (torch.compile traces the rest)
            raise ValueError(f"[rotary_apply] k {what} must equal q's {q.shape[axis]}, got {k.shape[axis]} "
                             f"(k shape {dims(k.shape)})")
