# Tests of the report plotter (python/rotary/report.py): draws PNGs from report directories, without the extension.
"""The plotter must work as a standalone script and as a module, reading only JSON/CSV.

A synthetic report directory is written here from numpy formulas (Llama 3.1 rule, RoFormer bound, f32 vs
float64 angles); when the built ``rotary`` CLI is found (env ROTARY_CLI or build*/rotary), a real report is
plotted too.
"""
from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "python" / "rotary" / "report.py"
FIGURES = ("wavelengths.png", "decay.png", "score.png", "phase_error.png")
TAB_RED = np.array([214, 39, 40]) / 255.0  # matplotlib "tab:red": the model's curve in every figure


def _llama3_thetas(base, dim, factor, L, low=1.0, high=4.0):
    """Meta's Llama 3.1 frequency rule, in float64."""
    theta = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    wl = 2 * np.pi / theta
    smooth = (L / wl - low) / (high - low)
    scaled = np.where(wl < L / high, theta, np.where(wl > L / low, theta / factor,
                                                      (1 - smooth) * theta / factor + smooth * theta))
    return theta, scaled


def _write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def write_synthetic_report(d: pathlib.Path):
    """A report directory with the schema `rotary report` writes, for a Llama-3.1-like model (d = 64)."""
    d.mkdir(parents=True, exist_ok=True)
    dim, base, factor, L, max_pos = 64, 500000.0, 8.0, 8192, 131072
    theta, scaled = _llama3_thetas(base, dim, factor, L)
    ratio = theta / scaled
    classes = np.where(np.abs(ratio - 1) < 1e-9, np.where(2 * np.pi / theta < L, "full_rotations", "sub_rotation"),
                       np.where(ratio >= factor * (1 - 1e-6), "interpolated", "blended"))
    _write_csv(d / "bands.csv", ["pair", "theta", "theta_default", "wavelength", "wavelength_default", "ratio", "class"],
               [[i, scaled[i], theta[i], 2 * np.pi / scaled[i], 2 * np.pi / theta[i], ratio[i], classes[i]]
                for i in range(dim // 2)])
    variants = {"model": scaled, "unscaled": theta, "linear": theta / factor,
                "roformer": 10000.0 ** (-np.arange(0, dim, 2) / dim)}
    grid = list(range(17))
    x = 16.0
    while x * 10 ** (1 / 80) <= 2 * max_pos:
        x *= 10 ** (1 / 80)
        if round(x) > grid[-1]:
            grid.append(int(round(x)))
    r = np.array(grid, dtype=np.float64)

    def bound(th):
        s = np.cumsum(np.exp(1j * np.outer(r, th)), axis=1)
        return np.abs(s).mean(axis=1)

    rng = np.random.default_rng(7)
    q = rng.standard_normal(dim)
    k = rng.standard_normal(dim)
    q /= np.linalg.norm(q)
    k /= np.linalg.norm(k)
    h = dim // 2

    def score(th, a, b):
        ang = np.outer(r, th)
        A = a[:h] * b[:h] + a[h:] * b[h:]
        B = a[:h] * b[h:] - a[h:] * b[:h]
        return np.cos(ang) @ A + np.sin(ang) @ B

    dec_cols, sc_cols, dec_head, sc_head = [], [], ["distance"], ["distance"]
    for key, th in variants.items():
        b = bound(th)
        dec_head += [key, key + "_mean", key + "_min", key + "_max"]
        dec_cols += [b, b, 0.9 * b, 1.1 * b]
        for suffix, vals in (("_pair", score(th, q, k)), ("_self", score(th, q, q))):
            sc_head += [key + suffix + s for s in ("", "_mean", "_min", "_max")]
            sc_cols += [vals, vals, vals - 0.05, vals + 0.05]
    sc_head.append("model_pair_kernel")
    sc_cols.append(score(scaled, q, k))
    _write_csv(d / "decay.csv", dec_head, [[grid[j]] + [c[j] for c in dec_cols] for j in range(len(grid))])
    _write_csv(d / "score.csv", sc_head, [[grid[j]] + [c[j] for c in sc_cols] for j in range(len(grid))])

    positions = np.unique(np.round(np.logspace(0, math.log10(2 ** 24 - 1), 200)).astype(np.int64))
    rows = []
    for p in positions:
        exact = p * scaled
        a32 = (scaled.astype(np.float32) * np.float32(p)).astype(np.float64)
        rows.append([int(p), np.abs(np.cos(a32) - np.cos(exact)).max(), np.abs(np.sin(a32) - np.sin(exact)).max(),
                     np.abs(a32 - exact).max(),
                     np.abs(np.cos(exact).astype(np.float32) - np.cos(exact)).max(),
                     np.abs(np.sin(exact).astype(np.float32) - np.sin(exact)).max()])
    _write_csv(d / "phase_error.csv", ["position", "f32_cos_err", "f32_sin_err", "f32_angle_err_rad",
                                       "rotary_cos_err", "rotary_sin_err"], rows)
    report = {
        "model": "synthetic-llama3",
        "spec": {"head_dim": dim, "rotary_dim": dim,
                 "rope_parameters": {"rope_type": "llama3", "rope_theta": base, "factor": factor}},
        "context": {"original": L, "max_position_embeddings": max_pos, "factor": factor},
        "attention_factor": 1.0,
        "curves": {"variants": [{"key": key, "label": key} for key in variants]},
    }
    (d / "report.json").write_text(json.dumps(report))
    return d


def _check_png(path: pathlib.Path, want_red=True):
    import matplotlib.image as mpimg

    assert path.is_file(), f"{path} not written"
    assert path.stat().st_size > 20_000, f"{path} is suspiciously small"
    img = mpimg.imread(str(path))[..., :3]
    h, w = img.shape[:2]
    assert w >= 800 and h >= 500
    non_white = (img < 0.97).any(axis=-1).mean()
    assert non_white > 0.05, f"{path}: almost blank ({non_white:.3f} non-white)"
    colours = np.unique((img.reshape(-1, 3) * 255).astype(np.uint8), axis=0)
    assert len(colours) > 50, f"{path}: only {len(colours)} colours"
    if want_red:
        red = (np.abs(img - TAB_RED).max(axis=-1) < 0.06).sum()
        assert red > 200, f"{path}: the model's curve (tab:red) is missing ({red} pixels)"


def _load_standalone():
    """Imports report.py by path, not through the rotary package (no compiled extension needed)."""
    spec = importlib.util.spec_from_file_location("rotary_report_standalone", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def synthetic(tmp_path):
    pytest.importorskip("matplotlib")
    return write_synthetic_report(tmp_path / "report")


def test_script_draws_four_figures(synthetic):
    res = subprocess.run([sys.executable, str(SCRIPT), str(synthetic)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    for name in FIGURES:
        _check_png(synthetic / name, want_red=name != "phase_error.png")


def test_module_main_with_out_dir(synthetic, tmp_path):
    mod = _load_standalone()
    out = tmp_path / "png"
    assert mod.main([str(synthetic), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(FIGURES)
    _check_png(out / "wavelengths.png")


def test_missing_report_is_an_error(tmp_path):
    mod = _load_standalone()
    assert mod.main([str(tmp_path)]) == mod.EXIT_BAD_INPUT


def test_broken_csv_is_an_error_not_a_crash(synthetic):
    (synthetic / "bands.csv").write_text("pair,theta\n")
    mod = _load_standalone()
    assert mod.main([str(synthetic)]) == mod.EXIT_BAD_INPUT


def test_failed_plot_writes_leave_the_old_files(synthetic):
    # Figures are written to a temporary file and renamed over the old one: under a file-size limit (as on a
    # full disk) every old PNG stays as it was and no temporary file is left. Before, savefig truncated them.
    import resource
    import signal

    for name in FIGURES:
        (synthetic / name).write_bytes(b"old " + name.encode())

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing Python
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    res = subprocess.run([sys.executable, "-B", str(SCRIPT), str(synthetic)], capture_output=True, text=True,
                         timeout=300, preexec_fn=limit)
    assert res.returncode == 2, res.stderr
    assert "File too large" in res.stderr, res.stderr
    for name in FIGURES:
        assert (synthetic / name).read_bytes() == b"old " + name.encode(), name
    assert not [p.name for p in synthetic.iterdir() if ".tmp" in p.name]


def _find_cli():
    env = os.environ.get("ROTARY_CLI")
    if env:
        return env
    for cand in sorted(REPO_ROOT.glob("build*/rotary")):
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which("rotary")


@pytest.mark.parametrize("preset", ["llama-3.1-8b", "phi-3.5-mini"])
def test_real_report_plots(tmp_path, preset):
    pytest.importorskip("matplotlib")
    cli = _find_cli()
    if not cli:
        pytest.skip("rotary CLI not built (set ROTARY_CLI)")
    d = tmp_path / preset
    res = subprocess.run([cli, "report", "--preset", preset, "--out", str(d), "--no-plots", "--quick"],
                         capture_output=True, text=True, timeout=300)
    if res.returncode == 2 and "preset" in res.stderr:
        pytest.skip(f"preset {preset} not available: {res.stderr.strip()}")
    assert res.returncode == 0, res.stderr
    res = subprocess.run([sys.executable, str(SCRIPT), str(d)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    for name in FIGURES:
        _check_png(d / name, want_red=name != "phase_error.png")


def test_plot_command_draws_every_layer_type_of_a_per_layer_type_report(tmp_path):
    """`rotary report` on a config with rope parameters per layer type writes DIR/<type>/; `rotary plot DIR`
    draws each of them (it used to want DIR/report.json)."""
    pytest.importorskip("matplotlib")
    cli = _find_cli()
    if not cli:
        pytest.skip("rotary CLI not built (set ROTARY_CLI)")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({
        "model_type": "gemma3_text", "hidden_size": 256, "num_attention_heads": 4, "head_dim": 64,
        "max_position_embeddings": 4096, "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}))
    d = tmp_path / "rep"
    res = subprocess.run([cli, "report", "--config", str(cfg), "--out", str(d), "--no-plots", "--quick"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert not (d / "report.json").exists()
    env = dict(os.environ, ROTARY_PYTHON=sys.executable)
    res = subprocess.run([cli, "plot", str(d)], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    for t in ("full_attention", "sliding_attention"):
        assert f"plots of {d / t}" in res.stdout
        for name in FIGURES:  # the unscaled type has no scaled (red) wavelength curve
            red = name != "phase_error.png" and (t, name) != ("sliding_attention", "wavelengths.png")
            _check_png(d / t / name, want_red=red)
    res = subprocess.run([cli, "plot", str(tmp_path / "nothing")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "report.json not found" in res.stderr


def test_speed_counts_the_bytes_a_partial_rotary_call_moves(tmp_path):
    """GPT-J rotates 64 of its 256 channels in place: the GB/s and the limit count those bytes, not whole heads."""
    cli = _find_cli()
    if not cli:
        pytest.skip("rotary CLI not built (set ROTARY_CLI)")
    d = tmp_path / "gptj"
    res = subprocess.run([cli, "report", "--preset", "gpt-j-6b", "--out", str(d), "--no-plots", "--quick"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    sp = json.loads((d / "report.json").read_text())["speed"]
    assert sp["rotated_channels"] == 64
    pre = sp["prefill"]
    tokens, q_heads = pre["q_shape"][:2]
    moved = 2 * 4 * tokens * (q_heads + pre["k_shape"][1]) * 64  # read and written, f32
    assert pre["gb_per_s"] * pre["seconds"] * 1e9 == pytest.approx(moved, rel=1e-9)
    assert pre["streaming_limit_gb_per_s"] * pre["streaming_limit_seconds"] * 1e9 == pytest.approx(moved, rel=1e-9)
    assert "64 rotated of each head's 256 channels" in res.stdout


def _drawn_figure(plot, synthetic, monkeypatch):
    """Runs one plot function of the standalone plotter on `synthetic` and returns its figure (not closed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    mod = _load_standalone()
    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    getattr(mod, plot)(plt, mod.load(str(synthetic)), str(synthetic / "out.png"))
    return figs[0]


@pytest.mark.parametrize("af,exp", [(1.0, -25), (1.6, -24), (0.9, -25)])
def test_phase_error_floor_is_half_an_ulp_of_the_largest_value(synthetic, monkeypatch, af, exp):
    # af·cos reaches af: values in [1, af) round to half of 2^-23, not 2^-25 · af (gpt-oss: af 1.35).
    rep = json.loads((synthetic / "report.json").read_text())
    (synthetic / "report.json").write_text(json.dumps(dict(rep, attention_factor=af)))
    fig = _drawn_figure("plot_phase_error", synthetic, monkeypatch)
    floor = [ln for ln in fig.axes[0].lines if "ulp" in ln.get_label()]
    assert len(floor) == 1 and floor[0].get_ydata()[0] == 2.0 ** exp, [ln.get_label() for ln in floor]
    assert f"2^{exp}" in floor[0].get_label()


def test_score_kernel_dots_sit_on_fp64_values_at_the_same_distances(synthetic, monkeypatch):
    # The kernel is evaluated at each bin start: it must be drawn against the fp64 bin-start value, not the bin mean.
    rows = list(csv.reader(open(synthetic / "score.csv")))
    head = rows[0]
    col = head.index("model_pair_mean")
    for row in rows[1:]:
        row[col] = str(float(row[col]) + 0.2)  # a bin mean away from the bin start, as in a wide oscillating bin
    _write_csv(synthetic / "score.csv", head, rows[1:])
    fig = _drawn_figure("plot_score", synthetic, monkeypatch)
    lines = {ln.get_label(): ln for ln in fig.axes[1].lines}
    dots = [ln for lb, ln in lines.items() if "f32 kernel" in lb]
    fp64 = [ln for lb, ln in lines.items() if "bin start" in lb and "fp64" in lb]
    assert len(dots) == 1 and len(fp64) == 1, list(lines)
    np.testing.assert_allclose(fp64[0].get_ydata(), dots[0].get_ydata(), atol=1e-9)
    np.testing.assert_array_equal(fp64[0].get_xdata(), dots[0].get_xdata())


def test_linear_scaling_context_is_max_position_embeddings(tmp_path):
    """Linear scaling names no original context: max_position_embeddings (Gemma 3's ×8: 131072) is the scaled one."""
    cli = _find_cli()
    if not cli:
        pytest.skip("rotary CLI not built (set ROTARY_CLI)")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 8, "head_dim": 128,
                               "max_position_embeddings": 131072, "rope_theta": 1e6,
                               "rope_scaling": {"rope_type": "linear", "factor": 8.0}}))
    d = tmp_path / "rep"
    res = subprocess.run([cli, "report", "--config", str(cfg), "--out", str(d), "--no-plots", "--quick"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    ctx = json.loads((d / "report.json").read_text())["context"]
    assert (ctx["original"], ctx["extended"]) == (16384, 131072), ctx
    assert "L = 16384 tokens = original context, max_position_embeddings / factor" in res.stdout
