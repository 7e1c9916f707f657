"""PhiMoE's longrope: transformers' PhimoeRotaryEmbedding scales cos/sin by the dict's short_mscale / long_mscale."""
from __future__ import annotations

import json

import numpy as np
import pytest

import rotary
from hf_models import load_hf_config, quiet_transformers

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
modeling = pytest.importorskip("transformers.models.phimoe.modeling_phimoe")

SHORT = [1.0 + i / 32 for i in range(32)]
LONG = [2.0 + i for i in range(32)]


def _config(tmp_path, short_mscale, long_mscale):
    # Phi-3.5-MoE's own values, head_dim 64: orig 4096, max 131072 (the computed longrope factor would be 1.19).
    doc = {"model_type": "phimoe", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
           "max_position_embeddings": 131072, "rope_theta": 10000.0,
           "rope_scaling": {"type": "longrope", "short_factor": SHORT, "long_factor": LONG,
                            "short_mscale": short_mscale, "long_mscale": long_mscale,
                            "original_max_position_embeddings": 4096}}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    return str(tmp_path / "config.json")


def test_phimoe_cos_sin_are_scaled_by_its_mscale(tmp_path):
    path = _config(tmp_path, 1.243163121016122, 1.243163121016122)  # Phi-3.5-MoE-instruct's config.json
    with quiet_transformers():
        emb = modeling.PhimoeRotaryEmbedding(load_hf_config(tmp_path))
    pos = torch.arange(101)[None]
    hf_cos, hf_sin = emb(torch.zeros(1, 101, 64), pos)
    spec = rotary.Spec.from_hf_config(path)
    assert spec.attention_factor == pytest.approx(1.243163121016122, rel=1e-12)
    cos, sin = rotary.cos_sin(spec, np.arange(101), seq_len=101)
    np.testing.assert_allclose(cos, hf_cos[0, :, :32].double().numpy(), rtol=0, atol=2e-5)  # HF: f32 angles up to 100 rad
    np.testing.assert_allclose(sin, hf_sin[0, :, :32].double().numpy(), rtol=0, atol=2e-5)  # HF: f32 angles up to 100 rad


def test_phimoe_with_two_different_mscales_is_refused_naming_them(tmp_path):
    path = _config(tmp_path, 1.1, 1.3)
    with pytest.raises(Exception, match=r"rope_scaling\.long_mscale must equal rope_scaling\.short_mscale"):
        rotary.Spec.from_hf_config(path)
