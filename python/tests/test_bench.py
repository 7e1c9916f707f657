"""python -m rotary.bench --peers: one JSON line per (case, dtype, impl, threads) with the fields its docstring lists."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from ggml_live import ggml_or_skip
from reference import default_inv_freq, rotate

IMPLS = {"rotary", "torch-seed", "hf-apply", "onnxruntime", "ggml"}


def test_peer_bench_decode_lines_and_speedup_table():
    pytest.importorskip("ml_dtypes")  # the bf16 inputs (a bare install of the wheel has no ml_dtypes)
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


def test_ggml_peer_computes_rope_with_half_split_pairs():
    """The ctypes driver of ggml_rope_ext (NEOX) against fp64 RoPE, so that the bench times the right operation."""
    g = ggml_or_skip()
    rng = np.random.default_rng(1)
    tokens, first, base = 5, 1000, 10000.0
    q = rng.standard_normal((tokens, 4, 64)).astype(np.float32)
    k = rng.standard_normal((tokens, 2, 64)).astype(np.float32)
    angles = np.outer(np.arange(first, first + tokens), default_inv_freq(base, 64))[:, None, :]
    for dtype, npdt, tol in (("f32", np.float32, 1e-4), ("f16", np.float16, 4e-3)):
        for threads in (1, 2):
            xs = (q.astype(npdt), k.astype(npdt))
            rope = g.GgmlRope(*xs, first, base, dtype, threads)
            outs = rope()  # views of ggml's context: valid while rope lives
            for x, y in zip(xs, outs):
                want = rotate(x, angles)
                assert y.shape == x.shape and y.dtype == npdt
                assert np.abs(y.astype(np.float64) - want).max() < tol, (dtype, threads)
    with pytest.raises(g.GgmlUnavailable, match="no bf16 kernel"):
        g.GgmlRope(q, k, 0, base, "bf16", 1)


def test_peer_bench_runs_ggml_where_installed():
    g = ggml_or_skip()
    del g
    proc = subprocess.run(
        [sys.executable, "-m", "rotary.bench", "--peers", "--json", "--quick", "--case", "P2", "--threads", "2"],
        capture_output=True, text=True, timeout=600, check=True)
    ggml = {r["dtype"]: r for r in map(json.loads, proc.stdout.splitlines()) if r["impl"] == "ggml"}
    assert ggml["f32"]["ms"] > 0 and ggml["f16"]["ms"] > 0, ggml
    assert ggml["bf16"]["ms"] is None and "bf16" in ggml["bf16"]["unavailable"]
