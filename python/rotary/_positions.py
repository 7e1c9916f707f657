"""rotary's Python position arguments -> what the core takes: an int offset or an ids array, and the packed /
per-batch schemes of the caller-table calls."""
from __future__ import annotations

from typing import Any, Sequence, Tuple, Union

import numpy as np

from ._arrays import (_INT_KINDS, ArrayLike, _check_rank, _index_array, _is_torch, _offset_arg,
                      _refuse_position_derivative)

PositionsLike = Union[int, Sequence[int], Sequence[float], ArrayLike, None]

def _split_positions(positions: PositionsLike, where: str) -> Tuple[int, Any]:
    """(offset, ids array or None); errors (an id past int64 included) in the words of the entry point `where`."""
    if positions is None:
        return 0, None
    _refuse_position_derivative(positions, where, plain=True)
    if isinstance(positions, (bool, np.bool_)):
        raise TypeError(f"[{where}] positions must be an int or an array, got bool")
    if isinstance(positions, (int, np.integer)):
        return _offset_arg(positions, "positions.offset", where), None
    if isinstance(positions, float):
        raise TypeError(f"[{where}] a scalar position must be an int (the start offset); pass an array for "
                        "fractional positions")
    if _is_torch(positions) and positions.ndim == 0 and not positions.is_floating_point():
        return _offset_arg(positions, "positions.offset", where), None
    if isinstance(positions, np.ndarray) and positions.ndim == 0 and positions.dtype.kind in _INT_KINDS:
        return _offset_arg(positions, "positions.offset", where), None
    ids = _index_array(positions, "positions", allow_float=True, where=where)
    if ids.ndim > 4:  # (with the shape, which the extension's conversion omits; a plain comparison first: decode calls)
        _check_rank(ids, "positions", where)
    return 0, ids


def _offset_arrays(cu_seqlens: Any, seq_offsets: Any, batch_offsets: Any, where: str) -> Tuple[Any, Any, Any]:
    """(cu_seqlens, seq_offsets, batch_offsets) as index arrays (None where not given), named as the core names them
    (positions.cu_seqlens, ...) in the words of `where`."""
    if cu_seqlens is None and seq_offsets is None and batch_offsets is None:  # (most calls: no tuple built)
        return None, None, None
    return tuple(None if a is None else _index_array(a, f"positions.{name}", False, where)
                 for name, a in (("cu_seqlens", cu_seqlens), ("seq_offsets", seq_offsets),
                                 ("batch_offsets", batch_offsets)))  # type: ignore[return-value]


def _table_positions(positions: PositionsLike, cu_seqlens: Any, seq_offsets: Any, batch_offsets: Any,
                     where: str) -> Tuple[int, Any, Any, Any, Any]:
    """(offset, ids, cu_seqlens, seq_offsets, batch_offsets) for a caller-table call. flash-attn's varlen form
    passes one int offset for every packed sequence: it becomes seq_offsets [N] here."""
    offset, ids = _split_positions(positions, where)
    if ids is not None and (cu_seqlens is not None or batch_offsets is not None):
        raise ValueError(f"[{where}] positions ids cannot be combined with cu_seqlens= or batch_offsets= (they are "
                         "other position schemes), got both")
    cu = _index_array(cu_seqlens, "positions.cu_seqlens", False, where) if cu_seqlens is not None else None
    n_seq = max(int(cu.shape[0]) - 1, 0) if cu is not None and cu.ndim == 1 else 0
    so = None
    if seq_offsets is not None:
        if isinstance(seq_offsets, (int, np.integer)) and not isinstance(seq_offsets, (bool, np.bool_)):
            if cu is None:
                raise ValueError(f"[{where}] an int seq_offsets needs cu_seqlens (use positions=offset otherwise)")
            so = np.full(n_seq, int(seq_offsets), dtype=np.int64)
        else:
            so = _index_array(seq_offsets, "positions.seq_offsets", False, where)
    bo = _index_array(batch_offsets, "positions.batch_offsets", False, where) if batch_offsets is not None else None
    if cu is not None and offset != 0:
        if so is not None:
            raise ValueError(f"[{where}] give the packed sequences' start positions either as an int positions or "
                             "as seq_offsets, not both")
        so = np.full(n_seq, offset, dtype=np.int64)
        offset = 0
    return offset, ids, cu, so, bo
