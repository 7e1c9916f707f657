"""rotary.check on engine buffers of unusual forms: vLLM's Phi-3 LongRoPE long_short_cos_sin_cache (the short-factor
cache followed by the long-factor one, built here from transformers' own longrope frequencies as vLLM's class builds
it), and GPT-OSS's cos/sin, which transformers returns with each frequency once ([N, R/2])."""
from __future__ import annotations

import numpy as np
import pytest

import rotary

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

ORIG, MAX_POS, D = 512, 4096, 64
PARAMS = {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": ORIG,
          "short_factor": [1.0 + 0.04 * i for i in range(D // 2)], "long_factor": [1.0 + 1.3 * i for i in range(D // 2)]}


def _config():
    return LlamaConfig(hidden_size=256, num_attention_heads=4, head_dim=D, max_position_embeddings=MAX_POS,
                       rope_parameters=PARAMS)


def _cache(config, seq_len, rows):
    """vLLM's _compute_cos_sin_cache: [rows, D] = cos·mscale | sin·mscale, f32, from HF's inv_freq at seq_len."""
    inv_freq, af = ROPE_INIT_FUNCTIONS["longrope"](config, "cpu", seq_len=seq_len)
    angles = np.arange(rows, dtype=np.float64)[:, None] * inv_freq.double().numpy()[None, :]
    return np.concatenate([np.cos(angles) * af, np.sin(angles) * af], axis=1).astype(np.float32)


def test_long_short_buffer_is_checked_as_its_two_caches(tmp_path):
    config = _config()
    short, long_ = _cache(config, ORIG, ORIG), _cache(config, MAX_POS, MAX_POS)
    buffer = np.concatenate([short, long_], axis=0)
    r = rotary.check(config, layout="vllm", cos_sin=buffer)
    assert r.agree and r["diagnoses"] == [], r.text
    assert any("long_short_cos_sin_cache" in n and "agree" in n for n in r["notes"]), r["notes"]
    # A state_dict holding the buffer under vLLM's attribute name, through a file.
    torch.save({"model.layers.0.self_attn.rotary_emb.long_short_cos_sin_cache": torch.from_numpy(buffer)},
               tmp_path / "rope.pt")
    assert rotary.check(config, layout="vllm", cos_sin=tmp_path / "rope.pt").agree
    # An engine that built its short cache with the long factors, under vLLM's name: the short part disagrees, and
    # says why.
    wrong = np.concatenate([_cache(config, MAX_POS, ORIG), long_], axis=0)
    rw = rotary.check(config, layout="vllm", cos_sin={"rotary_emb.long_short_cos_sin_cache": wrong})
    assert not rw.agree and {d["code"] for d in rw["diagnoses"]} == {"longrope_switch"}, rw.text
    assert all(d["message"].startswith(f"short cache (rows [0, {ORIG})): ") for d in rw["diagnoses"]), rw.text
    # Unnamed and neither reading agreeing: the table as given, with a note on the two-cache reading.
    ru = rotary.check(config, layout="vllm", cos_sin=wrong)
    assert not ru.agree and any("name the tensor long_short_cos_sin_cache" in n for n in ru["notes"]), ru.text
    # The long cache alone, or with an explicit max_pos, is one table as before.
    assert rotary.check(config, layout="vllm", cos_sin=long_).agree
    assert not rotary.check(config, layout="vllm", cos_sin=buffer, max_pos=ORIG + MAX_POS).agree
    # One long-factor cache that happens to have orig + max_pos rows is read as one table (it agrees as one).
    one = _cache(config, ORIG + MAX_POS, ORIG + MAX_POS)
    r1 = rotary.check(config, layout="vllm", cos_sin=one)
    assert r1.agree and not any("long_short" in n for n in r1["notes"]), r1.text


def test_gpt_oss_cos_sin_hold_each_frequency_once():
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding
    config = GptOssConfig(hidden_size=2880, num_attention_heads=64, head_dim=64, num_key_value_heads=8,
                          max_position_embeddings=131072, rope_theta=150000.0,
                          rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                        "original_max_position_embeddings": 4096, "truncate": False})
    cos, sin = GptOssRotaryEmbedding(config)(torch.zeros(1), torch.arange(3000)[None])
    assert cos.shape == (1, 3000, 32)  # transformers' form: [N, R/2], no cat(freqs, freqs)
    r = rotary.check(config, layout="hf", cos=cos[0], sin=sin[0])
    assert r.agree and r["diagnoses"] == [], r.text
    assert r["rotary_dim_found"] == 64 and any("once" in n for n in r["notes"]), r.text
    # The same table checked against a config whose rotary_dim is half as wide still reads as cat(freqs, freqs)
    # of nothing: a half-wide table that is duplicated is not taken for "once".
    dup = torch.cat([cos[0][:, :16], cos[0][:, :16]], dim=1), torch.cat([sin[0][:, :16], sin[0][:, :16]], dim=1)
    rd = rotary.check(config, layout="hf", cos=dup[0], sin=dup[1])
    assert not rd.agree and rd["rotary_dim_found"] == 32, rd.text


def test_each_frequency_once_with_an_odd_count():
    # R = 18: nine frequencies once, [N, 9] (an odd width, which the duplicated forms cannot have).
    config = LlamaConfig(hidden_size=72, num_attention_heads=4, head_dim=18, max_position_embeddings=4096)
    inv = 1.0 / (10000.0 ** (np.arange(0, 18, 2) / 18))
    angles = np.arange(300)[:, None] * inv[None, :]
    r = rotary.check(config, layout="hf", cos=np.cos(angles).astype(np.float32), sin=np.sin(angles).astype(np.float32))
    assert r.agree and r["rotary_dim_found"] == 18, r.text
