"""flash-attn's reference rotation transcribed for float64 torch, and the tables and offsets the flash-attn drop-in tests
(test_caller_tables.py, test_flash_packed.py) feed it; imported after those modules' importorskip of torch."""
from __future__ import annotations

import numpy as np
import torch

# f32 outputs vs the float64 reference: one f32 rounding of |y| <= ~4, plus the f32 cos/sin values (exact inputs).
F32_ABS_TOL = 4e-6
# float64 end to end (cos/sin held in f32 by the kernel's caller path: the reference uses the same f32 values).
F64_ABS_TOL = 1e-12


# ---- flash-attn's reference (flash_attn/layers/rotary.py, tests/test_rotary.py), transcribed for float64 torch
def rotate_half(x, interleaved):
    if not interleaved:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def fa_apply_rotary_emb_torch(x, cos, sin, interleaved=False):
    """x: (B, S, H, D); cos/sin: (S, R/2) or (B, S, R/2)."""
    ro_dim = cos.shape[-1] * 2
    if interleaved:
        cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
    else:
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    return torch.cat([x[..., :ro_dim] * cos + rotate_half(x[..., :ro_dim], interleaved) * sin, x[..., ro_dim:]],
                     dim=-1)


def fa_index_cos_sin(cos, sin, seqlen_offsets, seqlen):
    if isinstance(seqlen_offsets, torch.Tensor):
        idx = seqlen_offsets[:, None] + torch.arange(seqlen)[None]
        return cos[idx], sin[idx]
    return cos[seqlen_offsets:seqlen_offsets + seqlen], sin[seqlen_offsets:seqlen_offsets + seqlen]


def cos_sin_tables(rows, rotary_dim, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    angle = torch.rand(rows, rotary_dim // 2, generator=g, dtype=torch.float64) * 2 * np.pi
    return torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)


def seqlen_offsets(kind, B, S):
    if kind == "zero":
        return 0
    if kind == "int":
        return 7
    return torch.tensor([0, S, 3][:B], dtype=torch.int32)
