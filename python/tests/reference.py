"""Independent float64 numpy reference for RoPE used by the Python tests (formulas, not rotary's code)."""
from __future__ import annotations

import numpy as np


def default_inv_freq(base: float, rotary_dim: int) -> np.ndarray:
    """theta_i = base^(-2i/R) in float64."""
    return 1.0 / (float(base) ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim))


def rotate(x: np.ndarray, angles: np.ndarray, *, pairing: str = "half", scale: float = 1.0,
           inverse: bool = False) -> np.ndarray:
    """Rotates the leading 2*h channels of x[..., D] by angles[..., h] (broadcast against x[..., :h]).

    half: pairs (i, i + h); interleaved: pairs (2i, 2i + 1). Channels >= 2h pass through.
    cos and sin are multiplied by `scale` (HF's attention scaling). Computed in float64.
    """
    x = np.asarray(x, dtype=np.float64)
    h = angles.shape[-1]
    sign = -1.0 if inverse else 1.0
    c = np.cos(angles) * scale
    s = np.sin(angles) * scale * sign
    y = x.copy()
    if pairing == "half":
        x1, x2 = x[..., :h], x[..., h:2 * h]
        y[..., :h] = x1 * c - x2 * s
        y[..., h:2 * h] = x2 * c + x1 * s
    elif pairing == "interleaved":
        x1, x2 = x[..., 0:2 * h:2], x[..., 1:2 * h:2]
        y[..., 0:2 * h:2] = x1 * c - x2 * s
        y[..., 1:2 * h:2] = x2 * c + x1 * s
    else:
        raise ValueError(pairing)
    return y


def apply_bshd(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray, *, pairing: str = "half",
               scale: float = 1.0, inverse: bool = False) -> np.ndarray:
    """x [B, S, H, D]; positions [B, S] (or [S]) int or float -> rotated x in float64."""
    pos = np.asarray(positions, dtype=np.float64)
    if pos.ndim == 1:
        pos = np.broadcast_to(pos, x.shape[:2])
    angles = pos[:, :, None, None] * inv_freq[None, None, None, :]  # [B, S, 1, h]
    return rotate(x, angles, pairing=pairing, scale=scale, inverse=inverse)


def mrope_angles(pos3: np.ndarray, inv_freq: np.ndarray, section, interleaved: bool) -> np.ndarray:
    """pos3 [3, B, S] (t, h, w) -> angles [B, S, h] using M-RoPE sections.

    sectioned (Qwen2-VL): frequencies [0, s0) use t, [s0, s0+s1) use h, the rest w.
    interleaved (Qwen3-VL): frequency j uses h if j % 3 == 1 and j < 3*s1, w if j % 3 == 2 and j < 3*s2, else t.
    """
    h = inv_freq.shape[0]
    axis = np.zeros(h, dtype=np.int64)
    if interleaved:
        for j in range(h):
            if j % 3 == 1 and j < 3 * section[1]:
                axis[j] = 1
            elif j % 3 == 2 and j < 3 * section[2]:
                axis[j] = 2
    else:
        axis[section[0]:section[0] + section[1]] = 1
        axis[section[0] + section[1]:] = 2
    pos = np.asarray(pos3, dtype=np.float64)
    chosen = pos[axis]  # [h, B, S]
    return np.moveaxis(chosen, 0, -1) * inv_freq  # [B, S, h]


def onnx_rotary_embedding(x, cos_cache, sin_cache, position_ids=None, interleaved=0, rotary_embedding_dim=0,
                          num_heads=0):
    """ONNX RotaryEmbedding-23 semantics written from the operator description, in float64."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 4:
        xb = np.transpose(x, (0, 2, 1, 3))  # [B, S, N, H]
    else:
        b, s, hidden = x.shape
        xb = x.reshape(b, s, num_heads, hidden // num_heads)
    head = xb.shape[-1]
    r = rotary_embedding_dim or head
    h = r // 2
    cos = np.asarray(cos_cache, dtype=np.float64)
    sin = np.asarray(sin_cache, dtype=np.float64)
    if position_ids is not None:
        cos, sin = cos[position_ids], sin[position_ids]
    cos, sin = cos[..., :h][:, :, None, :], sin[..., :h][:, :, None, :]
    y = xb.copy()
    if interleaved:
        x1, x2 = xb[..., 0:r:2], xb[..., 1:r:2]
        y[..., 0:r:2] = cos * x1 - sin * x2
        y[..., 1:r:2] = sin * x1 + cos * x2
    else:
        x1, x2 = xb[..., :h], xb[..., h:r]
        y[..., :h] = cos * x1 - sin * x2
        y[..., h:r] = sin * x1 + cos * x2
    if x.ndim == 4:
        return np.transpose(y, (0, 2, 1, 3))
    return y.reshape(x.shape)
