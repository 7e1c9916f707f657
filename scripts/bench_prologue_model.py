#!/usr/bin/env python3
# Benchmark: a whole transformers model's prefill and decode on the CPU, with and without patch_prologue, alternated.
"""Times a model built from a config (random weights: the speed does not depend on them) through transformers'
own forward with a StaticCache: one prefill of --prompt tokens, then --new greedy decode steps, unpatched and
patched with rotary.prologue_torch.patch_prologue (one rotary call per layer for q/k norm + RoPE + cache write),
alternated for --rounds rounds. Prints one JSON line per round and implementation, then the medians.

    python3 scripts/bench_prologue_model.py                                  # Qwen3-0.6B shapes, bf16, one thread
    taskset -c 1 python3 scripts/bench_prologue_model.py --dtype f32 --threads 1 --model llama
    python3 scripts/bench_prologue_model.py --config path/to/config.json     # any supported model's config

Needs torch and transformers. With random weights greedy tokens sit on near-ties, so bf16 runs may pick other
tokens than the unpatched model (the prologue rounds once where transformers rounds twice; docs/prologue.md):
"same_tokens" is reported, not required.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

# Shapes of public configs (vocabulary trimmed to 32000: the output projection would dominate decode otherwise).
MODELS = {
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM",  # Qwen3-0.6B
              dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                   num_key_value_heads=8, head_dim=128, rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    "llama": ("LlamaConfig", "LlamaForCausalLM",  # Llama-3.2-1B
              dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                   num_key_value_heads=8, head_dim=64, rope_parameters={
                       "rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
}


def build(args):
    import torch
    import transformers

    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    if args.config:
        config = transformers.AutoConfig.from_pretrained(args.config)
        model_cls = transformers.AutoModelForCausalLM
        make = lambda: model_cls.from_config(config)  # noqa: E731
    else:
        config_name, model_name, fields = MODELS[args.model]
        if args.layers:
            fields = {**fields, "num_hidden_layers": args.layers}
        config = getattr(transformers, config_name)(vocab_size=32000, max_position_embeddings=8192,
                                                    tie_word_embeddings=True, **fields)
        make = lambda: getattr(transformers, model_name)(config)  # noqa: E731
    torch.manual_seed(0)
    model = make().to(dtype).eval()
    model.config._attn_implementation = args.attention
    return model


def run(model, ids, new: int):
    """(prefill ms, decode ms per token, tokens) of one prefill and `new` greedy decode steps."""
    import torch
    import transformers

    prompt = ids.shape[1]
    cache = transformers.StaticCache(config=model.config, max_cache_len=prompt + new + 8)
    tokens = []
    with torch.no_grad():
        t0 = time.perf_counter()
        out = model(ids, cache=cache, use_cache=True)
        t1 = time.perf_counter()
        tok = out.logits[:, -1:].argmax(-1)
        for s in range(new):
            pos = torch.tensor([prompt + s])
            out = model(input_ids=tok, cache=cache, use_cache=True, cache_position=pos, position_ids=pos[None])
            tok = out.logits[:, -1:].argmax(-1)
            tokens.append(int(tok))
        t2 = time.perf_counter()
    return (t1 - t0) * 1e3, (t2 - t1) / new * 1e3, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="qwen3", help="built-in shapes (default qwen3)")
    ap.add_argument("--config", help="a config.json (or model directory) to take the shapes from instead")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="bf16")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1; rotary's calls use one)")
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens (default 512)")
    ap.add_argument("--new", type=int, default=32, help="decode steps (default 32)")
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds (default 3)")
    ap.add_argument("--attention", default="sdpa", help="transformers attention implementation (default sdpa)")
    ap.add_argument("--layers", type=int, default=0, help="built-in shapes with this many layers (default: the model's)")
    args = ap.parse_args()

    import torch

    from rotary import prologue_torch

    torch.set_num_threads(args.threads)
    model = build(args)
    ids = torch.randint(1, model.config.get_text_config().vocab_size, (1, args.prompt),
                        generator=torch.Generator().manual_seed(1))
    results = {"unpatched": [], "patched": []}
    tokens = {}
    for r in range(args.rounds):
        for impl in results:
            if impl == "patched":
                prologue_torch.patch_prologue(model)
            try:
                prefill, decode, tokens[impl] = run(model, ids, args.new)
            finally:
                if impl == "patched":
                    prologue_torch.unpatch_prologue(model)
            results[impl].append((prefill, decode))
            print(json.dumps({"round": r, "impl": impl, "prefill_ms": round(prefill, 2),
                              "decode_ms_per_token": round(decode, 3)}), flush=True)
    med = {impl: (statistics.median(p for p, _ in v), statistics.median(d for _, d in v)) for impl, v in results.items()}
    print(json.dumps({"model": args.config or args.model, "dtype": args.dtype, "threads": args.threads,
                      "prompt": args.prompt, "new": args.new,
                      "prefill_ms": {k: round(v[0], 2) for k, v in med.items()},
                      "decode_ms_per_token": {k: round(v[1], 3) for k, v in med.items()},
                      "prefill_speedup": round(med["unpatched"][0] / med["patched"][0], 3),
                      "decode_speedup": round(med["unpatched"][1] / med["patched"][1], 3),
                      "same_tokens": tokens["unpatched"] == tokens["patched"]}))


if __name__ == "__main__":
    main()
