"""DeepSeek V4's RoPE keyed by label (main / compress) vs transformers' DeepseekV4RotaryEmbedding and its rotation."""
from __future__ import annotations

import json

import numpy as np
import pytest

import rotary
from hf_models import hf_model_modules, load_hf_config, per_type_rope

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "DeepseekV4Config"):
    pytest.skip("this transformers has no DeepSeek V4", allow_module_level=True)

# The Hub files' form (transformers folds these legacy keys into its nested dict): per-layer compress_ratios,
# qk_rope_head_dim, a flat YaRN rope_scaling that only the compressed layers use.
HUB = {"model_type": "deepseek_v4", "num_hidden_layers": 6, "hidden_size": 1024, "num_attention_heads": 16,
       "head_dim": 512, "qk_rope_head_dim": 64, "rope_theta": 10000, "compress_rope_theta": 160000,
       "max_position_embeddings": 1048576, "compress_ratios": [0, 0, 4, 128, 4, 128],
       "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536, "beta_fast": 32,
                        "beta_slow": 1}}

CASES = {
    "hub": HUB,
    "trimmed": {"model_type": "deepseek_v4", "num_hidden_layers": 5},  # class defaults: layer pattern, bases, 64 of 512
    "partial_half": {**HUB, "head_dim": 256, "partial_rotary_factor": 0.5, "rope_theta": 5e4,
                     "compress_rope_theta": 2e5},  # the top-level factor (128 channels) wins over qk_rope_head_dim (64)
    "legacy_rope_head": {**{k: v for k, v in HUB.items() if k != "head_dim"}, "qk_rope_head_dim": 32},  # 32 of 512
    "nested_own_mscale": {**{k: v for k, v in HUB.items() if k != "rope_scaling"}, "rope_parameters": {
        "main": {"rope_type": "default", "rope_theta": 20000.0, "partial_rotary_factor": 0.25},
        "compress": {"rope_type": "yarn", "rope_theta": 160000.0, "partial_rotary_factor": 0.125, "factor": 8.0,
                     "original_max_position_embeddings": 4096}}},  # no attention_factor: YaRN's mscale applies
    "layer_types": {**{k: v for k, v in HUB.items() if k != "compress_ratios"},
                    "layer_types": ["sliding_attention", "heavily_compressed_attention", "sliding_attention",
                                    "compressed_sparse_attention", "sliding_attention", "sliding_attention",
                                    "heavily_compressed_attention"]},  # one more than num_hidden_layers: cut
    "plain_compress": {**{k: v for k, v in HUB.items() if k != "rope_scaling"}},  # default RoPE for both labels
    "dynamic_class_max_pos": {"model_type": "deepseek_v4", "num_hidden_layers": 3,  # the class's 1048576 positions
                              "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}},
    "flat_v5_dict": {"model_type": "deepseek_v4", "num_hidden_layers": 3, "rope_parameters": {  # its base: compress'
        "rope_type": "yarn", "rope_theta": 5e4, "factor": 4.0, "original_max_position_embeddings": 4096,
        "partial_rotary_factor": 0.5}},  # replaced by the class's share
    "float_legacy_keys": {**HUB, "compress_ratios": [0.0, 0.0, 4.0, 128.0, 4.0, 128.0], "qk_rope_head_dim": 64.0},
    # Nested dicts without a factor: the top level's; else the class's share for YaRN, the whole head for default.
    "nested_top_factor": {"model_type": "deepseek_v4", "num_hidden_layers": 3, "partial_rotary_factor": 0.25,
                          "rope_parameters": {"main": {"rope_type": "default", "rope_theta": 1e4},
                                              "compress": {"rope_type": "default", "rope_theta": 16e4}}},
    "nested_no_factor": {"model_type": "deepseek_v4", "num_hidden_layers": 3, "qk_rope_head_dim": 32,
                         "rope_parameters": {"main": {"rope_type": "default", "rope_theta": 1e4},
                                             "compress": {"rope_type": "default", "rope_theta": 16e4}}},
    "nested_yarn_no_factor": {"model_type": "deepseek_v4", "num_hidden_layers": 3, "rope_parameters": {
        "main": {"rope_type": "default", "rope_theta": 1e4},
        "compress": {"rope_type": "yarn", "rope_theta": 16e4, "factor": 16.0, "original_max_position_embeddings": 4096,
                     "truncate": False}}},  # transformers reads truncate from rope_parameters' top level: true
}


def _hf(doc: dict, tmp_path):
    """transformers' config read from `doc` and its DeepseekV4RotaryEmbedding."""
    (tmp_path / "config.json").write_text(json.dumps(doc))
    _, mod = hf_model_modules("deepseek_v4")
    config = load_hf_config(tmp_path)
    return config, mod, mod.DeepseekV4RotaryEmbedding(config=config)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_layer_type_reads_its_labels_rope_as_transformers(case, tmp_path):
    config, _, emb = _hf(CASES[case], tmp_path)
    specs = rotary.LayerTypeSpecs.from_hf_config(str(tmp_path / "config.json"))
    assert specs.nested
    assert specs.layer_types == list(config.layer_types)
    hf = per_type_rope(emb)
    assert set(hf) == {"main", "compress"}
    for layer_type in ("sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"):
        label = "main" if layer_type == "sliding_attention" else "compress"
        inv, scaling = hf[label]
        spec = specs[layer_type]
        assert spec.pairing == "interleaved"
        assert spec.head_dim == spec.rotary_dim == 2 * inv.shape[0], f"{case} {layer_type}: the rotated slice"
        np.testing.assert_allclose(spec.inv_freq(None), inv.double().numpy(), rtol=1e-6, atol=0,
                                   err_msg=f"{case} {layer_type} ({label})")
        assert spec.attention_factor == pytest.approx(float(scaling), rel=1e-6), f"{case} {layer_type}"
    # transformers' saved file (nested main / compress, qk_rope_head_dim and head_dim kept) against the
    # RotaryEmbedding transformers builds from it (the same as above, except where transformers' own defaults
    # for a nested dict without a factor differ between a file and its saved copy)
    config.save_pretrained(tmp_path / "saved")
    saved_config = load_hf_config(tmp_path / "saved")
    saved_hf = per_type_rope(type(emb)(config=saved_config))
    saved = rotary.LayerTypeSpecs.from_hf_config(str(tmp_path / "saved" / "config.json"))
    assert saved.layer_types == specs.layer_types
    for layer_type, label in (("sliding_attention", "main"), ("compressed_sparse_attention", "compress")):
        inv, scaling = saved_hf[label]
        np.testing.assert_allclose(saved[layer_type].inv_freq(None), inv.double().numpy(), rtol=1e-6, atol=0,
                                   err_msg=f"{case} saved {layer_type}")
        assert saved[layer_type].attention_factor == pytest.approx(float(scaling), rel=1e-6)


@pytest.mark.parametrize("layer_type", ["sliding_attention", "compressed_sparse_attention"])
def test_rotating_the_trailing_slice_matches_transformers_apply(layer_type, tmp_path):
    config, mod, emb = _hf(HUB, tmp_path)
    specs = rotary.LayerTypeSpecs.from_hf_config(str(tmp_path / "config.json"))
    spec = specs[layer_type]
    label = "main" if layer_type == "sliding_attention" else "compress"
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 24, 512, generator=gen)  # [B, H, S, D]
    pos = torch.arange(100, 124).expand(2, 24)
    cos, sin = emb(x, pos, layer_type=label)
    ref = mod.apply_rotary_pos_emb(x, cos, sin).numpy()
    got = x.numpy().copy()
    got[..., -spec.head_dim:] = rotary.apply(got[..., -spec.head_dim:], 100, spec, layout="bhsd")
    # f32 on both sides at positions < 128: transformers' f32 angles (pos x inv_freq) stay within ~1e-5 of exact
    np.testing.assert_allclose(got, ref, rtol=0, atol=3e-5)
    np.testing.assert_array_equal(got[..., :-spec.head_dim], x.numpy()[..., :-spec.head_dim])  # the nope part kept


def test_one_spec_is_refused_naming_the_per_layer_type_readers(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(HUB))
    with pytest.raises(NotImplementedError, match="keyed by label.*per layer type"):
        rotary.Spec.from_hf_config(str(tmp_path / "config.json"))


@pytest.mark.parametrize("change,field", [
    ({"compress_ratios": [0, 4, 64]}, r"compress_ratios\[2\] must be 0, 4 or 128, got 64"),
    ({"layer_types": ["full_attention"]}, r"layer_types\[0\] must be one of"),
    ({"partial_rotary_factor": 0.1}, r"partial_rotary_factor must give an even number of rotated channels, got "
                                     r"head_dim 512 x 0.1 = 51"),
    ({"head_dim": None}, r"head_dim must be an integer \(model_type deepseek_v4\), got null"),  # refused by the class
    ({"compress_ratios": [0, 4]}, r"compress_ratios must list num_hidden_layers \(6\) layers, got 2"),  # the class too
    ({"compress_rope_theta": "x"}, r"compress_rope_theta must be a number"),
    ({"rope_scaling": {"type": "yarn", "factor": "16"}}, r"rope_scaling.factor must be a number"),
])
def test_bad_fields_are_refused_by_name(change, field, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**HUB, **change}))
    with pytest.raises(ValueError, match=field):
        rotary.LayerTypeSpecs.from_hf_config(str(tmp_path / "config.json"))
