"""inv_freq and attention_factor of every transformers rope_type (and models' defaults) vs rotary, on generated configs."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import rotary
from hf_models import hf_model_modules

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

N_CONFIGS = 30

# Two comparisons per frequency:
# 1. against HF's own float32 output: relative 1e-6, except where HF's float32 evaluation is itself further than
#    that from its own formula (e.g. llama3's smoothing band, where (old_len/wavelen - low) cancels): there the
#    bound is twice HF's own rounding error, measured by comparison 2;
# 2. against HF's *same code* evaluated in float64 (torch.float/torch.float32 temporarily aliased to float64):
#    relative 1e-12, i.e. rotary implements exactly HF's formulas. longrope calls `.float()` on the exponent,
#    which the alias cannot reach, so there the float64 run still carries a float32 exponent (bound 1e-6).
INV_FREQ_REL_TOL_F32 = 1e-6
INV_FREQ_REL_TOL_F64 = 1e-12
INV_FREQ_REL_TOL_F64_LONGROPE = 1e-6


@contextlib.contextmanager
def hf_in_float64():
    saved = torch.float, torch.float32
    torch.float = torch.float64
    torch.float32 = torch.float64
    try:
        yield
    finally:
        torch.float, torch.float32 = saved


ATTN_REL_TOL = 1e-6


def _common(r: np.random.Generator, allow_partial: bool):
    head_dim = int(r.choice([16, 32, 64, 80, 96, 128, 256]))
    heads = int(r.choice([2, 4, 8]))
    base = float(r.choice([1e4, 2.5e4, 1e5, 5e5, 1e6, 5e6])) * float(r.choice([1.0, r.uniform(0.5, 2.0)]))
    max_pos = int(r.choice([2048, 4096, 8192, 32768, 131072]))
    params = {"rope_theta": base}
    if allow_partial and r.random() < 0.4:
        params["partial_rotary_factor"] = float(r.choice([0.25, 0.5, 0.75]))
    cfg = dict(hidden_size=head_dim * heads, num_attention_heads=heads, num_key_value_heads=heads, head_dim=head_dim,
               max_position_embeddings=max_pos, intermediate_size=64, num_hidden_layers=1, vocab_size=32)
    return cfg, params


def _rotary_half(cfg: dict, params: dict) -> int:
    return int(cfg["head_dim"] * params.get("partial_rotary_factor", 1.0)) // 2


def gen_linear(r):
    cfg, p = _common(r, True)
    p.update(rope_type="linear", factor=float(r.uniform(1.0, 16.0)))
    return cfg, p, [None]


def gen_dynamic(r):
    cfg, p = _common(r, True)
    p.update(rope_type="dynamic", factor=float(r.uniform(1.0, 8.0)))
    m = cfg["max_position_embeddings"]
    return cfg, p, [None, m // 2, m, 2 * m, 3 * m + 17]


def gen_yarn(r):
    cfg, p = _common(r, True)
    orig = int(r.choice([2048, 4096, 8192]))
    factor = float(r.choice([2.0, 4.0, 8.0, 16.0, 32.0, r.uniform(1.0, 40.0)]))
    cfg["max_position_embeddings"] = int(orig * factor)
    p.update(rope_type="yarn", original_max_position_embeddings=orig)
    if r.random() < 0.8:
        p["factor"] = factor
    else:
        p["factor"] = None  # HF derives max_position_embeddings / original_max_position_embeddings
    if r.random() < 0.3:
        p["beta_fast"] = float(r.uniform(8, 64))
        p["beta_slow"] = float(r.uniform(0.5, 2))
    if r.random() < 0.3:
        p["mscale"] = float(r.uniform(0.5, 1.5))
        p["mscale_all_dim"] = float(r.uniform(0.5, 1.5))
    if r.random() < 0.2:
        p["attention_factor"] = float(r.uniform(0.8, 1.5))
    if r.random() < 0.3:
        p["truncate"] = False
    return cfg, p, [None]


def gen_longrope(r):
    cfg, p = _common(r, True)
    half = _rotary_half(cfg, p)
    orig = int(r.choice([2048, 4096]))
    cfg["max_position_embeddings"] = orig * int(r.choice([4, 16, 32]))
    p.update(rope_type="longrope", original_max_position_embeddings=orig,
             short_factor=[float(v) for v in r.uniform(1.0, 3.0, half)],
             long_factor=[float(v) for v in r.uniform(1.0, 60.0, half)])
    if r.random() < 0.3:
        p["factor"] = float(r.uniform(1.0, 40.0))
    if r.random() < 0.2:
        p["attention_factor"] = float(r.uniform(0.9, 1.4))
    m = cfg["max_position_embeddings"]
    return cfg, p, [None, orig, orig + 1, m]


def gen_llama3(r):
    cfg, p = _common(r, True)
    p.update(rope_type="llama3", factor=float(r.choice([8.0, 16.0, 32.0, r.uniform(1.5, 40.0)])),
             low_freq_factor=float(r.choice([1.0, r.uniform(0.5, 2.0)])),
             high_freq_factor=float(r.choice([4.0, r.uniform(2.5, 8.0)])),
             original_max_position_embeddings=int(r.choice([2048, 8192])))
    return cfg, p, [None]


def gen_proportional(r):
    cfg, p = _common(r, False)
    p.update(rope_type="proportional", partial_rotary_factor=float(r.choice([0.25, 0.5, 0.75, 1.0])))
    if r.random() < 0.5:
        p["factor"] = float(r.uniform(1.0, 8.0))
    return cfg, p, [None]


GENERATORS = {
    "linear": gen_linear,
    "dynamic": gen_dynamic,
    "yarn": gen_yarn,
    "longrope": gen_longrope,
    "llama3": gen_llama3,
    "proportional": gen_proportional,
}


def test_every_hf_rope_type_has_a_generator():
    missing = set(ROPE_INIT_FUNCTIONS) - set(GENERATORS)
    assert not missing, f"transformers has rope types the suite does not cover: {sorted(missing)}"


def _hf_config(cfg: dict, params: dict) -> LlamaConfig:
    params = {k: v for k, v in params.items() if v is not None or k == "factor"}
    return LlamaConfig(**cfg, rope_parameters=params)


def _compare(spec: rotary.Spec, hf_inv, hf_attn, seq_len, what, hf_inv64=None, rel64=INV_FREQ_REL_TOL_F64):
    ours = spec.inv_freq(seq_len)
    hf = hf_inv.double().numpy()
    assert ours.shape == hf.shape, f"{what}: shape {ours.shape} vs HF {hf.shape}"
    nz = hf != 0
    assert np.array_equal(ours == 0, ~nz), f"{what}: zero frequencies differ"
    bound = INV_FREQ_REL_TOL_F32 * np.abs(hf)
    if hf_inv64 is not None:
        hf64 = hf_inv64.double().numpy()
        rel = np.max(np.abs(ours[nz] - hf64[nz]) / np.abs(hf64[nz])) if nz.any() else 0.0
        assert rel <= rel64, f"{what}: inv_freq vs HF's formula in float64, max rel err {rel:.3g}"
        bound = np.maximum(bound, 2 * np.abs(hf - hf64))
    err = np.abs(ours - hf)
    assert np.all(err <= bound), (f"{what}: inv_freq vs HF float32, max rel err "
                                  f"{np.max(err[nz] / np.abs(hf[nz])):.3g}")
    _, attn = spec.frequencies(seq_len)
    assert attn == pytest.approx(float(hf_attn), rel=ATTN_REL_TOL), f"{what}: attention_factor"
    if seq_len is None:
        assert spec.attention_factor == pytest.approx(float(hf_attn), rel=ATTN_REL_TOL)


@pytest.mark.parametrize("rope_type", sorted(GENERATORS))
def test_inv_freq_and_attention_factor_match_transformers(rope_type):
    r = np.random.default_rng(sum(map(ord, rope_type)))
    fn = ROPE_INIT_FUNCTIONS[rope_type]
    for i in range(N_CONFIGS):
        cfg, params, seq_lens = GENERATORS[rope_type](r)
        config = _hf_config(cfg, params)
        spec = rotary.Spec.from_hf_config(config)
        assert spec.rope_type == rope_type
        for seq_len in seq_lens:
            kw = {} if seq_len is None else {"seq_len": seq_len}
            inv, attn = fn(config, None, **kw)
            with hf_in_float64():
                inv64, _ = fn(config, None, **kw)
            rel64 = INV_FREQ_REL_TOL_F64_LONGROPE if rope_type == "longrope" else INV_FREQ_REL_TOL_F64
            _compare(spec, inv, attn, seq_len, f"{rope_type} config {i} {params} seq_len={seq_len}", inv64, rel64)


def test_v4_style_rope_scaling_dict_matches_transformers():
    # A plain dict in the transformers-4 spelling (rope_theta + rope_scaling with "type"), as older config.json files.
    d = {"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 131072, "rope_theta": 500000.0,
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 8192}}
    spec = rotary.Spec.from_hf_config(d)
    config = LlamaConfig(**{k: v for k, v in d.items()})
    inv, attn = ROPE_INIT_FUNCTIONS["llama3"](config, None)
    with hf_in_float64():
        inv64, _ = ROPE_INIT_FUNCTIONS["llama3"](config, None)
    _compare(spec, inv, attn, None, "llama3 v4 dict", inv64)


# Models' own compute_default_rope_parameters (they differ: some honour partial_rotary_factor, some do not).
DEFAULT_MODELS = [
    ("llama", "LlamaConfig", "LlamaRotaryEmbedding", False),
    ("mistral", "MistralConfig", "MistralRotaryEmbedding", False),
    ("qwen2", "Qwen2Config", "Qwen2RotaryEmbedding", False),
    ("qwen3", "Qwen3Config", "Qwen3RotaryEmbedding", False),
    ("gemma", "GemmaConfig", "GemmaRotaryEmbedding", False),
    ("olmo", "OlmoConfig", "OlmoRotaryEmbedding", False),
    ("granite", "GraniteConfig", "GraniteRotaryEmbedding", False),
    ("gpt_neox", "GPTNeoXConfig", "GPTNeoXRotaryEmbedding", True),
    ("phi", "PhiConfig", "PhiRotaryEmbedding", True),
    ("stablelm", "StableLmConfig", "StableLmRotaryEmbedding", True),
    ("persimmon", "PersimmonConfig", "PersimmonRotaryEmbedding", True),
]


@pytest.mark.parametrize("model,config_cls,rope_cls,partial", DEFAULT_MODELS, ids=[m[0] for m in DEFAULT_MODELS])
def test_model_default_rope_matches_transformers(model, config_cls, rope_cls, partial):
    cfg_mod, mdl_mod = hf_model_modules(model)
    ConfigCls = getattr(cfg_mod, config_cls)
    RopeCls = getattr(mdl_mod, rope_cls)
    r = np.random.default_rng(sum(map(ord, model)))
    for i in range(8):
        heads = int(r.choice([2, 4, 8]))
        head_dim = int(r.choice([32, 64, 80, 128]))
        base = float(r.choice([1e4, 1e6, r.uniform(1e4, 1e6)]))
        params = {"rope_type": "default", "rope_theta": base}
        if partial:
            params["partial_rotary_factor"] = float(r.choice([0.25, 0.5, 1.0]))
        config = ConfigCls(hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=heads,
                           rope_parameters=params, max_position_embeddings=4096)
        if getattr(config, "head_dim", None) not in (None, head_dim):
            config.head_dim = head_dim
        inv, attn = RopeCls.compute_default_rope_parameters(config)
        with hf_in_float64():
            inv64, _ = RopeCls.compute_default_rope_parameters(config)
        spec = rotary.Spec.from_hf_config(config)
        _compare(spec, inv, attn, None, f"{model} default config {i} {params}", inv64)


def test_llama3_with_equal_freq_factors_matches_transformers():
    # Llama-4-Scout-17B-16E's text config: llama3 scaling with low_freq_factor = high_freq_factor = 1, so no blend
    # band (transformers warns and computes a step at wavelen = orig / low).
    params = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 16.0, "low_freq_factor": 1.0,
              "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}
    from transformers import Llama4TextConfig
    config = Llama4TextConfig(hidden_size=5120, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                              max_position_embeddings=10485760, rope_parameters=params)
    spec = rotary.Spec.from_hf_config(config)
    assert spec.pairing == "interleaved" and spec.rope_type == "llama3"
    inv, attn = ROPE_INIT_FUNCTIONS["llama3"](config, None)
    with hf_in_float64():
        inv64, _ = ROPE_INIT_FUNCTIONS["llama3"](config, None)
    _compare(spec, inv, attn, None, "llama4 scout llama3 low = high", inv64)
    default = 500000.0 ** (-np.arange(0, 128, 2) / 128)
    ours, _ = spec.frequencies()
    stepped = np.isclose(ours, default / 16, rtol=1e-15)
    assert (stepped | np.isclose(ours, default, rtol=1e-15)).all() and 0 < stepped.sum() < 64
    # The file form (model_type llama4, text_config with the legacy rope_scaling key) reads the same.
    doc = {"model_type": "llama4", "text_config": {"model_type": "llama4_text", "hidden_size": 5120,
                                                   "num_attention_heads": 40, "head_dim": 128, "rope_theta": 500000.0,
                                                   "max_position_embeddings": 10485760,
                                                   "rope_scaling": {k: v for k, v in params.items() if k != "rope_theta"}}}
    np.testing.assert_array_equal(rotary.Spec.from_hf_config(doc).frequencies()[0], ours)
