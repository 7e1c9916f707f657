"""partial_rotary_factor under each model's own RoPE: its default type ignores it or not as transformers' code does."""
from __future__ import annotations

import numpy as np
import pytest

import rotary
from hf_models import quiet_transformers, text_rotary_embedding_class, trimmed_hf_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# From scripts/survey_default_partial.py on transformers 5.25 (src/core/model_defaults_partial.cc lists IGNORES):
# model types whose default-type frequencies span the whole head whatever partial_rotary_factor says ...
IGNORES = [
    "EvollaModel", "afmoe", "apertus", "apertus1p5", "apertus1p5_text", "arcee", "aria", "aria_text", "axk1", "axk2",
    "bailing_hybrid", "bitnet", "blt", "blt_global_transformer", "blt_local_decoder", "blt_local_encoder",
    "blt_patcher", "chameleon", "cohere", "cohere2", "cohere2_moe", "cosmos3_edge", "cosmos3_edge_text", "csm",
    "csm_depth_decoder_model", "cwm", "dbrx", "deepseek_ocr2", "deepseek_ocr2_encoder", "deepseek_ocr2_text",
    "deepseek_v2", "deepseek_v3", "deepseek_v32", "dia", "dia_decoder", "dia_encoder", "diffllama", "doge", "dots1",
    "emu3", "emu3_text_model", "eomt_dinov3", "ernie4_5", "ernie4_5_moe", "ernie4_5_vl_moe", "ernie4_5_vl_moe_text",
    "esmc", "eurobert", "evolla", "exaone4", "exaone_moe", "falcon", "falcon_h1", "flex_olmo", "flint", "gemma",
    "gemma2", "glm_moe_dsa", "gpt_oss", "gradium_phonon_tts", "granite", "granite4_vision", "granite4_vision_text",
    "granite_docling_text", "granite_swa", "granitemoe", "granitemoe_swa", "granitemoehybrid", "granitemoeshared",
    "gte", "helium", "higgs_audio_v2", "hrm_text", "hunyuan_v1_dense", "hunyuan_v1_moe", "hunyuan_vl",
    "hunyuan_vl_text", "hy_v3", "hy_v4", "hy_v4_vl", "hy_v4_vl_text", "hyperclovax", "idefics", "jais2", "jetmoe",
    "jina_embeddings_v3", "kolibri1", "kolibri1_1", "kyutai_speech_to_text", "lara_mini", "lasr_encoder", "lfm2",
    "lfm2_moe", "llama", "llama4", "llama4_text", "longcat_flash", "mimi", "mimi_decoder", "mimi_encoder", "minicpm3",
    "minicpm5_moe", "minimax", "ministral", "ministral3", "mistral", "mistral4", "mistral_large4",
    "mistral_large4_text", "mixtral", "mllama", "mllama_text_model", "molmo2", "molmo2_text", "moshi", "muse_glimmer",
    "muse_glimmer_assistant", "muse_glimmer_text", "muse_spark_text", "nanochat", "neucodec", "nomic_bert", "olmo",
    "olmo2", "olmo_hybrid", "olmoe", "openai_privacy_filter", "paddleocr_vl", "paddleocr_vl_text", "pe_audio_encoder",
    "pe_audio_video_encoder", "pe_video_encoder", "phimoe", "pocket_tts", "pocket_tts_audio_tokenizer",
    "pocket_tts_audio_tokenizer_decoder", "pocket_tts_audio_tokenizer_encoder", "qwen2", "qwen2_5_omni",
    "qwen2_5_omni_dit", "qwen2_5_omni_talker", "qwen2_5_omni_text", "qwen2_5_omni_thinker", "qwen2_5_vl",
    "qwen2_5_vl_text", "qwen2_moe", "qwen2_vl", "qwen2_vl_text", "qwen3", "qwen3_moe", "qwen3_omni_moe",
    "qwen3_omni_moe_talker_code_predictor", "qwen3_omni_moe_talker_text", "qwen3_omni_moe_text",
    "qwen3_omni_moe_thinker", "qwen3_vl", "qwen3_vl_moe", "qwen3_vl_moe_text", "qwen3_vl_text", "seed_oss", "smollm3",
    "starcoder2", "t5_gemma_module", "timesfm2_5", "unlimited_ocr", "unlimited_ocr_text", "vaultgemma",
    "voxtral_realtime", "voxtral_realtime_encoder", "voxtral_realtime_text", "xcodec2", "youtu", "zamba2",
]
# ... and those whose default type honours it.
HONOURS = [
    "bamba", "glm", "glm4", "glm4_moe", "glm4_moe_lite", "glm4v", "glm4v_moe", "glm4v_moe_text", "glm4v_text",
    "glm_image", "glm_image_text", "glm_ocr", "glm_ocr_text", "glmasr", "glmasr_encoder", "gpt_neox",
    "gpt_neox_japanese", "minimax_m2", "minimax_m3_vl", "minimax_m3_vl_text", "moonshine", "moonshine_streaming",
    "musicflamingo", "nemotron", "nemotron3_5_transcribe_asr_audio", "nemotron3_5_transcribe_word_timestamp",
    "nemotron3_diarization_audio", "persimmon", "phi", "phi3", "phi4_multimodal", "qwen3_5", "qwen3_5_moe",
    "qwen3_5_moe_text", "qwen3_5_text", "qwen3_next", "qwen4_exp", "qwen4_exp_text", "recurrent_gemma",
    "solar_open", "stablelm",
]

# head_dim and base given, so that only the partial factor is under test (test_hf_class_defaults.py checks the
# classes' own head_dim and base; scripts/survey_default_partial.py sweeps trimmed files without them).
# Disagreements that are not about the factor (found by the same comparison; not fixed here): the variants skipped.
ALL = ("top", "dict", "linear")
KNOWN = {
    "mistral4": (("dict",), "its default type spans qk_nope + qk_rope (128 wide), more than the 64 qk_rope channels its "
                 "code rotates: transformers' model fails, rotary refuses it (test_hf_class_defaults.py)"),
    "gpt_neox_japanese": (("top",), "its class reads rotary_pct, not a top-level partial_rotary_factor"),
    "eomt_dinov3": (ALL, "a 2-D vision RoPE (head_dim / 4 frequencies per axis), not a text one"),
    "nanochat": (ALL, "refused by rotary (its code rotates by minus the angle)"),
    "musicflamingo": (ALL, "refused by rotary (its RoPE is the audio side's timestamp-scaled 2-D one: "
                      "test_hf_composites.py)"),
}
# Classes that refuse the trimmed 768-wide file (validators; sections that no longer cover its head) or that AutoConfig
# does not know: test_every_model_whose_default_rope_ignores_the_factor_rotates_the_whole_head checks them instead.
UNTRIMMED = ("cohere2_moe", "cosmos3_edge", "cosmos3_edge_text", "ernie4_5_vl_moe", "ernie4_5_vl_moe_text",
             "granite4_vision", "granite4_vision_text", "kolibri1_1", "pocket_tts")
KNOWN.update({m: (ALL, "checked on its class's default config (UNTRIMMED)") for m in UNTRIMMED})

BASE = {"hidden_size": 768, "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 96, "rope_theta": 1e4}
VARIANTS = {
    "top": {"partial_rotary_factor": 0.5},
    "dict": {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
    # transformers' generic functions (linear here) always read the factor.
    "linear": {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0,
                                   "partial_rotary_factor": 0.5}},
}


def _inv_freq(cls, model_type, fields, float64=False):
    """transformers' inv_freq for `fields` and their config.json document; with float64, its code run in float64
    (torch.float / torch.float32 aliased to torch.float64, as test_hf_freqs.py does)."""
    config, doc = trimmed_hf_config(model_type, fields)
    saved = torch.float, torch.float32
    if float64:
        torch.float = torch.float32 = torch.float64
    try:
        return cls(config=config).inv_freq.double().numpy(), doc
    finally:
        torch.float, torch.float32 = saved


def _base(cls, model_type):
    """BASE as this model's class takes it: MLA classes get qk_rope_head_dim (64) instead of head_dim; a class whose
    head_dim is derived (Falcon) gets none."""
    try:
        config, _ = trimmed_hf_config(model_type, BASE)
    except Exception:  # noqa: BLE001 - a read-only head_dim
        return {k: v for k, v in BASE.items() if k != "head_dim"}
    if hasattr(config, "qk_rope_head_dim"):
        return {**{k: v for k, v in BASE.items() if k != "head_dim"}, "qk_rope_head_dim": 64}
    return BASE


@pytest.mark.parametrize("model_type", IGNORES + HONOURS)
def test_default_and_linear_types_read_partial_rotary_factor_as_the_model_does(model_type):
    skipped, why = KNOWN.get(model_type, ((), ""))
    if skipped == ALL:
        pytest.skip(why)
    cls = text_rotary_embedding_class(model_type)
    if cls is None:  # pragma: no cover - depends on the installed transformers
        pytest.skip(f"transformers has no {model_type} RotaryEmbedding")
    base = _base(cls, model_type)
    ran = 0
    for name, extra in VARIANTS.items():
        if name in skipped:
            continue
        try:
            hf, doc = _inv_freq(cls, model_type, {**base, **extra})
        except Exception:  # noqa: BLE001 - a type the class refuses (Phi-3: longrope only; RecurrentGemma: default)
            continue
        ran += 1
        ours = rotary.Spec.from_hf_config(doc).inv_freq(None)
        what = f"{model_type} {name} {extra}"
        assert ours.shape == hf.shape, f"{what}: rotary {ours.shape[0]} frequencies, transformers {hf.shape[0]}"
        # 1e-6, or twice transformers' own float32 rounding where that is larger (llama3's smoothing band cancels)
        hf64, _ = _inv_freq(cls, model_type, {**base, **extra}, float64=True)
        assert np.all(np.abs(ours - hf) <= np.maximum(1e-6 * np.abs(hf), 2 * np.abs(hf - hf64))), what
        assert np.max(np.abs(ours - hf64) / np.abs(hf64)) <= 1e-9, what
    assert ran, f"{model_type}: transformers refused every variant"
    # The list is still transformers' fact: the default type with the factor in rope_parameters.
    whole, _ = _inv_freq(cls, model_type, {**base, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                                       "partial_rotary_factor": 1.0}})
    half, _ = _inv_freq(cls, model_type, {**base, **VARIANTS["dict"]})
    assert (half.shape == whole.shape) == (model_type in IGNORES), f"{model_type}: transformers changed"


def test_an_unknown_model_type_keeps_applying_the_factor():
    spec = rotary.Spec.from_hf_config({"model_type": "not_in_transformers", **BASE, "partial_rotary_factor": 0.5})
    assert (spec.head_dim, spec.rotary_dim) == (96, 48)
    llama = rotary.Spec.from_hf_config({"model_type": "llama", **BASE, "partial_rotary_factor": 0.5})
    assert (llama.head_dim, llama.rotary_dim) == (96, 96)
    # The generic types still rotate the partial share.
    linear = rotary.Spec.from_hf_config({"model_type": "llama", **BASE, **VARIANTS["linear"]})
    assert linear.rotary_dim == 48


def _default_rope_ignorers():
    """Every text RotaryEmbedding class in transformers' modeling modules (whatever CONFIG_MAPPING lists: Granite 4
    Vision's is not there) whose compute_default_rope_parameters never reads partial_rotary_factor, with its config
    class (its __init__'s annotation). Derived from the source, so that IGNORES cannot fall behind transformers."""
    import importlib
    import inspect
    import pkgutil
    import typing

    import transformers.models as models

    out = []
    for info in pkgutil.iter_modules(models.__path__):
        try:
            mod = importlib.import_module(f"transformers.models.{info.name}.modeling_{info.name}")
        except Exception:  # noqa: BLE001 - no modeling module, or one that needs an optional dependency
            continue
        for name, cls in sorted(vars(mod).items()):
            if not (name.endswith("RotaryEmbedding") and isinstance(cls, type) and cls.__module__ == mod.__name__):
                continue
            fn = getattr(cls, "compute_default_rope_parameters", None)
            if ("Vision" in name and "VisionText" not in name) or fn is None or "partial_rotary_factor" in inspect.getsource(fn):
                continue
            config_cls = typing.get_type_hints(cls.__init__).get("config")
            if isinstance(config_cls, type):
                out.append((name, config_cls, cls))
    return out


_IGNORERS = _default_rope_ignorers()


@pytest.mark.parametrize("name,config_cls,emb_cls", _IGNORERS, ids=[n for n, _, _ in _IGNORERS])
def test_every_model_whose_default_rope_ignores_the_factor_rotates_the_whole_head(name, config_cls, emb_cls):
    # The survey behind IGNORES built trimmed configs (768 wide, 8 heads), which some classes refuse (Kolibri 1.1's
    # and PocketTTS's validators) or whose sections no longer cover that head (ERNIE 4.5 VL, Cosmos 3 Edge), and it
    # walked CONFIG_MAPPING only (Granite 4 Vision's text config is not there): these were read with
    # int(head_dim * 0.5) channels. Here each class's own default config, default type, factor 0.5.
    with quiet_transformers():
        try:
            base = config_cls().get_text_config()  # a composite annotation (Qwen2VLConfig): its text part
        except Exception as e:  # noqa: BLE001 - a class that needs arguments
            pytest.skip(f"{config_cls.__name__}() fails: {e}")
        rp = getattr(base, "rope_parameters", None)
        if not isinstance(rp, dict) or "rope_type" not in rp:
            pytest.skip(f"{type(base).__name__}: no flat rope_parameters (per layer type: test_hf_layer_type_*)")
        config = type(base)(rope_parameters={**rp, "rope_type": "default", "partial_rotary_factor": 0.5})
        try:
            hf = emb_cls(config=config).inv_freq.double().numpy()
        except AttributeError as e:  # a composite annotation (BltConfig): its parts are swept by IGNORES
            pytest.skip(f"{name} does not build from {config_cls.__name__}(): {e}")
    model_type = config.model_type
    if model_type not in UNTRIMMED and "dict" in KNOWN.get(model_type, ((), ""))[0]:
        pytest.skip(KNOWN[model_type][1])
    if (getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads) % 2:
        pytest.skip(f"{model_type}: its class's default head_dim is odd (rotary rotates whole pairs)")
    assert model_type in IGNORES, f"{model_type} ({name}) ignores the factor in transformers: add it to IGNORES"
    for source in (config, config.to_dict()):
        spec = rotary.Spec.from_hf_config(source)
        ours = spec.inv_freq(None)
        assert ours.shape == hf.shape, f"{model_type}: rotary {ours.shape[0]} frequencies, transformers {hf.shape[0]}"
        # (sorted: ERNIE 4.5 VL's buffer orders its frequencies by the axis each takes; rotary reads text positions)
        np.testing.assert_allclose(np.sort(ours), np.sort(hf), rtol=1e-6, err_msg=model_type)
