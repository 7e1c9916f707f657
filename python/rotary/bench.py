"""Peer benchmark: rotary vs a plain PyTorch RoPE module (torch-seed), HF apply_rotary_pos_emb, ONNX Runtime and ggml.

    python -m rotary.bench --peers [--json] [--quick] [--case P1|P2|prologue] [--threads N]
    python -m rotary.bench --torch [--json] [--quick] [--torch-case decode|prefill|model]   (rotary/_bench_torch.py)

Runs every implementation on the same tensors as `rotary bench`: P1 = Llama-3-8B prefill (q [4096,32,128]
+ k [4096,8,128], positions 0..4095) and P2 = decode (q [1,32,128] + k [1,8,128] at position 12345), in
f32 / f16 / bf16, half-split pairing, forward, out of place (inputs left unchanged; rotary writes into
output arrays reused across calls, ONNX Runtime into its arena, ggml into its context's tensors with a
persistent threadpool, PyTorch allocates). Prints one JSON object per (case, dtype, impl, threads) with --json, then a table of
speedups (peer ms / rotary ms). An implementation that cannot run a combination (not installed, dtype
not supported) is reported with "ms": null and the reason.

`--case prologue` (also part of a run without --case) times the attention prologue instead: rotary.prologue
against the torch eager composition (HF q_norm/k_norm + apply_rotary_pos_emb + StaticCache update), see
rotary/_bench_prologue.py and docs/performance.md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

import rotary

HEADS_Q, HEADS_K, HEAD_DIM = 32, 8, 128
BASE = 500000.0
CASES = {"P1": (4096, 0), "P2": (1, 12345)}  # name -> (tokens, first position)
DTYPES = ("f32", "f16", "bf16")
IMPLS = ("rotary", "torch-seed", "hf-apply", "onnxruntime", "ggml")


def _median_ms(fn: Callable[[], object], min_time: float, min_reps: int, batch: int) -> float:
    """Median milliseconds per call over batches of `batch` calls, repeated until min_time and min_reps."""
    for _ in range(batch):
        fn()
    samples: List[float] = []
    start = time.perf_counter()
    while len(samples) < min_reps or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - t0) / batch * 1e3)
    return statistics.median(samples)


def _numpy_dtype(dtype: str):
    if dtype == "bf16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return {"f32": np.float32, "f16": np.float16}[dtype]


def _torch_dtype(dtype: str):
    import torch

    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]


class Inputs:
    """The tensors of one (case, dtype), shared by every implementation (same values everywhere)."""

    def __init__(self, case: str, dtype: str):
        self.tokens, self.offset = CASES[case]
        rng = np.random.default_rng(0)
        q = rng.standard_normal((self.tokens, HEADS_Q, HEAD_DIM), dtype=np.float32)
        k = rng.standard_normal((self.tokens, HEADS_K, HEAD_DIM), dtype=np.float32)
        self.q = q.astype(_numpy_dtype(dtype))
        self.k = k.astype(_numpy_dtype(dtype))
        self.dtype = dtype
        self.positions = np.arange(self.offset, self.offset + self.tokens, dtype=np.int64)
        inv_freq = BASE ** (-np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM)
        angles = np.outer(self.positions.astype(np.float64), inv_freq)  # [T, D/2]
        self.cos_half = np.cos(angles).astype(np.float32)
        self.sin_half = np.sin(angles).astype(np.float32)


# ---------------------------------------------------------------- implementations
# Each maker returns a zero-argument callable that performs one q+k rotation, or raises
# Unavailable with the reason.


class Unavailable(Exception):
    pass


def make_rotary(inp: Inputs, threads: int) -> Callable[[], object]:
    """Out of place into output arrays allocated once and reused, as ONNX Runtime reuses its arena
    (a fresh 80 MiB numpy array per call would time the kernel's page faults, not RoPE)."""
    spec = rotary.Spec(HEAD_DIM, base=BASE)
    # Outputs from rotary.empty_like (cache-line aligned, as ONNX Runtime's arena buffers are; numpy's
    # own start 16 bytes past a line, which costs rotary its whole-line streaming stores).
    q_out = rotary.empty_like(inp.q)
    k_out = rotary.empty_like(inp.k)
    q_out[...] = 0
    k_out[...] = 0

    def run():
        return rotary.apply_qk(inp.q, inp.k, inp.offset, spec, layout="thd", q_out=q_out, k_out=k_out,
                               threads=threads)

    run()  # builds the spec's cached table
    return run


def make_torch_seed(inp: Inputs, threads: int) -> Callable[[], object]:
    """A plain PyTorch RoPE module's math (x * cos + rotate_half(x) * sin with [T, C] caches), on [H, T, D] views.

    Such a module indexes its cache from position 0; the benchmark slices the same cache at the
    case's positions, which is what the module would compute for them."""
    import torch

    torch.set_num_threads(threads)
    dt = _torch_dtype(inp.dtype)
    q = torch.from_numpy(inp.q.astype(np.float32)).to(dt).transpose(0, 1).contiguous()  # [H, T, D]
    k = torch.from_numpy(inp.k.astype(np.float32)).to(dt).transpose(0, 1).contiguous()
    theta = 1.0 / (BASE ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
    seq_idx = torch.arange(inp.offset + inp.tokens)
    idx_theta = torch.outer(seq_idx, theta)
    idx_theta = torch.cat([idx_theta, idx_theta], dim=-1)
    cos = idx_theta.cos()[inp.offset:].to(dt)
    sin = idx_theta.sin()[inp.offset:].to(dt)

    def forward(x):
        x_front, x_back = torch.chunk(x, 2, dim=-1)
        x_shift = torch.cat([-x_back, x_front], dim=-1)
        return x * cos + x_shift * sin

    def run():
        with torch.no_grad():
            return forward(q), forward(k)

    return run


def make_hf_apply(inp: Inputs, threads: int) -> Callable[[], object]:
    import torch

    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    except Exception as e:  # pragma: no cover - depends on the environment
        raise Unavailable(f"transformers not importable: {e}")
    torch.set_num_threads(threads)
    dt = _torch_dtype(inp.dtype)
    q = torch.from_numpy(inp.q.astype(np.float32)).to(dt).transpose(0, 1).unsqueeze(0).contiguous()  # [1,H,T,D]
    k = torch.from_numpy(inp.k.astype(np.float32)).to(dt).transpose(0, 1).unsqueeze(0).contiguous()
    cos = torch.from_numpy(np.concatenate([inp.cos_half, inp.cos_half], -1)).to(dt).unsqueeze(0)  # [1,T,D]
    sin = torch.from_numpy(np.concatenate([inp.sin_half, inp.sin_half], -1)).to(dt).unsqueeze(0)

    def run():
        with torch.no_grad():
            return apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)

    return run


def make_onnxruntime(inp: Inputs, threads: int) -> Callable[[], object]:
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except Exception as e:  # pragma: no cover
        raise Unavailable(f"onnx/onnxruntime not importable: {e}")
    elem = {"f32": TensorProto.FLOAT, "f16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}[inp.dtype]
    T = inp.tokens
    max_pos = inp.offset + T
    # Opset 23 RotaryEmbedding, 3-D X [1, T, H*D] (BSNH) with num_heads; one node for q, one for k.
    nodes = [
        helper.make_node("RotaryEmbedding", ["q", "cos", "sin", "pos"], ["q_out"], num_heads=HEADS_Q, interleaved=0),
        helper.make_node("RotaryEmbedding", ["k", "cos", "sin", "pos"], ["k_out"], num_heads=HEADS_K, interleaved=0),
    ]
    graph = helper.make_graph(
        nodes, "rope",
        [helper.make_tensor_value_info("q", elem, [1, T, HEADS_Q * HEAD_DIM]),
         helper.make_tensor_value_info("k", elem, [1, T, HEADS_K * HEAD_DIM]),
         helper.make_tensor_value_info("cos", elem, [max_pos, HEAD_DIM // 2]),
         helper.make_tensor_value_info("sin", elem, [max_pos, HEAD_DIM // 2]),
         helper.make_tensor_value_info("pos", TensorProto.INT64, [1, T])],
        [helper.make_tensor_value_info("q_out", elem, [1, T, HEADS_Q * HEAD_DIM]),
         helper.make_tensor_value_info("k_out", elem, [1, T, HEADS_K * HEAD_DIM])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    try:
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise Unavailable(f"onnxruntime {ort.__version__} cannot load RotaryEmbedding-23 for {inp.dtype}: "
                          f"{str(e).splitlines()[0][:160]}")
    inv_freq = BASE ** (-np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM)
    angles = np.outer(np.arange(max_pos, dtype=np.float64), inv_freq)
    npdt = _numpy_dtype(inp.dtype)
    feeds = {
        "q": inp.q.reshape(1, T, -1), "k": inp.k.reshape(1, T, -1),
        "cos": np.cos(angles).astype(np.float32).astype(npdt), "sin": np.sin(angles).astype(np.float32).astype(npdt),
        "pos": inp.positions.reshape(1, T),
    }
    try:
        sess.run(None, feeds)
    except Exception as e:
        raise Unavailable(f"onnxruntime {ort.__version__} cannot run RotaryEmbedding-23 for {inp.dtype}: "
                          f"{str(e).splitlines()[0][:160]}")
    return lambda: sess.run(None, feeds)


def make_ggml(inp: Inputs, threads: int) -> Callable[[], object]:
    """ggml_rope_ext (NEOX mode) through PyPI's libggml-python libraries (see rotary._bench_ggml)."""
    from rotary._bench_ggml import GgmlRope, GgmlUnavailable

    try:
        rope = GgmlRope(inp.q, inp.k, inp.offset, BASE, inp.dtype, threads)
    except GgmlUnavailable as e:
        raise Unavailable(str(e))
    # The driver declares ggml's C API by hand: check that it computes this case's RoPE before timing it.
    # ggml accumulates its angles in f32 (error ~1e-3 at position 4095); a wrong mode or layout is O(1).
    half = HEAD_DIM // 2
    for x, y in zip((inp.q, inp.k), rope()):
        x = x.astype(np.float64)
        c, s = inp.cos_half[:, None, :], inp.sin_half[:, None, :]
        want = np.concatenate([x[..., :half] * c - x[..., half:] * s, x[..., half:] * c + x[..., :half] * s], -1)
        err = float(np.abs(y.astype(np.float64) - want).max())
        if not err < 2e-2:
            raise RuntimeError(f"ggml driver: output differs from RoPE by {err:.3g} ({inp.dtype})")
    return rope


MAKERS: Dict[str, Callable[[Inputs, int], Callable[[], object]]] = {
    "rotary": make_rotary,
    "torch-seed": make_torch_seed,
    "hf-apply": make_hf_apply,
    "onnxruntime": make_onnxruntime,
    "ggml": make_ggml,
}


# ---------------------------------------------------------------- driver


def run(cases: List[str], threads_list: List[int], quick: bool, as_json: bool) -> List[dict]:
    rows: List[dict] = []
    total = len(cases) * len(DTYPES) * len(IMPLS) * len(threads_list)
    done = 0
    for case in cases:
        decode = case == "P2"
        for dtype in DTYPES:
            inp = Inputs(case, dtype)
            for threads in threads_list:
                for impl in IMPLS:
                    row = {"case": case, "dtype": dtype, "threads": threads, "impl": impl, "ms": None}
                    try:
                        fn = MAKERS[impl](inp, threads)
                        if decode:
                            row["ms"] = _median_ms(fn, 0.05 if quick else 0.3, 5, 50 if quick else 200)
                        else:
                            row["ms"] = _median_ms(fn, 0.1 if quick else 0.6, 3, 1)
                    except Unavailable as e:
                        row["unavailable"] = str(e)
                    except ImportError as e:  # a peer whose package is not installed (e.g. torch in a bare venv)
                        row["unavailable"] = f"{impl}: {e.name or e} is not installed"
                    rows.append(row)
                    done += 1
                    if sys.stderr.isatty():
                        print(f"\r[rotary.bench] {done}/{total}", end="", file=sys.stderr, flush=True)
                    if as_json:
                        print(json.dumps(row), flush=True)
    if sys.stderr.isatty():
        print(f"\r[rotary.bench] {total}/{total} done", file=sys.stderr)
    return rows


def speedup_table(rows: List[dict]) -> str:
    """Rows (case, dtype, threads): rotary ms and each peer's ms / rotary ms."""
    peers = [i for i in IMPLS if i != "rotary"]
    by_key: Dict[Tuple[str, str, int], Dict[str, Optional[float]]] = {}
    for r in rows:
        by_key.setdefault((r["case"], r["dtype"], r["threads"]), {})[r["impl"]] = r["ms"]
    lines = ["speedup of rotary (peer ms / rotary ms; '-' = unavailable)",
             f"{'case':<5}{'dtype':<6}{'thr':>4}{'rotary ms':>12}" + "".join(f"{p:>14}" for p in peers)]
    for (case, dtype, threads), ms in by_key.items():
        base = ms.get("rotary")
        cells = []
        for p in peers:
            v = ms.get(p)
            cells.append(f"{v / base:>13.1f}x" if v is not None and base else f"{'-':>14}")
        base_s = f"{base:12.4f}" if base is not None else f"{'-':>12}"
        lines.append(f"{case:<5}{dtype:<6}{threads:>4}{base_s}" + "".join(cells))
    reasons = sorted({f"{r['impl']} ({r['dtype']}): {r['unavailable']}" for r in rows if "unavailable" in r})
    if reasons:
        lines.append("unavailable:")
        lines.extend("  " + s for s in reasons)
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rotary.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--peers", action="store_true", help="run rotary and the peer implementations")
    ap.add_argument("--torch", action="store_true",
                    help="rotary's PyTorch operators vs transformers and inductor (rotary/_bench_torch.py)")
    ap.add_argument("--torch-case", choices=("decode", "prefill", "model"), help="only this --torch case")
    ap.add_argument("--json", action="store_true", help="one JSON object per line, then the speedup table on stderr")
    ap.add_argument("--quick", action="store_true", help="shorter timing (noisier)")
    ap.add_argument("--case", choices=sorted(CASES) + ["prologue"], help="only this case")
    ap.add_argument("--threads", type=int, help="only this thread count (default: 1 and 2)")
    args = ap.parse_args(argv)
    if args.torch:
        from . import _bench_torch

        return _bench_torch.main(args.json, args.quick, args.torch_case or "")
    if not args.peers:
        ap.error("nothing to do: pass --peers or --torch (the kernel-only benchmark is the C++ `rotary bench`)")
    if args.threads is not None and args.threads < 1:
        ap.error(f"--threads must be >= 1, got {args.threads}")
    cases = [args.case] if args.case and args.case != "prologue" else [] if args.case else list(CASES)
    threads_list = [args.threads] if args.threads else [1, 2]
    if cases:
        rows = run(cases, threads_list, args.quick, args.json)
        print(speedup_table(rows), file=sys.stderr if args.json else sys.stdout)
    if args.case in (None, "prologue"):
        from . import _bench_prologue

        rows = _bench_prologue.run(threads_list, args.quick, args.json, _median_ms)
        print(_bench_prologue.speedup_table(rows), file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
