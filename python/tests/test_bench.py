"""python -m rotary.bench --peers: one JSON line per (case, dtype, impl, threads) with issue 4's fields."""
from __future__ import annotations

import json
import subprocess
import sys

IMPLS = {"rotary", "torch-seed", "hf-apply", "onnxruntime", "ggml"}


def test_peer_bench_decode_lines_and_speedup_table():
    proc = subprocess.run(
        [sys.executable, "-m", "rotary.bench", "--peers", "--json", "--quick", "--case", "P2", "--threads", "1"],
        capture_output=True, text=True, timeout=600, check=True)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    seen = set()
    for r in rows:
        assert set(r) >= {"case", "dtype", "threads", "impl", "ms"}, r
        assert r["case"] == "P2" and r["threads"] == 1 and isinstance(r["threads"], int)
        assert r["dtype"] in {"f32", "f16", "bf16"} and r["impl"] in IMPLS, r
        if r["ms"] is None:
            assert r["impl"] != "rotary" and r["unavailable"], r  # a peer that cannot run says why
        else:
            assert r["ms"] > 0, r
        seen.add((r["dtype"], r["impl"]))
    assert seen == {(d, i) for d in ("f32", "f16", "bf16") for i in IMPLS}
    assert "speedup of rotary" in proc.stderr
