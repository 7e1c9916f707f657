"""rotary.check / export_tables against tables made by real engine code: transformers' RotaryEmbedding classes for
every rope_type (correct, and with each reported bug reproduced through HF's own code), GPT-J's sinusoid tables and
apply, live ggml_rope_ext, ONNX's reference RotaryEmbedding; .pt/.safetensors/.npy inputs."""
from __future__ import annotations

import math

import numpy as np
import pytest

import rotary
from ggml_live import ggml_or_skip

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb  # noqa: E402

BASE = dict(hidden_size=128, num_attention_heads=2, num_key_value_heads=2, head_dim=64, intermediate_size=64,
            num_hidden_layers=1, vocab_size=32)

# One config per rope_type (the keys HF reads), and the table length to test it at.
CONFIGS = {
    "default": (dict(max_position_embeddings=4096), {"rope_type": "default", "rope_theta": 10000.0}, 3000),
    "linear": (dict(max_position_embeddings=8192), {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, 3000),
    "dynamic": (dict(max_position_embeddings=2048), {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 3000),
    "yarn": (dict(max_position_embeddings=32768), {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0,
                                                   "original_max_position_embeddings": 4096}, 3000),
    "yarn_mscale": (dict(max_position_embeddings=163840),
                    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
                     "mscale": 1.0, "mscale_all_dim": 1.0}, 3000),
    "yarn_no_truncate": (dict(max_position_embeddings=131072),
                         {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                          "original_max_position_embeddings": 4096, "truncate": False}, 3000),
    "longrope": (dict(max_position_embeddings=8192),
                 {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 2048,
                  "short_factor": [1.0 + 0.05 * i for i in range(32)], "long_factor": [1.0 + 1.5 * i for i in range(32)]},
                 3000),
    "llama3": (dict(max_position_embeddings=131072),
               {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 3000),
    "proportional": (dict(max_position_embeddings=8192),
                     {"rope_type": "proportional", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}, 3000),
}


def hf_config(name, **rope_overrides):
    cfg, params, _ = CONFIGS[name]
    params = dict(params, **rope_overrides)
    return LlamaConfig(**BASE, **cfg, rope_parameters={k: v for k, v in params.items() if v is not None})


def hf_cos_sin(config, n, *, dtype=torch.float32, patch=None):
    """cos, sin [n, R] from transformers' LlamaRotaryEmbedding.forward for positions 0..n-1 (`patch` edits the module
    first, reproducing an engine's mistake through HF's own forward)."""
    rope = LlamaRotaryEmbedding(config)
    if patch:
        patch(rope)
    x = torch.zeros(1, n, 64, dtype=dtype)
    cos, sin = rope(x, torch.arange(n)[None])
    return cos[0], sin[0]


def codes(r):
    return {d["code"] for d in r["diagnoses"]}


def test_every_transformers_rope_type_is_covered():
    assert set(ROPE_INIT_FUNCTIONS) | {"default"} <= {c["rope_type"] for _, c, _ in CONFIGS.values()}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_transformers_tables_agree(name, tmp_path):
    config = hf_config(name)
    n = CONFIGS[name][2]
    cos, sin = hf_cos_sin(config, n)
    r = rotary.check(config, layout="hf", cos=cos, sin=sin)
    assert r.agree, r.text
    assert r["verdict"] == "agree" and r["diagnoses"] == []
    for key in ("max_rel_err_inv_freq", "attention_factor_expected", "attention_factor_found", "first_pos_err_1e-3",
                "first_pos_err_1e-2", "bands", "precision", "precision_f32_angles"):
        assert key in r
    # HF's bf16 forward (cos/sin cast to the model dtype) agrees too: bf16 rounding is not a diagnosis.
    cb, sb = hf_cos_sin(config, n, dtype=torch.bfloat16)
    rb = rotary.check(config, layout="hf", cos=cb, sin=sb)
    assert rb.agree, rb.text
    assert rb["dtype"] == "bf16" and rb["first_pos_err_1e-3"] is not None
    # The same tensors through .pt (a dict), .safetensors (written by the safetensors package) and .npy files.
    torch.save({"cos": cos, "sin": sin}, tmp_path / "t.pt")
    assert rotary.check(config, layout="hf", cos_sin=tmp_path / "t.pt").agree
    from safetensors.torch import save_file
    save_file({"cos": cos.contiguous(), "sin": sin.contiguous()}, str(tmp_path / "t.safetensors"))
    assert rotary.check(config, layout="hf", cos_sin=str(tmp_path / "t.safetensors")).agree
    np.save(tmp_path / "c.npy", cos.numpy())
    np.save(tmp_path / "s.npy", sin.numpy())
    assert rotary.check(config, layout="hf", cos=str(tmp_path / "c.npy"), sin=str(tmp_path / "s.npy")).agree
    # HF's inv_freq buffer (a state_dict-style key), before any forward.
    rope = LlamaRotaryEmbedding(config)
    torch.save({"model.rotary_emb.inv_freq": rope.inv_freq}, tmp_path / "inv.pt")
    ri = rotary.check(config, layout="hf", inv_freq=tmp_path / "inv.pt")
    assert ri.agree, ri.text


def _ramp_config(name, **kw):
    return hf_config(name, **kw)


# Each reported bug, reproduced through transformers' own code, and the diagnosis it must get.
def _patch_attention(value):
    return lambda rope: setattr(rope, "attention_scaling", value)


def _inv_from(config_name, seq_len=None, **overrides):
    if CONFIGS[config_name][1]["rope_type"] == "default":
        return LlamaRotaryEmbedding(hf_config(config_name, **overrides)).inv_freq
    inv, _ = ROPE_INIT_FUNCTIONS[CONFIGS[config_name][1]["rope_type"]](hf_config(config_name, **overrides), None,
                                                                      **({} if seq_len is None else {"seq_len": seq_len}))
    return inv


def _patch_inv(inv, attention=None):
    def patch(rope):
        rope.inv_freq = inv.clone()
        rope.original_inv_freq = inv.clone()
        if attention is not None:
            rope.attention_scaling = attention
    return patch


BUGS = [
    # vLLM/mlx-lm dropping YaRN's attention factor; applying it twice (ggml's in-kernel mscale on top of HF's).
    ("yarn", _patch_attention(1.0), "attention_factor_missing"),
    ("yarn", _patch_attention((0.1 * math.log(8.0) + 1) ** 2), "attention_factor_twice"),
    ("longrope", _patch_attention(1.0), "attention_factor_missing"),
    # vLLM ignoring mscale/mscale_all_dim (DeepSeek-V3 style: 1.0 expected, 0.1 ln 40 + 1 used).
    ("yarn_mscale", _patch_attention(0.1 * math.log(40.0) + 1), "mscale_ignored"),
    # Older HF: correction range from max_position_embeddings.
    ("yarn", lambda r: _patch_inv(_inv_from("yarn", original_max_position_embeddings=32768))(r), "yarn_range_from_max_pos"),
    # truncate on/off.
    ("yarn", lambda r: _patch_inv(_inv_from("yarn", truncate=False))(r), "truncate_mismatch"),
    ("yarn_no_truncate", lambda r: _patch_inv(_inv_from("yarn_no_truncate", truncate=True))(r), "truncate_mismatch"),
    # vLLM's static dynamic NTK (the base for max_pos * factor) on a 3000-token forward.
    ("dynamic", lambda r: _patch_inv(_inv_from("dynamic", seq_len=4096))(r), "dynamic_base"),
    # HF #29496 / sglang-jax #1472: inv_freq in bf16 before the phase.
    ("llama3", lambda r: _patch_inv(r.inv_freq.bfloat16().float())(r), "low_precision_table"),
    # Wrong rope_theta.
    ("default", lambda r: _patch_inv(_inv_from("default", rope_theta=500000.0))(r), "base_mismatch"),
]


@pytest.mark.parametrize("name,patch,code", BUGS, ids=[f"{b[0]}-{b[2]}" for b in BUGS])
def test_transformers_tables_with_reported_bugs(name, patch, code):
    config = hf_config(name)
    n = CONFIGS[name][2]
    if name == "dynamic":  # HF's dynamic forward would re-derive inv_freq; the engine's table is static
        config = hf_config(name)
        rope_patch = patch
        rope = LlamaRotaryEmbedding(config)
        rope_patch(rope)
        rope.rope_type = "default"
        cos, sin = rope(torch.zeros(1, n, 64), torch.arange(n)[None])
        cos, sin = cos[0], sin[0]
    else:
        cos, sin = hf_cos_sin(config, n, patch=patch)
    r = rotary.check(config, layout="hf", cos=cos, sin=sin)
    assert not r.agree
    assert codes(r) == {code}, r.text


def test_longrope_switch_with_transformers_factors():
    config = hf_config("longrope")
    long_inv = _inv_from("longrope", seq_len=2049)
    cos, sin = hf_cos_sin(config, 1500, patch=_patch_inv(long_inv))  # vLLM: long factors for a short prompt
    r = rotary.check(config, layout="hf", cos=cos, sin=sin)
    assert codes(r) == {"longrope_switch"}, r.text


def test_bf16_angles_lose_the_phase():
    # Angles formed in bf16 (inv_freq and positions in bf16, as autocast did before HF PR #29285).
    config = hf_config("default")
    inv = LlamaRotaryEmbedding(config).inv_freq
    ang = (torch.arange(3000).bfloat16()[:, None] * inv.bfloat16()[None, :]).float()
    emb = torch.cat([ang, ang], -1)
    r = rotary.check(config, layout="hf", cos=emb.cos().bfloat16(), sin=emb.sin().bfloat16())
    assert codes(r) == {"low_precision_table"}, r.text
    assert r["first_pos_err_1e-2"] is not None and r["first_pos_err_1e-2"] < 1000


def test_rotary_dim_partial_factor_ignored():
    # Linear with factor 1 (default frequencies): Llama's own default type ignores the factor, the generic ones do not.
    config = hf_config("default", rope_type="linear", factor=1.0, partial_rotary_factor=0.5)
    full = hf_config("default")
    cos, sin = hf_cos_sin(full, 2000)  # the engine rotated the whole head
    r = rotary.check(config, layout="hf", cos=cos, sin=sin)
    assert codes(r) == {"rotary_dim"}, r.text
    assert (r["rotary_dim_expected"], r["rotary_dim_found"]) == (32, 64)


def test_gptj_tables_and_apply():
    gptj = pytest.importorskip("transformers.models.gptj.modeling_gptj")
    n, dim = 2000, 64
    sincos = gptj.create_sinusoidal_positions(n, dim)
    sin, cos = torch.split(sincos, dim // 2, dim=-1)
    cos2, sin2 = torch.repeat_interleave(cos, 2, -1), torch.repeat_interleave(sin, 2, -1)
    gptj_spec = rotary.Spec(head_dim=64, rotary_dim=64, base=10000.0, pairing="interleaved", max_position_embeddings=2048)
    llama_spec = rotary.Spec.from_hf_config(hf_config("default"))
    assert rotary.check(gptj_spec, layout="hf", cos=cos2, sin=sin2).agree
    r = rotary.check(llama_spec, layout="hf", cos=cos2, sin=sin2)
    assert codes(r) == {"pairing_mismatch"}, r.text
    # q rotated by GPT-J's own apply_rotary_pos_emb ([B, S, H, D]); read as [T, H, D].
    rng = np.random.default_rng(0)
    q = torch.from_numpy(rng.standard_normal((1, 300, 4, dim)).astype(np.float32))
    y = gptj.apply_rotary_pos_emb(q, sin[None, :300], cos[None, :300])
    pos = np.arange(300)
    assert rotary.check(gptj_spec, layout="raw", rotated=y[0], input=q[0], positions=pos).agree
    r = rotary.check(llama_spec, layout="raw", rotated=y[0], input=q[0], positions=pos)
    assert codes(r) == {"pairing_mismatch"}, r.text
    # And HF llama's apply_rotary_pos_emb on [B, H, S, D] (hf layout's rank-4 form).
    config = hf_config("yarn")
    c, s = hf_cos_sin(config, 300)
    qh = torch.from_numpy(rng.standard_normal((1, 4, 300, 64)).astype(np.float32))
    yh, _ = apply_rotary_pos_emb(qh, qh, c[None], s[None])
    r = rotary.check(config, layout="hf", rotated=yh, input=qh, positions=pos)
    assert r.agree, r.text


def test_export_layouts_match_the_engines_formulas():
    """export_tables vs fp64 transcriptions of vLLM's _compute_cos_sin_cache, TE's RotaryPositionEmbedding.forward
    and FlashInfer's cache (those packages are not installed here), and vs transformers' forward."""
    config = hf_config("yarn")
    spec = rotary.Spec.from_hf_config(config)
    inv, af = spec.frequencies(1000)
    t = np.arange(1000, dtype=np.float64)[:, None] * inv[None, :]
    vllm = np.concatenate([np.cos(t) * af, np.sin(t) * af], -1)
    for layout in ("vllm", "flashinfer"):
        got = rotary.export_tables(spec, layout, max_pos=1000)["cos_sin_cache"]
        assert got.dtype == np.float32 and np.abs(got - vllm).max() < 2e-7
    te = rotary.export_tables(spec, "te", max_pos=1000)["freqs"]
    assert te.shape == (1000, 1, 1, 64) and np.allclose(te[:, 0, 0], np.concatenate([t, t], -1), rtol=1e-7, atol=0)
    onnx = rotary.export_tables(spec, "onnx", max_pos=1000)
    assert np.abs(onnx["cos_cache"] - np.cos(t) * af).max() < 2e-7
    hf = rotary.export_tables(spec, "hf", max_pos=1000)
    cos, sin = hf_cos_sin(config, 1000)
    assert np.abs(hf["cos"][:16] - cos.numpy()[:16]).max() < 1e-6  # HF's f32 angles drift beyond small positions
    for dtype in ("float16", "bfloat16"):
        tb = rotary.export_tables(spec, "hf", max_pos=1000, dtype=dtype, framework="torch")
        assert str(tb["cos"].dtype) == f"torch.{dtype}"
        r = rotary.check(spec, layout="hf", cos=tb["cos"], sin=tb["sin"])
        assert r.agree, r.text


def test_onnx_reference_operator_runs_on_exported_caches():
    ref = pytest.importorskip("onnx.reference.ops.op_rotary_embedding")
    spec = rotary.Spec.preset("llama-3.1-8b")
    caches = rotary.export_tables(spec, "onnx", max_pos=512)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 64, 128)).astype(np.float32)
    pos = rng.integers(0, 512, (1, 64))
    y = ref.rotary_embedding(x, caches["cos_cache"], caches["sin_cache"], pos)
    want = rotary.apply(x, pos, spec, layout="bhsd")
    assert np.abs(y - want).max() < 4e-6


def test_ggml_live():
    g = ggml_or_skip()
    rng = np.random.default_rng(2)
    tokens, heads = 400, 4
    pos = np.arange(tokens)
    # llama.cpp's YaRN parameters for qwen2.5-7b-yarn: freq_scale 1/factor, ext_factor 1, attn_factor 1
    # (ggml multiplies in 0.1 ln(factor) + 1 itself).
    spec = rotary.Spec.preset("qwen2.5-7b-yarn")
    q = rng.standard_normal((tokens, heads, 128)).astype(np.float32)
    k = q[:, :1].copy()
    yarn = dict(freq_scale=0.25, ext_factor=1.0, n_ctx_orig=32768, beta_fast=32.0, beta_slow=1.0)
    def run(*args, **kw):  # the outputs are views of the ggml context: copy them while the GgmlRope lives
        rope = g.GgmlRope(*args, **kw)
        return rope()[0].copy()

    out = run(q, k, 0, spec.base, "f32", 1, positions=pos, **yarn, attn_factor=1.0)
    r = rotary.check(spec, layout="ggml", rotated=out, input=q, positions=pos)
    assert r.agree, r.text
    # Passing HF's attention factor as attn_factor applies it twice.
    out2 = run(q, k, 0, spec.base, "f32", 1, positions=pos, **yarn, attn_factor=spec.attention_factor)
    assert codes(rotary.check(spec, layout="ggml", rotated=out2, input=q, positions=pos)) == {"attention_factor_twice"}
    # The same parameters as ggml metadata.
    params = {"mode": "neox", "n_dims": 128, "freq_base": spec.base, "attn_factor": 1.0, **yarn}
    assert rotary.check(spec, layout="ggml", inv_freq=params).agree
    # rotary export --layout ggml (freq_factors + parameters) run by ggml itself, for every rope_type's config.
    for name in sorted(CONFIGS):
        s = rotary.Spec.from_hf_config(hf_config(name))
        e = rotary.export_tables(s, "ggml")
        m = e.metadata
        assert m["mode"] == "neox"
        qq = rng.standard_normal((tokens, heads, 64)).astype(np.float32)
        got = run(qq, qq[:, :1].copy(), 0, float(m["freq_base"]), "f32", 1, positions=pos, n_dims=int(m["n_dims"]),
                  attn_factor=float(m["attn_factor"]), freq_factors=e["freq_factors"])
        want = rotary.apply(qq, pos, s, layout="thd")
        assert np.abs(got - want).max() < 4e-3, name  # ggml's f32 angles at positions < 400
        rr = rotary.check(s, layout="ggml", rotated=got, input=qq, positions=pos)
        assert rr.agree, (name, rr.text)
        assert rotary.check(s, layout="ggml", inv_freq=dict(e, **m)).agree, name


def test_round_trip_every_layout_and_dtype(tmp_path):
    for name in sorted(CONFIGS):
        spec = rotary.Spec.from_hf_config(hf_config(name))
        for layout in ("hf", "vllm", "flashinfer", "te", "onnx", "raw"):
            for dtype in ("float32", "float16", "bfloat16"):
                if layout in ("flashinfer", "te") and dtype != "float32":
                    with pytest.raises(ValueError, match="float32"):
                        rotary.export_tables(spec, layout, dtype=dtype, max_pos=64)
                    continue
                t = rotary.export_tables(spec, layout, dtype=dtype, max_pos=3000)
                args = {"cos": t["cos"], "sin": t["sin"]} if "sin" in t else \
                       {"cos": t["cos_cache"], "sin": t["sin_cache"]} if "cos_cache" in t else {"cos_sin": next(iter(t.values()))}
                r = rotary.check(spec, layout=layout, **args)
                assert r.agree and r["diagnoses"] == [], (name, layout, dtype, r.text)
    # The CLI's .safetensors files are read by the safetensors package itself.
    import os
    import subprocess
    cli = os.environ.get("ROTARY_CLI")
    if cli and os.path.exists(cli):
        out = tmp_path / "t.safetensors"
        subprocess.run([cli, "export", "--preset", "llama-3.1-8b", "--layout", "hf", "--dtype", "bf16", "--max-pos", "100",
                        "--out", str(out)], check=True, capture_output=True)
        from safetensors.torch import load_file as load_t  # numpy has no bf16: read through torch
        tt = load_t(str(out))
        assert tt["cos"].dtype == torch.bfloat16 and tuple(tt["cos"].shape) == (100, 128)
        ref = rotary.export_tables("llama-3.1-8b", "hf", dtype="bfloat16", max_pos=100, framework="torch")
        assert torch.equal(tt["cos"], ref["cos"]) and torch.equal(tt["sin"], ref["sin"])


def test_hostile_inputs(tmp_path):
    spec = rotary.Spec.preset("llama-2-7b")
    t = rotary.export_tables(spec, "hf", max_pos=32)
    with pytest.raises(ValueError, match=r"hf cos must have shape"):
        rotary.check(spec, layout="hf", cos=t["cos"].reshape(32, 2, 64), sin=t["sin"].reshape(32, 2, 64))
    with pytest.raises(ValueError, match="must hold each frequency twice"):
        rotary.check(spec, layout="hf", cos=t["cos"][:, :100], sin=t["sin"][:, :100])
    with pytest.raises(TypeError, match="unsupported dtype"):
        rotary.check(spec, layout="hf", cos=t["cos"].astype(np.int8), sin=t["sin"])
    with pytest.raises(ValueError, match="non-finite"):
        bad = t["cos"].copy()
        bad[3, 3] = np.nan
        rotary.check(spec, layout="hf", cos=bad, sin=t["sin"])
    with pytest.raises(ValueError, match="float32"):
        rotary.check(spec, layout="flashinfer", cos_sin=rotary.export_tables(spec, "vllm", max_pos=8)["cos_sin_cache"].astype(np.float16))
    p = tmp_path / "t.safetensors"
    from safetensors.numpy import save_file
    save_file({"cos": t["cos"], "sin": t["sin"]}, str(p))
    raw = p.read_bytes()
    (tmp_path / "trunc.safetensors").write_bytes(raw[:-10])
    with pytest.raises(OSError, match="trunc.safetensors"):
        rotary.check(spec, layout="hf", cos_sin=str(tmp_path / "trunc.safetensors"))
    (tmp_path / "trunc.pt").write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(OSError, match="trunc.pt"):
        rotary.check(spec, layout="hf", cos_sin=str(tmp_path / "trunc.pt"))
    with pytest.raises(ValueError, match="exactly one"):
        rotary.check(spec, layout="hf")
    with pytest.raises(ValueError, match="layout must be one of"):
        rotary.check(spec, layout="mlx", cos=t["cos"], sin=t["sin"])


# mlx-lm's own RoPE classes (mlx_lm.models.rope_utils.initialize_rope, mlx's CPU backend): the config keys it is
# given, and what rotary check must say about q it rotated at positions 0..T-1.
MLX_CASES = [
    ("default", {}, 2000, set()),
    ("linear", {}, 2000, set()),
    ("dynamic", {}, 3000, set()),
    ("yarn", {}, 2000, set()),
    ("yarn_mscale", {}, 2000, set()),
    ("llama3", {}, 2000, set()),
    ("proportional", {}, 2000, set()),
    ("longrope", {}, 3000, set()),
    # mlx-lm 0.32 passes neither attention_factor nor truncate to its YarnRoPE, and its SuScaledRoPE always uses
    # the long factors (as vLLM does): real divergences from HF.
    ("yarn", {"attention_factor": 1.0}, 2000, {"attention_factor_missing"}),
    ("yarn_no_truncate", {}, 2000, {"truncate_mismatch"}),
    ("longrope", {}, 2000, {"longrope_switch"}),
    # mlx-lm 0.32's YarnRoPE defaults original_max_position_embeddings to 4096 (transformers: max_position_embeddings),
    # and its SuScaledRoPE derives the attention factor from max_pos / original_max, ignoring an explicit factor.
    ("yarn", {"original_max_position_embeddings": None}, 2000, {"yarn_original_max_default"}),
    ("longrope", {"factor": 2.0}, 3000, {"longrope_factor_ignored"}),
]


@pytest.mark.parametrize("name,extra,tokens,expected", MLX_CASES,
                         ids=[f"{c[0]}{'-' + '-'.join(c[1]) if c[1] else ''}-{c[2]}" for c in MLX_CASES])
def test_mlx_lm_rope_classes(name, extra, tokens, expected):
    mx = pytest.importorskip("mlx.core")
    rope_utils = pytest.importorskip("mlx_lm.models.rope_utils")
    cfg, params, _ = CONFIGS[name]
    params = {k: v for k, v in dict(params, **extra).items() if v is not None}  # None: the key left out
    scaling = None if params["rope_type"] == "default" else dict(params, type=params["rope_type"])
    rope = rope_utils.initialize_rope(64, params["rope_theta"], False, scaling, cfg["max_position_embeddings"])
    x = np.random.default_rng(4).standard_normal((1, 4, tokens, 64)).astype(np.float32)
    y = np.array(rope(mx.array(x)))
    config = hf_config(name, **extra)
    r = rotary.check(config, layout="raw", rotated=y[0].transpose(1, 0, 2), input=x[0].transpose(1, 0, 2),
                     positions=np.arange(tokens))
    assert codes(r) == expected, r.text
    assert r.agree == (not expected)


def _cli_check(tmp_path, *args):
    """`rotary check ... --json` through the built CLI (env ROTARY_CLI), as a dict."""
    import json
    import os
    import subprocess
    cli = os.environ.get("ROTARY_CLI")
    if not cli or not os.path.exists(cli):
        pytest.skip("rotary CLI not built (set ROTARY_CLI)")
    out = subprocess.run([cli, "check", *map(str, args), "--json"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode in (0, 1), out.stderr  # 1: the verdict is DISAGREE
    return json.loads(out.stdout)


def test_transformers_own_llama3_blend_agrees_where_f32_smooth_is_magnified(tmp_path):
    # A narrow blend (low 1, high 2) and factor 32: HF's f32 smooth factor is off by ~3e-7, which the blend
    # multiplies by up to factor - 1 (5.4e-6 relative in band 26).
    import json
    from safetensors.torch import save_file
    params = {"rope_type": "llama3", "rope_theta": 150000.0, "factor": 32.0, "low_freq_factor": 1.0,
              "high_freq_factor": 2.0, "original_max_position_embeddings": 4096}
    doc = {"model_type": "llama", "hidden_size": 768, "num_attention_heads": 8, "head_dim": 96,
           "max_position_embeddings": 131072, "rope_scaling": params}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    config = LlamaConfig(hidden_size=768, num_attention_heads=8, head_dim=96, max_position_embeddings=131072,
                         rope_parameters=params)
    rope = LlamaRotaryEmbedding(config)
    save_file({"inv_freq": rope.inv_freq.contiguous()}, str(tmp_path / "inv.safetensors"))
    r = _cli_check(tmp_path, "--config", "config.json", "--layout", "hf", "--inv-freq", "inv.safetensors")
    assert r["verdict"] == "agree" and r["diagnoses"] == [], r
    cos, sin = rope(torch.zeros(1, 3000, 96), torch.arange(3000)[None])
    save_file({"cos": cos[0].contiguous(), "sin": sin[0].contiguous()}, str(tmp_path / "cs.safetensors"))
    r = _cli_check(tmp_path, "--config", "config.json", "--layout", "hf", "--cos-sin", "cs.safetensors")
    assert r["verdict"] == "agree" and r["diagnoses"] == [], r


def test_a_wrong_base_is_one_diagnosis(tmp_path):
    # Fits of the base on 1, 2, 4, 8 and all bands found 9999.96 and 10000: one mistake, one diagnosis.
    import json
    from safetensors.torch import save_file
    from transformers import AutoConfig
    doc = json.loads(rotary.preset_config_json("llama-3.1-8b"))
    model_type = doc.pop("model_type")
    doc.pop("architectures", None)
    rope = LlamaRotaryEmbedding(AutoConfig.for_model(model_type, **dict(doc, rope_theta=10000.0)))
    cos, sin = rope(torch.zeros(1, 8192, 8), torch.arange(8192)[None])
    save_file({"cos": cos[0].contiguous(), "sin": sin[0].contiguous()}, str(tmp_path / "b.safetensors"))
    r = _cli_check(tmp_path, "--preset", "llama-3.1-8b", "--layout", "hf", "--cos-sin", "b.safetensors")
    assert [d["code"] for d in r["diagnoses"]] == ["base_mismatch"], r["diagnoses"]


def test_no_resolved_band_gives_no_max_error(tmp_path):
    # A bf16 inv_freq resolves no band: its largest relative error is unknown (null), not 0.
    import os
    import subprocess
    cli = os.environ.get("ROTARY_CLI")
    if not cli or not os.path.exists(cli):
        pytest.skip("rotary CLI not built (set ROTARY_CLI)")
    subprocess.run([cli, "export", "--preset", "llama-2-7b", "--layout", "hf", "--what", "inv-freq", "--dtype", "bf16",
                    "--out", "inv.safetensors"], check=True, capture_output=True, cwd=tmp_path)
    r = _cli_check(tmp_path, "--preset", "llama-2-7b", "--layout", "hf", "--inv-freq", "inv.safetensors")
    assert r["max_rel_err_inv_freq"] is None, r["max_rel_err_inv_freq"]
    text = subprocess.run([cli, "check", "--preset", "llama-2-7b", "--layout", "hf", "--inv-freq", "inv.safetensors"],
                          capture_output=True, text=True, cwd=tmp_path).stdout
    assert "resolved inv_freq n/a" in text, text


@pytest.mark.parametrize("theta,factor,orig,betas", [(10000.0, 128.0, 4096, (None, None)),
                                                     (150000.0, 64.0, 32768, (8.0, 2.0))])
def test_transformers_own_yarn_blend_agrees_with_fractional_ramp_bounds(theta, factor, orig, betas, tmp_path):
    # truncate: false leaves the correction range's bounds fractional; HF rounds them to f32 in
    # arange(R/2) - low, and the blend multiplies that by up to factor - 1 (7.1e-6 relative in band 45 of the first).
    params = {"rope_type": "yarn", "rope_theta": theta, "factor": factor, "original_max_position_embeddings": orig,
              "truncate": False, "beta_fast": betas[0], "beta_slow": betas[1]}
    config = LlamaConfig(hidden_size=1024, num_attention_heads=8, head_dim=128,
                         max_position_embeddings=int(orig * factor),
                         rope_parameters={k: v for k, v in params.items() if v is not None})
    rope = LlamaRotaryEmbedding(config)
    torch.save({"inv_freq": rope.inv_freq}, tmp_path / "inv.pt")
    r = rotary.check(config, layout="hf", inv_freq=tmp_path / "inv.pt")
    assert r.agree and r["diagnoses"] == [], r.text
    assert r["max_rel_err_inv_freq"] > 4e-6  # beyond the plain f32 allowance: the blend's slack is what accepts it
    # Rounding the range (truncate: true) moves whole bands: still found.
    flipped = LlamaConfig(hidden_size=1024, num_attention_heads=8, head_dim=128,
                          max_position_embeddings=int(orig * factor),
                          rope_parameters={k: v for k, v in dict(params, truncate=True).items() if v is not None})
    rf = rotary.check(flipped, layout="hf", inv_freq=tmp_path / "inv.pt")
    assert not rf.agree and codes(rf) == {"truncate_mismatch"}, rf.text
