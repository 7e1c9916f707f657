"""Composite configs (Qwen-Omni, Dia, T5Gemma, ColPali, ColQwen2): rotary reads the language model where
transformers' get_text_config() finds it, checked against the model's own RotaryEmbedding; models and parts whose RoPE
is no text RoPE a Spec expresses (or who have none) are refused, naming why."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import rotary
from hf_models import quiet_transformers, text_config_path, text_rotary_embedding_class, trimmed_hf_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# (model_type, the attributes from the composite config to the one get_text_config() returns, as transformers 5.25
# has them (src/core/config_root.cc reads the same objects), the text model's RotaryEmbedding class or None for the
# first of its module's).
COMPOSITES = [
    ("qwen2_5_omni", ("thinker_config", "text_config"), "Qwen2_5OmniRotaryEmbedding"),
    ("qwen3_omni_moe", ("thinker_config", "text_config"), "Qwen3OmniMoeThinkerTextRotaryEmbedding"),
    ("dia", ("decoder_config",), None),
    ("t5gemma", ("decoder",), None),
    ("colqwen2", ("vlm_config", "text_config"), None),
    ("colpali", ("vlm_config", "text_config"), None),
    ("paligemma", ("text_config",), None),  # no RotaryEmbedding of its own: its text part is Gemma's (ColPali's too)
]
# 96 wide: no class's own head_dim (Dia's 128, Gemma's and T5Gemma's 256), so a missed class default shows.
FIELDS = {"hidden_size": 768, "num_attention_heads": 8, "num_key_value_heads": 8}


def _composite(model_type: str, nested: dict):
    try:
        with quiet_transformers():
            return transformers.AutoConfig.for_model(model_type, **copy.deepcopy(nested))
    except (KeyError, ValueError) as e:  # pragma: no cover - depends on the installed transformers
        pytest.skip(f"transformers has no config class for {model_type}: {e}")


def _rope_class(model_type: str, name):
    from hf_models import modeling_module

    cls = text_rotary_embedding_class(model_type) if name is None else getattr(modeling_module(model_type), name, None)
    if cls is None:  # pragma: no cover - depends on the installed transformers
        pytest.skip(f"transformers has no RotaryEmbedding {name or ''} for {model_type}")
    return cls


@pytest.mark.parametrize("model_type,path,rope_cls", COMPOSITES, ids=[c[0] for c in COMPOSITES])
def test_a_composite_config_is_read_where_get_text_config_finds_its_language_model(model_type, path, rope_cls):
    text, doc = trimmed_hf_config(model_type, FIELDS)
    composite = _composite(model_type, {k: v for k, v in doc.items() if k != "model_type"})
    assert text_config_path(composite) == path, f"{model_type}: transformers moved its text config"
    emb = _rope_class(text.model_type, rope_cls)(config=text)
    hf = emb.inv_freq.double().numpy()
    # The trimmed file (its text part has no model_type: the composite's class defaults apply, as transformers'
    # sub-config class gives them), the same with the containers' model_types (the nearest one decides: ColPali's
    # vlm_config is PaliGemma's) and the file save_pretrained writes (every object with its model_type).
    typed = node = copy.deepcopy(doc)
    obj = composite
    for key in path[:-1]:
        obj, node = getattr(obj, key), node[key]
        node["model_type"] = obj.model_type
    for what, d in (("trimmed", doc), ("typed containers", typed), ("saved", composite.to_dict())):
        spec = rotary.Spec.from_hf_config(d)
        ours = spec.inv_freq(None)
        assert ours.shape == hf.shape, f"{model_type} {what}: {ours.shape[0]} frequencies, transformers {hf.shape[0]}"
        assert np.max(np.abs(ours - hf) / np.abs(hf)) <= 1e-6, f"{model_type} {what}"
        assert spec.attention_factor == pytest.approx(float(emb.attention_scaling), rel=1e-6)
        # The model's sections where they cover its rotated pairs (rotary reads others as plain RoPE).
        section = list(getattr(emb, "mrope_section", None) or [])
        expected = section if sum(section) == hf.shape[0] else []
        assert list(spec.mrope_section or []) == expected, f"{model_type} {what}"


@pytest.mark.parametrize("model_type,rope_cls", [("qwen2_5_omni", "Qwen2_5OmniRotaryEmbedding"),
                                                 ("qwen3_omni_moe", "Qwen3OmniMoeThinkerTextRotaryEmbedding")])
def test_a_saved_qwen_omni_config_rotates_as_its_thinker_does(model_type, rope_cls):
    """The thinker's M-RoPE cos/sin from its own RotaryEmbedding at 3-axis positions (Qwen2.5-Omni's sections in
    contiguous blocks, Qwen3-Omni-MoE's interleaved), for the saved composite config (head_dim 128)."""
    fields = {**FIELDS, "hidden_size": 1024}
    composite = _composite(model_type, {"thinker_config": {"text_config": fields}})
    text = composite.get_text_config()
    emb = _rope_class(text.model_type, rope_cls)(config=text)
    spec = rotary.Spec.from_hf_config(composite.to_dict())
    assert list(spec.mrope_section) == list(emb.mrope_section)
    assert spec.mrope_interleaved == (model_type == "qwen3_omni_moe")
    pos3 = np.stack([np.arange(30), np.arange(30) // 2, np.arange(30) % 5])[:, None, :]  # (3, batch 1, 30)
    with torch.no_grad():
        cos, sin = emb(torch.zeros(1), torch.from_numpy(pos3))
    half = emb.inv_freq.numel()
    cos, sin = cos.double().numpy()[..., :half], sin.double().numpy()[..., :half]
    c, s = rotary.cos_sin(spec, pos3)
    # HF: float32 angles at positions < 30 (rotary's are exact).
    np.testing.assert_allclose(c, cos, rtol=0, atol=2e-5)
    np.testing.assert_allclose(s, sin, rtol=0, atol=2e-5)
    other, _ = rotary.cos_sin(spec.replace(mrope_interleaved=not spec.mrope_interleaved), pos3)
    assert np.abs(other - cos).max() > 1e-3  # the positions tell the two axis assignments apart


@pytest.mark.parametrize("key", ["mrope_section", "xdrope_section"])
@pytest.mark.parametrize("section", [[16, 16, 16, 16], [16, 24, 24], [32, 16, 16]])
def test_hunyuan_vl_reads_text_positions_only_whatever_its_section(key, section, tmp_path):
    # HunYuanVLConfig renames xdrope_section to mrope_section; its code splits cat(freq, freq) over the whole head by
    # 2 x section (recomposition_frequencies), no rotation a Spec expresses. rotary read the section as Qwen2-VL's
    # contiguous M-RoPE (off by 1.6 from transformers) or refused 4 entries: it reads what the code computes when every
    # axis has the same position (docs/scaling.md).
    from hf_models import hf_model_modules

    conf, mod = hf_model_modules("hunyuan_vl")
    with quiet_transformers():
        config = conf.HunYuanVLConfig(text_config={"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                                        key: list(section)}})
        text = config.get_text_config(decoder=True)
        emb = mod.HunYuanVLRotaryEmbedding(text)
        config.save_pretrained(tmp_path)
    assert text.rope_parameters["mrope_section"] == section  # transformers' renaming
    pos = np.array([0, 1, 7, 30, 4000])
    cos, sin = emb(torch.zeros(1, len(pos), 8), torch.tensor([pos])[None].expand(len(section), 1, -1))
    for source in (config, config.to_dict(), str(tmp_path / "config.json")):
        spec = rotary.Spec.from_hf_config(source)
        assert not spec.mrope_section and spec.rotary_dim == spec.head_dim == 2 * sum(section), type(source)
        ours_cos, ours_sin = rotary.cos_sin(spec, pos)
        half = spec.rotary_dim // 2
        for hf, ours in ((cos, ours_cos), (sin, ours_sin)):
            hf = hf[0].double().numpy()
            # (transformers computes float32 angles: 4000 * 2^-24 of a turn)
            assert np.max(np.abs(hf[:, :half] - ours)) < 1e-3 and np.max(np.abs(hf[:, half:] - ours)) < 1e-3


def test_lightglue_is_refused_its_angles_are_projected_keypoint_coordinates():
    # LightGlue's cos/sin are cos/sin of a learned Linear(2, head_dim / 2) of each keypoint's (x, y), repeat_interleave'd
    # (its rotate_half pairs x[::2] with x[1::2]): no token positions, no fixed frequencies. rotary read it as default
    # half-split RoPE over its 64-wide heads.
    from hf_models import hf_model_modules

    conf, mod = hf_model_modules("lightglue")
    with quiet_transformers():
        config = conf.LightGlueConfig()
    enc = mod.LightGluePositionalEncoder(config)
    keypoints = torch.rand(1, 5, 2, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        (cos, _), = enc(keypoints)
        enc.projector.weight.mul_(2.0)
        (cos2, _), = enc(keypoints)
    assert not torch.allclose(cos, cos2)  # the angles are the checkpoint's projection of the coordinates
    for source in (config, config.to_dict(), config.to_json_string()):
        with pytest.raises(ValueError, match=r"model_type lightglue: its rotary angles are keypoint coordinates"):
            rotary.Spec.from_hf_config(source)


def _permutation_equivariant(attn, width: int) -> bool:
    """An attention without position encoding (non-causal, no mask) commutes with permuting its tokens."""
    h = torch.randn(1, 9, width, generator=torch.Generator().manual_seed(3))
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        out, perm_out = attn(h)[0], attn(h[:, perm])[0]
    return bool(torch.allclose(out[:, perm], perm_out, atol=1e-5))


def _model_rotation_matches(spec, emb, apply_fn) -> None:
    """rotary.apply with `spec` against the model's own apply function on its RotaryEmbedding's cos/sin."""
    pos = torch.arange(3, 10)[None]
    with torch.no_grad():
        cos, sin = emb(torch.zeros(1), pos)
    q = torch.randn(1, 2, 7, spec.head_dim, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    want, _ = apply_fn(q, q, cos.double(), sin.double())
    got = rotary.apply(q.transpose(1, 2).float().numpy(), pos.numpy(), spec).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=2e-5)


def test_musicflamingo_audio_rope_is_refused_and_its_text_config_read():
    # MusicFlamingoConfig's own rope_parameters (base 1200, 0.2 of head_dim 1280) drive its audio RoPE: 2-D (window
    # start, frame) angles scaled by each token's timestamp, rotated in (x[2i], x[2i+1]) pairs. rotary read them as a
    # half-split text Spec; and AudioFlamingo3's encoder (its audio_config), which has no RoPE, as default RoPE.
    from hf_models import hf_model_modules

    conf, mod = hf_model_modules("musicflamingo")
    with quiet_transformers():
        config = conf.MusicFlamingoConfig()
    emb = mod.MusicFlamingoRotaryEmbedding(config)
    frames = torch.arange(8, dtype=torch.float32)[None] * 0.04
    with torch.no_grad():
        cos, _ = emb(frames, 8)
        cos_later, _ = emb(frames + 30.0, 8)  # the same frames, 30 s further into the audio
    assert not torch.allclose(cos, cos_later)  # the angles are timestamps', not token positions'
    for source in (config, config.to_dict(), config.to_json_string()):
        with pytest.raises(ValueError, match=r"model_type musicflamingo: its rope_parameters are the audio side's"):
            rotary.Spec.from_hf_config(source)
    audio_conf, audio_mod = hf_model_modules("audioflamingo3")
    audio = config.audio_config
    with quiet_transformers():
        audio._attn_implementation = "eager"
        assert _permutation_equivariant(audio_mod.AudioFlamingo3EncoderLayer(audio).self_attn, audio.d_model)
    assert not [n for n in dir(audio_mod) if n.endswith("RotaryEmbedding")]
    for source in (audio, audio.to_dict()):
        with pytest.raises(ValueError, match=r"model_type audioflamingo3_encoder: its attention has no rotary"):
            rotary.Spec.from_hf_config(source)
    # The language model (Qwen2) reads as Qwen2's own rotation; so does AudioFlamingo3's composite (its text_config).
    from hf_models import modeling_module

    qwen2, qwen2_apply = _rope_class("qwen2", None), modeling_module("qwen2").apply_rotary_pos_emb
    text = config.text_config
    _model_rotation_matches(rotary.Spec.from_hf_config(text), qwen2(config=text), qwen2_apply)
    with quiet_transformers():
        af3 = audio_conf.AudioFlamingo3Config()
    _model_rotation_matches(rotary.Spec.from_hf_config(af3.to_dict()), qwen2(config=af3.text_config), qwen2_apply)


def test_moonshine_streaming_decoder_is_read_and_its_encoder_refused():
    # The decoder (the top-level config) rotates (x[2i], x[2i+1]) pairs over 0.8 of its heads, as rotary reads it; the
    # encoder's attention has no RoPE at all (rotary read MoonshineStreamingEncoderConfig as half-split default RoPE).
    from hf_models import hf_model_modules

    conf, mod = hf_model_modules("moonshine_streaming")
    with quiet_transformers():
        config = conf.MoonshineStreamingConfig()
    spec = rotary.Spec.from_hf_config(config)
    assert spec.pairing == "interleaved"
    _model_rotation_matches(spec, mod.MoonshineStreamingRotaryEmbedding(config), mod.apply_rotary_pos_emb)
    encoder = config.encoder_config
    with quiet_transformers():
        encoder._attn_implementation = "eager"
        assert _permutation_equivariant(mod.MoonshineStreamingEncoderAttention(encoder, 0), encoder.hidden_size)
    with quiet_transformers():
        standalone = conf.MoonshineStreamingEncoderConfig()
    for source in (encoder, encoder.to_dict(), standalone.to_json_string()):
        with pytest.raises(ValueError, match=r"model_type moonshine_streaming_encoder: its attention has no rotary"):
            rotary.Spec.from_hf_config(source)


# Model types whose transformers code has no rotary embedding at all; rotary read their configs as default RoPE
# (base 10000) and now refuses them (src/core/model_defaults.cc, kNoRope).
NO_ROPE = ["albert", "bart", "bert", "bloom", "camembert", "clip", "clip_text_model", "clip_vision_model", "deberta",
           "deberta-v2", "distilbert", "electra", "gpt2", "gpt_bigcode", "gpt_neo", "mbart", "mpt", "mt5", "opt",
           "roberta", "siglip", "siglip_text_model", "siglip_vision_model", "t5", "vit", "whisper", "xlm-roberta"]


@pytest.mark.parametrize("model_type", NO_ROPE)
def test_a_model_type_without_rope_is_refused(model_type):
    import importlib
    import inspect
    with quiet_transformers():
        config = transformers.AutoConfig.for_model(model_type)
    modeling = importlib.import_module(type(config).__module__.replace(".configuration_", ".modeling_"))
    source = inspect.getsource(modeling)
    assert "RotaryEmbedding" not in source and "rotate_half" not in source, f"{model_type} rotates: transformers changed"
    for src in (config, config.to_dict()):
        # a composite (clip, siglip) is refused at the text config get_text_config() finds (clip_text_model, ...)
        with pytest.raises(ValueError, match=rf"model_type {model_type}(_text_model)?: its attention has no rotary emb"):
            rotary.Spec.from_hf_config(src)


def test_falcon_with_alibi_is_refused_and_without_it_read():
    # transformers' Falcon rotates q/k unless config.alibi, when it adds ALiBi biases instead; rotary read both as RoPE.
    import inspect
    from transformers.models.falcon import modeling_falcon
    forward = inspect.getsource(modeling_falcon.FalconAttention.forward)
    assert "if not self.config.alibi" in forward and "apply_rotary_pos_emb" in forward, "transformers' Falcon changed"
    with quiet_transformers():
        rope_cfg, alibi_cfg = transformers.FalconConfig(), transformers.FalconConfig(alibi=True)
    assert rotary.Spec.from_hf_config(rope_cfg).head_dim == rope_cfg.hidden_size // rope_cfg.num_attention_heads
    for src in (alibi_cfg, alibi_cfg.to_dict()):
        with pytest.raises(ValueError, match=r"alibi is true: model_type falcon then uses ALiBi attention biases"):
            rotary.Spec.from_hf_config(src)


def test_sam3_is_refused_as_sam3_not_as_its_clip_text_encoder():
    # SAM 3's text encoder (text_config) is CLIP's, which has no RoPE, and its vision backbone's RoPE is 2-D axial:
    # there is no text-decoder RoPE to read. It was refused as "model_type clip_text_model: its attention has no
    # rotary embedding", the text part get_text_config() finds, which hid that the model is SAM 3.
    import importlib.util
    import pathlib
    # (the modeling module's text: importing it needs torchvision)
    source = pathlib.Path(importlib.util.find_spec("transformers.models.sam3.modeling_sam3").origin).read_text()
    with quiet_transformers():
        config = transformers.AutoConfig.for_model("sam3")
    assert config.text_config.model_type == "clip_text_model", "transformers' SAM 3 changed its text encoder"
    assert 'rope_type != "axial"' in source and "CLIPTextModel" in source, "transformers' SAM 3 changed its RoPE"
    for source in (config, config.to_dict(), config.to_json_string(), config.vision_config.to_dict()):
        with pytest.raises(ValueError) as info:
            rotary.Spec.from_hf_config(source)
        with pytest.raises(ValueError, match=r"^\[rotary_config\] model_type sam3(_vision_model)?: .*2-D axial"):
            rotary.LayerTypeSpecs.from_hf_config(source)
        assert "clip_text_model" not in str(info.value) and "2-D axial" in str(info.value), str(info.value)
