#!/usr/bin/env python3
# Survey: rotary vs each transformers config class's own RotaryEmbedding, on a trimmed or saved config.json.
"""For every model_type in transformers' CONFIG_MAPPING whose modeling module has a text RotaryEmbedding, build a
trimmed config (model_type, hidden_size 768, 8 heads; a composite model's fields in text_config), instantiate the
model's own RotaryEmbedding, and compare its inv_freq with rotary's (the installed build, Spec.from_hf_config on the
same document). Prints one line per model type: the class's head_dim, base and rope type as transformers filled them
in, and "ok", "DIFF" or rotary's error.

    PYTHONPATH=<site> python scripts/survey_class_defaults.py [--only llama4,vaultgemma] [--saved]

With --saved, the document is instead the class's own default config as save_pretrained writes it (to_dict():
every field, composites nested as transformers nests them, non-finite floats included), compared with the
RotaryEmbedding of its get_text_config(); per-layer-type embeddings ({type}_inv_freq) are compared type by type
with rotary.LayerTypeSpecs.

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


def survey_saved(mt, rotary):
    """The saved default config of `mt` against its text part's RotaryEmbedding (None: no such embedding)."""
    import transformers

    try:
        config = transformers.AutoConfig.for_model(mt)
        text = config.get_text_config()
    except Exception:  # noqa: BLE001 - a class that cannot build its own defaults
        return None
    cls = hf_models.text_rotary_embedding_class(text.model_type)
    if cls is None:
        return None
    try:
        emb = cls(config=text)
    except Exception as e:  # noqa: BLE001
        return f"skipped: {type(e).__name__}: {str(e)[:80]}"
    try:
        hf = {t: inv.double().numpy() for t, (inv, _) in hf_models.per_type_rope(emb).items()}
    except AttributeError:
        return "skipped: no inv_freq"
    doc = config.to_dict()
    try:
        if None in hf:
            try:
                ours = {None: rotary.Spec.from_hf_config(doc).inv_freq(None)}
            except NotImplementedError:  # one RoPE shared by layer types the file lists
                ours = {None: rotary.LayerTypeSpecs.from_hf_config(doc).for_layer(0).inv_freq(None)}
        else:
            specs = rotary.LayerTypeSpecs.from_hf_config(doc)
            ours = {t: specs[hf_models.LABEL_LAYER_TYPE.get(t, t)].inv_freq(None) for t in hf}
    except Exception as e:  # noqa: BLE001
        return f"rotary error: {str(e)[:80]}"
    for t, ref in hf.items():
        got = ours[t]
        if got.shape != ref.shape or float(np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-30))) > 1e-5:
            return f"DIFF {t or ''}: rotary {got.shape[0]} frequencies, transformers {ref.shape[0]}"
    return f"ok ({', '.join(f'{t}: {v.shape[0]}' for t, v in hf.items()) if None not in hf else hf[None].shape[0]})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated model types")
    ap.add_argument("--saved", action="store_true", help="the classes' saved default configs, not trimmed files")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    import rotary
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    types = args.only.split(",") if args.only else sorted(CONFIG_MAPPING_NAMES)
    differ = []
    for mt in types:
        line = (survey_saved if args.saved else survey)(mt, rotary)
        if line is None:
            continue
        print(f"{mt:36s} {line}", flush=True)
        if "DIFF" in line or "rotary error" in line:
            differ.append(mt)
    print(f"\nrotary differs or refuses: {len(differ)}: {' '.join(differ)}")


if __name__ == "__main__":
    main()
