"""Peer benchmark of the attention prologue: rotary.prologue vs the torch eager composition users run today.

Workload (Qwen3-8B shapes): q [T, 32, 128], k/v [T, 8, 128], q/k RMSNorm, RoPE (theta 1e6), k/v written
into a Hugging Face StaticCache-shaped [1, 8, S_max, 128] cache at the sequence's position; prefill
T = 4096 at 0, decode T = 1 at 12345; f32 and bf16. The torch composition is transformers' own code:
Qwen3RMSNorm for q_norm/k_norm, apply_rotary_pos_emb, and StaticLayer.update's index_copy_ into the cache.
rotary runs the same work as one rotary.prologue call on the same torch tensors.
"""
from __future__ import annotations

import json
import statistics
from typing import Callable, Dict, List, Optional

import numpy as np

import rotary

HQ, HKV, D, BASE, S_MAX = 32, 8, 128, 1000000.0, 12800
PHASES = {"prefill": (4096, 0), "decode": (1, 12345)}
ROUNDS = 3  # alternated rounds of each implementation per configuration


class Unavailable(Exception):
    pass


class Inputs:
    def __init__(self, phase: str, dtype: str):
        import torch

        self.tokens, self.offset = PHASES[phase]
        dt = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
        g = torch.Generator().manual_seed(0)
        T = self.tokens
        self.q = torch.randn((1, T, HQ, D), generator=g).to(dt)     # [B, S, H, D] as the projections give
        self.k = torch.randn((1, T, HKV, D), generator=g).to(dt)
        self.v = torch.randn((1, T, HKV, D), generator=g).to(dt)
        # rotary's timed calls normalise and rotate q in place, thousands of times: with unequal q weights each call
        # scales channel i by w_i / rms and the smaller channels decay to subnormals and zeros (measured: 903 zeros
        # and 3129 values below 1e-30 of 4096 after 20 000 decode calls), which no real step sees. So q's weight
        # is one value (the same for both implementations); k is never overwritten and keeps unequal weights.
        self.wq = torch.full((D,), 0.95).to(dt)
        self.wk = (1 + 0.1 * torch.randn(D, generator=g)).to(dt)
        self.k_cache = torch.zeros((1, HKV, S_MAX, D), dtype=dt)
        self.v_cache = torch.zeros((1, HKV, S_MAX, D), dtype=dt)
        self.positions = torch.arange(self.offset, self.offset + T)
        self.dt = dt


def make_rotary(inp: Inputs, threads: int) -> Callable[[], object]:
    import torch

    spec = rotary.Spec(D, base=BASE)
    q = inp.q.clone()
    start = torch.tensor([inp.offset])

    def run():
        return rotary.prologue(q, inp.k, inp.v, inp.offset, spec, k_cache=inp.k_cache, v_cache=inp.v_cache,
                               cache_layout="bhsd", cache_positions=start, q_norm_weight=inp.wq,
                               k_norm_weight=inp.wk, layout="bshd", threads=threads)

    run()  # builds the spec's table; q now holds one call's result (the tests read it as run.q)
    run.q = q
    return run


def make_torch_eager(inp: Inputs, threads: int) -> Callable[[], object]:
    import torch

    try:
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm, apply_rotary_pos_emb
    except Exception as e:  # pragma: no cover - depends on the environment
        raise Unavailable(f"transformers not importable: {e}")
    torch.set_num_threads(threads)
    q_norm, k_norm = Qwen3RMSNorm(D, eps=1e-6), Qwen3RMSNorm(D, eps=1e-6)
    with torch.no_grad():
        q_norm.weight.copy_(inp.wq.float())
        k_norm.weight.copy_(inp.wk.float())
    q_norm.to(inp.dt)
    k_norm.to(inp.dt)
    inv = 1.0 / (BASE ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    freqs = inp.positions.float()[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos()[None].to(inp.dt), emb.sin()[None].to(inp.dt)  # [1, T, D], as Qwen3RotaryEmbedding returns
    cache_position = inp.positions.clone()

    def run():
        with torch.no_grad():
            qs = q_norm(inp.q).transpose(1, 2)
            ks = k_norm(inp.k).transpose(1, 2)
            vs = inp.v.transpose(1, 2)
            qs, ks = apply_rotary_pos_emb(qs, ks, cos, sin)
            inp.k_cache.index_copy_(2, cache_position, ks)
            inp.v_cache.index_copy_(2, cache_position, vs)
            return qs

    return run


MAKERS: Dict[str, Callable[[Inputs, int], Callable[[], object]]] = {"rotary": make_rotary,
                                                                   "torch-eager": make_torch_eager}


def run(threads_list: List[int], quick: bool, as_json: bool, median_ms: Callable[..., float]) -> List[dict]:
    """One row per (phase, dtype, threads, impl): {"case": "prologue", "phase", "dtype", "threads", "impl", "ms"}."""
    rows: List[dict] = []
    for phase in PHASES:
        decode = phase == "decode"
        for dtype in ("f32", "bf16"):
            try:
                inp: Optional[Inputs] = Inputs(phase, dtype)
            except ImportError as e:  # torch not installed: every implementation here uses torch tensors
                inp, reason = None, f"{e.name or e} is not installed"
            for threads in threads_list:
                fns: Dict[str, Callable[[], object]] = {}
                here: Dict[str, dict] = {}
                for impl, maker in MAKERS.items():
                    here[impl] = {"case": "prologue", "phase": phase, "dtype": dtype, "threads": threads,
                                  "impl": impl, "ms": None}
                    try:
                        if inp is None:
                            raise Unavailable(reason)
                        fns[impl] = maker(inp, threads)
                    except Unavailable as e:
                        here[impl]["unavailable"] = str(e)
                # The implementations alternate, ROUNDS rounds of each (the guest's speed drifts between rounds):
                # each row's ms is the median over its rounds, and its rounds_ms say how far they spread.
                rounds: Dict[str, List[float]] = {impl: [] for impl in fns}
                for _ in range(ROUNDS):
                    for impl, fn in fns.items():
                        if decode:
                            rounds[impl].append(median_ms(fn, (0.05 if quick else 0.3) / ROUNDS, 5, 20 if quick else 100))
                        else:
                            rounds[impl].append(median_ms(fn, (0.1 if quick else 0.6) / ROUNDS, 3, 1))
                for impl, row in here.items():
                    if impl in rounds:
                        row["ms"] = statistics.median(rounds[impl])
                        row["rounds_ms"] = rounds[impl]
                    rows.append(row)
                    if as_json:
                        print(json.dumps(row), flush=True)
    return rows


def speedup_table(rows: List[dict]) -> str:
    """torch-eager ms / rotary ms per (phase, dtype, threads)."""
    by: Dict[tuple, Dict[str, Optional[float]]] = {}
    for r in rows:
        by.setdefault((r["phase"], r["dtype"], r["threads"]), {})[r["impl"]] = r["ms"]
    lines = ["attention prologue (q/k RMSNorm + RoPE + StaticCache write, Qwen3-8B shapes): "
             "speedup of rotary.prologue over the torch eager composition",
             f"{'phase':<8}{'dtype':<6}{'thr':>4}{'rotary ms':>12}{'torch ms':>12}{'speedup':>9}"]
    for (phase, dtype, threads), ms in by.items():
        a, b = ms.get("rotary"), ms.get("torch-eager")
        sp = f"{b / a:>8.1f}x" if a and b else f"{'-':>9}"
        fa = f"{a:12.4f}" if a is not None else f"{'-':>12}"
        fb = f"{b:12.4f}" if b is not None else f"{'-':>12}"
        lines.append(f"{phase:<8}{dtype:<6}{threads:>4}{fa}{fb}{sp}")
    return "\n".join(lines)
