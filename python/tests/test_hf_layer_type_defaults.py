"""Per-layer-type config classes (layer_types, rope_parameters per layer type) vs transformers' own RotaryEmbedding."""
from __future__ import annotations

import json

import numpy as np
import pytest

import rotary
from hf_models import hf_model_modules, load_hf_config, per_type_rope, quiet_transformers, text_rotary_embedding_names

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# 768 / 8 = 96 differs from every class's own head_dim (64, 128, 192, 256), so a missed class default shows.
FIELDS = {"hidden_size": 768, "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": 12}


def _hf(doc: dict, tmp_path, module: str):
    """transformers' reading of `doc` as a config.json: its (text) config and that model's RotaryEmbedding."""
    (tmp_path / "config.json").write_text(json.dumps(doc))
    _, mod = hf_model_modules(module)
    config = load_hf_config(tmp_path)
    config = getattr(config, "text_config", config)
    names = text_rotary_embedding_names(mod)
    return config, getattr(mod, names[0])(config=config)


def _compare(doc: dict, tmp_path, module: str, layer_types: bool = True):
    config, emb = _hf(doc, tmp_path, module)
    specs = rotary.LayerTypeSpecs.from_hf_config(str(tmp_path / "config.json"))
    for layer_type, (inv, scaling) in per_type_rope(emb).items():
        what = f"{doc['model_type']} {layer_type}"
        spec = specs[layer_type] if layer_type is not None else specs.for_layer(0)
        hf, ours = inv.double().numpy(), spec.inv_freq(None)
        assert ours.shape == hf.shape, f"{what}: {ours.shape[0]} frequencies, transformers {hf.shape[0]}"
        # (proportional RoPE's angles beyond the rotated share are exact zeros on both sides)
        np.testing.assert_allclose(ours, hf, rtol=1e-6, atol=0, err_msg=f"{what}: base {spec.base}, {spec.rope_type}")
        assert spec.attention_factor == pytest.approx(float(scaling), rel=1e-6), what
    if layer_types:  # the layer types the class derives without a layer_types field
        assert specs.layer_types == list(config.layer_types), doc["model_type"]
    return specs


# Trimmed files (model_type plus the model's size): the class's nested dict, base, head_dim and layer pattern.
# (model_type, modeling module, rotary derives the layer types too)
TRIMMED = [("olmo3", "olmo3", True), ("mellum", "mellum", True), ("ultrabert", "ultrabert", True),
           ("lfm3", "lfm3", False), ("laguna", "laguna", True), ("mimo_v2_flash", "mimo_v2_flash", True),
           ("zaya", "zaya", False), ("neomme", "neomme", True), ("gemma3_text", "gemma3", True),
           ("gemma3n_text", "gemma3n", True), ("t5gemma2_text", "t5gemma2", True), ("dory", "dory", True),
           ("gemma4_text", "gemma4", True), ("gemma4_unified_text", "gemma4_unified", True),
           ("diffusion_gemma_text", "diffusion_gemma", True), ("embedding_gemma2_text", "embedding_gemma2", True)]


@pytest.mark.parametrize("model_type,module,layer_types", TRIMMED, ids=[m for m, _, _ in TRIMMED])
def test_a_trimmed_per_layer_type_config_gets_the_class_defaults(model_type, module, layer_types, tmp_path):
    specs = _compare({"model_type": model_type, **FIELDS}, tmp_path, module, layer_types)
    assert specs.nested
    with pytest.raises(NotImplementedError, match="per layer type"):  # one Spec cannot describe it
        rotary.Spec.from_hf_config(str(tmp_path / "config.json"))


# Files that set some fields: each read as the class converts them.
GIVEN = [
    ("olmo3", "olmo3", {"rope_theta": 2e4}),  # full_attention's base only: sliding keeps the class's 5e5
    ("olmo3", "olmo3", {"rope_scaling": {"rope_type": "linear", "factor": 4.0}}),  # full_attention only
    ("neomme", "neomme", {"rope_theta": 2e4}),  # every type's base
    ("t5gemma2_text", "t5gemma2", {"rope_theta": 2e6, "rope_local_base_freq": 3e4}),
    ("mimo_v2_flash", "mimo_v2_flash", {"partial_rotary_factor": 0.5}),  # the class dict's own 0.334 stays
    ("mellum", "mellum", {"partial_rotary_factor": 0.5}),  # not carried into the class dict: whole head
    ("lfm3", "lfm3", {"partial_rotary_factor": 0.5}),  # carried, but its default type ignores it
    ("laguna", "laguna", {"rope_theta": 3e4}),  # the class dict's own bases stay
    ("olmo3", "olmo3", {"partial_rotary_factor": 0.5, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}),
    ("t5gemma2_text", "t5gemma2", {"partial_rotary_factor": 0.5, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}),
    ("dory", "dory", {"partial_rotary_factor": 0.5}),  # its default type ignores it
] + [(m, mod, {"rope_parameters": {  # a nested YaRN entry always truncates: transformers reads truncate at the top
    "full_attention": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 16.0, "original_max_position_embeddings": 4096,
                       "truncate": False},
    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}})
    for m, mod in [("laguna", "laguna"), ("mimo_v2_flash", "mimo_v2_flash")]] + [
    ("mimo_v2_flash", "mimo_v2_flash", {"rope_parameters": {  # its default-type function reads 0.334 without a factor
        "full_attention": {"rope_type": "default", "rope_theta": 5e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}),
    ("mimo_v2_flash", "mimo_v2_flash", {"partial_rotary_factor": 0.5, "rope_parameters": {  # ... the top level's unseen
        "full_attention": {"rope_type": "default", "rope_theta": 5e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}),
    ("mimo_v2_flash", "mimo_v2_flash", {"partial_rotary_factor": 0.5, "rope_parameters": {  # ... unless a YaRN type
        "full_attention": {"rope_type": "yarn", "rope_theta": 5e6, "factor": 4.0,  # sorted before it copies it in
                           "original_max_position_embeddings": 4096},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}),
    ("mimo_v2_flash", "mimo_v2_flash", {"partial_rotary_factor": 0.5, "rope_parameters": {  # (after it: not)
        "full_attention": {"rope_type": "default", "rope_theta": 5e6},
        "sliding_attention": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                              "original_max_position_embeddings": 4096}}})] + [
    (m, mod, {"rope_parameters": {  # a truncate beside the layer types is the one transformers' YaRN reads
        "full_attention": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 16.0, "original_max_position_embeddings": 4096},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}, "truncate": False}})
    for m, mod in [("olmo3", "olmo3"), ("laguna", "laguna")]] + [(m, mod, {"partial_rotary_factor": 0.5, "rope_parameters": {  # a file's own nested dict beside a top-level factor
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}})
    for m, mod in [("mellum", "mellum"), ("laguna", "laguna"), ("olmo3", "olmo3"), ("ultrabert", "ultrabert"),
                   ("mimo_v2_flash", "mimo_v2_flash"), ("neomme", "neomme"), ("lfm3", "lfm3")]]
# the layer types of these two classes are not derived by rotary (LFM3's conv layers, Zaya's hybrid ones)
NOT_DERIVED = {"lfm3", "zaya"}


@pytest.mark.parametrize("model_type,module,given", GIVEN, ids=[f"{m}-{'-'.join(g)}-{i}" for i, (m, _, g) in enumerate(GIVEN)])
def test_a_partly_trimmed_per_layer_type_config_reads_as_its_class_converts_it(model_type, module, given, tmp_path):
    _compare({"model_type": model_type, **FIELDS, **given}, tmp_path, module, model_type not in NOT_DERIVED)


# Gemma 3's default-type frequencies span the whole head whatever partial_rotary_factor says; other types read it.
NESTED_PARTIAL = {"full_attention": {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5},
                  "sliding_attention": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.25}}
GEMMA3 = {
    "top-partial": {"partial_rotary_factor": 0.5},
    "top-partial-linear": {"partial_rotary_factor": 0.5, "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
    "nested-partial": {"rope_parameters": NESTED_PARTIAL},
    "nested-partial-linear": {"rope_parameters": {**NESTED_PARTIAL, "full_attention": {
        "rope_type": "linear", "factor": 8.0, "rope_theta": 1e6, "partial_rotary_factor": 0.5}}},
    "nested-partial-yarn": {"max_position_embeddings": 8192, "rope_parameters": {**NESTED_PARTIAL, "full_attention": {
        "rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6, "partial_rotary_factor": 0.5}}},
    # A flat v5 dict: Gemma3TextConfig keeps it beside the two types it adds, and reads only those.
    "flat-v5": {"rope_parameters": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}},
    "flat-v5-own-base": {"rope_parameters": {"rope_type": "linear", "factor": 8.0, "rope_theta": 5e5}},
    "flat-v5-top-bases": {"rope_parameters": {"rope_type": "linear", "factor": 8.0}, "rope_theta": 2e6,
                          "rope_local_base_freq": 3e4},
    "flat-v5-partial": {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5}},
    # A v4 dict that names its type "type" only: merged into {"rope_type": "default"}, it stays default.
    "legacy-type-key": {"rope_scaling": {"type": "linear", "factor": 8.0}},
    "nested-plus-legacy": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                               "sliding_attention": {"rope_type": "default"}},
                           "rope_scaling": {"rope_type": "linear", "factor": 2.0}, "rope_local_base_freq": 3e4},
}
GEMMA3_TEXT = {"hidden_size": 64, "num_attention_heads": 2, "head_dim": 32, "num_hidden_layers": 7}


@pytest.mark.parametrize("wrapped", [False, True], ids=["gemma3_text", "gemma3"])
@pytest.mark.parametrize("case", sorted(GEMMA3))
def test_gemma3_reads_partial_rotary_and_flat_dicts_as_transformers(case, wrapped, tmp_path):
    text = {"model_type": "gemma3_text", **GEMMA3_TEXT, **GEMMA3[case]}
    doc = {"model_type": "gemma3", "text_config": text} if wrapped else text
    _compare(doc, tmp_path, "gemma3")


# Gemma 4 (and the classes built like it): full-attention layers take their own head_dim (512, a top-level
# global_head_dim, or per_layer_config's entries, which save_pretrained writes with zero-padded layer indices).
GEMMA4 = [("gemma4_text", "gemma4"), ("gemma4_unified_text", "gemma4_unified"), ("diffusion_gemma_text", "diffusion_gemma"),
          ("embedding_gemma2_text", "embedding_gemma2")]


@pytest.mark.parametrize("model_type,module", GEMMA4, ids=[m for m, _ in GEMMA4])
def test_gemma4_full_attention_layers_read_their_own_head_dim(model_type, module, tmp_path):
    trimmed = {"model_type": model_type, **FIELDS}
    saved = _hf(trimmed, tmp_path, module)[0].to_dict()
    assert saved["per_layer_config"], "transformers no longer writes per_layer_config"
    # (a layer_types ending with a sliding layer: the class makes the last one full)
    last_sliding = {**trimmed, "layer_types": ["full_attention"] + ["sliding_attention"] * 11}
    for doc in (trimmed, saved, {**trimmed, "global_head_dim": 384}, last_sliding,
                {"model_type": "gemma4", "text_config": FIELDS}):
        if doc.get("model_type") == "gemma4" and module != "gemma4":
            continue
        specs = _compare(doc, tmp_path, module)
        full = specs["full_attention"]
        assert full.head_dim == doc.get("global_head_dim", 512) and specs["sliding_attention"].head_dim == 256
        with pytest.raises(NotImplementedError, match="per layer type"):  # one Spec cannot describe it
            rotary.Spec.from_hf_config(str(tmp_path / "config.json"))


def test_step3p7_drops_a_truncate_beside_its_layer_types(tmp_path):
    # Step3p7TextConfig rebuilds rope_parameters from its layer types' entries alone: its YaRN always truncates.
    text = {"model_type": "step3p5", "num_hidden_layers": 2, "hidden_size": 512, "num_attention_heads": 4,
            "head_dim": 128, "max_position_embeddings": 8192, "layer_types": ["full_attention", "full_attention"],
            "rope_parameters": {"full_attention": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                                                   "original_max_position_embeddings": 1024}, "truncate": False}}
    specs = _compare({"model_type": "step3p7", "text_config": text}, tmp_path, "step3p7")
    assert specs["full_attention"].truncate


@pytest.mark.parametrize("form", ["object", "to_dict", "file"])
def test_ergo_rotates_interleaved_pairs_as_its_code(form, tmp_path):
    # ERGO's rotate_half pairs x[..., ::2] with x[..., 1::2] over repeat_interleave'd cos/sin: interleaved pairs
    # (read as half-split, the rotation differed from transformers' by ~5).
    conf, mod = hf_model_modules("ergo")
    config = conf.ErgoConfig(**({} if form == "object" else FIELDS))
    (tmp_path / "config.json").write_text(config.to_json_string())
    doc = {"object": config, "to_dict": config.to_dict(), "file": str(tmp_path / "config.json")}[form]
    specs = rotary.LayerTypeSpecs.from_hf_config(doc)
    emb = mod.ErgoRotaryEmbedding(config)
    pos = np.array([0, 1, 7, 100, 4000])
    ran = 0
    for layer_type, spec in specs.specs.items():
        if spec is None:
            continue
        ran += 1
        assert spec.pairing == "interleaved", layer_type
        cos, sin = emb(torch.zeros(1, len(pos), 8, dtype=torch.float64), torch.tensor([pos]), layer_type)
        q = torch.randn(1, 2, len(pos), spec.head_dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        hf, _ = mod.apply_rotary_pos_emb(q, q, cos.double(), sin.double())
        ours = rotary.apply(q.numpy(), pos, spec, layout="bhsd")
        assert np.max(np.abs(ours - hf.numpy())) < 1e-3, layer_type  # transformers' cos/sin are float32
    assert ran


@pytest.mark.parametrize("form", ["object", "to_dict", "file", "composite"])
def test_dots3_note_rotates_its_qk_rope_channels_in_interleaved_pairs(form, tmp_path):
    # Dots 3 Note's MLA attention rotates q_rot / k_rot (the qk_rope_head_dim channels) with
    # apply_rotary_pos_emb_interleave; its class sets each layer type's partial_rotary_factor to qk_rope / head_dim
    # (0.25 of 256), so its frequencies span those 64 channels. rotary read 16 channels (0.25 of 64), half-split.
    conf, mod = hf_model_modules("dots3_note")
    with quiet_transformers():
        full = conf.Dots3NoteConfig()
        config = full.get_text_config()
        (full if form == "composite" else config).save_pretrained(tmp_path)
        emb = mod.Dots3NoteTextRotaryEmbedding(config)
    doc = {"object": config, "to_dict": config.to_dict(), "file": str(tmp_path / "config.json"),
           "composite": full.to_dict()}[form]
    specs = rotary.LayerTypeSpecs.from_hf_config(doc)
    assert sorted(specs.specs) == sorted(set(config.layer_types))
    pos = np.array([0, 1, 7, 100, 4000])
    for layer_type, spec in specs.specs.items():
        base = config.rope_parameters[layer_type]["rope_theta"]
        assert (spec.head_dim, spec.rotary_dim, spec.pairing, spec.base) == (64, 64, "interleaved", base), layer_type
        cos, sin = emb(torch.zeros(1, len(pos), 8), torch.tensor([pos]), layer_type)
        q = torch.randn(1, 2, len(pos), config.qk_rope_head_dim, generator=torch.Generator().manual_seed(0))
        hf, _ = mod.apply_rotary_pos_emb_interleave(q.double(), q.double(), cos.double(), sin.double())
        ours = rotary.apply(q.double().numpy(), pos, spec, layout="bhsd")
        # its _interleave variant writes each pair's results de-interleaved (i, i + 32; q and k alike)
        got = np.concatenate([ours[..., 0::2], ours[..., 1::2]], axis=-1)
        assert np.max(np.abs(got - hf.numpy())) < 1e-3, layer_type  # transformers' cos/sin are float32
    with pytest.raises(NotImplementedError, match="per layer type"):
        rotary.Spec.from_hf_config(doc)


def test_a_hub_style_dots3_note_file_is_refused_naming_why():
    # Without nested rope_parameters its class takes the sliding layers' base from swa_rope_theta (and their widths
    # from swa_* keys, the layer pattern from its own rule), which rotary does not read: refused, not read with 8e7.
    hub = {"model_type": "dots3_note_text", "hidden_size": 4096, "num_attention_heads": 64, "head_dim": 256,
           "qk_rope_head_dim": 64, "qk_nope_head_dim": 192, "rope_theta": 8e7, "swa_rope_theta": 5e4,
           "max_position_embeddings": 131072, "num_hidden_layers": 4,
           "layer_types": ["indexed_attention", "indexed_attention", "sliding_attention", "sliding_attention"]}
    for read in (rotary.Spec.from_hf_config, rotary.LayerTypeSpecs.from_hf_config):
        with pytest.raises(ValueError, match=r"rope_parameters must be nested per layer type for model_type "
                                             r"dots3_note_text \(.*swa_rope_theta"):
            read(hub)


ERGO_FLAT = {"theta": {"rope_theta": 5e5}, "none": {},
             "parameters": {"rope_parameters": {"rope_type": "default", "rope_theta": 2e5}},
             "scaling": {"rope_theta": 5e5, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
             "every-3": {"rope_theta": 5e5, "global_attention_every_n_layers": 3},
             # (transformers' YaRN reads `truncate` beside the layer types once the class has nested the dict: true)
             "yarn-truncate-false": {"max_position_embeddings": 8192, "rope_parameters": {
                 "rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 2048,
                 "truncate": False}}}


def _ergo_in_transformers(doc: dict, tmp_path):
    """(config, ErgoRotaryEmbedding) of the file `doc` as transformers reads it; its full-attention entry is null."""
    (tmp_path / "config.json").write_text(json.dumps(doc))
    _, mod = hf_model_modules("ergo")
    with quiet_transformers():
        config = load_hf_config(tmp_path)
    assert config.rope_parameters["full_attention"] is None, "transformers' ERGO conversion changed"
    return config, mod.ErgoRotaryEmbedding(config)


@pytest.mark.parametrize("flat", ERGO_FLAT.values(), ids=ERGO_FLAT.keys())
def test_an_ergo_hub_style_flat_file_is_its_sliding_layers_rope_and_full_layers_have_none(flat, tmp_path):
    # ErgoConfig.convert_rope_params_to_dict makes a flat dict (a top-level rope_theta, a flat rope_parameters or
    # rope_scaling; none: default_theta 1e6) {"sliding_attention": flat, "full_attention": None}, and derives the
    # layer types (every global_attention_every_n_layers-th full). rotary read such a file as one Spec for every
    # layer (full-attention layers included, base 1e4 without a rope_theta).
    doc = {"model_type": "ergo", **FIELDS, **flat}
    config, emb = _ergo_in_transformers(doc, tmp_path)
    for source in (str(tmp_path / "config.json"), doc):
        specs = rotary.LayerTypeSpecs.from_hf_config(source)
        assert specs.nested and specs.layer_types == list(config.layer_types)
        assert specs.specs["full_attention"] is None
        spec = specs["sliding_attention"]
        np.testing.assert_allclose(spec.inv_freq(None), emb.sliding_attention_inv_freq.double().numpy(), rtol=1e-6)
        assert spec.attention_factor == pytest.approx(float(emb.sliding_attention_attention_scaling), rel=1e-6)
        assert spec.pairing == "interleaved"
        for layer, layer_type in enumerate(config.layer_types):
            if layer_type == "full_attention":
                with pytest.raises(ValueError, match="has no RoPE"):
                    specs.for_layer(layer)
        with pytest.raises(NotImplementedError, match=r"model_type ergo: .*sliding_attention layers' RoPE and gives "
                                                      r"full_attention layers none: one Spec cannot describe it"):
            rotary.Spec.from_hf_config(source)


def test_an_ergo_nested_file_without_layer_types_keeps_its_null_full_attention_entry(tmp_path):
    # {"sliding_attention": {...}, "full_attention": null} with the layer types derived (no layer_types field):
    # the null entry was dropped (only objects were read as layer types without layer_types), so full-attention
    # layers said 'layer_type must be one of sliding_attention' instead of "has no RoPE", as with layer_types given.
    doc = {"model_type": "ergo", **FIELDS, "head_dim": 64, "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 3e4}, "full_attention": None}}
    config, emb = _ergo_in_transformers(doc, tmp_path)
    for source in (str(tmp_path / "config.json"), doc, dict(doc, layer_types=list(config.layer_types))):
        specs = rotary.LayerTypeSpecs.from_hf_config(source)
        assert specs.nested and specs.layer_types == list(config.layer_types)
        assert sorted(specs.specs) == ["full_attention", "sliding_attention"] and specs.specs["full_attention"] is None
        np.testing.assert_allclose(specs["sliding_attention"].inv_freq(None),
                                   emb.sliding_attention_inv_freq.double().numpy(), rtol=1e-6)
        for layer, layer_type in enumerate(config.layer_types):
            if layer_type == "full_attention":
                with pytest.raises(ValueError, match=r'layer_type "full_attention" has no RoPE \(its rope_parameters '
                                                     r'entry is null\)'):
                    specs.for_layer(layer)
            else:
                assert specs.for_layer(layer) == specs["sliding_attention"]


EVERY_N = [("ergo", "ErgoConfig", "global_attention_every_n_layers"),
           ("gemma3_text", "Gemma3TextConfig", "sliding_window_pattern"),
           ("modernbert", "ModernBertConfig", "global_attn_every_n_layers")]


@pytest.mark.parametrize("model_type, cls, key", EVERY_N, ids=[m for m, _, _ in EVERY_N])
def test_every_n_th_layer_full_counts_below_one_are_read_as_transformers_computes_them(model_type, cls, key):
    # The classes derive layer_types with (i + 1) % n (ModernBERT: i % n) in Python: n = 0 raises
    # ZeroDivisionError, a negative n marks the layers |n| does. rotary gave an empty layer list for both (every
    # for_layer then failed).
    config_cls = getattr(transformers, cls)
    doc = {"model_type": model_type, **FIELDS, "num_hidden_layers": 7, "rope_theta": 5e5}
    for n in (-3, -1, 2):
        with quiet_transformers():
            want = list(config_cls(**{k: v for k, v in doc.items() if k != "model_type"}, **{key: n}).layer_types)
        specs = rotary.LayerTypeSpecs.from_hf_config(dict(doc, **{key: n}))
        assert specs.layer_types == want, n
        assert "full_attention" in want and "full_attention" in specs.specs, n
    with pytest.raises(ZeroDivisionError):
        config_cls(**{k: v for k, v in doc.items() if k != "model_type"}, **{key: 0})
    with pytest.raises(ValueError, match=rf"^\[rotary_config\] {key} must be a nonzero integer \(every n-th layer "
                                         rf"is full_attention\), got 0$"):
        rotary.LayerTypeSpecs.from_hf_config(dict(doc, **{key: 0}))



# Python-% classes (the count a kwarg): (model_type, key)
EVERY_N_KWARG = [("gemma3_text", "sliding_window_pattern"), ("t5gemma2_text", "sliding_window_pattern"),
                 ("modernbert", "global_attn_every_n_layers")]


@pytest.mark.parametrize("model_type, key", EVERY_N_KWARG, ids=[m for m, _ in EVERY_N_KWARG])
def test_every_n_th_layer_counts_as_integral_floats_or_bools_are_read_as_transformers_computes_them(model_type, key,
                                                                                                   tmp_path):
    # These classes compute (i + 1) % n (ModernBERT: i % n) on the file's value: 2.0 counts as 2, 1e300 as beyond
    # every layer, true as 1 (every layer full). rotary refused every float and bool ("must be an integer").
    doc = {"model_type": model_type, **FIELDS, "num_hidden_layers": 7, "rope_theta": 5e5}
    for n in (2.0, 3.0, -2.0, 7.0, 1e300, True):
        (tmp_path / "config.json").write_text(json.dumps(dict(doc, **{key: n})))
        config = load_hf_config(tmp_path)
        want = list(getattr(config, "text_config", config).layer_types)
        specs = rotary.LayerTypeSpecs.from_hf_config(dict(doc, **{key: n}))
        assert specs.layer_types == want, n
        for layer, layer_type in enumerate(want):
            assert specs.for_layer(layer) == specs[layer_type], (n, layer)
    # transformers fails on these (ZeroDivisionError, TypeError), or, for a fraction, marks the layers its multiples
    # hit (2.5: every fifth), which no count means: refused naming the key.
    for n, shown in ((0.0, "0.0"), (False, "false"), (None, "null"), ("2", '"2"'), (2.5, "2.5")):
        (tmp_path / "config.json").write_text(json.dumps(dict(doc, **{key: n})))
        if n != 2.5:
            with pytest.raises((ZeroDivisionError, TypeError)):
                load_hf_config(tmp_path)
        with pytest.raises(ValueError, match=rf"^\[rotary_config\] {key} must be a nonzero integer \(every n-th "
                                             rf"layer is full_attention\), got {shown}$"):
            rotary.LayerTypeSpecs.from_hf_config(dict(doc, **{key: n}))


def test_ergo_every_n_th_layer_count_is_a_strict_int_as_its_field(tmp_path):
    # ErgoConfig.global_attention_every_n_layers is a strict int dataclass field: a float, a bool or null is refused
    # by its validation, so rotary refuses them too (null was read as the default 4).
    doc = {"model_type": "ergo", **FIELDS, "num_hidden_layers": 7, "rope_theta": 5e5}
    for n, shown in ((2.0, "2.0"), (True, "true"), (None, "null")):
        (tmp_path / "config.json").write_text(json.dumps(dict(doc, global_attention_every_n_layers=n)))
        with pytest.raises(Exception, match="global_attention_every_n_layers"):
            load_hf_config(tmp_path)
        with pytest.raises(ValueError, match=rf"^\[rotary_config\] global_attention_every_n_layers must be an "
                                             rf"integer, got {shown}$"):
            rotary.LayerTypeSpecs.from_hf_config(dict(doc, global_attention_every_n_layers=n))

MODERNBERT_NESTED = [
    ({"sliding_attention": {"rope_type": "default", "rope_theta": 3e4}}, {}),
    ({"full_attention": {"rope_type": "default"}, "sliding_attention": {"rope_type": "default"}}, {}),
    ({"full_attention": {"rope_type": "default"}, "sliding_attention": {"rope_type": "default"}},
     {"global_rope_theta": 5e4, "local_rope_theta": 7e3}),
    ({"sliding_attention": {"rope_type": "default"}}, {"global_rope_theta": 5e4}),
    ({"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 2e5}}, {"local_rope_theta": 2e4}),
]


@pytest.mark.parametrize("nested,extra", MODERNBERT_NESTED)
def test_a_modernbert_nested_file_fills_a_missing_entry_and_base_as_its_class(nested, extra, tmp_path):
    # ModernBertConfig.convert_rope_params_to_dict gives both layer types an entry (a missing one {"rope_type":
    # "default"}) and each entry without rope_theta the file's global_rope_theta / local_rope_theta (160000 / 10000).
    # rotary read a missing entry as no layer type at all ('layer_type must be one of sliding_attention') and an
    # entry without rope_theta with base 10000, full-attention layers included (transformers: 160000).
    doc = {"model_type": "modernbert", **FIELDS, "rope_parameters": nested, **extra}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    _, mod = hf_model_modules("modernbert")
    with quiet_transformers():
        config = load_hf_config(tmp_path)
    emb = mod.ModernBertRotaryEmbedding(config)
    specs = rotary.LayerTypeSpecs.from_hf_config(doc)
    assert specs.layer_types == list(config.layer_types)
    assert sorted(specs.specs) == sorted(config.rope_parameters) == ["full_attention", "sliding_attention"]
    for layer_type in ("full_attention", "sliding_attention"):
        assert specs[layer_type].base == config.rope_parameters[layer_type]["rope_theta"], layer_type
        np.testing.assert_allclose(specs[layer_type].inv_freq(None),
                                   getattr(emb, f"{layer_type}_inv_freq").double().numpy(), rtol=1e-6)
    for layer, layer_type in enumerate(config.layer_types):
        assert specs.for_layer(layer) == specs[layer_type]


NEOMME_NESTED = [
    {"sliding_attention": {"rope_type": "default", "rope_theta": 3e4}},  # full_attention missing
    {"sliding_attention": {"rope_type": "default"}, "rope_theta": 2e4},  # ... with a top-level base
    {},  # both missing
    {"full_attention": {"rope_theta": 5e5}},  # partial entries: no rope_type, no factor; sliding missing
    {"full_attention": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
     "sliding_attention": {"partial_rotary_factor": 0.5}},
    {"sliding_attention": {"rope_type": "default", "rope_theta": 3e4},
     "layer_types": ["sliding_attention"] * 11 + ["full_attention"]},  # the file's layer_types
    {"sliding_attention": {"rope_type": "default", "rope_theta": 3e4},
     "layer_types": ["full_attention"] * 12},  # keyed by a type no layer uses (rotary read it as one flat Spec)
]


@pytest.mark.parametrize("nested", NEOMME_NESTED, ids=[str(i) for i in range(len(NEOMME_NESTED))])
def test_a_neomme_nested_file_fills_a_missing_entry_as_its_class(nested, tmp_path):
    # NeoMMEConfig.convert_rope_params_to_dict gives each of its layer types an entry ({} when missing) and fills
    # rope_type, rope_theta (the top level's, else the class's) and partial_rotary_factor. rotary left a missing
    # entry out ('layer_type must be one of sliding_attention' for full-attention layers) and read an empty dict as
    # one flat Spec of base 10000 over the whole head.
    nested = dict(nested)
    top = {k: nested.pop(k) for k in ("rope_theta", "layer_types") if k in nested}
    doc = {"model_type": "neomme", **FIELDS, "rope_parameters": nested, **top}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    _, mod = hf_model_modules("neomme")
    config = load_hf_config(tmp_path)
    emb = mod.NeoMMERotaryEmbedding(config)
    specs = rotary.LayerTypeSpecs.from_hf_config(doc)
    assert specs.nested and specs.layer_types == list(config.layer_types)
    assert sorted(specs.specs) == sorted(config.rope_parameters) == ["full_attention", "sliding_attention"]
    for layer_type, (inv, scaling) in per_type_rope(emb).items():
        assert specs[layer_type].base == config.rope_parameters[layer_type]["rope_theta"], layer_type
        np.testing.assert_allclose(specs[layer_type].inv_freq(None), inv.double().numpy(), rtol=1e-6, err_msg=layer_type)
        assert specs[layer_type].attention_factor == pytest.approx(float(scaling), rel=1e-6), layer_type
    for layer, layer_type in enumerate(config.layer_types):
        assert specs.for_layer(layer) == specs[layer_type]
    # One Spec cannot describe it (one read base 10000 over the whole head from an empty or unused-type-keyed dict).
    with pytest.raises(NotImplementedError, match=r"rope_parameters is nested per layer type"):
        rotary.Spec.from_hf_config(doc)


def test_a_neomme_null_entry_is_refused_as_transformers_refuses_it(tmp_path):
    # NeoMMEConfig's rope_parameters field takes a dict of dicts (strict): a null entry is refused, where rotary read
    # it as "no RoPE" for that layer type.
    doc = {"model_type": "neomme", **FIELDS, "rope_parameters": {
        "full_attention": None, "sliding_attention": {"rope_type": "default", "rope_theta": 3e4}}}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(Exception, match="rope_parameters"):
        load_hf_config(tmp_path)
    with pytest.raises(ValueError, match=r"^\[rotary_config\] rope_parameters\.full_attention must be an object "
                                         r"\(neomme's class fills each layer type's entry\), got null$"):
        rotary.LayerTypeSpecs.from_hf_config(doc)
