# Plotter for `rotary report`: reads report.json and the CSVs of a report directory and draws four PNGs.
"""Draw the figures of a ``rotary report`` directory.

Usage::

    python -m rotary.report DIR [--out PNG_DIR]
    python python/rotary/report.py DIR [--out PNG_DIR]

Reads only ``report.json``, ``bands.csv``, ``decay.csv``, ``score.csv`` and ``phase_error.csv`` written by the
C++ ``rotary report`` command (never the compiled extension) and writes:

* ``wavelengths.png``  (a) wavelength 2*pi/theta_i per dimension pair, unscaled vs scaled, context marked
* ``decay.png``        (b) RoFormer long-term decay bound vs relative distance, per frequency variant
* ``score.png``        (c) attention score of a fixed random q/k pair (and q = k) vs relative distance
* ``phase_error.png``  (d) cos/sin error vs position: f32 angles vs rotary's exact rows

Exit status: 0 written, 2 bad input, 3 matplotlib missing.
"""

import os
import sys

if __name__ == "__main__" and not __package__:
    # Run as a script: its folder (the rotary package source) must not shadow top-level modules
    # such as `torch` (rotary/torch.py) for matplotlib/numpy imports.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

import argparse
import csv
import json
import math

EXIT_BAD_INPUT = 2
EXIT_NO_MATPLOTLIB = 3

FIGURES = ("wavelengths.png", "decay.png", "score.png", "phase_error.png")

# Colours per band class (same order as the C++ report's classes).
CLASS_STYLE = {
    "full_rotations": ("#d8ecd8", "full rotations within L (kept)"),
    "blended": ("#fbe5c8", "blended (partially scaled)"),
    "interpolated": ("#d6e2f3", "interpolated (full factor)"),
    "sub_rotation": ("#e8e8e8", "< 1 rotation within L (kept)"),
}


def _float(text):
    text = text.strip()
    if text in ("", "nan"):
        return math.nan
    if text == "inf":
        return math.inf
    if text == "-inf":
        return -math.inf
    return float(text)


def read_csv(path):
    """Returns {column: list} with numbers converted to float where possible."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path} has no rows")
    cols = {}
    for name in rows[0].keys():
        values = [r[name] for r in rows]
        try:
            cols[name] = [_float(v) for v in values]
        except ValueError:
            cols[name] = values
    return cols


def load(report_dir):
    with open(os.path.join(report_dir, "report.json")) as f:
        report = json.load(f)
    data = {"report": report}
    for name in ("bands", "decay", "score", "phase_error"):
        data[name] = read_csv(os.path.join(report_dir, name + ".csv"))
    return data


def _title(report):
    spec = report["spec"]  # config.json layout: rope_parameters holds rope_type and rope_theta
    rp = spec["rope_parameters"]
    t = f"{report['model']}: rotary_dim {spec['rotary_dim']}, base {rp['rope_theta']:g}, {rp['rope_type']}"
    if rp["rope_type"] != "default":
        t += f" x{report['context']['factor']:g}"
    return t


def _context_lines(ax, report, axis="x"):
    """Marks the original context L, max_position_embeddings and the scaled (extended) context."""
    ctx = report["context"]
    L, max_pos = ctx["original"], ctx["max_position_embeddings"]
    extended = ctx.get("extended") or max_pos
    line = ax.axvline if axis == "x" else ax.axhline
    line(L, color="darkgoldenrod", linestyle="-.", linewidth=1.5, label=f"original context L = {L:,}")
    if max_pos and max_pos != L:
        line(max_pos, color="darkgoldenrod", linestyle=":", linewidth=1.5,
             label=f"max_position_embeddings = {max_pos:,}")
    if extended and extended not in (L, max_pos):
        line(extended, color="olive", linestyle="--", linewidth=1.2,
             label=f"scaled context factor × L = {extended:,}")


def plot_wavelengths(plt, data, out):
    report, bands = data["report"], data["bands"]
    pairs = bands["pair"]
    fig, ax = plt.subplots(figsize=(10, 6))
    # Background: the class of each pair (contiguous runs).
    seen = set()
    classes = bands["class"]
    start = 0
    for j in range(1, len(pairs) + 1):
        if j == len(pairs) or classes[j] != classes[start]:
            colour, label = CLASS_STYLE.get(classes[start], ("#ffffff", classes[start]))
            ax.axvspan(pairs[start] - 0.5, pairs[j - 1] + 0.5, color=colour, zorder=0,
                       label=None if classes[start] in seen else label)
            seen.add(classes[start])
            start = j
    finite = lambda v: [x if math.isfinite(x) else math.nan for x in v]
    if any(abs(r - 1.0) > 1e-9 for r in bands["ratio"]):
        ax.plot(pairs, finite(bands["wavelength"]), "s-", color="tab:red", markersize=4, linewidth=2.0,
                label="scaled: 2π / θ'_i (what the model uses)", zorder=3)
    ax.plot(pairs, finite(bands["wavelength_default"]), "o-", color="black", markersize=2.5, linewidth=0.9,
            label="unscaled: 2π / θ_i (base only)", zorder=4)
    _context_lines(ax, report, axis="y")
    ax.set_yscale("log")
    ax.set_xlim(pairs[0] - 0.5, pairs[-1] + 0.5)
    ax.set_xlabel("dimension pair i  (θ_i = base^(-2i/d): high frequency on the left, low on the right)")
    ax.set_ylabel("wavelength 2π/θ_i  [tokens, log scale]")
    ax.set_title("(a) wavelength per dimension pair\n" + _title(report), fontsize=11)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=9, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _variants(report):
    return [(v["key"], v["label"]) for v in report["curves"]["variants"]]


VARIANT_COLOURS = {
    "model": "tab:red",
    "unscaled": "black",
    "linear": "tab:blue",
    "dynamic": "tab:orange",
    "yarn": "tab:green",
    "llama3": "tab:purple",
    "longrope_short": "tab:cyan",
    "roformer": "tab:brown",
}


def _style(key):
    colour = VARIANT_COLOURS.get(key, "tab:gray")
    if key == "model":
        return dict(color=colour, linewidth=2.2, zorder=5)
    if key == "unscaled":
        return dict(color=colour, linewidth=1.4, zorder=4)
    return dict(color=colour, linewidth=1.1, alpha=0.9)


def _from(table, column, keep):
    return [table[column][i] for i in keep]


def plot_decay(plt, data, out):
    report, decay = data["report"], data["decay"]
    r = decay["distance"]
    keep = [i for i, x in enumerate(r) if x >= 1]
    x = [r[i] for i in keep]
    fig, ax = plt.subplots(figsize=(10, 6))
    for key, label in _variants(report):
        if key + "_mean" not in decay:
            continue
        if key == "model":
            ax.fill_between(x, _from(decay, "model_min", keep), _from(decay, "model_max", keep),
                            color=VARIANT_COLOURS["model"], alpha=0.15, linewidth=0,
                            label="model: min..max within each distance bin")
        ax.plot(x, _from(decay, key + "_mean", keep), label=label, **_style(key))
    _context_lines(ax, report, axis="x")
    h = report["spec"]["rotary_dim"] // 2
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("relative distance m − n  [tokens, log scale; beyond 16: mean over log-spaced bins]")
    ax.set_ylabel(r"$\frac{1}{d/2}\sum_{j=1}^{d/2} |S_j|,\quad S_j=\sum_{k<j} e^{i(m-n)\theta_k}$" + f"   (d/2 = {h})")
    ax.set_title("(b) long-term decay: RoFormer upper bound on |attention| vs relative distance\n"
                 + _title(report), fontsize=11)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="lower left", fontsize=9, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


SCORE_VARIANTS = ("model", "unscaled", "roformer", "longrope_short")


def plot_score(plt, data, out):
    report, score = data["report"], data["score"]
    r = score["distance"]
    keep = [i for i, x in enumerate(r) if x >= 1]
    x = [r[i] for i in keep]
    fig, axes = plt.subplots(2, 1, figsize=(10, 8.5), sharex=True)
    for ax, suffix, what in ((axes[0], "_self", "same vector (k = q): decays with distance"),
                             (axes[1], "_pair", "fixed random pair (q, k independent): starts at q·k, then oscillates")):
        for key, label in _variants(report):
            col = key + suffix
            if key not in SCORE_VARIANTS or col + "_mean" not in score:
                continue
            if key == "model":
                ax.fill_between(x, _from(score, col + "_min", keep), _from(score, col + "_max", keep),
                                color=VARIANT_COLOURS["model"], alpha=0.15, linewidth=0,
                                label="model: min..max within each distance bin")
            style = _style(key)
            if key not in ("model", "unscaled"):
                style["linestyle"] = "--"
            ax.plot(x, _from(score, col + "_mean", keep), label=label + " (bin mean)", **style)
        if suffix == "_pair" and "model_pair_kernel" in score and "model_pair" in score:
            # The kernel's values are at each bin start: compare them with the fp64 value there, not the bin mean.
            ax.plot(x, _from(score, "model_pair", keep), linestyle="none", marker="o", markersize=4.5,
                    markerfacecolor="none", markeredgewidth=0.6, color="tab:red", zorder=6,
                    label="model at each bin start, fp64 (rings)")
            ax.plot(x, _from(score, "model_pair_kernel", keep), linestyle="none", marker="o", markersize=1.6,
                    color="tab:blue", label="model at each bin start, through rotary's f32 kernel (dots)", zorder=7)
        _context_lines(ax, report, axis="x")
        ax.axhline(0.0, color="gray", linewidth=0.6)
        ax.set_xscale("log")
        ax.set_ylabel("score <R(m)q, R(n)k>\n(unit q, k; × attention_factor²)")
        ax.set_title(what, fontsize=10)
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(loc="lower left", fontsize=8, framealpha=0.9)
    axes[1].set_xlabel("relative distance m − n  [tokens, log scale; beyond 16: log-spaced bins]")
    fig.suptitle("(c) attention score vs relative distance\n" + _title(report), fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _largest_binade(top):
    """k of the binade [2^k, 2^(k+1)) that holds the largest values below `top` (af·cos, af·sin: |value| <= af; an
    exact power of two such as 1 is itself exact); half an f32 ulp there is 2^(k - 24)."""
    return math.ceil(math.log2(top)) - 1


def plot_phase_error(plt, data, out):
    report, pe = data["report"], data["phase_error"]
    p = pe["position"]
    floor = 1e-10  # exact zeros cannot be drawn on a log axis
    clip = lambda v: [max(x, floor) for x in v]
    fig, ax = plt.subplots(figsize=(10, 6))
    ax.plot(p, clip(pe["f32_cos_err"]), color="tab:orange", linewidth=1.6, label="f32 angles: max |cos error|")
    ax.plot(p, clip(pe["f32_sin_err"]), color="tab:red", linewidth=1.0, linestyle="--",
            label="f32 angles: max |sin error|")
    ax.plot(p, clip(pe["rotary_cos_err"]), color="tab:green", linewidth=1.6, label="rotary: max |cos error|")
    ax.plot(p, clip(pe["rotary_sin_err"]), color="tab:blue", linewidth=1.0, linestyle="--",
            label="rotary: max |sin error|")
    exp = _largest_binade(max(1.0, abs(report.get("attention_factor", 1.0))))
    ax.axhline(2.0 ** (exp - 24), color="gray", linestyle=":", linewidth=1.0,
               label=f"half an f32 ulp of the largest |value| (2^{exp - 24}): the floor for any f32 table")
    _context_lines(ax, report, axis="x")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(floor / 2, 4.0)
    ax.set_xlabel("position  [tokens, log scale, up to 2^24 − 1]")
    ax.set_ylabel("max over pairs of |value − fp64 truth|  [log scale]")
    ax.set_title("(d) cos/sin error vs position: f32 angle (f32 θ × f32 position, as commonly computed) vs rotary\n"
                 + _title(report), fontsize=11)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="upper left", fontsize=9, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def draw(report_dir, out_dir=None):
    """Draws the four figures; returns their paths. Raises ImportError if matplotlib is missing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = out_dir or report_dir
    os.makedirs(out_dir, exist_ok=True)
    data = load(report_dir)
    paths = []
    for name, fn in zip(FIGURES, (plot_wavelengths, plot_decay, plot_score, plot_phase_error)):
        path = os.path.join(out_dir, name)
        save_atomically(lambda tmp: fn(plt, data, tmp), path)
        paths.append(path)
    return paths


def save_atomically(write, path):
    """Calls write(tmp) for a temporary file in path's folder, fsyncs it and renames it over path, as the C++
    CLI writes its files: a failed write (full disk, file-size limit) leaves the old file at path untouched and
    no temporary file behind."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder or os.curdir, f".{name}.tmp-{os.getpid()}{os.path.splitext(name)[1]}")
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m rotary.report",
                                     description="Draw the PNGs of a `rotary report` directory.")
    parser.add_argument("dir", help="directory written by `rotary report --out DIR`")
    parser.add_argument("--out", help="where to write the PNGs (default: DIR)")
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.dir, "report.json")):
        print(f"rotary.report: {args.dir}/report.json not found (run `rotary report --out {args.dir}` first)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("rotary.report: matplotlib is not installed (pip install 'rotary[plots]', or pip install matplotlib); no plots drawn",
              file=sys.stderr)
        return EXIT_NO_MATPLOTLIB
    try:
        paths = draw(args.dir, args.out)
    except (OSError, ValueError, KeyError) as e:
        print(f"rotary.report: cannot plot {args.dir}: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print("plots: " + ", ".join(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
