"""`python -m rotary.bench --torch`: rotary's PyTorch operators against transformers and inductor, one JSON line each.

Cases (every line: {"case", "impl", "mode", "ms"} plus what the case reports):
  model-f32 / model-bf16   a transformers LlamaForCausalLM (4 layers, hidden 1024, 16/4 heads, head_dim 64,
                           random weights), one forward of [1, 1024] tokens: "hf" (its own RoPE) and "rotary-patch"
                           (rotary.torch.patch), mode "eager" and "compile" (torch.compile(fullgraph=True), inductor);
                           compile lines carry "graphs" and "graph_breaks" from torch._dynamo.explain.
  prefill-f32 / prefill-bf16  q [1, 32, 4096, 128] + k [1, 8, 4096, 128] (Llama-3-8B prefill, HF's [B, H, S, D]):
                           "rotary-op-inplace" (torch.ops.rotary.apply_qk_), "rotary-op" (apply_qk, new outputs) and
                           "hf-inductor" (transformers' apply_rotary_pos_emb compiled by inductor, new outputs, its
                           cos/sin [1, S, 128] given); mode "prefill"; lines of rotary carry "x_vs_inductor".
  decode-f32               one Llama-3-8B token (q [1, 1, 32, 128], k [1, 1, 8, 128], position 12345, table grown
                           as by a prefill): "rotary-kernel" (the C++ entry the operator's kernel calls),
                           "rotary-op-inplace" (torch.ops.rotary.apply_qk_), "rotary-op" (apply_qk),
                           "rt-inplace" (rotary.torch.apply_qk(inplace=True)), "numpy-out" (rotary.apply_qk on numpy
                           arrays with q_out/k_out), "custom-op-inplace" (the same kernel registered with
                           torch.library.custom_op(mutates_args=("q", "k")) + register_fake, the alternative to the
                           direct torch.library.Library registration rotary uses); op lines carry
                           "overhead_us" = op - kernel.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Callable, Dict, List

HEADS_Q, HEADS_K, HEAD_DIM, BASE = 32, 8, 128, 500000.0


def _best_ms(fn: Callable[[], object], batch: int, reps: int) -> float:
    """Minimum over `reps` batches of the mean time per call (decode: the steady state, not the noise)."""
    for _ in range(batch):
        fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        best = min(best, (time.perf_counter() - t0) / batch * 1e3)
    return best


def _median_ms(fn: Callable[[], object], reps: int) -> float:
    fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def _emit(rows: List[dict], row: dict, as_json: bool) -> None:
    rows.append(row)
    if as_json:
        print(json.dumps(row), flush=True)
    else:
        extra = {k: v for k, v in row.items() if k not in ("case", "impl", "mode", "ms")}
        print(f"{row['case']:13s} {row['impl']:18s} {row['mode']:8s} {row['ms']:10.4f} ms  {extra or ''}", flush=True)


def _model_cases(rows, as_json, quick):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import rotary.torch as rt

    for dtype, case in ((torch.float32, "model-f32"), (torch.bfloat16, "model-bf16")):
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=1000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                          num_attention_heads=16, num_key_value_heads=4, head_dim=64, max_position_embeddings=4096,
                          rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
        cfg._attn_implementation = "sdpa"
        model = LlamaForCausalLM(cfg).eval().to(dtype)
        ids = torch.randint(0, 1000, (1, 1024), generator=torch.Generator().manual_seed(1))
        reps = 3 if quick else 7
        with torch.no_grad():
            for impl in ("hf", "rotary-patch"):
                if impl == "rotary-patch":
                    rt.patch(model)
                _emit(rows, {"case": case, "impl": impl, "mode": "eager",
                             "ms": _median_ms(lambda: model(ids), reps)}, as_json)
                torch._dynamo.reset()
                ex = torch._dynamo.explain(model)(ids)
                torch._dynamo.reset()
                compiled = torch.compile(model, fullgraph=True, dynamic=False)
                t0 = time.perf_counter()
                compiled(ids)
                compile_s = time.perf_counter() - t0
                _emit(rows, {"case": case, "impl": impl, "mode": "compile", "ms": _median_ms(lambda: compiled(ids), reps),
                             "graphs": ex.graph_count, "graph_breaks": ex.graph_break_count,
                             "compile_s": round(compile_s, 1)}, as_json)
                torch._dynamo.reset()
            rt.unpatch(model)


def _prefill_cases(rows, as_json, quick):
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    import rotary
    import rotary.torch as rt

    spec = rotary.Spec(HEAD_DIM, base=BASE)
    key = rt.spec_key(spec)
    S = 4096
    for dtype, case in ((torch.float32, "prefill-f32"), (torch.bfloat16, "prefill-bf16")):
        torch.manual_seed(0)
        q = torch.randn(1, HEADS_Q, S, HEAD_DIM).to(dtype)
        k = torch.randn(1, HEADS_K, S, HEAD_DIM).to(dtype)
        c, s = rt.cos_sin(torch.arange(S)[None], spec)
        cos, sin = torch.cat((c, c), -1).to(dtype), torch.cat((s, s), -1).to(dtype)
        hf = torch.compile(apply_rotary_pos_emb, fullgraph=True, dynamic=False)
        reps = 5 if quick else 15
        with torch.no_grad():
            hf_ms = _median_ms(lambda: hf(q, k, cos, sin), reps)
            ops = torch.ops.rotary
            inplace_ms = _median_ms(lambda: ops.apply_qk_(q, k, None, 0, key, "bhsd"), reps)
            out_ms = _median_ms(lambda: ops.apply_qk(q, k, None, 0, key, "bhsd"), reps)
        _emit(rows, {"case": case, "impl": "hf-inductor", "mode": "prefill", "ms": hf_ms}, as_json)
        _emit(rows, {"case": case, "impl": "rotary-op-inplace", "mode": "prefill", "ms": inplace_ms,
                     "x_vs_inductor": round(hf_ms / inplace_ms, 2)}, as_json)
        _emit(rows, {"case": case, "impl": "rotary-op", "mode": "prefill", "ms": out_ms,
                     "x_vs_inductor": round(hf_ms / out_ms, 2)}, as_json)


def _custom_op_peer(native, spec):
    """rotary's in-place q/k kernel registered the other way, with torch.library.custom_op (registered once)."""
    import torch

    name = "rotary_bench::apply_qk_"
    if not hasattr(torch.ops, "rotary_bench") or not hasattr(torch.ops.rotary_bench, "apply_qk_"):
        @torch.library.custom_op(name, mutates_args=("q", "k"),
                                 schema="(Tensor(a!) q, Tensor(b!) k, SymInt offset, int threads) -> ()")
        def apply_qk_(q, k, offset, threads):
            native._torch_apply(spec, None, None, q, None, k, None, None, offset, "bshd", "", False, None, threads,
                                False, 0)

        @apply_qk_.register_fake
        def _(q, k, offset, threads):
            return None
    return torch.ops.rotary_bench.apply_qk_


def _decode_cases(rows, as_json, quick):
    import numpy as np
    import torch

    import rotary
    import rotary.torch as rt
    from rotary import _rotary as native

    spec = rotary.Spec.preset("llama-3.1-8b")
    key = rt.spec_key(spec)
    pos = 12345
    # grow the table as a prefill up to the position would (a lone decode step at 12345 computes its row on the fly)
    rotary.apply(np.zeros((pos + 1, 1, HEAD_DIM), np.float32), 0, spec, layout="thd")
    torch.manual_seed(0)
    q = torch.randn(1, 1, HEADS_Q, HEAD_DIM)
    k = torch.randn(1, 1, HEADS_K, HEAD_DIM)
    qn, kn = q.numpy().reshape(1, HEADS_Q, HEAD_DIM).copy(), k.numpy().reshape(1, HEADS_K, HEAD_DIM).copy()
    qo, ko = rotary.empty_like(qn), rotary.empty_like(kn)
    ops = torch.ops.rotary
    threads = torch.get_num_threads()
    custom = _custom_op_peer(native, spec)
    batch, reps = (500, 5) if quick else (2000, 15)
    fns: Dict[str, Callable[[], object]] = {
        "rotary-kernel": lambda: native._torch_apply(spec, None, None, q, None, k, None, None, pos, "bshd", "",
                                                     False, None, threads, False, 0),
        "rotary-op-inplace": lambda: ops.apply_qk_(q, k, None, pos, key),
        "rotary-op": lambda: ops.apply_qk(q, k, None, pos, key),
        "rt-inplace": lambda: rt.apply_qk(q, k, pos, spec, inplace=True),
        "numpy-out": lambda: rotary.apply_qk(qn, kn, pos, spec, layout="thd", q_out=qo, k_out=ko),
        "custom-op-inplace": lambda: custom(q, k, pos, threads),
    }
    best = {name: float("inf") for name in fns}
    for _ in range(reps):  # interleaved, so that every implementation sees the same machine state
        for name, fn in fns.items():
            best[name] = min(best[name], _best_ms(fn, batch, 1))
    kernel = best["rotary-kernel"]
    for name, ms in best.items():
        row = {"case": "decode-f32", "impl": name, "mode": "decode", "ms": ms}
        if name.startswith("rotary-op") or name in ("rt-inplace", "custom-op-inplace"):
            row["overhead_us"] = round((ms - kernel) * 1e3, 2)
        _emit(rows, row, as_json)


def run(as_json: bool, quick: bool, cases: List[str]) -> List[dict]:
    rows: List[dict] = []
    if "decode" in cases:
        _decode_cases(rows, as_json, quick)
    if "prefill" in cases:
        _prefill_cases(rows, as_json, quick)
    if "model" in cases:
        _model_cases(rows, as_json, quick)
    return rows


def main(as_json: bool, quick: bool, case: str = "") -> int:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"[rotary.bench] --torch needs torch and transformers: {e}", file=sys.stderr)
        return 2
    cases = [case] if case else ["decode", "prefill", "model"]
    run(as_json, quick, cases)
    return 0
