"""Autograd, forward AD and vmap of rotary.apply_axes / permute_qk_weight on torch tensors (both are linear in x)."""
from __future__ import annotations

from typing import Any, Optional

import torch

from . import multimodal
from ._arrays import _position_derivative_error, _refuse_position_derivative


def _per_item(function, info, in_dims, args):
    """A vmap rule of one call per item (the kernels take plain tensors): the items' results stacked on axis 0."""
    outs = [function.apply(*(a if d is None else a.select(d, i) for a, d in zip(args, in_dims)))
            for i in range(info.batch_size)]
    if isinstance(outs[0], tuple):
        return tuple(torch.stack(o) for o in zip(*outs)), (0,) * len(outs[0])
    return torch.stack(outs), 0


def _rotate(x, k, positions, freqs, layout, pairing, inverse, threads, backend):
    """apply_axes on tensors needing no gradient (the kernel call; outputs are new tensors)."""
    return multimodal._apply_axes(x.detach(), positions, freqs, None if k is None else k.detach(), layout, pairing,
                                  inverse, None, threads, backend)


class _AxesRotation(torch.autograd.Function):
    """apply_axes(x[, k]): backward (and jvp) is the rotation by the same frequencies and positions, the other way
    for backward (the transpose of a rotation scaled by attention_factor is the inverse rotation, scaled alike)."""

    @staticmethod
    def forward(x, k, positions, freqs, layout, pairing, inverse, threads, backend):
        return _rotate(x, k, positions, freqs, layout, pairing, inverse, threads, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, k, positions = inputs[:3]
        ctx.tensor_positions = isinstance(positions, torch.Tensor)
        if ctx.tensor_positions:
            ctx.save_for_backward(positions)
            ctx.save_for_forward(positions)
        ctx.args = (None if ctx.tensor_positions else positions,) + tuple(inputs[3:])
        ctx.has_k = k is not None

    @staticmethod
    def _args(ctx, flip: bool):
        positions, freqs, layout, pairing, inverse, threads, backend = ctx.args
        if ctx.tensor_positions:
            positions = ctx.saved_tensors[0]
        return positions, freqs, layout, pairing, (not inverse) if flip else inverse, threads, backend

    @staticmethod
    def _turn(ctx, x_g, k_g, flip: bool):
        """The rotation of the incoming gradients (tangents); a missing one stays None."""
        args = _AxesRotation._args(ctx, flip)
        if not ctx.has_k:
            return _AxesRotation.apply(x_g, None, *args) if x_g is not None else None
        if x_g is None and k_g is None:
            return None, None
        if x_g is None or k_g is None:
            one = _AxesRotation.apply(x_g if k_g is None else k_g, None, *args)
            return (one, None) if k_g is None else (None, one)
        return _AxesRotation.apply(x_g, k_g, *args)

    @staticmethod
    def backward(ctx, *grads):
        got = _AxesRotation._turn(ctx, grads[0], grads[1] if ctx.has_k else None, True)
        dx, dk = got if ctx.has_k else (got, None)
        return (dx, dk) + (None,) * 7

    @staticmethod
    def vmap(info, in_dims, *args):
        return _per_item(_AxesRotation, info, in_dims, args)

    @staticmethod
    def jvp(ctx, x_t, k_t, positions_t, *_):
        if positions_t is not None:  # torch.func.jvp with respect to the positions: no derivative, not a silent 0
            raise _position_derivative_error("rotary_apply_axes", "carries a forward-mode tangent")
        return _AxesRotation._turn(ctx, x_t, k_t if ctx.has_k else None, False)


def apply_axes(x: Any, positions: Any, freqs: Any, k: Any, layout: str, pairing: Optional[str], inverse: bool,
               threads: int, backend: str) -> Any:
    """multimodal.apply_axes for torch x (and k) of which one needs a derivative (out=, mixed types refused before)."""
    _refuse_position_derivative(positions, "rotary_apply_axes")
    return _AxesRotation.apply(x, k, positions, freqs, layout, pairing, bool(inverse), threads, backend)


class _Permutation(torch.autograd.Function):
    """permute_qk_weight: a row permutation; backward permutes the gradient back (src and dst swapped)."""

    @staticmethod
    def forward(w, n_heads, head_dim, rotary_dim, src, dst):
        return multimodal._permute_qk_weight(w.detach(), n_heads, head_dim, rotary_dim, src, dst)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.args = tuple(inputs[1:])

    @staticmethod
    def backward(ctx, grad):
        n_heads, head_dim, rotary_dim, src, dst = ctx.args
        return _Permutation.apply(grad.contiguous(), n_heads, head_dim, rotary_dim, dst, src), None, None, None, None, None

    @staticmethod
    def vmap(info, in_dims, *args):
        return _per_item(_Permutation, info, in_dims, args)

    @staticmethod
    def jvp(ctx, w_t, *_):
        return _Permutation.apply(w_t, *ctx.args)


def permute_qk_weight(w: Any, n_heads: int, head_dim: int, rotary_dim: int, src: str, dst: str) -> Any:
    return _Permutation.apply(w, n_heads, head_dim, rotary_dim, src, dst)
