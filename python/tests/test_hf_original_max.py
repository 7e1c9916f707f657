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
        assert spec.attention_factor == pytest.approx(float(hf_af), rel=1e-6), f"{model_type} {case}: attention_factor"
