"""config.json as transformers' save_pretrained writes it, Python's JSON dialect included (NaN / Infinity tokens)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import rotary
from hf_models import quiet_transformers, text_rotary_embedding_class

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# Hybrid Mamba / attention models whose configs hold time_step_limit = (0.0, inf): save_pretrained writes
# `[0.0, Infinity]`, which JSON lacks; their attention rotates with RoPE.
HYBRIDS = ["bamba", "falcon_h1", "granitemoehybrid"]


@pytest.mark.parametrize("model_type", HYBRIDS)
def test_a_saved_hybrid_config_with_infinity_reads_as_transformers(model_type, tmp_path):
    with quiet_transformers():
        try:
            config = transformers.AutoConfig.for_model(model_type)
        except (KeyError, ValueError) as e:  # pragma: no cover - depends on the installed transformers
            pytest.skip(f"transformers has no {model_type}: {e}")
        config.save_pretrained(tmp_path)
    text = (tmp_path / "config.json").read_text()
    assert "Infinity" in text, f"{model_type}: transformers no longer writes a non-finite field"
    assert any(isinstance(v, float) and math.isinf(v) for v in config.to_dict().get("time_step_limit", ()))
    cls = text_rotary_embedding_class(model_type)
    hf = cls(config=config).inv_freq.double().numpy()
    for source in (str(tmp_path / "config.json"), text, config, config.to_dict()):  # file, text, object, dict
        ours = rotary.Spec.from_hf_config(source).inv_freq(None)
        assert ours.shape == hf.shape and np.max(np.abs(ours - hf) / hf) <= 1e-6, (model_type, type(source))


def test_a_non_finite_rope_field_is_refused_naming_it(tmp_path):
    for value, shown in ((float("inf"), "Infinity"), (float("nan"), "NaN"), (-float("inf"), "-Infinity")):
        (tmp_path / "config.json").write_text(json.dumps({"head_dim": 64, "rope_theta": value}))
        for source in (str(tmp_path / "config.json"), {"head_dim": 64, "rope_theta": value}):
            with pytest.raises(ValueError, match=rf'rope_theta must be a number, got "{shown}"'):
                rotary.Spec.from_hf_config(source)


def test_dbrx_reads_its_attribute_map_and_its_attn_config_base(tmp_path):
    """DBRX: d_model / n_heads / max_seq_len (DbrxConfig's attribute_map); a Hub file's base lives in attn_config,
    which DBRX's code and vLLM read and transformers 5.25 does not (a documented divergence)."""
    from hf_models import modeling_module

    with quiet_transformers():
        saved = transformers.AutoConfig.for_model("dbrx", d_model=1024, n_heads=8)
    emb = modeling_module("dbrx").DbrxRotaryEmbedding(config=saved)
    spec = rotary.Spec.from_hf_config(saved.to_dict())  # rope_parameters present: transformers' base
    np.testing.assert_allclose(spec.inv_freq(None), emb.inv_freq.double().numpy(), rtol=1e-6)
    hub = {"model_type": "dbrx", "d_model": 6144, "n_heads": 48, "max_seq_len": 32768,
           "attn_config": {"kv_n_heads": 8, "rope_theta": 500000}}
    (tmp_path / "config.json").write_text(json.dumps(hub))
    with quiet_transformers():
        hf = transformers.AutoConfig.from_pretrained(str(tmp_path))
    assert hf.attn_config.rope_theta == 500000 and hf.rope_parameters["rope_theta"] == 10000.0  # transformers' reading
    spec = rotary.Spec.from_hf_config(str(tmp_path / "config.json"))
    assert (spec.head_dim, spec.base, spec.max_position_embeddings) == (128, 500000.0, 32768)


def _max_pos_aliases():
    """(model_type, key) for each transformers config class whose attribute_map sends max_position_embeddings to
    another key (the only one a saved file holds), where the model has a text RotaryEmbedding."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    out = []
    for model_type in sorted(CONFIG_MAPPING_NAMES):
        try:
            cls = CONFIG_MAPPING[model_type]
        except Exception:  # noqa: BLE001 - needs an optional dependency
            continue
        key = (getattr(cls, "attribute_map", None) or {}).get("max_position_embeddings")
        if key and text_rotary_embedding_class(model_type) is not None:
            out.append((model_type, key))
    return out


@pytest.mark.parametrize("model_type,key", _max_pos_aliases())
def test_an_attribute_mapped_max_position_embeddings_is_read(model_type, key, tmp_path):
    # transformers reads max_position_embeddings from the attribute_map'd key (BailingHybrid: model_max_length; it
    # was refused as "max_position_embeddings is required" for dynamic): rotary reads that key too.
    with quiet_transformers():
        config = transformers.AutoConfig.for_model(model_type, max_position_embeddings=32768)
        if getattr(config, "rope_parameters", None) is not None and "rope_type" in config.rope_parameters:
            config.rope_parameters = {**config.rope_parameters, "rope_type": "dynamic", "factor": 4.0}
        config.save_pretrained(tmp_path)
    doc = config.to_dict()
    assert doc[key] == config.max_position_embeddings == 32768 and "max_position_embeddings" not in doc, model_type
    for source in (config, doc, str(tmp_path / "config.json")):
        spec = rotary.Spec.from_hf_config(source)
        assert spec.max_position_embeddings == 32768, (model_type, type(source))
    # A file holding both keys: the class's __init__ decides which wins (BailingHybrid: model_max_length; DBRX:
    # max_position_embeddings); rotary read the plain key for both.
    both = dict(doc, max_position_embeddings=1000)
    with quiet_transformers():
        want = type(config).from_dict(both).max_position_embeddings
    assert rotary.Spec.from_hf_config(both).max_position_embeddings == want, model_type


@pytest.mark.parametrize("model_type", ["granite4_vision", "granite4_vision_text"])
def test_a_model_whose_name_holds_vision_has_its_text_rope_found_and_read(model_type):
    # Granite 4 Vision's text RoPE is Granite4VisionTextRotaryEmbedding: hf_models skipped every class whose name
    # holds "Vision", so the tests that find a model's text RoPE through it passed this model type by.
    cls = text_rotary_embedding_class(model_type)
    assert cls is not None and cls.__name__ == "Granite4VisionTextRotaryEmbedding", cls
    with quiet_transformers():
        config = transformers.AutoConfig.for_model(model_type)
        hf = cls(config=config.get_text_config()).inv_freq.double().numpy()
    for source in (config, config.to_dict()):
        ours = rotary.Spec.from_hf_config(source).inv_freq(None)
        assert ours.shape == hf.shape, (model_type, type(source))
        np.testing.assert_allclose(ours, hf, rtol=1e-6, err_msg=model_type)
