"""original_max_position_embeddings at the top level, in the dict, both or neither: read as transformers reads it."""
from __future__ import annotations

import json

import numpy as np
import pytest

import rotary
from hf_models import load_hf_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# Phi-3 and Phi-4-multimodal's config classes hold original_max_position_embeddings as an attribute (default 4096) that
# replaces the dict's; Phi-MoE's (like Llama's) has none, so transformers reads the dict's and ignores the top level.
CASES = {"neither": (None, None), "top": (8192, None), "dict": (None, 8192), "both": (2048, 8192)}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("model_type", ["phi3", "phi4_multimodal", "phimoe"])
def test_longrope_original_max_is_read_as_transformers_reads_it(model_type, case, tmp_path):
    top, in_dict = CASES[case]
    scaling = {"type": "longrope", "short_factor": [1.0 + i / 48 for i in range(48)],
               "long_factor": [1.0 + i for i in range(48)]}
    if model_type == "phimoe":
        scaling.update(short_mscale=1.0, long_mscale=1.0)
    if in_dict is not None:
        scaling["original_max_position_embeddings"] = in_dict
    doc = {"model_type": model_type, "hidden_size": 3072, "num_attention_heads": 32, "num_key_value_heads": 32,
           "max_position_embeddings": 131072, "rope_theta": 10000.0, "rope_scaling": scaling}
    if top is not None:
        doc["original_max_position_embeddings"] = top
    (tmp_path / "config.json").write_text(json.dumps(doc))
    config = load_hf_config(tmp_path)
    init = transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS["longrope"]
    spec = rotary.Spec.from_hf_config(str(tmp_path / "config.json"))
    for seq_len in (3000, 6000, 10000):  # each side of 2048, 4096 and 8192
        hf_inv, hf_af = init(config, "cpu", seq_len=seq_len)
        ours = spec.inv_freq(seq_len)
        rel = np.max(np.abs(ours - hf_inv.double().numpy()) / hf_inv.double().numpy())
        assert rel <= 1e-6, f"{model_type} {case} seq_len {seq_len}: inv_freq max rel err {rel:.3g}"
        # PhimoeRotaryEmbedding scales by the dict's mscale in place of the init function's factor (test_hf_phimoe.py)
        expected = 1.0 if model_type == "phimoe" else float(hf_af)
        assert spec.attention_factor == pytest.approx(expected, rel=1e-6), f"{model_type} {case}: attention_factor"


# transformers 5's standardize_rope_params, run by every RoPE init function: for a flat dict of type llama3, yarn or
# longrope, a config attribute original_max_position_embeddings replaces the dict's. A top-level key of config.json
# is kept as such an attribute by every class but Phi-MoE's (which sets the attribute from the dict); entries of a
# dict nested per layer type read only their own value (else max_position_embeddings).
SCALINGS = {
    "yarn": {"factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0},
    "llama3": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    "longrope": {"short_factor": [1.0 + i / 32 for i in range(32)], "long_factor": [2.0 + i for i in range(32)]},
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("model_type,rope_type", [(m, t) for m in ("llama", "qwen2", "deepseek_v3") for t in SCALINGS]
                         + [("phimoe", "longrope")])  # PhimoeConfig takes longrope only
def test_top_level_original_max_as_transformers_5_reads_it(model_type, rope_type, case, tmp_path):
    top, in_dict = CASES[case]
    scaling = {"rope_type": rope_type, "rope_theta": 10000.0, **SCALINGS[rope_type]}
    if model_type == "phimoe":
        scaling.update(short_mscale=1.0, long_mscale=1.0)
    if in_dict is not None:
        scaling["original_max_position_embeddings"] = in_dict // 8  # 1024: below max_position_embeddings 16384
    doc = {"model_type": model_type, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
           "head_dim": 64, "qk_rope_head_dim": 64, "max_position_embeddings": 16384, "rope_scaling": scaling}
    if top is not None:
        doc["original_max_position_embeddings"] = top // 4  # 2048 or 512
    (tmp_path / "config.json").write_text(json.dumps(doc))
    config = load_hf_config(tmp_path)
    init = transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type]
    spec = rotary.Spec.from_hf_config(str(tmp_path / "config.json"))
    for seq_len in (300, 700, 1500, 3000):  # each side of 512, 1024 and 2048
        hf_inv, hf_af = init(config, "cpu", seq_len=seq_len)
        ours, af = spec.frequencies(seq_len)
        rel = np.max(np.abs(ours - hf_inv.double().numpy()) / hf_inv.double().numpy())
        assert rel <= 1e-6, f"{model_type} {rope_type} {case} seq_len {seq_len}: inv_freq max rel err {rel:.3g}"
        expected = 1.0 if model_type == "phimoe" else float(hf_af)  # its mscale (test_hf_phimoe.py)
        assert af == pytest.approx(expected, rel=1e-6), f"{model_type} {rope_type} {case}: attention_factor"


def test_entries_nested_per_layer_type_do_not_read_the_top_level_original_max(tmp_path):
    params = {"full_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6},
              "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
    doc = {"model_type": "gemma3_text", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
           "head_dim": 64, "max_position_embeddings": 16384, "original_max_position_embeddings": 512,
           "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"], "rope_parameters": params}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    config = load_hf_config(tmp_path)
    hf_inv, hf_af = transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS["yarn"](
        config, "cpu", layer_type="full_attention")
    specs = rotary.LayerTypeSpecs.from_hf_config(str(tmp_path / "config.json"))
    ours, af = specs["full_attention"].frequencies(None)
    rel = np.max(np.abs(ours - hf_inv.double().numpy()) / hf_inv.double().numpy())
    assert rel <= 1e-6, f"inv_freq max rel err {rel:.3g}"
    assert af == pytest.approx(float(hf_af), rel=1e-6)
