"""vLLM's extra rope types (ntk, mixed ntk, dynamic + alpha) vs transformers' own Hunyuan rotary class and vLLM's
formulas transcribed in float64 torch."""
from __future__ import annotations

import numpy as np
import pytest

import rotary
from hf_models import hf_model_modules

torch = pytest.importorskip("torch")

# rotary's double values vs the same formula in float64 torch: summation/pow order only.
F64_REL_TOL = 1e-13
# vs HF's float32 buffers: HF's own float32 rounding of base' ** (2i/d) (~2.5e-7 relative, more for a large base').
HF_F32_REL_TOL = 2e-6


def _vllm_base_inv_freq(base: float, rotary_dim: int) -> torch.Tensor:
    """vLLM RotaryEmbedding._compute_inv_freq, in float64."""
    return 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))


def _vllm_ntk(base: float, rotary_dim: int, factor: float, mixed_b=None) -> np.ndarray:
    """vLLM NTKScalingRotaryEmbedding._compute_inv_freq (ntk_scaling_rope.py), transcribed in float64."""
    inv_freq = _vllm_base_inv_freq(base * (factor if mixed_b is None else 1), rotary_dim)
    if mixed_b is None:
        inv_freq = inv_freq / factor ** (2 / rotary_dim)
    else:
        a = torch.tensor(factor, dtype=torch.float64).log() / (rotary_dim / 2) ** mixed_b
        lambda_1_m = (a * torch.arange(1, rotary_dim // 2 + 1, dtype=torch.float64) ** mixed_b).exp()
        inv_freq = inv_freq / lambda_1_m
    return inv_freq.numpy()


def _vllm_alpha(base: float, rotary_dim: int, alpha: float) -> np.ndarray:
    """vLLM DynamicNTKAlphaRotaryEmbedding._compute_cos_sin_cache's frequencies, in float64."""
    return _vllm_base_inv_freq(base * alpha ** (rotary_dim / (rotary_dim - 2)), rotary_dim).numpy()


@pytest.mark.parametrize("head_dim,prf,base,factor,mixed_b", [
    (128, 1.0, 10000.0, 4.0, None), (64, 1.0, 5e5, 2.5, None), (128, 0.5, 1e6, 16.0, None),
    (128, 1.0, 10000.0, 4.0, 0.625), (64, 1.0, 1e6, 8.0, 2.0), (96, 0.5, 10000.0, 3.0, 1.0),
])
def test_ntk_matches_vllm_formula(head_dim, prf, base, factor, mixed_b):
    rs = {"rope_type": "ntk", "factor": factor}
    if mixed_b is not None:
        rs["mixed_b"] = mixed_b
    spec = rotary.Spec.from_hf_config({"head_dim": head_dim, "rope_theta": base, "partial_rotary_factor": prf,
                                       "rope_scaling": rs})
    rd = int(head_dim * prf)  # vLLM get_rope: rotary_dim = int(head_size * partial_rotary_factor)
    assert spec.rotary_dim == rd and spec.rope_type == "ntk" and spec.mixed_b == mixed_b
    inv, af = spec.frequencies()
    np.testing.assert_allclose(inv, _vllm_ntk(base, rd, factor, mixed_b), rtol=F64_REL_TOL, atol=0)
    assert af == 1.0
    # The Spec constructor reads the same fields, and to_dict rebuilds it.
    again = rotary.Spec(head_dim, rd, base, rope_type="ntk", factor=factor, mixed_b=mixed_b)
    np.testing.assert_array_equal(again.inv_freq(), inv)
    assert rotary.Spec(**again.to_dict()) == again


def _hunyuan(alpha, head_dim=64, base=10000.0):
    cfg_mod, model_mod = hf_model_modules("hunyuan_v1_dense")
    config = cfg_mod.HunYuanDenseV1Config(
        vocab_size=32, hidden_size=256, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, head_dim=head_dim, max_position_embeddings=4096,
        rope_parameters={"rope_type": "dynamic", "alpha": alpha, "factor": 1.0, "rope_theta": base,
                         "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0})
    return config, model_mod.HunYuanDenseV1RotaryEmbedding(config)


@pytest.mark.parametrize("alpha,head_dim,base", [(1000.0, 64, 10000.0), (4.0, 128, 1e6), (50.0, 32, 10000.0)])
def test_dynamic_alpha_matches_transformers_hunyuan(alpha, head_dim, base):
    config, emb = _hunyuan(alpha, head_dim, base)
    assert emb.rope_type == "ntk_alpha"  # HF's own relabelling of "dynamic" + alpha
    for source in (config, config.to_dict()):
        spec = rotary.Spec.from_hf_config(source)
        assert spec.rope_type == "dynamic" and spec.alpha == alpha and not spec.length_dependent
        inv, af = spec.frequencies()
        np.testing.assert_allclose(inv, emb.inv_freq.double().numpy(), rtol=HF_F32_REL_TOL, atol=0)
        np.testing.assert_allclose(inv, _vllm_alpha(base, head_dim, alpha), rtol=F64_REL_TOL, atol=0)
        assert af == pytest.approx(emb.attention_scaling)
    # HF's forward at a long position: its cos/sin vs rotary's exact rows (HF forms p*theta in float32).
    spec = rotary.Spec.from_hf_config(config)
    pos = torch.tensor([[0, 1, 17, 3000]])
    cos, sin = emb(torch.zeros(1, 4, head_dim), pos)
    c, s = rotary.cos_sin(spec, pos[0].numpy())
    h = head_dim // 2
    np.testing.assert_allclose(cos[0, :, :h].numpy(), c, atol=3e-4, rtol=0)  # ulp(3000)/2 = 1.2e-4 rad
    np.testing.assert_allclose(sin[0, :, :h].numpy(), s, atol=3e-4, rtol=0)
    # The frequencies do not move with the length (unlike HF's plain dynamic NTK).
    np.testing.assert_array_equal(spec.inv_freq(seq_len=1 << 20), spec.inv_freq())


def test_vllm_field_errors():
    with pytest.raises(ValueError, match="rope_scaling.factor is required for rope_type ntk"):
        rotary.Spec.from_hf_config({"head_dim": 8, "rope_scaling": {"rope_type": "ntk"}})
    with pytest.raises(ValueError, match=r"scaling.mixed_b must be > 0, got -1"):
        rotary.Spec(8, rope_type="ntk", factor=2.0, mixed_b=-1.0)
    with pytest.raises(ValueError, match=r"scaling.alpha must be >= 1 \(1 = no scaling\), got 0.5"):
        rotary.Spec(8, rope_type="dynamic", alpha=0.5)
    with pytest.raises(ValueError, match="rope_scaling.alpha must be a number"):
        rotary.Spec.from_hf_config({"head_dim": 8, "rope_scaling": {"type": "dynamic", "alpha": "x"}})
