"""A tiny random transformers LlamaForCausalLM with its own RoPE vs patched to rotary (logits and generate)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from rotary import _torch_ops, _torch_patch  # noqa: E402

ROPE_CASES = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64},
}


def tiny_llama(rope_parameters: dict, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                      rope_parameters=dict(rope_parameters), attn_implementation="eager")
    model = LlamaForCausalLM(cfg).eval()
    return model


class _Counter:
    """Counts runs of rotary's CPU kernel by the torch operators (one per q+k rotation) during a block."""

    def __init__(self, monkeypatch):
        self.calls = 0
        original = _torch_ops._run

        def counting(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(_torch_ops, "_run", counting)


@pytest.mark.parametrize("case", sorted(ROPE_CASES))
def test_patched_logits_match(case, monkeypatch):
    model = tiny_llama(ROPE_CASES[case])
    ids = torch.randint(0, 97, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(ids).logits
        counter = _Counter(monkeypatch)
        rt.patch(model)
        assert rt.is_patched(model)
        assert _torch_patch._function_of(modeling_llama.apply_rotary_pos_emb) is _torch_patch._apply_rotary_pos_emb
        counter.calls = 0  # patch's own check forward ran the kernel too
        got = model(ids).logits
    assert counter.calls == 2, "each layer's q/k rotation must go through rotary's kernel"
    # HF builds its cos/sin from float32 angles (error ~ pos * theta * 2^-24 at pos < 40 -> < 3e-6),
    # rotary from exact angles; after two layers the logits (|.| ~ 1) agree to f32 tolerance.
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    # and the patched cos/sin are rotary's exact values
    rot = model.model.rotary_emb
    cos, sin = rot(torch.zeros(1), torch.arange(40)[None])
    spec = rotary.Spec.from_hf_config(model.config)
    inv, af = spec.frequencies()
    ang = np.arange(40)[:, None] * inv
    np.testing.assert_allclose(cos[0, :, :8].numpy(), np.cos(ang) * af, atol=1.5e-7)
    np.testing.assert_allclose(sin[0, :, 8:].numpy(), np.sin(ang) * af, atol=1.5e-7)
    rt.unpatch(model)
    assert not rt.is_patched(model)
    assert _torch_patch._function_of(modeling_llama.apply_rotary_pos_emb) is not _torch_patch._apply_rotary_pos_emb
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, ref, rtol=0, atol=0)


@pytest.mark.parametrize("case", ["default", "yarn"])
def test_generate_with_kv_cache_same_tokens(case, monkeypatch):
    model = tiny_llama(ROPE_CASES[case], seed=3)
    # 40 + 30 tokens: generation runs past yarn's original_max_position_embeddings (64)
    prompt = torch.randint(0, 97, (2, 40), generator=torch.Generator().manual_seed(4))
    kw = dict(max_new_tokens=30, do_sample=False, use_cache=True, pad_token_id=0, output_scores=True,
              return_dict_in_generate=True)
    with torch.no_grad():
        ref = model.generate(prompt, **kw)
        counter = _Counter(monkeypatch)
        rt.patch(model)
        counter.calls = 0
        try:
            got = model.generate(prompt, **kw)
        finally:
            rt.unpatch(model)
    assert counter.calls == 2 * 30, "prefill + 29 cached decode steps, 2 layers each, through rotary's kernel"
    assert torch.equal(got.sequences, ref.sequences)
    for a, b in zip(got.scores, ref.scores):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
