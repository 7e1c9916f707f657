"""rotary.onnx_rotary_embedding: the ONNX RotaryEmbedding operator (opset 23) on numpy arrays and torch CPU tensors."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import _rotary
from ._arrays import (ArrayLike, _as_core_array, _check_torch_cpu, _index_array, _int64_checked, _is_torch, _needs_grad,
                      _threads_arg, _torch_module)

_onnx = _int64_checked(_rotary._onnx, "onnx_rotary_embedding", ())  # attributes beyond int64: named


def onnx_rotary_embedding(
    X: ArrayLike,
    cos_cache: ArrayLike,
    sin_cache: ArrayLike,
    position_ids: Optional[ArrayLike] = None,
    *,
    interleaved: int = 0,
    rotary_embedding_dim: int = 0,
    num_heads: int = 0,
    inverse: bool = False,
    threads: int = 0,
    backend: str = "auto",
) -> ArrayLike:
    """The ONNX RotaryEmbedding operator (ai.onnx opset 23), evaluated by rotary's kernels.

    X: [batch, num_heads, seq, head_size] (4-D) or [batch, seq, num_heads * head_size] (3-D, needs num_heads).
    cos_cache/sin_cache: [max_pos, R/2] with position_ids [batch, seq] (int64), or [batch, seq, R/2] without.
      A wider last dimension is sliced to R/2, as the operator's function body does.
    interleaved: 0 pairs (x[i], x[i + R/2]); 1 pairs (x[2i], x[2i+1]).
    rotary_embedding_dim: R (0 = head_size); channels R..head_size-1 pass through.
    inverse: not an ONNX attribute: rotate by -angle, the operator's gradient with respect to X.
    Returns Y with X's shape, dtype and array type. A position id outside [0, max_pos) raises ValueError.
    A torch X that requires grad or carries a forward-mode tangent gets a Y that carries its derivative (the rotation;
    backward the inverse rotation), also under torch.func transforms (grad, jvp, vmap, jacrev); caches that require
    grad or carry a tangent raise.
    """
    attrs = dict(interleaved=interleaved, rotary_embedding_dim=rotary_embedding_dim, num_heads=num_heads,
                 threads=threads, backend=backend)
    if any(_needs_grad(t) for t in (X, cos_cache, sin_cache, position_ids)):
        from ._onnx_grad import with_gradient

        return with_gradient(lambda x, c, s, ids, inv: onnx_rotary_embedding(x, c, s, ids, inverse=inv, **attrs),
                             X, cos_cache, sin_cache, position_ids, inverse)
    if isinstance(X, np.ndarray):
        out = np.empty(X.shape, dtype=X.dtype.newbyteorder("="))  # a byte-swapped X gets a native Y
    elif _is_torch(X):
        torch = _torch_module()
        if X.numel() == 0:  # an empty tensor has no data address, which the core reads as a missing X: the same
            def host(t: Any) -> Any:  # checks on numpy arrays (a bf16 tensor as float32), then an empty Y
                if not _is_torch(t):
                    return t
                _check_torch_cpu(t, "X", "onnx_rotary_embedding")
                t = t.detach()
                return (t.float() if t.dtype == torch.bfloat16 else t).numpy()

            onnx_rotary_embedding(host(X), host(cos_cache), host(sin_cache), host(position_ids), inverse=inverse,
                                  **attrs)
            return torch.empty(tuple(X.shape), dtype=X.dtype)
        out = torch.empty(tuple(X.shape), dtype=X.dtype)
    else:
        raise TypeError(f"[onnx_rotary_embedding] X must be a numpy array or a torch CPU tensor, "
                        f"got {type(X).__name__}")
    if X.ndim > 4:  # (ranks 1 and 2: the core's message, the same)
        raise ValueError(f"[onnx_rotary_embedding] X must have rank 3 [batch, seq, hidden] (with num_heads) or 4 "
                         f"[batch, num_heads, seq, head_size], got rank {X.ndim}")
    if position_ids is not None and getattr(position_ids, "ndim", 2) > 4:
        raise ValueError(f"[onnx_rotary_embedding] position_ids must be 2-D [batch, seq], got rank {position_ids.ndim}")
    where = "onnx_rotary_embedding"
    xv, bf16 = _as_core_array(X, "X", readonly=True, where=where)
    ov, _ = _as_core_array(out, "Y", where=where)
    cv, cbf16 = _as_core_array(cos_cache, "cos_cache", readonly=True, where=where)
    sv, sbf16 = _as_core_array(sin_cache, "sin_cache", readonly=True, where=where)
    if cbf16 != sbf16:
        raise TypeError("[onnx_rotary_embedding] cos_cache and sin_cache must have the same dtype")
    ids = _index_array(position_ids, "position_ids", False, where) if position_ids is not None else None
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rotary_embedding_dim, "num_heads": num_heads}
    for name, v in attrs.items():  # ONNX attributes are ints: int(8.9) would make 8 of a fractional width
        if not isinstance(v, (int, np.integer)):
            raise TypeError(f"[onnx_rotary_embedding] {name} must be an int (an ONNX int attribute), got "
                            f"{type(v).__name__} {v!r}")
    _onnx(xv, cv, sv, position_ids=ids, y=ov, interleaved=int(interleaved),
          rotary_embedding_dim=int(rotary_embedding_dim), num_heads=int(num_heads), inverse=bool(inverse),
          threads=_threads_arg(threads, where), backend=backend, bf16_bits=bf16, table_bf16_bits=cbf16)
    return out
