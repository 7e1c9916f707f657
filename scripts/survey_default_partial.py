#!/usr/bin/env python3
# Survey: which transformers models' default-type RoPE honours partial_rotary_factor, and whether rotary agrees.
"""For every model_type in transformers' CONFIG_MAPPING whose modeling module has a text RotaryEmbedding, build a
trimmed config (hidden_size 768, 8 heads, partial_rotary_factor 0.5 at the top level, then inside rope_parameters),
instantiate the model's own RotaryEmbedding and record whether its default-type inv_freq honours the factor (fewer
frequencies than with no factor), and whether rotary (the installed build, Spec.from_hf_config) gives the same
frequencies; also a linear (factor 2) dict with the factor, which transformers' generic functions always honour.

    PYTHONPATH=<site> python scripts/survey_default_partial.py [--json out.json] [--only llama,qwen2]

Prints one line per model type and a summary; `--table` prints the model types whose default type ignores the factor,
as src/core/model_defaults_partial.cc lists them. Not used by the tests (python/tests/test_hf_default_partial.py
checks the same facts for the listed types).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
import hf_models  # noqa: E402  (the tests' helpers: modeling module, RotaryEmbedding class, trimmed config)

HIDDEN, HEADS = 768, 8
BASE = {"hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_key_value_heads": HEADS}
VARIANTS = {
    "top": {"partial_rotary_factor": 0.5},
    "dict": {"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}},
    "linear": {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}},
}


def whole(extra):
    """The same fields with partial_rotary_factor 1.0 (the baseline: a class's own factor must not count)."""
    out = json.loads(json.dumps(extra))
    (out["rope_parameters"] if "rope_parameters" in out else out)["partial_rotary_factor"] = 1.0
    return out


def hf_inv_freq(cls, mt, fields):
    config, doc = hf_models.trimmed_hf_config(mt, fields)
    emb = cls(config=config)
    inv = getattr(emb, "inv_freq", None)
    if inv is None:
        raise LookupError("no inv_freq (per-layer-type)")
    return inv.double().numpy(), getattr(emb, "rope_type", "?"), doc


def rotary_inv_freq(doc):
    import rotary
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        return rotary.Spec.from_hf_config(path).inv_freq(None)


def agree(ours, hf):
    return ours.shape == hf.shape and float(np.max(np.abs(ours - hf) / np.abs(hf))) <= 1e-6


def survey(mt):
    cls = hf_models.text_rotary_embedding_class(mt)
    if cls is None:
        return None
    row = {"model_type": mt, "class": cls.__name__}
    try:
        full, row["type_full"], _ = hf_inv_freq(cls, mt, BASE)
    except Exception as e:  # noqa: BLE001
        row["error"] = f"{type(e).__name__}: {e}"[:160]
        return row
    row["n_full"] = int(full.shape[0])
    for name, extra in VARIANTS.items():
        r = row[name] = {}
        try:
            hf, r["rope_type"], doc = hf_inv_freq(cls, mt, {**BASE, **extra})
            base, _, _ = hf_inv_freq(cls, mt, {**BASE, **whole(extra)})
        except Exception as e:  # noqa: BLE001
            r["error"] = f"{type(e).__name__}: {e}"[:160]
            continue
        r["n"], r["n_whole"] = int(hf.shape[0]), int(base.shape[0])
        r["honours"] = r["n"] < r["n_whole"]
        try:
            ours = rotary_inv_freq(doc)
            r["rotary_n"] = int(ours.shape[0])
            r["rotary_agrees"] = agree(ours, hf)
        except Exception as e:  # noqa: BLE001
            r["rotary_error"] = f"{type(e).__name__}: {e}"[:160]
            r["rotary_agrees"] = False
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--only", help="comma-separated model types")
    ap.add_argument("--table", action="store_true", help="print the ignoring model types, one a line")
    args = ap.parse_args()
    import logging
    import warnings
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    types = args.only.split(",") if args.only else sorted(CONFIG_MAPPING_NAMES)
    rows = []
    for mt in types:
        row = survey(mt)
        if row is None:
            continue
        rows.append(row)
        if "error" in row:
            print(f"{mt:32s} skipped: {row['error']}", flush=True)
            continue
        cells = []
        for name in VARIANTS:
            r = row[name]
            if "error" in r:
                cells.append(f"{name}=error")
            else:
                cells.append(f"{name}={r['rope_type']}:{r['n']}/{r['n_whole']}"
                             f"{'' if r['honours'] else ' IGNORES'}{'' if r['rotary_agrees'] else ' ROTARY-DIFFERS'}")
        print(f"{mt:32s} " + "  ".join(cells), flush=True)
    ok = [r for r in rows if "error" not in r]
    dflt = [r for r in ok if "n" in r["dict"] and r["dict"]["rope_type"] == "default"]
    ign = sorted(r["model_type"] for r in dflt if not r["dict"]["honours"])
    hon = sorted(r["model_type"] for r in dflt if r["dict"]["honours"])
    differ = sorted(r["model_type"] for r in ok for v in VARIANTS if r[v].get("rotary_agrees") is False)
    print(f"\n{len(rows)} model types with a text RotaryEmbedding, {len(ok)} built; default type (factor in "
          f"rope_parameters): {len(ign)} ignore the factor, {len(hon)} honour it")
    print(f"rotary differs (any variant): {len(set(differ))}: {' '.join(sorted(set(differ)))}")
    if args.table:
        print("\n".join(ign))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
