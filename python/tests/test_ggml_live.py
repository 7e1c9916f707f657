"""rotary.ggml_frequencies + apply_axes against live ggml_rope_ext (both pairings) and ggml_rope_multi (PyPI's libggml-python)."""
from __future__ import annotations

import numpy as np
import pytest

from ggml_live import ggml_or_skip, rope_multi
from rotary import multimodal

# ggml_rope_ext parameters: plain, partial rotation, YaRN (extrapolation mix + attention factor),
# linear scaling with an explicit attention factor.
CASES = [
    {},
    {"n_dims": 64},
    {"freq_scale": 0.25, "ext_factor": 1.0, "n_ctx_orig": 4096, "beta_fast": 32.0, "beta_slow": 1.0},
    {"freq_scale": 0.5, "attn_factor": 1.3},
    # ggml's own test suite (test-backend-ops test_rope): YaRN on with n_ctx_orig 0, corr dims [0, -inf].
    {"freq_scale": 1.4245, "ext_factor": 0.7465, "attn_factor": 1.4245, "n_ctx_orig": 0, "beta_fast": 1.0,
     "beta_slow": 1.0},
]


@pytest.mark.parametrize("mode_name,mode", [("neox", 2), ("normal", 0)])
@pytest.mark.parametrize("params", CASES, ids=["plain", "partial", "yarn", "linear-attn", "yarn-no-context"])
def test_ggml_frequencies_match_live_ggml(mode_name, mode, params):
    g = ggml_or_skip()
    rng = np.random.default_rng(3)
    tokens, head_dim, base = 64, 128, 10000.0
    positions = rng.integers(0, 4096, tokens)
    q = rng.standard_normal((tokens, 4, head_dim)).astype(np.float32)
    k = rng.standard_normal((tokens, 2, head_dim)).astype(np.float32)
    rope = g.GgmlRope(q, k, 0, base, "f32", 1, positions=positions, mode=mode, **params)
    got_q, got_k = rope()
    n_dims = params.get("n_dims", head_dim)
    freqs = multimodal.ggml_frequencies(mode_name, n_dims, freq_base=base,
                                        **{name: v for name, v in params.items() if name != "n_dims"})
    want_q, want_k = multimodal.apply_axes(q, positions, freqs, k=k, layout="thd")
    # ggml forms its angles in float32 (theta *= theta_scale, then p * theta): at positions < 4096 its
    # outputs differ from the exact rotation by up to ~2e-3 here; a wrong frequency, ramp, attention
    # factor or pairing differs by 1e-2 or more.
    assert np.abs(got_q - want_q).max() < 4e-3
    assert np.abs(got_k - want_k).max() < 4e-3
    if n_dims < head_dim:  # the pass-through channels are copied exactly by both
        assert np.array_equal(got_q[..., n_dims:], q[..., n_dims:])
        assert np.array_equal(want_q[..., n_dims:], q[..., n_dims:])


@pytest.mark.parametrize("mode_name,mode", [("neox", 2), ("normal", 0)])
@pytest.mark.parametrize("params", CASES[:3], ids=["plain", "partial", "yarn"])
def test_negative_positions_match_live_ggml(mode_name, mode, params):
    """llama.cpp's K-shift calls ggml_rope_ext on the K cache with positions = the shift delta, often negative:
    ggml rotates by pos * theta (the inverse rotation by |pos|), and so does rotary with ggml_frequencies."""
    g = ggml_or_skip()
    rng = np.random.default_rng(5)
    tokens, head_dim, base = 64, 128, 10000.0
    positions = rng.integers(-4096, 4096, tokens)
    positions[:8] = [-1, -2, -4095, 0, 1, -100, -2048, -7]
    q = rng.standard_normal((tokens, 4, head_dim)).astype(np.float32)
    k = rng.standard_normal((tokens, 2, head_dim)).astype(np.float32)
    rope = g.GgmlRope(q, k, 0, base, "f32", 1, positions=positions, mode=mode, **params)
    got_q, got_k = rope()
    freqs = multimodal.ggml_frequencies(mode_name, params.get("n_dims", head_dim), freq_base=base,
                                        **{name: v for name, v in params.items() if name != "n_dims"})
    want_q, want_k = multimodal.apply_axes(q, positions, freqs, k=k, layout="thd")
    assert np.abs(got_q - want_q).max() < 4e-3
    assert np.abs(got_k - want_k).max() < 4e-3
    assert freqs.signed_positions
    # The sign matters: the rotation by |pos| is far from ggml's result.
    wrong = multimodal.apply_axes(q, np.abs(positions), freqs, layout="thd")
    assert np.abs(got_q - wrong).max() > 1e-1
    # Other conventions keep refusing negative positions.
    vision = multimodal.vision_frequencies("qwen2vl", head_dim)
    with pytest.raises(ValueError, match=r"must be >= 0 \(negative positions are invalid\)"):
        multimodal.apply_axes(q, np.stack([positions, positions]), vision, layout="thd")


# ggml_rope_multi cases: (mode name, mode, n_dims, head_dim, sections). MROPE/IMROPE sections summing past n_dims are
# valid in ggml when the head is wider (partial rotation; ggml asserts sum <= head_dim only); VISION with llama.cpp
# clip's {D/4 x4} and with two sections that wrap (where ggml's CPU and GPU ropes agree).
MULTI = [
    ("mrope", 8, 64, 64, (8, 12, 12, 0)),
    ("imrope", 40, 64, 64, (12, 10, 10, 0)),
    ("mrope", 8, 32, 64, (10, 10, 24, 0)),
    ("imrope", 40, 32, 64, (20, 4, 20, 0)),
    ("vision", 24, 32, 64, (16, 16, 16, 16)),
    ("vision", 24, 24, 48, (5, 4, 0, 0)),
]


@pytest.mark.parametrize("mode_name,mode,n_dims,head_dim,sections", MULTI,
                         ids=["mrope", "imrope", "mrope-sum-past-n_dims", "imrope-sum-past-n_dims", "vision-clip",
                              "vision-wrap"])
def test_multi_rope_matches_live_ggml(mode_name, mode, n_dims, head_dim, sections):
    """ggml_rope_multi itself vs ggml_frequencies + apply_axes, positions of both signs on its 4 rows."""
    ggml_or_skip()
    rng = np.random.default_rng(7)
    tokens = 48
    x = rng.standard_normal((tokens, 3, head_dim)).astype(np.float32)
    positions = rng.integers(-4096, 4096, (4, tokens))
    got = rope_multi(x, positions, n_dims, sections, mode, 1e6)
    freqs = multimodal.ggml_frequencies(mode_name, n_dims, freq_base=1e6, sections=sections)
    want = multimodal.apply_axes(x, positions, freqs, layout="thd")
    assert np.abs(got - want).max() < 4e-3
    rotated = 2 * n_dims if mode_name == "vision" else n_dims
    assert np.array_equal(want[..., rotated:], x[..., rotated:])
