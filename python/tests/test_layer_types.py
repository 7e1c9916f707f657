"""RoPE per layer type (rotary.LayerTypeSpecs) vs transformers' own Gemma 3 config and Gemma3RotaryEmbedding."""
from __future__ import annotations

import json

import numpy as np
import pytest

import rotary
from hf_models import hf_model_modules

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

# inv_freq: HF's float32 values vs rotary's double (HF's own rounding, ~2.5e-7 relative).
INV_FREQ_REL_TOL = 1e-6
# cos/sin: HF forms the angle p*theta in float32; for p < 300 its error is <= ulp(300)/2 = 1.5e-5 rad (plus one
# f32 rounding of theta, ~300 * 6e-8), while rotary's rows are exact: 3e-5 bounds the difference.
COS_SIN_ABS_TOL = 3e-5


def _gemma3(**kw):
    cfg_mod, model_mod = hf_model_modules("gemma3")
    base = dict(vocab_size=32, hidden_size=64, intermediate_size=64, num_hidden_layers=7, num_attention_heads=2,
                num_key_value_heads=1, head_dim=32, max_position_embeddings=4096)
    base.update(kw)
    return cfg_mod.Gemma3TextConfig(**base), model_mod


CASES = {
    "linear-global": dict(rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                           "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
    "yarn-global": dict(rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 5e5,
                                                            "original_max_position_embeddings": 1024},
                                         "sliding_attention": {"rope_type": "default", "rope_theta": 2e4}}),
    "legacy-kwargs": dict(rope_scaling={"rope_type": "linear", "factor": 4.0}, rope_theta=2e6, rope_local_base_freq=3e4),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_gemma3_layer_types_match_transformers(case):
    config, model_mod = _gemma3(**CASES[case])
    emb = model_mod.Gemma3RotaryEmbedding(config)
    for source in (config, config.to_dict(), config.to_json_string()):
        specs = rotary.LayerTypeSpecs.from_hf_config(source)
        assert specs.nested
        assert specs.layer_types == list(config.layer_types)
        assert sorted(specs.specs) == sorted(set(config.layer_types))
        for layer_type in specs.specs:
            hf_inv = getattr(emb, f"{layer_type}_inv_freq").double().numpy()
            hf_af = getattr(emb, f"{layer_type}_attention_scaling")
            spec = specs[layer_type]
            inv, af = spec.frequencies()
            np.testing.assert_allclose(inv, hf_inv, rtol=INV_FREQ_REL_TOL, atol=0)
            assert af == pytest.approx(hf_af, rel=1e-6)
            # The cos/sin HF's forward gives this layer type, against rotary's exact rows.
            pos = torch.arange(0, 300, 7)[None]
            x = torch.zeros(1, pos.shape[1], 32)
            cos, sin = emb(x, pos, layer_type)
            c, s = rotary.cos_sin(spec, pos[0].numpy())
            np.testing.assert_allclose(cos[0, :, : c.shape[1]].numpy(), c, atol=COS_SIN_ABS_TOL, rtol=0)
            np.testing.assert_allclose(sin[0, :, : s.shape[1]].numpy(), s, atol=COS_SIN_ABS_TOL, rtol=0)
        for i, t in enumerate(config.layer_types):
            assert specs.for_layer(i) is specs[t]


def test_gemma3_hub_legacy_config_json():
    """A Hub config.json of the pre-v5 form (what transformers converts on load) gives the same specs."""
    config, _ = _gemma3(**CASES["legacy-kwargs"])
    legacy = {"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 2, "head_dim": 32,
              "num_hidden_layers": 7, "max_position_embeddings": 4096, "sliding_window_pattern": 6,
              "rope_theta": 2e6, "rope_local_base_freq": 3e4, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}
    a = rotary.LayerTypeSpecs.from_hf_config(json.dumps(legacy))
    b = rotary.LayerTypeSpecs.from_hf_config(config)
    assert a.layer_types == b.layer_types == list(config.layer_types)
    for t in b.specs:
        np.testing.assert_array_equal(a[t].inv_freq(), b[t].inv_freq())


def test_one_spec_readers_refuse_and_name_the_way_out():
    config, _ = _gemma3(**CASES["linear-global"])
    with pytest.raises(NotImplementedError, match="LayerTypeSpecs.from_hf_config"):
        rotary.Spec.from_hf_config(config)


def test_flat_configs_and_lookups():
    specs = rotary.LayerTypeSpecs.from_hf_config({"head_dim": 8, "rope_theta": 50.0,
                                                  "layer_types": ["sliding_attention", "full_attention"]})
    assert not specs.nested
    assert specs["full_attention"] is specs.specs["full_attention"]
    np.testing.assert_allclose(specs["sliding_attention"].inv_freq(), 50.0 ** (-np.arange(0, 8, 2) / 8), rtol=1e-15)
    with pytest.raises(ValueError, match=r'layer_type must be one of sliding_attention, full_attention, got "x"'):
        specs["x"]
    with pytest.raises(ValueError, match="layer must be < the number of layer_types 2, got 2"):
        specs.for_layer(2)
    shared = rotary.LayerTypeSpecs.from_hf_config({"head_dim": 8})
    assert list(shared.specs) == [""]
    assert shared.for_layer(12) is shared["anything"]
    nope = rotary.LayerTypeSpecs.from_hf_config({"head_dim": 8, "layer_types": ["a", "b"],
                                                 "rope_parameters": {"a": {"rope_type": "default"}, "b": None}})
    assert nope.specs["b"] is None
    with pytest.raises(ValueError, match="has no RoPE"):
        nope.for_layer(1)
    with pytest.raises(ValueError, match=r"rope_parameters.a.factor must be a number"):
        rotary.LayerTypeSpecs.from_hf_config({"head_dim": 8, "layer_types": ["a"],
                                              "rope_parameters": {"a": {"rope_type": "linear", "factor": "x"}}})
    with pytest.raises(TypeError, match="LayerTypeSpecs.from_hf_config expects"):
        rotary.LayerTypeSpecs.from_hf_config(3)


# Hand-written / Hub-shaped files without layer_types: the layer types and bases each config class derives.
HUB_SHAPED = {
    # answerdotai/ModernBERT-base's fields: every third layer full from layer 0, its own base
    "modernbert": dict(model_type="modernbert", hidden_size=64, num_attention_heads=2, num_hidden_layers=7,
                       global_rope_theta=160000.0, local_rope_theta=10000.0, global_attn_every_n_layers=3),
    # Gemma 3 with v5 nested rope_parameters and no layer_types: sliding_window_pattern's default (6)
    "gemma3-nested": dict(model_type="gemma3_text", hidden_size=64, num_attention_heads=2, head_dim=32,
                          num_hidden_layers=8,
                          rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                           "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
    # Gemma 3n: every fifth layer full (not Gemma 3's sixth)
    "gemma3n": dict(model_type="gemma3n_text", hidden_size=64, num_attention_heads=2, head_dim=32, num_hidden_layers=10,
                    rope_theta=1e6, rope_local_base_freq=1e4),
}


@pytest.mark.parametrize("case", sorted(HUB_SHAPED))
def test_files_without_layer_types_get_the_config_class_s_types_and_bases(case, tmp_path):
    import transformers

    doc = HUB_SHAPED[case]
    (tmp_path / "config.json").write_text(json.dumps(doc))
    hf = transformers.AutoConfig.from_pretrained(str(tmp_path))
    specs = rotary.LayerTypeSpecs.from_hf_config(str(tmp_path / "config.json"))
    assert specs.nested and specs.layer_types == list(hf.layer_types), case
    for layer_type in set(hf.layer_types):
        want = hf.rope_parameters[layer_type]
        spec = specs[layer_type]
        assert spec.base == want["rope_theta"] and spec.rope_type == want["rope_type"], (case, layer_type)
    if case == "modernbert":  # one Spec cannot describe it: refused by name, as Gemma 3's legacy form
        with pytest.raises(NotImplementedError, match="global_rope_theta / local_rope_theta"):
            rotary.Spec.from_hf_config(doc)
