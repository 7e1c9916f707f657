#!/usr/bin/env python3
# Survey: which transformers config classes' RoPE defaults a trimmed config.json needs, and whether rotary has them.
"""For every model_type in transformers' CONFIG_MAPPING whose modeling module has a text RotaryEmbedding, build a
trimmed config (model_type, hidden_size 768, 8 heads; a composite model's fields in text_config), instantiate the
model's own RotaryEmbedding, and compare its inv_freq with rotary's (the installed build, Spec.from_hf_config on the
same document). Prints one line per model type: the class's head_dim, base and rope type as transformers filled them
in, and "ok", "DIFF" or rotary's error.

    PYTHONPATH=<site> python scripts/survey_class_defaults.py [--only llama4,vaultgemma]

Not used by the tests (python/tests/test_hf_class_defaults.py checks the table's entries).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
import hf_models  # noqa: E402  (the tests' helpers: modeling module, RotaryEmbedding class, trimmed config)

BASE = {"hidden_size": 768, "num_attention_heads": 8, "num_key_value_heads": 8}


def survey(mt, rotary):
    cls = hf_models.text_rotary_embedding_class(mt)
    if cls is None:
        return None
    try:
        config, doc = hf_models.trimmed_hf_config(mt, BASE)
        hf = cls(config=config).inv_freq.double().numpy()
    except Exception as e:  # noqa: BLE001 - a class that needs more fields, or no inv_freq (per-layer-type)
        return f"skipped: {type(e).__name__}: {str(e)[:80]}"
    rp = config.rope_parameters if isinstance(getattr(config, "rope_parameters", None), dict) else {}
    try:
        ours = rotary.Spec.from_hf_config(doc).inv_freq(None)
        same = ours.shape == hf.shape and float(np.max(np.abs(ours - hf) / np.abs(hf))) <= 1e-6
        verdict = "ok" if same else f"DIFF (rotary {ours.shape[0]} frequencies)"
    except Exception as e:  # noqa: BLE001
        verdict = f"rotary error: {str(e)[:60]}"
    return (f"n={hf.shape[0]:3d} head_dim={getattr(config, 'head_dim', None)} "
            f"qk_rope_head_dim={getattr(config, 'qk_rope_head_dim', None)} theta={rp.get('rope_theta')} "
            f"type={rp.get('rope_type')} partial={rp.get('partial_rotary_factor')}  {verdict}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated model types")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    import rotary
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    types = args.only.split(",") if args.only else sorted(CONFIG_MAPPING_NAMES)
    differ = []
    for mt in types:
        line = survey(mt, rotary)
        if line is None:
            continue
        print(f"{mt:36s} {line}", flush=True)
        if "DIFF" in line or "rotary error" in line:
            differ.append(mt)
    print(f"\nrotary differs or refuses: {len(differ)}: {' '.join(differ)}")


if __name__ == "__main__":
    main()
