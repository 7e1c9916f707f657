"""Plain-torch RoPE by per-token tables for the torch tests: differentiable in x, cos and sin (formulas, not rotary's code)."""
from __future__ import annotations


def rotate_by_tables(x, c, s, pairing):
    """Rotates the leading 2*h channels of x [..., D] by c/s [..., h] (broadcast against them), half-split or
    interleaved pairs; the other channels pass through."""
    import torch
    h = c.shape[-1]
    if pairing == "interleaved":
        a, b = x[..., 0:2 * h:2], x[..., 1:2 * h:2]
        rot = torch.stack((a * c - b * s, b * c + a * s), -1).flatten(-2)
    else:
        a, b = x[..., :h], x[..., h:2 * h]
        rot = torch.cat((a * c - b * s, b * c + a * s), -1)
    return torch.cat((rot, x[..., 2 * h:]), -1)
