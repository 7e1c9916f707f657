"""M-RoPE positions [3, ...] in rotary vs transformers' VL rotary code (given and class-default sections) and fp64."""
from __future__ import annotations

import numpy as np
import pytest

import rotary
from hf_models import hf_model_modules
from reference import mrope_angles, rotate

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _positions(r, B, S):
    # text tokens share t=h=w; an "image" block in the middle gets distinct (t, h, w) grid ids
    pos = np.broadcast_to(np.arange(S), (3, B, S)).copy()
    img = slice(3, 3 + 8)
    pos[1, :, img] = 3 + np.repeat(np.arange(2), 4)
    pos[2, :, img] = 3 + np.tile(np.arange(4), 2)
    pos[0, :, img] = 3
    pos[:, :, 11:] += r.integers(0, 50)
    return pos.astype(np.int64)


def _mrope_config(cfg_mod, config_cls, section, interleaved):
    """A small text config of the model with head_dim 128 and the given M-RoPE sections."""
    params = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": section}
    if interleaved:
        params["mrope_interleaved"] = True
    return getattr(cfg_mod, config_cls)(hidden_size=256, num_attention_heads=2, num_key_value_heads=1,
                                        head_dim=128, rope_parameters=params, max_position_embeddings=4096)


CASES = [
    ("qwen2_vl", "Qwen2VLTextConfig", "Qwen2VLRotaryEmbedding", [16, 24, 24], False),
    ("qwen3_vl", "Qwen3VLTextConfig", "Qwen3VLTextRotaryEmbedding", [24, 20, 20], True),
]


@pytest.mark.parametrize("model,config_cls,rope_cls,section,interleaved", CASES, ids=[c[0] for c in CASES])
def test_mrope_matches_transformers(model, config_cls, rope_cls, section, interleaved):
    cfg_mod, mdl_mod = hf_model_modules(model)
    config = _mrope_config(cfg_mod, config_cls, section, interleaved)
    spec = rotary.Spec.from_hf_config(config)
    assert list(spec.mrope_section) == section and spec.mrope_interleaved == interleaved

    r = np.random.default_rng(11)
    B, S, H, D = 2, 20, 2, 128
    pos3 = _positions(r, B, S)
    cos, sin = getattr(mdl_mod, rope_cls)(config)(torch.zeros(1), torch.from_numpy(pos3))
    q = torch.randn(B, H, S, D, generator=torch.Generator().manual_seed(3))
    qh, _ = mdl_mod.apply_rotary_pos_emb(q, q, cos, sin)
    ours = rotary.apply(q, torch.from_numpy(pos3), spec, layout="bhsd")
    # HF: float32 angles at positions < 100 (error < 1e-5 rad); rotary exact.
    np.testing.assert_allclose(ours.numpy(), qh.numpy(), rtol=0, atol=3e-5)

    inv, af = spec.frequencies()
    ang = mrope_angles(pos3, inv, section, interleaved)  # [B, S, h]
    truth = rotate(q.double().numpy().transpose(0, 2, 1, 3), ang[:, :, None, :], scale=af).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(ours.numpy(), truth, rtol=0, atol=4e-6)
    # and it is not plain RoPE on the t positions (the test can tell sections apart)
    plain = rotary.apply(q, torch.from_numpy(pos3[0]), spec.replace(mrope_section=None), layout="bhsd")
    assert (plain - ours).abs().max() > 1e-3


def test_mrope_thd_and_errors():
    spec = rotary.Spec(32, mrope_section=[4, 6, 6])
    r = np.random.default_rng(5)
    x = r.standard_normal((7, 2, 32))
    pos = r.integers(0, 30, (3, 7))
    y = rotary.apply(x, pos, spec, layout="thd")
    inv, _ = spec.frequencies()
    truth = rotate(x, mrope_angles(pos[:, None, :], inv, [4, 6, 6], False)[0][:, None, :])
    np.testing.assert_allclose(y, truth, atol=1e-6)
    with pytest.raises(ValueError):
        rotary.Spec(32, mrope_section=[4, 6, 5])  # sum must be rotary_dim / 2
    with pytest.raises(ValueError):
        rotary.apply(x, pos[:2], spec, layout="thd")  # needs 3 position rows


@pytest.mark.parametrize("model,config_cls,rope_cls,section,interleaved", CASES, ids=[c[0] for c in CASES])
def test_mrope_section_assignment_is_transformers_own_in_float64(model, config_cls, rope_cls, section, interleaved):
    """transformers' live recomposition (Qwen2-VL split/cat, Qwen3-VL interleave) fed float64 angles built from
    rotary's frequencies: the rotation must equal rotary's to f32 cos/sin rounding, at large positions too."""
    cfg_mod, mdl_mod = hf_model_modules(model)
    config = _mrope_config(cfg_mod, config_cls, section, interleaved)
    hf_rope = getattr(mdl_mod, rope_cls)(config)
    if not hasattr(hf_rope, "recomposition_frequencies"):  # pragma: no cover - older transformers
        pytest.skip("this transformers has no recomposition_frequencies")
    spec = rotary.Spec.from_hf_config(config)
    inv, _ = spec.frequencies()
    r = np.random.default_rng(4)
    B, S, H, D = 1, 12, 2, 128
    pos3 = r.integers(0, 1 << 20, (3, B, S))
    freqs = torch.from_numpy(pos3[..., None].astype(np.float64) * inv)  # [3, B, S, 64] exact angles
    emb = hf_rope.recomposition_frequencies(freqs).numpy()  # [B, S, 128], HF's own section assignment
    x = r.standard_normal((B, S, H, D))
    h = D // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], -1)
    want = x * np.cos(emb[:, :, None, :]) + rot * np.sin(emb[:, :, None, :])
    ours = rotary.apply(x, pos3, spec)
    np.testing.assert_allclose(ours, want, rtol=0, atol=2e-7)


@pytest.mark.parametrize("model,config_cls,rope_cls,section,interleaved", CASES, ids=[c[0] for c in CASES])
def test_text_only_positions_match_transformers(model, config_cls, rope_cls, section, interleaved):
    """[B, S] ids for an M-RoPE spec: transformers expands them to [3, B, S] (text tokens, t = h = w); vLLM's
    MRotaryEmbedding takes [T] the same way. rotary takes [B, S], [S] and (thd) [T] with that meaning."""
    cfg_mod, mdl_mod = hf_model_modules(model)
    config = _mrope_config(cfg_mod, config_cls, section, interleaved)
    spec = rotary.Spec.from_hf_config(config)
    B, S, H, D = 2, 9, 2, 128
    r = np.random.default_rng(21)
    pos2 = r.integers(0, 90, (B, S)).astype(np.int64)
    emb = getattr(mdl_mod, rope_cls)(config)
    cos, sin = emb(torch.zeros(1), torch.from_numpy(pos2))  # HF's own [B, S] path (expand(3, -1, -1))
    q = torch.randn(B, H, S, D, generator=torch.Generator().manual_seed(5))
    qh, _ = mdl_mod.apply_rotary_pos_emb(q, q, cos, sin)
    ours = rotary.apply(q, torch.from_numpy(pos2), spec, layout="bhsd")
    np.testing.assert_allclose(ours.numpy(), qh.numpy(), rtol=0, atol=3e-5)  # HF's f32 angles at p < 90
    # the same as the expanded [3, B, S] ids, bit for bit, and as plain RoPE (text tokens)
    expanded = rotary.apply(q, torch.from_numpy(np.broadcast_to(pos2, (3, B, S)).copy()), spec, layout="bhsd")
    assert torch.equal(ours, expanded)
    plain = rotary.apply(q, torch.from_numpy(pos2), spec.replace(mrope_section=None), layout="bhsd")
    np.testing.assert_allclose(ours.numpy(), plain.numpy(), rtol=0, atol=1e-6)
    # thd [T] (vLLM's 1-D positions) and [S] broadcast over the batch
    x = r.standard_normal((B * S, H, D)).astype(np.float32)
    np.testing.assert_array_equal(rotary.apply(x, pos2.reshape(-1), spec, layout="thd"),
                                  rotary.apply(x, np.broadcast_to(pos2.reshape(-1), (3, B * S)).copy(), spec, layout="thd"))
    xs = r.standard_normal((B, S, H, D)).astype(np.float32)
    np.testing.assert_array_equal(rotary.apply(xs, pos2[0], spec),
                                  rotary.apply(xs, np.broadcast_to(pos2[0], (3, B, S)).copy(), spec))
    with pytest.raises(ValueError, match="ambiguous with batch size 3"):
        rotary.apply(np.zeros((3, S, H, D), np.float32), pos2[:1].repeat(3, 0), spec)


@pytest.mark.parametrize("section,interleaved", [([16, 24, 24], False), ([24, 20, 20], True)])
def test_cos_sin_of_an_mrope_spec_takes_each_frequency_from_its_axis(section, interleaved):
    """rotary.cos_sin and rotary.torch.cos_sin with [3, ...] ids: fp64 truth from the sections, the two agree."""
    spec = rotary.Spec(128, base=1e6, mrope_section=section, mrope_interleaved=interleaved)
    r = np.random.default_rng(8)
    pos3 = r.integers(0, 1 << 22, (3, 2, 5))
    c, s = rotary.cos_sin(spec, pos3)
    assert c.shape == s.shape == (2, 5, 64) and c.dtype == np.float32
    inv, af = spec.frequencies()
    ang = mrope_angles(pos3, inv, section, interleaved)
    np.testing.assert_allclose(c, af * np.cos(ang), rtol=0, atol=4e-7)
    np.testing.assert_allclose(s, af * np.sin(ang), rtol=0, atol=4e-7)
    import rotary.torch as rt

    ct, st = rt.cos_sin(torch.from_numpy(pos3), spec)
    assert np.array_equal(ct.numpy(), c) and np.array_equal(st.numpy(), s)
    with pytest.raises(ValueError, match=r"\[rotary_cos_sin\] M-RoPE positions must be \[3, \.\.\.\]"):
        rotary.cos_sin(spec, pos3[:2])
    with pytest.raises(ValueError, match=r"\[rotary_cos_sin\] M-RoPE specs take \[3, \.\.\.\] position ids"):
        rotary.cos_sin(spec, 4)


@pytest.mark.parametrize("model,config_cls,rope_cls,head_dim,params", [
    ("qwen3_vl", "Qwen3VLTextConfig", "Qwen3VLTextRotaryEmbedding", 64, {"rope_theta": 5e5, "mrope_section": [16, 8, 8]}),
    ("qwen3_5", "Qwen3_5TextConfig", "Qwen3_5TextRotaryEmbedding", 128,
     {"rope_theta": 1e7, "partial_rotary_factor": 0.25, "mrope_section": [6, 5, 5]}),
], ids=["qwen3_vl-head64", "qwen3_5-partial"])
def test_explicit_sections_keep_the_models_own_interleaving(model, config_cls, rope_cls, head_dim, params):
    # Qwen3-VL / Qwen3.5 interleave their axes whatever the sections: a file's own mrope_section (here one the class
    # default [24, 20, 20] / [11, 11, 10] does not fit) keeps the class's interleaved assignment.
    cfg_mod, mdl_mod = hf_model_modules(model)
    config = getattr(cfg_mod, config_cls)(hidden_size=4 * head_dim, num_attention_heads=4, num_key_value_heads=4,
                                          head_dim=head_dim, rope_parameters={"rope_type": "default", **params})
    spec = rotary.Spec.from_hf_config(config)
    assert spec.mrope_interleaved
    pos3 = np.array([[[0, 5, 9, 17]], [[0, 2, 3, 40]], [[0, 7, 1, 33]]], dtype=np.int64)
    cos, _ = getattr(mdl_mod, rope_cls)(config)(torch.zeros(1), torch.from_numpy(pos3))
    ours, _ = rotary.cos_sin(spec, pos3[:, 0])
    half = ours.shape[-1]
    np.testing.assert_allclose(ours, cos[0, :, :half].double().numpy(), rtol=0, atol=1e-5)


# Models whose rotary embedding takes its own mrope_section when the config has none (transformers'
# `rope_parameters.get("mrope_section", [...])`, or the config class's setdefault: HY-V4-VL), with the code's axis
# assignment: contiguous blocks (Qwen2-VL's split / cat) or interleaved (Qwen3-VL's). (model_type, the text
# RotaryEmbedding class, extra trimmed fields that make the sections cover the rotated part, section, interleaved.)
CLASS_SECTIONS = [
    ("glm4v", "Glm4vTextRotaryEmbedding", {"head_dim": 64}, [8, 12, 12], False),
    ("glm4v_text", "Glm4vTextRotaryEmbedding", {"head_dim": 64}, [8, 12, 12], False),
    ("glm4v_moe", "Glm4vMoeTextRotaryEmbedding", {}, [8, 12, 12], False),  # partial 0.5 of 128
    ("glm4v_moe_text", "Glm4vMoeTextRotaryEmbedding", {}, [8, 12, 12], False),
    ("glm_image", "GlmImageTextRotaryEmbedding", {"head_dim": 64}, [8, 12, 12], False),
    ("glm_image_text", "GlmImageTextRotaryEmbedding", {"head_dim": 64}, [8, 12, 12], False),
    ("glm_ocr", "GlmOcrTextRotaryEmbedding", {"head_dim": 64}, [8, 12, 12], False),
    ("glm_ocr_text", "GlmOcrTextRotaryEmbedding", {"head_dim": 64}, [8, 12, 12], False),
    ("paddleocr_vl", "PaddleOCRRotaryEmbedding", {}, [16, 24, 24], False),
    ("paddleocr_vl_text", "PaddleOCRRotaryEmbedding", {}, [16, 24, 24], False),
    ("qwen2_5_omni_text", "Qwen2_5OmniRotaryEmbedding", {}, [16, 24, 24], False),
    ("qwen2_5_omni_thinker", "Qwen2_5OmniRotaryEmbedding", {}, [16, 24, 24], False),
    ("qwen2_5_omni_talker", "Qwen2_5OmniRotaryEmbedding", {}, [16, 24, 24], False),
    ("qwen3_omni_moe_text", "Qwen3OmniMoeThinkerTextRotaryEmbedding", {}, [24, 20, 20], True),
    ("qwen3_omni_moe_thinker", "Qwen3OmniMoeThinkerTextRotaryEmbedding", {}, [24, 20, 20], True),
    ("qwen3_omni_moe_talker_text", "Qwen3OmniMoeTalkerRotaryEmbedding", {}, [24, 20, 20], True),
    ("cosmos3_edge", "Cosmos3EdgeTextRotaryEmbedding", {}, [24, 20, 20], True),
    ("cosmos3_edge_text", "Cosmos3EdgeTextRotaryEmbedding", {}, [24, 20, 20], True),
    ("hy_v4_vl", "HYV4VLRotaryEmbedding", {}, [12, 10, 10], True),  # the config's [12, 10, 10], not the code's
    ("hy_v4_vl_text", "HYV4VLRotaryEmbedding", {}, [12, 10, 10], True),
    ("qwen4_exp", "Qwen4ExpTextRotaryEmbedding", {"partial_rotary_factor": 0.25}, [11, 11, 10], True),
    ("qwen4_exp_text", "Qwen4ExpTextRotaryEmbedding", {"partial_rotary_factor": 0.25}, [11, 11, 10], True),
]


@pytest.mark.parametrize("model_type,rope_cls,extra,section,interleaved", CLASS_SECTIONS,
                         ids=[c[0] for c in CLASS_SECTIONS])
def test_a_trimmed_config_without_mrope_section_gets_the_model_code_sections(model_type, rope_cls, extra, section,
                                                                            interleaved):
    from hf_models import modeling_module, quiet_transformers, trimmed_hf_config

    mod = modeling_module(model_type)
    if mod is None or not hasattr(mod, rope_cls):  # pragma: no cover - depends on the installed transformers
        pytest.skip(f"transformers has no {rope_cls} for {model_type}")
    fields = {"hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 8, **extra}
    config, doc = trimmed_hf_config(model_type, fields)
    with quiet_transformers():
        emb = getattr(mod, rope_cls)(config)
    assert list(emb.mrope_section) == section, model_type
    pos3 = _positions(np.random.default_rng(13), 2, 20)
    with torch.no_grad():
        cos, sin = emb(torch.zeros(1), torch.from_numpy(pos3))
    half = emb.inv_freq.numel()
    cos, sin = cos.double().numpy(), sin.double().numpy()
    if cos.shape[-1] == 2 * half and np.array_equal(cos[..., 0::2], cos[..., 1::2]):  # GLM-4V: repeat_interleave'd
        cos, sin = cos[..., 0::2], sin[..., 0::2]
    cos, sin = cos[..., :half], sin[..., :half]
    spec = rotary.Spec.from_hf_config(doc)
    assert list(spec.mrope_section) == section and spec.mrope_interleaved == interleaved, model_type
    c, s = rotary.cos_sin(spec, pos3)
    # HF: float32 angles at positions < 100; rotary's are exact.
    np.testing.assert_allclose(c, cos, rtol=0, atol=2e-5, err_msg=model_type)
    np.testing.assert_allclose(s, sin, rtol=0, atol=2e-5, err_msg=model_type)
    plain, _ = rotary.cos_sin(spec.replace(mrope_section=None), pos3[0])
    assert np.abs(plain - cos).max() > 1e-3  # the positions tell sections from plain RoPE


@pytest.mark.parametrize("model_type", ["cohere_compass", "cohere_compass_text"])
def test_cohere_compass_gets_the_code_sections_per_layer_type(model_type):
    """Its rope_parameters are nested per layer type (a null entry: no RoPE) and each entry without a mrope_section
    takes the code's [24, 20, 20], interleaved: rotary's LayerTypeSpecs reads each entry with those defaults."""
    from hf_models import modeling_module, quiet_transformers, trimmed_hf_config

    mod = modeling_module(model_type)
    if mod is None or not hasattr(mod, "CohereCompassRotaryEmbedding"):  # pragma: no cover - depends on transformers
        pytest.skip("transformers has no cohere_compass")
    fields = {"hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": 4,
              "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
              "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 50000.0},
                                  "full_attention": None}}
    config, doc = trimmed_hf_config(model_type, fields)
    with quiet_transformers():
        emb = mod.CohereCompassRotaryEmbedding(config)
    pos3 = _positions(np.random.default_rng(17), 2, 20)
    with torch.no_grad():
        cos, sin = emb(torch.zeros(1), torch.from_numpy(pos3), layer_type="sliding_attention")
    half = emb.sliding_attention_inv_freq.numel()
    specs = rotary.LayerTypeSpecs.from_hf_config(doc)
    assert specs.specs["full_attention"] is None
    spec = specs["sliding_attention"]
    assert list(spec.mrope_section) == [24, 20, 20] and spec.mrope_interleaved and spec.pairing == "half"
    c, s = rotary.cos_sin(spec, pos3)
    np.testing.assert_allclose(c, cos.double().numpy()[..., :half], rtol=0, atol=2e-5)
    np.testing.assert_allclose(s, sin.double().numpy()[..., :half], rtol=0, atol=2e-5)
