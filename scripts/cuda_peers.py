#!/usr/bin/env python3
"""CUDA peers and the device check's summary (scripts/device_check.sh), on the GPU machine's own torch.

    python3 scripts/cuda_peers.py bench                         # JSON lines: peers on rotary bench's shapes
    python3 scripts/cuda_peers.py summary BENCH.jsonl PEERS.jsonl   # markdown table + the issue's targets;
                                                                # exit 1 if the peer disagreed with rotary

Peers, timed with CUDA events on the same Llama-3-8B shapes as `rotary bench --backend cuda` (q [T, 32, 128],
k [T, 8, 128]; here in HF's [1, H, T, 128] layout, the same bytes):
  torch-eager-hf        HF's apply_rotary_pos_emb (rotate_half; GPT-J's rotate_every_two for interleaved) given
                        cos/sin [1, 1, T, 128] in the tensors' dtype, out of place (as HF runs it)
  flashinfer            apply_rope_with_cos_sin_cache (f32 cache), in place, if importable
  flash-attn            flash_attn.layers.rotary.apply_rotary_emb on q and k, in place, if importable
Bytes counted as rotary counts them: q and k read plus written. Needs only torch (not the rotary package).
"""
import json
import statistics
import sys

CASES = [("T1", 1, 12345), ("T4096", 4096, 0), ("T32768", 32768, 0), ("T131072", 131072, 0)]
HQ, HK, D = 32, 8, 128


def _time(fn, torch, batch, samples=15):
    if not torch.cuda.is_available():  # the self-test on a machine without a GPU: shapes only
        fn()
        return 1.0
    fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(samples):
        e0.record()
        for _ in range(batch):
            fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e-3 / batch)
    return statistics.median(times)


def bench(device="cuda", cases=CASES):
    import torch

    dev = torch.device(device)
    inv = 1.0 / (500000.0 ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    try:
        import flashinfer  # noqa: F401
    except Exception as e:  # noqa: BLE001
        flashinfer = None
        print(json.dumps({"peer": "flashinfer", "available": False, "why": type(e).__name__}), flush=True)
    try:
        from flash_attn.layers.rotary import apply_rotary_emb
    except Exception as e:  # noqa: BLE001
        apply_rotary_emb = None
        print(json.dumps({"peer": "flash-attn", "available": False, "why": type(e).__name__}), flush=True)

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    def rotate_every_two(x):
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((-x2, x1), dim=-1).flatten(-2)

    for name, T, p0 in cases:
        pos = torch.arange(p0, p0 + T, dtype=torch.float64)
        ang = pos[:, None] * inv[None, :]  # [T, D/2], exact enough for timing
        for dtype, dname in ((torch.bfloat16, "bf16"), (torch.float16, "f16"), (torch.float32, "f32")):
            q = torch.randn(1, HQ, T, D, device=dev, dtype=dtype)
            k = torch.randn(1, HK, T, D, device=dev, dtype=dtype)
            nbytes = 2 * (q.numel() + k.numel()) * q.element_size()
            batch = 200 if T == 1 else (20 if T <= 4096 else 3)
            for pairing in ("half", "interleaved"):
                if pairing == "half":
                    emb = torch.cat((ang, ang), dim=-1)
                    rot = rotate_half
                else:
                    emb = torch.repeat_interleave(ang, 2, dim=-1)
                    rot = rotate_every_two
                cos = emb.cos()[None, None].to(device=dev, dtype=dtype)
                sin = emb.sin()[None, None].to(device=dev, dtype=dtype)

                def hf():
                    return q * cos + rot(q) * sin, k * cos + rot(k) * sin

                sec = _time(hf, torch, batch)
                line = {"case": name, "peer": "torch-eager-hf", "tokens": T, "dtype": dname, "pairing": pairing,
                        "inplace": False, "ms": sec * 1e3, "bytes": nbytes, "gbps": nbytes / sec / 1e9}
                print(json.dumps(line), flush=True)
                if flashinfer is not None and dtype != torch.float32:
                    try:
                        cache = torch.cat((ang.cos(), ang.sin()), dim=-1).to(device=dev, dtype=torch.float32)
                        cache = torch.cat((torch.zeros(p0, D, device=dev), cache)) if p0 else cache
                        qf = q.transpose(1, 2).reshape(T, HQ * D).contiguous()
                        kf = k.transpose(1, 2).reshape(T, HK * D).contiguous()
                        positions = torch.arange(p0, p0 + T, device=dev, dtype=torch.int64)
                        sec = _time(lambda: flashinfer.apply_rope_with_cos_sin_cache_inplace(
                            positions, qf, kf, D, cache, is_neox=pairing == "half"), torch, batch)
                        print(json.dumps({**line, "peer": "flashinfer", "inplace": True, "ms": sec * 1e3,
                                          "gbps": nbytes / sec / 1e9}), flush=True)
                    except Exception as e:  # noqa: BLE001
                        print(json.dumps({"peer": "flashinfer", "case": name, "error": repr(e)[:200]}), flush=True)
                if apply_rotary_emb is not None and dtype != torch.float32:
                    try:
                        qs, ks = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous()  # [1, T, H, D]
                        c, s = ang.cos().to(device=dev, dtype=dtype), ang.sin().to(device=dev, dtype=dtype)
                        inter = pairing == "interleaved"

                        def fa():
                            apply_rotary_emb(qs, c, s, interleaved=inter, inplace=True)
                            apply_rotary_emb(ks, c, s, interleaved=inter, inplace=True)

                        sec = _time(fa, torch, batch)
                        print(json.dumps({**line, "peer": "flash-attn", "inplace": True, "ms": sec * 1e3,
                                          "gbps": nbytes / sec / 1e9}), flush=True)
                    except Exception as e:  # noqa: BLE001
                        print(json.dumps({"peer": "flash-attn", "case": name, "error": repr(e)[:200]}), flush=True)
            del q, k
            torch.cuda.empty_cache()


def _load(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    except OSError:
        pass
    return rows


def summary(bench_path, peers_path):
    rows, peers = _load(bench_path), _load(peers_path)
    torch_ms = {(p["case"], p["dtype"], p["pairing"]): p["ms"] for p in peers if p.get("peer") == "torch-eager-hf"}
    print("# CUDA device check\n")
    if rows:
        print(f"Device: {rows[0].get('device', '?')}\n")
    print("| case | dtype | pairing | in place | ms | GB/s | copy GB/s | ratio | vs one-thread-per-pair | vs torch eager | wall us |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        key = (r["case"], r["dtype"], r["pairing"])
        vs_torch = torch_ms.get(key)
        print(f"| {r['case']} | {r['dtype']} | {r['pairing']} | {'yes' if r['inplace'] else 'no'} | {r['ms']:.4f} | "
              f"{r['gbps']:.0f} | {r['limit_gbps']:.0f} | {r['ratio']:.3f} | "
              f"{'%.2fx' % r['speedup_vs_peer'] if 'speedup_vs_peer' in r else '-'} | "
              f"{'%.1fx' % (vs_torch / r['ms']) if vs_torch else '-'} | "
              f"{'%.2f' % r['wall_us'] if 'wall_us' in r else '-'} |")
    print("\n## Targets (issue 18)\n")

    def target(name, values, passed, worst):
        verdict = "NOT MEASURED" if not values else ("PASS" if passed(values) else "FAIL")
        print(f"- {name}: {verdict}" + (f" ({worst(values)})" if values else ""))

    big = [r["ratio"] for r in rows if r["dtype"] == "bf16" and r["tokens"] >= 16384]
    target("bf16 q+k at >= 16k tokens >= 0.85x the device copy", big, lambda v: min(v) >= 0.85,
           lambda v: f"lowest ratio {min(v):.3f}")
    wall = [r["wall_us"] for r in rows if "wall_us" in r]
    target("a decode step (one token, q+k) <= 5 us including launch", wall, lambda v: max(v) <= 5.0,
           lambda v: f"slowest {max(v):.2f} us, fastest {min(v):.2f} us")
    sp = [r["speedup_vs_peer"] for r in rows if "speedup_vs_peer" in r and r["tokens"] > 1]
    target(">= 2x the one-thread-per-pair kernel (T > 1)", sp, lambda v: min(v) >= 2, lambda v: f"lowest {min(v):.2f}x")
    vt = [torch_ms[(r["case"], r["dtype"], r["pairing"])] / r["ms"] for r in rows
          if (r["case"], r["dtype"], r["pairing"]) in torch_ms and r["tokens"] > 1]
    target(">= 10x torch eager (T > 1)", vt, lambda v: min(v) >= 10, lambda v: f"lowest {min(v):.1f}x")
    bad = [r for r in rows if r.get("peer_checked") is False]
    if bad:
        print(f"- FAIL: the one-thread-per-pair peer disagreed with rotary on {len(bad)} configurations: " +
              ", ".join(f"{r['case']} {r['dtype']} {r['pairing']}" for r in bad))
    return 1 if bad else 0  # a wrong result fails the device check (scripts/device_check.sh)

if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "bench":
        if "--cpu-selftest" in sys.argv:  # no GPU here: run the peers' code once on small CPU tensors
            bench("cpu", [("T1", 1, 12345), ("T8", 8, 0)])
        else:
            bench()
    elif len(sys.argv) == 4 and sys.argv[1] == "summary":
        sys.exit(summary(sys.argv[2], sys.argv[3]))
    else:
        print(__doc__)
        sys.exit(2)
