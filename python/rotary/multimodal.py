"""Multimodal and cross-framework RoPE variants: multi-axis frequencies (M-RoPE, 2-D vision RoPE, ggml modes),
context-parallel shard positions, and q/k weight permutation between interleaved and half-split layouts.

    import rotary
    f = rotary.vision_frequencies("qwen2vl", head_dim=80)           # 2 axes: (row, col)
    ids = rotary.grid_positions(16, 16)                              # [2, 256]
    q = rotary.apply_axes(q, ids, f, layout="thd")                   # q: [256, heads, 80]

    g = rotary.ggml_frequencies("neox", n_dims=128, freq_base=1e6)   # ggml_rope_ext parameters
    w_hf = rotary.permute_qk_weight(w_meta, n_heads=32, head_dim=128) # Meta (interleaved) -> HF (half-split)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from . import _rotary
from ._arrays import (_AS_X, _derivative_reason, _in_words, _index_array, _input_and_out, _int64_checked, _needs_grad,
                      _refuse_position_derivative, _routes_positions, _same_array_type, _threads_arg)

# The integer helpers of the extension, with ints beyond int64 refused by name (not nanobind's signature dump).
grid_positions = _int64_checked(_rotary.grid_positions, "rotary_grid_positions", ("height", "width"))
cp_positions = _int64_checked(_rotary.cp_positions, "rotary_context_parallel", ("rank", "cp_size", "local_len", "offset"))
cp_positions_packed = _int64_checked(_rotary.cp_positions_packed, "rotary_context_parallel",
                                     ("rank", "cp_size", "cu_seqlens"))
cp_local_cu_seqlens = _int64_checked(_rotary.cp_local_cu_seqlens, "rotary_context_parallel",
                                     ("rank", "cp_size", "cu_seqlens"))

__all__ = [
    "AxisFrequencies",
    "apply_axes",
    "cp_local_cu_seqlens",
    "cp_positions",
    "cp_positions_packed",
    "ggml_frequencies",
    "grid_positions",
    "mrope_frequencies",
    "permute_qk_weight",
    "vision_frequencies",
]


@dataclass(frozen=True)
class AxisFrequencies:
    """Frequencies whose pairs read different position axes.

    Pair j rotates by positions[axis_of_freq[j]] * inv_freq[j]; cos/sin are multiplied by attention_factor.
    Positions for apply_axes have shape [n_axes, B, S] / [n_axes, S] (bshd/bhsd) or [n_axes, T] (thd).
    pairing ("half" or "interleaved") is the convention's pairing, used unless apply_axes(pairing=...) is given.
    signed_positions: positions may be negative, as ggml takes them: a negative position rotates by the inverse of
    its magnitude (llama.cpp's K-shift deltas). ggml_frequencies sets it and the other conventions' functions leave it
    off (their positions must be >= 0); frequencies built by the caller may set it, e.g. for axial coordinates centred
    on zero (rotary-embedding-torch's 'pixel' positions in [-1, 1]).
    """

    inv_freq: np.ndarray
    axis_of_freq: np.ndarray
    n_axes: int
    pairing: str
    attention_factor: float
    signed_positions: bool = False

    @property
    def rotary_dim(self) -> int:
        return 2 * int(self.inv_freq.shape[0])


def _wrap(t: tuple) -> AxisFrequencies:
    inv, axis, n, pairing, af, signed = t
    return AxisFrequencies(inv, axis, int(n), str(pairing), float(af), bool(signed))


def mrope_frequencies(spec: Any, seq_len: Optional[int] = None) -> AxisFrequencies:
    """A Spec's frequencies with its M-RoPE axis map (3 axes t, h, w; 1 axis without sections)."""
    return _wrap(_rotary._mrope_frequencies(spec, seq_len))


def vision_frequencies(convention: str, head_dim: int, base: float = 10000.0, *,
                       pairing: Optional[str] = None) -> AxisFrequencies:
    """2-D vision RoPE (2 axes: row, col). convention:

    "qwen2vl"      HF Qwen2-VL / Qwen2.5-VL ViT: ladder base^(-4k/D) for row, the same for col; half-split.
    "ggml-vision"  ggml GGML_ROPE_TYPE_VISION as llama.cpp's clip uses it: identical to "qwen2vl".
    "pixtral"      HF Pixtral: row uses the even-index frequencies base^(-2i/D), col the odd ones; half-split.
                   mistral's original code pairs interleaved: pass pairing="interleaved".
    """
    return _wrap(_rotary._vision_frequencies(convention, int(head_dim), float(base), pairing))


def ggml_frequencies(mode: str, n_dims: int, *, freq_base: float = 10000.0, freq_scale: float = 1.0,
                     ext_factor: float = 0.0, attn_factor: float = 1.0, beta_fast: float = 32.0,
                     beta_slow: float = 1.0, n_ctx_orig: int = 0, sections: Sequence[int] = (),
                     freq_factors: Optional[Sequence[float]] = None) -> AxisFrequencies:
    """ggml_rope_ext / ggml_rope_multi parameters as AxisFrequencies.

    mode: "normal" (0), "neox" (2), "mrope" (8), "vision" (24), "imrope" (40) (names or numbers as strings).
    Multi-rope modes take 4 position rows (t, h, w, e) exactly as ggml; VISION needs n_dims = head_dim / 2 (ggml
    asserts it; rotary, given a wider head, rotates the first 2 * n_dims channels and passes the rest through).
    sections: as ggml, sum <= the head size (VISION: 2 * n_dims; MROPE/IMROPE: up to 65536, for partial rotation);
    VISION sections on which ggml's CPU and GPU kernels disagree are refused (docs/multimodal.md).
    rotary forms the angle in double: ggml's float32 results to rounding for positions < 2^16, exact beyond.
    Positions may be negative, as in ggml (llama.cpp's K-shift rotates the cache by a negative delta): the angle
    is pos * theta, i.e. the inverse rotation by |pos|.
    """
    ff = [] if freq_factors is None else [float(v) for v in freq_factors]
    return _wrap(_rotary._ggml_frequencies(str(mode), int(n_dims), n_ctx_orig=int(n_ctx_orig),
                                           freq_base=float(freq_base), freq_scale=float(freq_scale),
                                           ext_factor=float(ext_factor),
                                           attn_factor=float(attn_factor), beta_fast=float(beta_fast),
                                           beta_slow=float(beta_slow), sections=[int(s) for s in sections],
                                           freq_factors=ff))


def apply_axes(x: Any, positions: Any, freqs: AxisFrequencies, *, k: Any = None, layout: str = "bshd",
               pairing: Optional[str] = None, inverse: bool = False, out: Any = None, threads: int = 0,
               backend: str = "auto") -> Any:
    """Rotates x (and k, returned as a tuple) with multi-axis frequencies, cos/sin computed exactly on the fly.

    positions: [n_axes, B, S] / [n_axes, S] (bshd, bhsd) or [n_axes, T] (thd), int or float; >= 0 unless
    freqs.signed_positions (ggml_frequencies, or set by the caller), then any sign with |position| < 2^31.
    For n_axes == 1 the plain shapes [B, S] / [S] / [T] are accepted. k must be the same array type as x.
    torch tensors requiring grad (grad mode on) are differentiable, in forward mode and under torch.func transforms too
    (vmap: one call per item): backward is the inverse rotation by the same frequencies and positions (out= is refused
    for them; positions that require grad or carry a tangent are refused: rotary gives no derivative for them).
    """
    if not isinstance(freqs, AxisFrequencies):
        raise TypeError(f"[rotary_apply_axes] freqs must be a rotary.AxisFrequencies, got {type(freqs).__name__}")
    if k is not None and not _same_array_type(x, k):
        raise TypeError(f"[rotary_apply_axes] x and k must be the same array type, got {type(x).__name__} and "
                        f"{type(k).__name__}")
    if _needs_grad(x) or _needs_grad(k) or _routes_positions(x, positions, "rotary_apply_axes"):
        if out is not None:
            why = _derivative_reason([("x", x), ("k", k), ("positions", positions)])
            raise ValueError(f"[rotary_apply_axes] out must be None when {why}; use the returned tensor, got an out "
                             f"({type(out).__name__})")
        from . import _torch_axes

        return _torch_axes.apply_axes(x, positions, freqs, k, layout, pairing, inverse, threads, backend)
    return _apply_axes(x, positions, freqs, k, layout, pairing, inverse, out, threads, backend)


def _apply_axes(x: Any, positions: Any, freqs: AxisFrequencies, k: Any, layout: str, pairing: Optional[str],
                inverse: bool, out: Any, threads: int, backend: str) -> Any:
    """apply_axes on arrays (the kernel call)."""
    xv, bf16, out, ov = _input_and_out(x, out, where="rotary_apply_axes")
    kv = kov = k_out = None
    if k is not None:
        kv, _, k_out, kov = _input_and_out(k, None, "k", "k_out", where="rotary_apply_axes")
    _refuse_position_derivative(positions, "rotary_apply_axes", plain=True)
    ids = _index_array(positions, "positions", allow_float=True, where="rotary_apply_axes")
    try:
        _rotary._apply_axes(inv_freq=[float(v) for v in freqs.inv_freq],
                            axis_of_freq=[int(a) for a in freqs.axis_of_freq], n_axes=freqs.n_axes,
                            default_pairing=freqs.pairing, attention_factor=freqs.attention_factor,
                            signed_positions=bool(freqs.signed_positions),
                            q=xv, q_out=ov, k=kv, k_out=kov, ids=ids, layout=layout, pairing=pairing,
                            inverse=bool(inverse), threads=_threads_arg(threads), backend=backend, bf16_bits=bf16)
    except (ValueError, TypeError) as e:  # the core checks as rotary::apply does: "[rotary_apply] q ..."
        if (named := _in_words(e, "rotary_apply", names=_AS_X, to_where="rotary_apply_axes")) is e:
            raise
        raise named from None
    return out if k is None else (out, k_out)


def permute_qk_weight(w: Any, n_heads: int, head_dim: int, *, rotary_dim: int = 0, src: str = "interleaved",
                      dst: str = "half") -> Any:
    """Permutes the rows of a q/k projection weight [n_heads*head_dim, in] or bias [n_heads*head_dim].

    src/dst: "interleaved" (Meta) or "half" (HF). interleaved -> half is HF's convert_llama_weights_to_hf
    permute; half -> interleaved its inverse (llama.cpp's). Only the first rotary_dim rows of each head move
    (0 = head_dim). For GQA pass k's own head count. Returns a new array of the same type and dtype (a torch
    tensor requiring grad, e.g. an nn.Parameter, gives one requiring grad: backward permutes the gradient back;
    torch.func transforms work, vmap one call per item).
    """
    if _needs_grad(w):
        from . import _torch_axes

        return _torch_axes.permute_qk_weight(w, int(n_heads), int(head_dim), int(rotary_dim), src, dst)
    return _permute_qk_weight(w, n_heads, head_dim, rotary_dim, src, dst)


def _permute_qk_weight(w: Any, n_heads: int, head_dim: int, rotary_dim: int, src: str, dst: str) -> Any:
    """permute_qk_weight on arrays (the kernel call)."""
    wv, bf16, out, ov = _input_and_out(w, None, "w", where="rotary_permute_qk")
    _rotary._permute_qk(wv, ov, n_heads=int(n_heads), head_dim=int(head_dim), rotary_dim=int(rotary_dim), src=src,
                        dst=dst, bf16_bits=bf16)
    return out
