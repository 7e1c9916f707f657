"""Device kernels of rotary's torch operators: rotary's CUDA backend when built in, else a torch composite.

The composite never reads a device tensor on the host (so a call can be captured in a CUDA graph):
  * Spec operators gather rows of a per-(spec, frequency set, device) table of rotary's exact f32 cos/sin, computed
    on the host (rotary.cos_sin) once per growth and copied to the device. The table covers
    max(spec.max_position_embeddings or 8192, every offset position the host has seen: offset + tokens), capped at
    512 MiB of rows (the C++ auto mode's kAutoTableBytes). A position at or past its end gets a row computed on the
    device from the table's float64 frequencies, as the CPU kernel computes one (angle, cos/sin and attention factor
    in float64, rounded once to f32: within 1 ulp of rotary.cos_sin); for device positions both rows are computed
    and torch.where picks, so no position is read on the host. A position outside [0, 2^31), which the CPU kernel
    refuses, fails a device-side assertion (torch._assert_async).
  * LongRoPE picks its short or long rows on the device from max(position) + 1 (two tables, torch.where).
    Dynamic NTK without seq_len is the one exception: its frequencies depend on max(position) + 1 continuously,
    which is read on the host (a synchronisation, as transformers' own dynamic RoPE does); pass seq_len to avoid it.
    Lengths whose frequencies equal the spec's own share its table; the others (past max_position_embeddings) have
    none: every row is computed on the device.
  * Caller cos/sin operators gather rows of the caller's tables by the device positions.
  * In-place operators write with copy_ (which bumps the version counters); inference tensors outside inference
    mode are refused first, as torch refuses them.
  * The rotation is computed in float32 (float64 for float64 tensors) and rounded once to the tensor's dtype.
  * Outputs have the fake kernels' strides: torch.empty_like(x)'s for rotations (a permuted x keeps its memory
    order), contiguous rows for cos_sin.
Tests run it on CPU tensors with `forced()`.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Dict, Optional, Tuple

import numpy as np
import torch

from . import _rotary as _native
from ._arrays import _inference_write_error

FORCED = [False]  # CPU kernels take the composite while True (tests)
_TABLES: Dict[tuple, tuple] = {}  # (key, device, frequency set) -> _table's entry
_FREQS: Dict[tuple, tuple] = {}  # the same for frequency sets without a table (dynamic NTK past its length)
_TABLE_BYTES = 512 << 20  # a table's cos and sin rows hold at most this (the C++ auto mode's kAutoTableBytes)
_AXES: Dict[tuple, torch.Tensor] = {}
_DEFAULT_ROWS = 8192
_MAX_POSITION = (1 << 31) - 1  # the CPU kernel's largest position
# The device assertion of positions past it, per entry point (constants: nothing is formatted per call).
_OUTSIDE_POSITIONS = {where: f"[{where}] a position is outside [0, 2^31) (positions must be >= 0 and < 2^31)"
                      for where in ("rotary_apply", "rotary_cos_sin")}


@contextlib.contextmanager
def forced():
    """CPU tensors take the composite path inside this block (how the device path is tested without a GPU)."""
    old = FORCED[0]
    FORCED[0] = True
    try:
        yield
    finally:
        FORCED[0] = old


_CUDA: list = []


def cuda_backend_available() -> bool:
    """True when the extension was built with rotary's CUDA backend and sees a device (asked once)."""
    if not _CUDA:
        _CUDA.append(bool(_native._cuda_available()))
    return _CUDA[0]


# ------------------------------------------------------------------------------------------- tables


def check_writable(x: torch.Tensor, k: Optional[torch.Tensor] = None, name: str = "x") -> None:
    """In-place kernels, before writing: torch refuses in-place updates to inference tensors outside inference mode
    (the dispatcher does not check custom operators), and so do they."""
    if (x.is_inference() or (k is not None and k.is_inference())) and not torch.is_inference_mode_enabled():
        n = name if x.is_inference() else "k"
        raise _inference_write_error("rotary_apply", n)


def _spec_from_key(key: str, where: str):
    from ._torch_ops import spec_of_key

    return spec_of_key(key, where)


def _table(spec, key: str, device: torch.device, need: int, seq_len: Optional[int]) -> tuple:
    """(rows, cos, sin, inv_freq, attention_factor) on `device` for the frequencies at `seq_len` (None: the spec's
    own): f32 [rows, R/2] rows for positions [0, rows), and the frequencies (float64 [R/2] and a float64 scalar).
    One table per distinct frequency set (lengths with equal frequencies share it), of at most _TABLE_BYTES; rows = 0
    (no table: every row computed) for dynamic NTK lengths whose frequencies differ from the spec's own."""
    inv, attn = spec.frequencies(seq_len)
    inv = np.asarray(inv, dtype=np.float64)
    tk = (key, str(device), inv.tobytes(), float(attn))
    hit = _TABLES.get(tk)
    cap = max(1, _TABLE_BYTES // (8 * inv.size)) if inv.size else _DEFAULT_ROWS
    need = need if need <= cap else 0  # positions past the cap are computed: the table does not grow for them
    if hit is not None and hit[0] >= need:
        return hit
    if hit is None and spec.length_dependent and spec.rope_type != "longrope":
        base_inv, base_attn = spec.frequencies(None)
        if float(base_attn) != float(attn) or not np.array_equal(np.asarray(base_inv, dtype=np.float64), inv):
            return _freqs(tk, device, inv, attn)  # a continuum of lengths: a table each would grow without bound
    rows = min(max(need, spec.max_position_embeddings or _DEFAULT_ROWS, 2 * hit[0] if hit is not None else 0), cap)
    c, s = _native._cos_sin(spec, np.arange(rows, dtype=np.int64), seq_len)
    entry = (rows, torch.from_numpy(c).to(device), torch.from_numpy(s).to(device),
             torch.from_numpy(inv).to(device), torch.tensor(float(attn), dtype=torch.float64).to(device))
    _TABLES[tk] = entry
    return entry


def _freqs(tk: tuple, device: torch.device, inv: np.ndarray, attn: float) -> tuple:
    """A table with no rows (every row computed on the device) for frequencies `inv`, `attn`; the last few are kept."""
    hit = _FREQS.get(tk)
    if hit is None:
        if len(_FREQS) >= 64:
            _FREQS.pop(next(iter(_FREQS)))
        hit = (0, None, None, torch.from_numpy(inv).to(device), torch.tensor(float(attn), dtype=torch.float64).to(device))
        _FREQS[tk] = hit
    return hit


def _gather(table: tuple, ids: torch.Tensor, checked: bool, what: str = "the cos/sin rows"):
    """Rows of `table` (rows, cos, sin, ...) by ids: a caller's table (checked on the device: rotary_apply's
    caller-table operators), or a spec's table for offset positions (the host knows they are inside)."""
    rows, c, s = table[:3]
    if checked:
        inside = ((ids >= 0) & (ids < rows)).all()
        torch._assert_async(inside, f"[rotary_apply] a position is outside {what} [0, {rows})")
        ids = ids.clamp(0, rows - 1)
    return c[ids], s[ids]


def _computed(ids: torch.Tensor, inv: torch.Tensor, attn: torch.Tensor):
    """Rows computed on the device as the CPU kernel computes a row: angle = position * inv_freq, cos/sin and the
    attention factor in float64, rounded once to f32 (within 1 ulp of rotary.cos_sin: libm vs torch's cos/sin)."""
    angle = ids.to(torch.float64).unsqueeze(-1) * inv
    return (torch.cos(angle) * attn).to(torch.float32), (torch.sin(angle) * attn).to(torch.float32)


def _device_rows(tables: list, ids: torch.Tensor, where: str, use: Optional[torch.Tensor] = None):
    """Rows for device ids: table rows for ids inside a table, rows computed on the device past it (no host read).
    tables: one table, or LongRoPE's (short, long) with `use` (a device bool: the long ones). The device assertion
    names the entry point `where`."""
    torch._assert_async(((ids >= 0) & (ids <= _MAX_POSITION)).all(),
                        _OUTSIDE_POSITIONS[where])
    rows, c, s, inv, attn = tables[0]
    if rows == 0:  # no table (dynamic NTK: LongRoPE always has both)
        return _computed(ids, inv, attn)
    i = ids.clamp(0, rows - 1)
    c, s, inside = c[i], s[i], ids < rows
    if use is not None:
        rows, lc, ls, linv, lattn = tables[1]
        i = ids.clamp(0, rows - 1)
        c, s, inside = torch.where(use, lc[i], c), torch.where(use, ls[i], s), torch.where(use, ids < rows, inside)
        inv, attn = torch.where(use, linv, inv), torch.where(use, lattn, attn)
    fc, fs = _computed(ids, inv, attn)
    inside = inside.unsqueeze(-1)
    return torch.where(inside, c, fc), torch.where(inside, s, fs)


def offset_with_ids_error(offset: int) -> ValueError:
    """The operators' error for an offset given with position ids (it was ignored)."""
    return ValueError(f"[rotary_apply] offset must be 0 when positions are given (the ids are the positions: add "
                      f"the offset to them), got {offset}")


def _token_ids(positions: Optional[torch.Tensor], offset: int, n_tok: int, device, where: str) -> torch.Tensor:
    if positions is None:
        if offset < 0:  # known on the host: the CPU kernel's error (indexing would wrap to the table's end)
            raise ValueError(f"[rotary_apply] positions.offset must be >= 0, got {offset}")
        return torch.arange(offset, offset + n_tok, device=device)
    if offset:
        raise offset_with_ids_error(offset)
    if positions.is_floating_point():
        raise NotImplementedError(f"[{where}] fractional positions on device tensors are not supported "
                                  "(rotary's CPU kernels compute them)")
    return positions.to(device=device, dtype=torch.long)


def _spec_rows(spec, key: str, ids: torch.Tensor, host_end: Optional[int], seq_len: Optional[int], where: str):
    """f32 rows for integer ids of any shape: ids.shape + (R/2,). host_end: the ids' end (offset + tokens) when the
    host knows it (offset positions: the table's exact rows cover them), else None (device ids: _device_rows, whose
    assertion names the entry point `where`)."""
    from_offset = host_end is not None
    need = host_end or 0
    if seq_len is None and spec.rope_type == "longrope" and not from_offset:
        orig = spec.original_max_position_embeddings or spec.max_position_embeddings
        tables = [_table(spec, key, ids.device, need, orig), _table(spec, key, ids.device, need, orig + 1)]
        use_long = ids.max() + 1 > orig if ids.numel() else torch.zeros((), dtype=torch.bool, device=ids.device)
        return _device_rows(tables, ids, where, use_long)
    if seq_len is None and spec.length_dependent:
        # dynamic (and longrope with host-known positions): the length is max(position) + 1
        seq_len = host_end if from_offset else (int(ids.max()) + 1 if ids.numel() else 1)
    table = _table(spec, key, ids.device, need, seq_len)
    if from_offset and host_end <= table[0]:  # the host knows every offset position is inside: exact rows
        return _gather(table, ids, False)
    return _device_rows([table], ids, where)


def _shape(dims) -> str:
    return "[" + ",".join(str(int(d)) for d in dims) + "]"


def _mrope_text_only(ids: torch.Tensor, layout: str, b: int, n: int) -> bool:
    """M-RoPE ids by the CPU kernel's rules: [3, B or 1, S] / [3, S] / [3, T] (a row per axis: False) or text-only
    [B or 1, S] / [S] / [T] / [1, T] (the same position on every axis: True); other shapes raise its errors."""
    shape = list(ids.shape)
    if ids.dim() > 3 or ids.dim() == 0:
        raise ValueError(f"[rotary_apply] positions.ids must have rank 1, 2 or 3, got rank {ids.dim()}")
    if layout == "thd":
        if shape in ([3, n], [3, 1, n], [n], [1, n]):
            return len(shape) == 1 or shape[0] == 1
        raise ValueError(f"[rotary_apply] positions.ids must have shape [3,T] = [3,{n}] (t, h, w position per token "
                         f"for an M-RoPE spec), or [T] = [{n}] for text-only positions (the same on every axis), "
                         f"got {_shape(shape)}")
    if shape == [3, n] and b == 3:
        raise ValueError(f"[rotary_apply] positions.ids shape [3,{n}] is ambiguous with batch size 3 and 3 position "
                         "axes: [3,S] (one row per axis, broadcast over batch) or [B,S] (text-only, the same position "
                         f"on every axis); pass ids of shape [3,B,S] = [3,3,{n}]")
    if shape in ([3, b, n], [3, 1, n], [3, n]):
        return False
    if shape in ([b, n], [1, n], [n]):
        return True
    raise ValueError(f"[rotary_apply] positions.ids must have shape [3,B,S] = [3,{b},{n}] or [3,S] = [3,{n}] (t, h, w "
                     f"position per token for an M-RoPE spec), or [B,S] = [{b},{n}] or [S] = [{n}] for text-only "
                     f"positions (the same on every axis), got {_shape(shape)}")


def _mrope_rows(spec, key: str, ids: torch.Tensor, seq_len: Optional[int], where: str):
    """M-RoPE: ids [3, ...] -> rows ids.shape[1:] + (R/2,), frequency j from axis axis_of_freq[j]."""
    from ._torch_ops import mrope_parts

    base_key, axis = mrope_parts(spec)
    c, s = _spec_rows(_spec_from_key(base_key, where), base_key, ids, None, seq_len, where)  # [3, ..., h]
    dev_key = (key, str(ids.device))  # the spec's own key: its sections and interleaving decide the axes
    if dev_key not in _AXES:  # copied once per device (a copy would break CUDA-graph capture)
        _AXES[dev_key] = axis.to(ids.device)
    idx = _AXES[dev_key].expand(c.shape[1:]).unsqueeze(0)
    return c.gather(0, idx).squeeze(0), s.gather(0, idx).squeeze(0)


# ------------------------------------------------------------------------------------------- rotation


def _grid(x: torch.Tensor, layout: str) -> Tuple[int, int]:
    if layout == "thd":
        return 1, x.shape[0]
    return (x.shape[0], x.shape[1]) if layout == "bshd" else (x.shape[0], x.shape[2])


def _to_layout(c: torch.Tensor, layout: str) -> torch.Tensor:
    """Rows [B, S, h], [S, h] (or [T, h] for thd) -> broadcastable against x[..., :R] in `layout`."""
    if layout == "thd":
        return c.reshape(-1, c.shape[-1]).unsqueeze(-2) if c.dim() == 3 else c.unsqueeze(-2)
    if layout == "bshd":
        return c.unsqueeze(-2)
    return c.unsqueeze(-3)


def rotate(x: torch.Tensor, c: torch.Tensor, s: torch.Tensor, pairing: str, inverse: bool) -> torch.Tensor:
    """x[..., :2h] rotated by cos/sin (broadcastable [..., h]); channels 2h.. pass through. One rounding."""
    half = c.shape[-1]
    rot = 2 * half
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    xr = x[..., :rot].to(ct)
    c, s = c.to(ct), s.to(ct)
    if pairing == "interleaved":
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
    else:
        x1, x2 = xr[..., :half], xr[..., half:]
    if inverse:
        s = -s
    y1 = x1 * c - x2 * s
    y2 = x2 * c + x1 * s
    y = torch.stack((y1, y2), dim=-1).flatten(-2) if pairing == "interleaved" else torch.cat((y1, y2), dim=-1)
    # The result has torch.empty_like(x)'s strides, as the fake kernels and the CPU kernels (a permuted x, e.g.
    # transformers' q.view(...).transpose(1, 2), keeps its memory order: torch.compile relies on the fake's strides),
    # written by one copy that also rounds to x's dtype.
    out = torch.empty_like(x)
    if rot == x.shape[-1]:
        return y if y.dtype == x.dtype and y.stride() == out.stride() else out.copy_(y)
    out[..., :rot].copy_(y)
    out[..., rot:].copy_(x[..., rot:])
    return out


def _rows_for_spec(x, positions, offset, key, layout, seq_len):
    where = "rotary_apply"
    spec = _spec_from_key(key, where)
    b, n = _grid(x, layout)
    ids = _token_ids(positions, offset, n, x.device, where)
    if spec.mrope_section and (positions is None or _mrope_text_only(ids, layout, b, n)):
        # text-only: the same position on every axis, i.e. the rows of the spec without its sections
        from ._torch_ops import mrope_parts

        base_key = mrope_parts(spec)[0]
        c, s = _spec_rows(_spec_from_key(base_key, where), base_key, ids, offset + n if positions is None else None,
                          seq_len, where)
    elif spec.mrope_section:
        c, s = _mrope_rows(spec, key, ids, seq_len, where)
    else:
        c, s = _spec_rows(spec, key, ids, offset + n if positions is None else None, seq_len, where)
    return spec, c, s


def _rows_for_tables(x, cos, sin, positions, offset, layout):
    if cos.dim() == 3:
        return cos.to(x.device), sin.to(x.device)
    b, n = _grid(x, layout)
    ids = _token_ids(positions, offset, n, x.device, "rotary_apply")
    rows = cos.shape[0]
    if positions is None:
        if offset + n > rows:
            raise ValueError(f"[rotary_apply] position {offset + n - 1} is out of range for cos/sin with {rows} rows "
                             f"(shape {list(cos.shape)}); positions must be < max_pos")
        return cos.to(x.device)[ids], sin.to(x.device)[ids]
    # device ids: checked on the device (a negative id would wrap to the table's end)
    return _gather((rows, cos.to(x.device), sin.to(x.device)), ids, True)


def _spec_rotation(x, positions, offset, key, layout, pairing, inverse, seq_len):
    spec, c, s = _rows_for_spec(x, positions, offset, key, layout, seq_len)
    return rotate(x, _to_layout(c, layout), _to_layout(s, layout), pairing or spec.pairing, inverse)


def _table_rotation(x, cos, sin, positions, offset, layout, pairing, inverse):
    c, s = _rows_for_tables(x, cos, sin, positions, offset, layout)
    return rotate(x, _to_layout(c, layout), _to_layout(s, layout), pairing, inverse)


def dual_table_rotation(x, cos, sin, positions, offset, layout, pairing, inverse):
    """The caller-tables rotation as plain torch ops on dual tensors that also require grad (forward-over-reverse):
    differentiable in both modes to any order. rotate()'s copy into empty_like(x) would give a bf16/f16 x an f32
    tangent (copy_ into a tensor without one takes the source's tangent as it is), so the result is rounded with
    .to(x.dtype), which rounds the tangent too; the caller replaces the primal values by the operator's own."""
    c, s = _rows_for_tables(x, cos, sin, positions, offset, layout)
    c, s = _to_layout(c, layout), _to_layout(s, layout)
    half = c.shape[-1]
    rot = 2 * half
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    xr = x[..., :rot].to(ct)
    c, s = c.to(ct), s.to(ct)
    x1, x2 = (xr[..., 0::2], xr[..., 1::2]) if pairing == "interleaved" else (xr[..., :half], xr[..., half:])
    if inverse:
        s = -s
    y1 = x1 * c - x2 * s
    y2 = x2 * c + x1 * s
    y = torch.stack((y1, y2), dim=-1).flatten(-2) if pairing == "interleaved" else torch.cat((y1, y2), dim=-1)
    y = y.to(x.dtype)
    return y if rot == x.shape[-1] else torch.cat((y, x[..., rot:]), dim=-1)


# The composite implementation of every operator (same signatures as the operators).
def _apply(x, positions, offset, spec, layout="bshd", pairing="", inverse=False, seq_len=None, threads=0):
    return _spec_rotation(x, positions, offset, spec, layout, pairing, inverse, seq_len)


def _apply_(x, positions, offset, spec, layout="bshd", pairing="", inverse=False, seq_len=None, threads=0):
    check_writable(x)
    x.copy_(_spec_rotation(x, positions, offset, spec, layout, pairing, inverse, seq_len))


def _apply_qk(q, k, positions, offset, spec, layout="bshd", pairing="", inverse=False, seq_len=None, threads=0):
    return (_spec_rotation(q, positions, offset, spec, layout, pairing, inverse, seq_len),
            _spec_rotation(k, positions, offset, spec, layout, pairing, inverse, seq_len))


def _apply_qk_(q, k, positions, offset, spec, layout="bshd", pairing="", inverse=False, seq_len=None, threads=0):
    check_writable(q, k, "q")
    qr = _spec_rotation(q, positions, offset, spec, layout, pairing, inverse, seq_len)
    kr = _spec_rotation(k, positions, offset, spec, layout, pairing, inverse, seq_len)
    q.copy_(qr)
    k.copy_(kr)


def _apply_cos_sin(x, cos, sin, positions=None, offset=0, layout="bshd", pairing="half", inverse=False, threads=0):
    return _table_rotation(x, cos, sin, positions, offset, layout, pairing, inverse)


def _apply_cos_sin_(x, cos, sin, positions=None, offset=0, layout="bshd", pairing="half", inverse=False, threads=0):
    check_writable(x)
    x.copy_(_table_rotation(x, cos, sin, positions, offset, layout, pairing, inverse))


def _apply_qk_cos_sin(q, k, cos, sin, positions=None, offset=0, layout="bshd", pairing="half", inverse=False, threads=0):
    return (_table_rotation(q, cos, sin, positions, offset, layout, pairing, inverse),
            _table_rotation(k, cos, sin, positions, offset, layout, pairing, inverse))


def _apply_qk_cos_sin_(q, k, cos, sin, positions=None, offset=0, layout="bshd", pairing="half", inverse=False, threads=0):
    check_writable(q, k, "q")
    qr = _table_rotation(q, cos, sin, positions, offset, layout, pairing, inverse)
    kr = _table_rotation(k, cos, sin, positions, offset, layout, pairing, inverse)
    q.copy_(qr)
    k.copy_(kr)


def _cos_sin(positions, spec, seq_len=None):
    where = "rotary_cos_sin"
    s = _spec_from_key(spec, where)
    ids = _token_ids(positions, 0, 0, positions.device, where)
    if s.mrope_section:
        if ids.dim() < 1 or ids.shape[0] != 3:  # the CPU kernel's error (text-only ids are not taken here)
            raise ValueError(f"[rotary_cos_sin] M-RoPE positions must be [3, ...] (t, h, w), got shape {tuple(ids.shape)}")
        c, sn = _mrope_rows(s, spec, ids, seq_len, where)
    else:
        c, sn = _spec_rows(s, spec, ids, None, seq_len, where)
    return c.contiguous(), sn.contiguous()  # contiguous rows, as the CPU kernel and the fake kernel return


COMPOSITE: Dict[str, Callable] = {
    "apply": _apply, "apply_": _apply_, "apply_qk": _apply_qk, "apply_qk_": _apply_qk_,
    "apply_cos_sin": _apply_cos_sin, "apply_cos_sin_": _apply_cos_sin_, "apply_qk_cos_sin": _apply_qk_cos_sin,
    "apply_qk_cos_sin_": _apply_qk_cos_sin_, "cos_sin": _cos_sin,
}


def cuda_kernel(name: str, cuda_backend_kernel: Optional[Callable]) -> Callable:
    """The CUDA kernel of operator `name`: rotary's CUDA backend if the extension has it, else the composite."""
    composite = COMPOSITE[name]
    if cuda_backend_kernel is None:
        return composite

    def kernel(*args):
        if cuda_backend_available():
            return cuda_backend_kernel(*args)
        return composite(*args)

    return kernel
