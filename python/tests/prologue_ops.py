"""Test helper shared by the prologue operator tests: torch.ops.rotary.prologue's positional arguments for a small call."""
from __future__ import annotations

import torch


def op_args(q, k, v, kc, vc, key, **over):
    """The op's arguments in schema order: 3 tokens at positions 10..12 into paged nhd slots 5, -1 (skip), 2."""
    a = dict(q=q, k=k, v=v, positions=torch.tensor([10, 11, 12]), spec=key, k_cache=kc, v_cache=vc,
             slot_mapping=torch.tensor([5, -1, 2]), cache_positions=None, cache_layout="nhd", layout="thd",
             q_norm_weight=None, k_norm_weight=None, norm_eps=1e-6, norm_offset=0.0, k_scale=None, v_scale=None,
             fp8_k_scale=1.0, fp8_v_scale=1.0, q_out=None, threads=1)
    a.update(over)
    return list(a.values())
