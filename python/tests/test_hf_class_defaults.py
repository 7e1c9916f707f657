"""config.json files that leave RoPE fields out: rotary assumes what each model's transformers config class does."""
from __future__ import annotations

import copy
import importlib
import inspect
import json
import logging
import re
import warnings

import numpy as np
import pytest

import rotary
from hf_models import text_rotary_embedding_class, text_rotary_embedding_names, trimmed_hf_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# rotary's table of class defaults (src/core/model_defaults.cc) and models whose defaults are the generic ones.
# Each is checked on a trimmed file: the model type, hidden_size and num_attention_heads, nothing else.
FLAT = ["apertus", "bitnet", "cohere", "cohere2", "cohere2_moe", "deepseek_v2", "deepseek_v3", "ernie4_5",
        "ernie4_5_moe", "gemma", "gemma2", "glm", "glm4", "gpt_oss", "helium", "lfm2", "minimax", "mixtral",
        "nemotron", "persimmon", "phi", "phimoe", "qwen3", "seed_oss", "smollm3", "stablelm", "llama", "mistral",
        "qwen2", "olmo2", "granite", "cwm", "bamba", "qwen3_next", "recurrent_gemma", "zamba2"]
# Vision-language models: the text part nested in text_config (head_dim 128, the sections' sum times 2).
NESTED = [("qwen2_vl", "qwen2_vl_text"), ("qwen2_5_vl", "qwen2_5_vl_text"), ("qwen3_vl", "qwen3_vl_text"),
          ("qwen3_vl_moe", "qwen3_vl_moe_text"), ("qwen3_5", "qwen3_5_text"), ("qwen3_5_moe", "qwen3_5_moe_text")]
# 768 / 8 = 96 differs from every class's own head_dim (64, 128, 256), so a missed class default shows.
HIDDEN, HEADS = 768, 8


def _hf_modeling(model_type: str):
    from hf_models import modeling_module

    mod = modeling_module(model_type)  # a sub-type (llama4_text, glm4v_moe_text): its model's module
    if mod is None:  # pragma: no cover - depends on the installed transformers
        pytest.skip(f"transformers has no modeling module for {model_type}")
    return mod


def _hf_text_rope(model_type: str, config):
    """The model's text RotaryEmbedding built from `config` (its inv_freq, attention_scaling, mrope_section)."""
    mod = _hf_modeling(model_type)
    names = text_rotary_embedding_names(mod)
    assert names, f"{model_type}: no RotaryEmbedding class"
    return getattr(mod, names[0])(config=config)


def _hf_pairing(model_type: str, config=None) -> str:
    """The pairs the model's own code rotates: x[i] with x[i + d/2] ("half"), or x[2i] with x[2i+1]."""
    if config is not None and getattr(config, "rope_interleave", False):
        return "interleaved"  # DeepSeek-V3: the checkpoint's pairs are interleaved (the code permutes them)
    mod = _hf_modeling(model_type)
    if not hasattr(mod, "rotate_half"):
        # DeepSeek-V2: a complex product of (x[2i], x[2i+1]); gpt-oss: the two halves of torch.chunk.
        fn = getattr(mod, "apply_rotary_emb", None) or getattr(mod, "_apply_rotary_emb")
        src = inspect.getsource(fn)
        assert ("view_as_complex" in src) != ("torch.chunk(x, 2" in src), f"{model_type}: pairing not recognised"
        return "interleaved" if "view_as_complex" in src else "half"
    out = mod.rotate_half(torch.arange(1.0, 9.0))
    assert float(out[0]) in (-5.0, -2.0), f"{model_type}: rotate_half is neither half-split nor interleaved"
    return "half" if float(out[0]) == -5.0 else "interleaved"


def _hf_config(model_type: str, fields: dict):
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return transformers.AutoConfig.for_model(model_type, **fields)
    except (KeyError, ValueError) as e:  # pragma: no cover - depends on the installed transformers
        pytest.skip(f"transformers has no config class for {model_type}: {e}")
    finally:
        logging.disable(logging.NOTSET)


def _check(spec: rotary.Spec, emb, what: str):
    hf = emb.inv_freq.double().numpy()
    ours = spec.inv_freq(None)
    assert ours.shape == hf.shape, f"{what}: {ours.shape[0]} frequencies, transformers {hf.shape[0]}"
    rel = np.max(np.abs(ours - hf) / np.abs(hf))
    assert rel <= 1e-6, f"{what}: inv_freq max rel err {rel:.3g} (base or scaling differ)"
    assert spec.attention_factor == pytest.approx(float(emb.attention_scaling), rel=1e-6), f"{what}: attention_factor"


@pytest.mark.parametrize("model_type", FLAT)
def test_a_trimmed_config_gets_the_config_class_defaults(model_type, tmp_path):
    fields = {"hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_key_value_heads": HEADS}
    config = _hf_config(model_type, fields)
    emb = _hf_text_rope(model_type, config)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": model_type, **fields}))
    spec = rotary.Spec.from_hf_config(str(path))
    _check(spec, emb, model_type)
    assert spec.pairing == _hf_pairing(model_type, config), model_type


def test_bailing_hybrid_rotates_its_qk_rope_part_in_interleaved_pairs(tmp_path):
    # Its head_dim is qk_rope_head_dim (64), its base 6e6, and its attention always calls the _interleave variant.
    fields = {"hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_key_value_heads": HEADS}
    emb = _hf_text_rope("bailing_hybrid", _hf_config("bailing_hybrid", fields))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "bailing_hybrid", **fields}))
    spec = rotary.Spec.from_hf_config(str(path))
    _check(spec, emb, "bailing_hybrid")
    src = inspect.getsource(_hf_modeling("bailing_hybrid"))
    assert "q_rot, k_rot = apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin)" in src
    assert spec.pairing == "interleaved"


# Files that give some fields, with null or falsy values, or both dicts: each read as transformers reads it.
PARTIAL = [
    ("phi", {"partial_rotary_factor": None}),  # an explicit null: full rotation, not the class's 0.5
    ("seed_oss", {"head_dim": None}),  # an explicit null: hidden_size / heads, not the class's 128
    ("apertus", {"rope_theta": 3e5}),  # the class dict's own base stays
    ("gpt_oss", {"rope_theta": 3e5}),  # the class dict has none: the top-level base
    ("gpt_oss", {"rope_parameters": {}}),  # an empty dict is not absent: default RoPE
    ("mixtral", {"rope_scaling": {"rope_type": "linear", "factor": 4.0}}),  # the class's base, linear
    ("llama", {"rope_parameters": {"rope_type": "default", "rope_theta": 5e5},
               "rope_scaling": {"rope_type": "linear", "factor": 4.0, "rope_theta": 2e4}}),  # rope_scaling wins
    ("llama", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5},
               "rope_scaling": []}),  # a falsy rope_scaling does not
    ("glm4", {"partial_rotary_factor": 0.25, "head_dim": 64}),
    ("bamba", {"partial_rotary_factor": 1.0}),  # the class sets 0.5 whatever the top level says
    ("bamba", {"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 1.0}}),  # the dict's own wins
    ("zamba2", {"num_hidden_layers": 54, "attention_head_dim": 64}),  # its head_dim key, given
]


@pytest.mark.parametrize("model_type,given", PARTIAL, ids=[f"{m}-{'-'.join(g)}" for m, g in PARTIAL])
def test_a_partly_trimmed_config_reads_as_transformers_reads_it(model_type, given, tmp_path):
    fields = {"hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_key_value_heads": HEADS}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": model_type, **fields, **given}))
    emb = _hf_text_rope(model_type, transformers.AutoConfig.from_pretrained(str(tmp_path)))
    _check(rotary.Spec.from_hf_config(str(path)), emb, f"{model_type} with {given}")


@pytest.mark.parametrize("model_type,text_type", NESTED, ids=[m for m, _ in NESTED])
def test_a_trimmed_vl_config_gets_the_model_code_sections(model_type, text_type):
    text = {"hidden_size": 1024, "num_attention_heads": HEADS, "num_key_value_heads": HEADS}
    config = _hf_config(model_type, {"text_config": text})
    emb = _hf_text_rope(model_type, config.text_config)
    for doc in ({"model_type": model_type, "text_config": {"model_type": text_type, **text}},
                {"model_type": model_type, "text_config": dict(text)}):
        spec = rotary.Spec.from_hf_config(doc)
        _check(spec, emb, model_type)
        assert list(spec.mrope_section) == list(emb.mrope_section), model_type
        # Qwen3-VL's and Qwen3.5's code always interleaves the sections; Qwen2-VL's never does.
        assert spec.mrope_interleaved == model_type.startswith("qwen3"), model_type


def test_a_real_interleaved_model_s_config_rotates_interleaved_pairs():
    # Not a class default but the model's code: a complete GLM-4 / Cohere config reads as interleaved too.
    glm = {"model_type": "glm4", "hidden_size": 4096, "num_attention_heads": 32, "head_dim": 128,
           "partial_rotary_factor": 0.5, "rope_theta": 10000.0, "max_position_embeddings": 131072}
    cohere = {"model_type": "cohere", "hidden_size": 8192, "num_attention_heads": 64, "rope_theta": 8e6}
    for doc in (glm, cohere):
        spec = rotary.Spec.from_hf_config(doc)
        assert spec.pairing == _hf_pairing(doc["model_type"]) == "interleaved", doc["model_type"]
    # GLM-4's code reads no rope_interleave, so a top-level one changes nothing (transformers ignores it); types
    # not in rotary's table still follow it.
    assert rotary.Spec.from_hf_config({**glm, "rope_interleave": False}).pairing == "interleaved"
    plain = {k: v for k, v in glm.items() if k != "model_type"}
    assert rotary.Spec.from_hf_config({**plain, "rope_interleave": True}).pairing == "interleaved"
    assert rotary.Spec.from_hf_config({**plain, "rope_interleave": False}).pairing == "half"


@pytest.mark.parametrize("model_type", ["glm4_moe_lite", "mistral4", "youtu", "axk1"])
def test_an_mla_class_whose_rope_interleave_defaults_to_true_reads_interleaved(model_type):
    assert _hf_config(model_type, {}).rope_interleave is True
    doc = {"model_type": model_type, "qk_rope_head_dim": 64}
    assert rotary.Spec.from_hf_config(doc).pairing == "interleaved"
    assert rotary.Spec.from_hf_config({**doc, "rope_interleave": False}).pairing == "half"


# MLA models whose attention always calls apply_rotary_pos_emb_interleave (no rope_interleave flag): interleaved
# pairs (x[2i], x[2i+1]) rotated and written de-interleaved, so rotary's interleaved rotation gives the same
# values, each pair's two results at 2i and 2i + 1 instead of i and i + R/2 (q and k permuted alike: the same scores).
ALWAYS_INTERLEAVED = ["axk2", "deepseek_v32", "glm_moe_dsa", "hy_v4", "hy_v4_vl_text", "longcat_flash",
                      "mistral_large4_text"]


@pytest.mark.parametrize("model_type", ALWAYS_INTERLEAVED)
def test_an_mla_model_that_always_interleaves_reads_interleaved(model_type):
    from hf_models import modeling_module

    mod = modeling_module(model_type)
    if mod is None or not hasattr(mod, "apply_rotary_pos_emb_interleave"):
        pytest.skip(f"transformers has no {model_type} with apply_rotary_pos_emb_interleave")
    src = inspect.getsource(mod)
    assert "q_rot, k_rot = apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin" in src
    assert "rope_interleave" not in src  # unconditional: no flag chooses the half-split variant
    config = _hf_config(model_type, {})
    emb = text_rotary_embedding_class(model_type)(config=config)
    # A trimmed file, a saved one, and one with a rope_interleave the model's code never reads.
    for doc in ({"model_type": model_type}, config.to_dict(), {"model_type": model_type, "rope_interleave": False}):
        spec = rotary.Spec.from_hf_config(doc)
        assert spec.pairing == "interleaved", doc.get("model_type")
        r = spec.rotary_dim
        g = torch.Generator().manual_seed(0)
        q = torch.randn(1, 2, 5, r, generator=g, dtype=torch.float64)
        k = torch.randn(1, 1, 5, r, generator=g, dtype=torch.float64)
        pos = torch.arange(100, 105)[None]
        with torch.no_grad():  # Mistral Large 4's embedding holds a learned per-frequency scale (1 at init)
            cos, sin = emb(q, pos)
        hq, hk = mod.apply_rotary_pos_emb_interleave(q, k, cos.double(), sin.double())
        for x, h in ((q, hq), (k, hk)):
            ours = rotary.apply(x.numpy().astype(np.float32), np.arange(100, 105), spec, layout="bhsd")
            got = np.concatenate([ours[..., 0::2], ours[..., 1::2]], axis=-1)
            np.testing.assert_allclose(got, h.numpy(), rtol=0, atol=2e-5, err_msg=model_type)


def test_codegen_rotates_every_two_as_gpt_j():
    src = inspect.getsource(_hf_modeling("codegen").apply_rotary_pos_emb)
    assert "rotate_every_two" in src
    spec = rotary.Spec.from_hf_config({"model_type": "codegen", "n_embd": 1024, "n_head": 16, "rotary_dim": 32})
    assert (spec.pairing, spec.head_dim, spec.rotary_dim) == ("interleaved", 64, 32)


def test_the_file_s_own_fields_win_over_the_class_defaults():
    # StableLM's class rotates a quarter of the head; Mixtral's default type ignores the factor (the whole head).
    doc = {"model_type": "stablelm", "hidden_size": HIDDEN, "num_attention_heads": HEADS, "rope_theta": 5e5,
           "head_dim": 64, "partial_rotary_factor": 0.5}
    spec = rotary.Spec.from_hf_config(doc)
    assert (spec.base, spec.head_dim, spec.rotary_dim) == (5e5, 64, 32)
    spec = rotary.Spec.from_hf_config({**doc, "model_type": "mixtral"})
    assert (spec.base, spec.head_dim, spec.rotary_dim) == (5e5, 64, 64)
    # A dict of its own replaces gpt-oss's class dict (yarn) entirely.
    gpt = rotary.Spec.from_hf_config({"model_type": "gpt_oss", "hidden_size": HIDDEN, "num_attention_heads": HEADS,
                                      "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}})
    assert gpt.rope_type == "default" and gpt.base == 1e4 and gpt.head_dim == 64


def test_interleaved_sections_need_sections():
    with pytest.raises(ValueError, match=r"mrope\.interleaved needs mrope\.section"):
        rotary.Spec(128, mrope_interleaved=True)
    # Dropping the sections drops their interleaving with them.
    spec = rotary.Spec(128, mrope_section=[24, 20, 20], mrope_interleaved=True)
    plain = spec.replace(mrope_section=None)
    assert plain.mrope_section is None or len(plain.mrope_section) == 0
    assert not plain.mrope_interleaved
    assert spec.replace(base=5e5).mrope_interleaved


# Files as save_pretrained writes them (every field), for models whose code differs from the generic reading: the
# config key transformers maps head_dim to, MLA widths, a rotary_dim the code ignores, interleaved pairs.
SAVED = [("jetmoe", None), ("zamba2", None), ("mistral4", None), ("minimax_m3_vl", "text_config"),
         ("blt", "global_config"), ("blt", "encoder_config"), ("ernie4_5_vl_moe", "text_config"), ("glm_ocr", "text_config"), ("moonshine_streaming", None),
         ("openai_privacy_filter", None)]


@pytest.mark.parametrize("model_type,part", SAVED, ids=[f"{m}-{p}" if p else m for m, p in SAVED])
def test_a_saved_config_rotates_as_the_model_s_own_code(model_type, part):
    config = _hf_config(model_type, {})
    sub = getattr(config, part) if part else config
    spec = rotary.Spec.from_hf_config(sub.to_json_string())
    emb = _hf_text_rope(model_type, sub)
    if model_type != "ernie4_5_vl_moe":  # its inv_freq buffer holds the frequencies permuted for its 3-D axes
        _check(spec, emb, model_type)
    assert spec.rotary_dim == 2 * emb.inv_freq.shape[0]
    # The rotation itself: the model's apply_rotary_pos_emb on its RoPE module's cos/sin, against rotary.apply.
    mod = _hf_modeling(model_type)
    pos = torch.arange(3, 10)[None]
    try:
        cos, sin = emb(torch.zeros(1), pos)
    except Exception:  # M-RoPE modules take one row of positions per axis
        cos, sin = emb(torch.zeros(1), pos[None].expand(3, 1, 7))
    q = torch.randn(1, 2, 7, spec.head_dim, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    # MLA classes whose rope_interleave is set rotate through their _interleave variant (Mistral 4).
    rotate = mod.apply_rotary_pos_emb_interleave if getattr(sub, "rope_interleave", False) else mod.apply_rotary_pos_emb
    want, _ = rotate(q, q, cos.double(), sin.double())
    got = rotary.apply(q.transpose(1, 2).float().numpy(), pos.numpy(), spec).transpose(0, 2, 1, 3)
    if getattr(sub, "rope_interleave", False):  # that variant returns the pairs' channels in half-split order
        got = np.concatenate((got[..., 0::2], got[..., 1::2]), axis=-1)
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=2e-5, err_msg=model_type)


def test_a_model_whose_code_rotates_by_minus_the_angle_is_refused_by_name():
    src = inspect.getsource(_hf_modeling("nanochat").rotate_half)
    assert "(x2, -x1)" in src  # rotate_half = cat(x2, -x1): q*cos + rotate_half(q)*sin rotates by -angle
    with pytest.raises(ValueError, match=r"model_type nanochat: its code rotates by minus the angle"):
        rotary.Spec.from_hf_config(_hf_config("nanochat", {}).to_json_string())


def test_deepseek_v4_is_read_per_layer_type_not_as_one_flat_dict():
    # Its rope_parameters {"main": .., "compress": ..} are RoPE labels its attention picks per layer type; read as one
    # flat dict they gave a 64-wide default Spec rotating 8 channels (its heads are 512 wide, 64 rotated, interleaved).
    # One Spec is refused; per layer type each gets its label's (test_hf_deepseek_v4.py compares with transformers).
    doc = _hf_config("deepseek_v4", {"num_hidden_layers": 4}).to_dict()
    assert set(doc["rope_parameters"]) == {"main", "compress"}
    with pytest.raises(NotImplementedError, match=r"model_type deepseek_v4: its RoPE is keyed by label"):
        rotary.Spec.from_hf_config(doc)
    specs = rotary.LayerTypeSpecs.from_hf_config(doc)
    assert (specs["sliding_attention"].head_dim, specs["sliding_attention"].base) == (64, 10000.0)
    assert (specs["compressed_sparse_attention"].head_dim, specs["compressed_sparse_attention"].base) == (64, 160000.0)


def test_glm4v_text_rotates_interleaved_pairs_of_its_sectioned_rope():
    # GLM-4.1V's text attention repeat_interleaves its M-RoPE cos/sin and rotates with rotate_half_llm (pairs
    # (x[2i], x[2i+1])); its configs were read as half-split (off by up to 5). glm4v_moe's code is half-split.
    cfg_mod = importlib.import_module("transformers.models.glm4v.configuration_glm4v")
    mod = _hf_modeling("glm4v")
    rp = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5, "mrope_section": [8, 12, 12]}
    tc = cfg_mod.Glm4vTextConfig(rope_parameters=rp, hidden_size=256, num_attention_heads=2, num_key_value_heads=2,
                                 num_hidden_layers=1, vocab_size=10, intermediate_size=8)
    pos = torch.randint(0, 3000, (3, 1, 4), generator=torch.Generator().manual_seed(2))
    x = torch.randn(1, 2, 4, 128, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    cos, sin = mod.Glm4vTextRotaryEmbedding(tc)(x.float(), pos)
    want, _ = mod.apply_rotary_pos_emb(x, x, cos.double(), sin.double())
    for config in (tc, cfg_mod.Glm4vConfig(text_config=tc.to_dict())):
        spec = rotary.Spec.from_hf_config(config)
        assert spec.pairing == "interleaved" and spec.rotary_dim == 64 and list(spec.mrope_section) == [8, 12, 12]
        got = rotary.apply(x.numpy(), pos.numpy(), spec, layout="bhsd")
        np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=3e-4)  # transformers' f32 angles at p < 3000


# Class RoPE dicts (llama3 / yarn) rotary's table lacked before a review against transformers 5.25: a trimmed file read
# as default RoPE. Composite configs (apertus1p5) get the fields in text_config. A top-level rope_theta does not replace
# a class dict's own; a top-level partial_rotary_factor joins a class dict without one (not Mistral 4's).
CLASS_DICTS = ["apertus1p5", "apertus1p5_text", "higgs_audio_v2", "ministral3", "mistral4", "mistral_large4",
               "mistral_large4_text", "openai_privacy_filter"]
GIVEN = [{}, {"rope_theta": 3e5}, {"partial_rotary_factor": 0.5}, {"max_position_embeddings": 4096}]


@pytest.mark.parametrize("given", GIVEN, ids=["trimmed", "theta", "partial", "max_pos"])
@pytest.mark.parametrize("model_type", CLASS_DICTS)
def test_a_trimmed_config_gets_the_class_rope_dict(model_type, given):
    if model_type.startswith("mistral_large4") and "partial_rotary_factor" in given:
        pytest.skip("its yarn would span a share of the 64 rope channels it rotates whole (not rotary's to judge)")
    fields = {"hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_key_value_heads": HEADS, **given}
    config, doc = trimmed_hf_config(model_type, fields)
    emb = text_rotary_embedding_class(model_type)(config=config)
    spec = rotary.Spec.from_hf_config(doc)
    _check(spec, emb, f"{model_type} {given}")
    if model_type.startswith("mistral_large4"):  # its attention always calls the _interleave variant
        src = inspect.getsource(_hf_modeling("mistral_large4"))
        assert "q_rot, k_rot = apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin)" in src
        assert spec.pairing == "interleaved"
    elif model_type != "openai_privacy_filter":  # its pairing: test_a_saved_config_rotates_as_the_model_s_own_code
        assert spec.pairing == _hf_pairing(model_type.removesuffix("_text"), config), model_type


# A small Mistral 4 (MLA: q = [qk_nope | qk_rope], only the qk_rope part rotated). Its rope dict needs
# llama_4_scaling_beta and original_max_position_embeddings: its attention reads them for a query scale.
M4 = {"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": 50,
      "intermediate_size": 32, "moe_intermediate_size": 16, "n_routed_experts": 2, "num_experts_per_tok": 1,
      "q_lora_rank": None, "kv_lora_rank": 16}
L4 = {"llama_4_scaling_beta": 0.1, "original_max_position_embeddings": 4096}
M4_RUNS = [
    {},  # the class dict: yarn, factor 128
    {"partial_rotary_factor": 0.25},  # the class dict's own factor (qk_rope's share) stays
    {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0, **L4}},
    {"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, **L4}, "partial_rotary_factor": 0.5},
    # its class never reads a top-level partial_rotary_factor (it sets the dict's first)
    {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0, **L4}, "partial_rotary_factor": 1.0},
    {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, **L4}, "qk_nope_head_dim": 0},
    {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, **L4}, "qk_nope_head_dim": 32},
]
M4_FAILS = [  # widths transformers' model cannot rotate: its frequencies span more or less than qk_rope_head_dim
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, **L4}}, "rope_parameters.rope_type"),
    ({"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4, **L4}}, "rope_parameters.rope_type"),
    ({"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0, "partial_rotary_factor": 0.25,
                          **L4}}, "rope_parameters.partial_rotary_factor"),
]


def _mistral4(doc):
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fields = copy.deepcopy({k: v for k, v in doc.items() if k != "model_type"})  # transformers edits dicts
            config = transformers.AutoConfig.for_model("mistral4", **fields)
            torch.manual_seed(0)
            return _hf_modeling("mistral4").Mistral4ForCausalLM(config).eval()
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize("given", M4_RUNS, ids=["class", "class-top-partial", "linear", "llama3-top-partial", "top-partial-1", "nope0-default", "nope32"])
def test_mistral4_rotates_what_its_model_rotates(given, monkeypatch):
    # The model's own forward: record what its attention hands to the rotation and gets back, for rotary.apply.
    doc = {"model_type": "mistral4", **M4, **given}
    model, mod, seen = _mistral4(doc), _hf_modeling("mistral4"), []
    rotate = mod.apply_rotary_pos_emb_interleave

    def recording(q, k, cos, sin, *args, **kwargs):
        out = rotate(q, k, cos, sin, *args, **kwargs)
        seen.append((q, k, *out))
        return out

    monkeypatch.setattr(mod, "apply_rotary_pos_emb_interleave", recording)
    pos = torch.tensor([[0, 1, 7, 300, 5000, 70000]])
    with torch.no_grad():
        model(torch.arange(6)[None], position_ids=pos)
    assert len(seen) == 1
    spec = rotary.Spec.from_hf_config(doc)
    assert spec.pairing == "interleaved" and spec.rotary_dim == spec.head_dim == seen[0][0].shape[-1]
    for x, want in ((seen[0][0], seen[0][2]), (seen[0][1], seen[0][3])):  # q (bhsd), then k
        got = rotary.apply(x.float().numpy(), pos.numpy(), spec, layout="bhsd")
        got = np.concatenate((got[..., 0::2], got[..., 1::2]), axis=-1)  # the _interleave variant's channel order
        np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=2e-3, err_msg=str(given))


@pytest.mark.parametrize("given,field", M4_FAILS, ids=["default", "proportional", "dict-partial"])
def test_mistral4_widths_its_model_cannot_rotate_are_refused(given, field):
    # transformers' RotaryEmbedding gives frequencies for a width other than qk_rope_head_dim (the default type spans
    # qk_nope + qk_rope = 128): the model's forward fails, so no Spec describes it.
    doc = {"model_type": "mistral4", **M4, **given}
    with pytest.raises(RuntimeError, match="must match the size of tensor"):
        with torch.no_grad():
            _mistral4(doc)(torch.arange(4)[None])
    with pytest.raises(ValueError, match=rf"\[rotary_config\] {re.escape(field)} must give the 64 qk_rope channels "
                                         r"model_type mistral4 rotates"):
        rotary.Spec.from_hf_config(doc)


# Class head_dim / base / qk_rope_head_dim / partial defaults of model types rotary's table lacked (or had wrong:
# blt_patcher's base is 1e4, qwen3_vl_moe's head_dim hidden_size / heads), found by scripts/survey_class_defaults.py
# on transformers 5.25: a trimmed file (model type, hidden_size 768, 8 heads) against the live RotaryEmbedding.
HEAD_AND_BASE = ["EvollaModel", "afmoe", "axk1", "axk2", "blt_patcher", "csm", "csm_depth_decoder_model",
    "deepseek_v32", "dia_decoder", "dia_encoder", "emu3", "emu3_text_model", "evolla", "flex_olmo", "flint",
    "glm4_moe", "glm4_moe_lite", "glm4v_moe", "glm4v_moe_text", "glm_moe_dsa", "glmasr_encoder", "gte", "hrm_text",
    "hy_v3", "hy_v4", "jetmoe", "jina_embeddings_v3", "kolibri1", "lara_mini", "lfm2_moe", "llama4", "llama4_text",
    "longcat_flash", "minicpm3", "minicpm5_moe", "minimax_m2", "minimax_m3_vl", "minimax_m3_vl_text", "mllama",
    "mllama_text_model", "molmo2", "molmo2_text", "moonshine", "moonshine_streaming", "muse_glimmer",
    "muse_glimmer_assistant", "muse_glimmer_text", "muse_spark_text", "nemotron3_5_transcribe_asr_audio", "nemotron3_5_transcribe_word_timestamp", "neucodec",
    "nomic_bert", "paddleocr_vl", "paddleocr_vl_text", "pe_audio_encoder", "pe_audio_video_encoder",
    "pe_video_encoder", "qwen2_5_omni_dit", "qwen2_5_omni_talker", "qwen2_5_omni_text",
    "qwen3_omni_moe_talker_code_predictor", "qwen3_omni_moe_text", "qwen3_vl_moe", "qwen3_vl_moe_text", "qwen4_exp",
    "qwen4_exp_text", "solar_open", "t5_gemma_module", "timesfm2_5", "vaultgemma", "voxtral_realtime",
    "voxtral_realtime_encoder", "xcodec2", "youtu"]


@pytest.mark.parametrize("model_type", HEAD_AND_BASE)
def test_a_trimmed_config_gets_the_class_head_dim_and_base(model_type):
    fields = {"hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_key_value_heads": HEADS}
    config, doc = trimmed_hf_config(model_type, fields)
    emb = text_rotary_embedding_class(model_type)(config=config)
    spec = rotary.Spec.from_hf_config(doc)
    _check(spec, emb, model_type)
    assert spec.pairing == _model_pairing(model_type, emb, config), model_type


def _model_pairing(model_type: str, emb, config) -> str:
    """The pairs the model's attention rotates, from its own functions run on its embedding's cos/sin: each
    candidate rotation (fp64, by the embedding's inv_freq and scaling) against what the function returns."""
    from hf_models import modeling_module

    mod = modeling_module(model_type)
    src = inspect.getsource(mod)
    if "q_rot, k_rot = apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin" in src and "rope_interleave" not in src:
        return "interleaved"  # MLA attention that always interleaves (checked on its function above)
    fn = getattr(mod, "apply_rotary_pos_emb", None)
    if fn is None or getattr(config, "rope_interleave", False) or "mrope_section" in inspect.signature(fn).parameters:
        return _hf_pairing(model_type, config)  # Llama 4's complex product, DeepSeek's flag, M-RoPE's sections
    inv = emb.inv_freq.double().numpy()
    r = 2 * inv.shape[0]
    pos = np.arange(3, 8)
    x = torch.randn(1, 1, 5, r, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ids = torch.from_numpy(pos)[None]
    with torch.no_grad():
        try:
            cos, sin = emb(x, ids)
        except RuntimeError:  # an M-RoPE embedding whose class sections do not fit this trimmed head: the code's
            return _hf_pairing(model_type, config)  # rotate_half decides
    got = fn(x, x, cos.double(), sin.double())[0].numpy()
    ang = pos[:, None] * inv[None, :]
    c, s_ = np.cos(ang) * float(emb.attention_scaling), np.sin(ang) * float(emb.attention_scaling)
    xs = x.numpy()
    out = {}
    a, b = xs[..., : r // 2], xs[..., r // 2:]
    out["half"] = np.concatenate([a * c - b * s_, b * c + a * s_], axis=-1)
    a, b = xs[..., 0::2], xs[..., 1::2]
    out["interleaved"] = np.stack([a * c - b * s_, b * c + a * s_], axis=-1).reshape(xs.shape)
    match = [k for k, v in out.items() if np.max(np.abs(v - got)) < 1e-4]
    assert len(match) == 1, f"{model_type}: its apply_rotary_pos_emb is neither pairing"
    return match[0]


def test_a_saved_moonshine_config_reads_its_decoder_heads_and_interleaved_pairs():
    # Moonshine maps num_attention_heads to decoder_num_attention_heads (what save_pretrained writes), rotates 0.9
    # of the head, and pairs x[0::2] with x[1::2] (its rotate_half).
    config = _hf_config("moonshine", {"hidden_size": HIDDEN, "decoder_num_attention_heads": HEADS})
    emb = text_rotary_embedding_class("moonshine")(config=config)
    doc = config.to_dict()
    assert "num_attention_heads" not in doc and doc["decoder_num_attention_heads"] == HEADS
    spec = rotary.Spec.from_hf_config(doc)
    _check(spec, emb, "moonshine")
    assert spec.pairing == _model_pairing("moonshine", emb, config) == "interleaved"
