"""rotary.prologue_torch.patch_prologue on tiny HF Gemma 3 / Llama / Mistral / Qwen2 / Qwen3 models: generate() equal to the
unpatched model, refusals, compile graphs."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import rotary  # noqa: E402
from rotary import _prologue, prologue_torch  # noqa: E402


def test_patched_layers_keep_the_original_forward_when_a_parameter_needs_a_gradient():
    # Fine-tuning only q_norm (or a LoRA-like q_proj) with a StaticCache in grad mode: the fused call would have
    # given no gradient at all (q_norm) or refused (q_proj); the layer's own forward runs instead.
    model = _tiny("qwen3")
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.model.layers:
        layer.self_attn.q_norm.weight.requires_grad_(True)
    ids = torch.randint(1, 96, (1, 6), generator=torch.Generator().manual_seed(7))

    def grads():
        model.zero_grad()
        cache = transformers.StaticCache(config=model.config, max_cache_len=16)
        model(ids, cache=cache, use_cache=True).logits.sum().backward()
        return [layer.self_attn.q_norm.weight.grad.clone() for layer in model.model.layers]

    want = grads()
    prologue_torch.patch_prologue(model)
    try:
        got = grads()
    finally:
        prologue_torch.unpatch_prologue(model)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def _tiny(kind: str, **extra):
    torch.manual_seed(0)
    common = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6, **extra)
    if kind == "llama":
        cfg = transformers.LlamaConfig(**common)
        model = transformers.LlamaForCausalLM(cfg)
    elif kind == "mistral":
        cfg = transformers.MistralConfig(**{"sliding_window": None, **common})
        model = transformers.MistralForCausalLM(cfg)
    elif kind == "gemma3":  # q/k norms x * (1 + w), RoPE per layer type
        cfg = transformers.Gemma3TextConfig(**{"query_pre_attn_scalar": 24, "sliding_window": 4, **common})  # not head_dim
        model = transformers.Gemma3ForCausalLM(cfg)
        for layer in model.model.layers:  # non-zero norm weights (they start as zeros: a factor 1)
            with torch.no_grad():
                layer.self_attn.q_norm.weight.uniform_(-0.5, 0.5)
                layer.self_attn.k_norm.weight.uniform_(-0.5, 0.5)
    elif kind == "qwen2":  # biased q/k/v projections
        cfg = transformers.Qwen2Config(**common)
        model = transformers.Qwen2ForCausalLM(cfg)
        for layer in model.model.layers:  # non-zero biases (they start as zeros)
            with torch.no_grad():
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.uniform_(-0.5, 0.5)
    else:
        cfg = transformers.Qwen3Config(**common)
        model = transformers.Qwen3ForCausalLM(cfg)
        for layer in model.model.layers:  # non-trivial qk-norm weights (they start as ones)
            with torch.no_grad():
                layer.self_attn.q_norm.weight.uniform_(0.5, 1.5)
                layer.self_attn.k_norm.weight.uniform_(0.5, 1.5)
    model.config._attn_implementation = "eager"
    return model.eval()


def _generate(model, ids):
    cache = transformers.StaticCache(config=model.config, max_cache_len=40)
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=10, do_sample=False, cache=cache, output_logits=True,
                              return_dict_in_generate=True, pad_token_id=0)


def _generate_patched(model, ids, monkeypatch, seen=lambda kw: 1):
    """generate() of `model` patched (unpatched again after), the layers patched, and `seen(keywords)` of each
    rotary.prologue call it made."""
    layers = prologue_torch.patch_prologue(model)
    calls = []
    real = _prologue.prologue
    monkeypatch.setattr(_prologue, "prologue", lambda *a, **kw: (calls.append(seen(kw)), real(*a, **kw))[1])
    try:
        return _generate(model, ids), layers, calls
    finally:
        monkeypatch.setattr(_prologue, "prologue", real)
        prologue_torch.unpatch_prologue(model)


def _assert_generated_alike(got, want):
    """The same greedy tokens, and logits within 1e-5."""
    assert torch.equal(got.sequences, want.sequences)
    for a, b in zip(got.logits, want.logits):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "qwen3"])
def test_generate_with_the_fused_prologue_equals_the_unpatched_model(kind, monkeypatch):
    model = _tiny(kind)
    ids = torch.randint(1, 96, (2, 7), generator=torch.Generator().manual_seed(3))
    want = _generate(model, ids)
    got, patched, calls = _generate_patched(model, ids, monkeypatch)
    assert len(patched) == model.config.num_hidden_layers
    # one rotary call per layer per forward (1 prefill + 9 decode forwards for 10 new tokens)
    assert len(calls) == model.config.num_hidden_layers * 10
    _assert_generated_alike(got, want)


@pytest.mark.parametrize("kind", ["qwen2", "mistral"])
def test_sliding_window_layers_keep_their_own_forward_and_generate_the_same(kind, monkeypatch):
    # A sliding-window layer's StaticCache layer is a StaticSlidingWindowLayer (a ring of the last tokens), which
    # the fused call does not write: such layers run their own forward; Qwen2's full-attention layers take the
    # fused path, with the sliding window their own forward passes (None) and the model's results.
    if kind == "qwen2":
        model = _tiny("qwen2", use_sliding_window=True, sliding_window=4, max_window_layers=1)
    else:
        model = _tiny("mistral", sliding_window=4)
    ids = torch.randint(1, 96, (2, 7), generator=torch.Generator().manual_seed(3))
    want = _generate(model, ids)
    got, _, calls = _generate_patched(model, ids, monkeypatch)
    assert len(calls) == (10 if kind == "qwen2" else 0)  # Qwen2's layer 0 is full attention, layer 1 slides
    _assert_generated_alike(got, want)


_GEMMA3_ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}}


@pytest.mark.parametrize("layer_types,fused", [(["sliding_attention", "full_attention"], 1),
                                               (["full_attention", "full_attention"], 2)])
def test_gemma3_layers_take_their_types_rope_and_their_norms_offset(layer_types, fused, monkeypatch):
    # Gemma 3: q/k norms scale by (1 + w) (norm_offset 1.0) and each layer type has its own RoPE (local base 1e4;
    # global 1e6 with linear scaling 8, as Gemma 3 4B's config). Full-attention layers take the fused path with the
    # global Spec; sliding ones (ring cache layers) keep their own forward. generate() equals the unpatched model's.
    model = _tiny("gemma3", layer_types=layer_types, rope_parameters=_GEMMA3_ROPE)
    ids = torch.randint(1, 96, (2, 7), generator=torch.Generator().manual_seed(3))
    want = _generate(model, ids)
    layers = prologue_torch.patch_prologue(model)
    bases = [rotary.Spec(**json.loads(layer._rotary_spec_key)).base for layer in layers]
    prologue_torch.unpatch_prologue(model)
    assert bases == [1e4 if t == "sliding_attention" else 1e6 for t in layer_types]
    got, _, calls = _generate_patched(model, ids, monkeypatch, lambda kw: kw["norm_offset"])
    assert calls == [1.0] * (10 * fused)
    _assert_generated_alike(got, want)


def test_a_multimodal_gemma3_s_language_layers_take_their_text_config_s_rope(monkeypatch):
    # Gemma3ForConditionalGeneration: the per-layer-type RoPE is in config.text_config (the composite config has
    # none); its vision tower's attention (out_proj, no o_proj) is not a prologue layer.
    text = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6, sliding_window=4,
                layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=16, rope_parameters=_GEMMA3_ROPE)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14)
    torch.manual_seed(0)
    cfg = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=1, image_token_index=95,
                                    boi_token_index=93, eoi_token_index=94)
    model = transformers.Gemma3ForConditionalGeneration(cfg).eval()
    model.config._attn_implementation = "eager"
    for module in model.modules():
        if type(module).__name__ == "Gemma3Attention":
            with torch.no_grad():
                module.q_norm.weight.uniform_(-0.5, 0.5)
                module.k_norm.weight.uniform_(-0.5, 0.5)
    ids = torch.randint(1, 90, (2, 7), generator=torch.Generator().manual_seed(3))

    def generate():
        cache = transformers.StaticCache(config=model.config.get_text_config(), max_cache_len=40)
        with torch.no_grad():
            return model.generate(ids, max_new_tokens=6, do_sample=False, cache=cache, output_logits=True,
                                  return_dict_in_generate=True, pad_token_id=0)

    want = generate()
    assert len(prologue_torch.patch_prologue(model)) == 2
    calls = []
    real = _prologue.prologue
    monkeypatch.setattr(_prologue, "prologue", lambda *a, **kw: (calls.append(1), real(*a, **kw))[1])
    try:
        got = generate()
    finally:
        prologue_torch.unpatch_prologue(model)
    assert len(calls) == 6  # the full-attention layer, once per forward
    _assert_generated_alike(got, want)


def test_a_layer_whose_norms_scale_differently_or_unknown_norms_are_refused():
    # One norm_offset per call: a Gemma 3 layer with a plain x * w k_norm (a swapped module) would be normalised wrong;
    # a norm class of unknown formula (a kernel library's replacement) was taken as x * w.
    model = _tiny("gemma3", layer_types=["full_attention", "full_attention"])
    model.model.layers[1].self_attn.k_norm = torch.nn.RMSNorm(16, eps=1e-6)
    with pytest.raises(NotImplementedError, match=r"^\[rotary.patch_prologue\] Gemma3ForCausalLM: layer 1's q_norm "
                                                  r"Gemma3RMSNorm and k_norm RMSNorm scale differently"):
        prologue_torch.patch_prologue(model)
    assert not any(hasattr(m, "_rotary_original_forward") for m in model.modules())

    class KernelNorm(torch.nn.Module):  # a replacement of unknown formula
        def __init__(self, old):
            super().__init__()
            self.weight, self.eps = old.weight, old.eps

        def forward(self, x):
            return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)).type_as(x)

    model = _tiny("gemma3", layer_types=["full_attention", "full_attention"])
    model.model.layers[0].self_attn.q_norm = KernelNorm(model.model.layers[0].self_attn.q_norm)
    with pytest.raises(NotImplementedError, match=r"^\[rotary.patch_prologue\] Gemma3ForCausalLM: layer 0's q_norm is a "
                                                  r"KernelNorm, whose formula the fused call does not know"):
        prologue_torch.patch_prologue(model)


def test_a_subclass_of_a_known_norm_keeps_its_formula(monkeypatch):
    # A subclass of Gemma3RMSNorm (as kernel libraries and fine-tuning code make) scales by (1 + w) too: it was taken
    # as x * w (by exact class name) and generate() diverged from the unpatched model.
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    class SubNorm(Gemma3RMSNorm):
        pass

    model = _tiny("gemma3", layer_types=["full_attention", "full_attention"])
    for layer in model.model.layers:
        for name in ("q_norm", "k_norm"):
            old = getattr(layer.self_attn, name)
            new = SubNorm(16, eps=old.eps)
            with torch.no_grad():
                new.weight.copy_(old.weight)
            setattr(layer.self_attn, name, new)
    ids = torch.randint(1, 96, (1, 6), generator=torch.Generator().manual_seed(5))
    want = _generate(model, ids)
    got, _, offsets = _generate_patched(model, ids, monkeypatch, lambda kw: kw["norm_offset"])
    assert offsets == [1.0] * 20
    _assert_generated_alike(got, want)


def test_the_sliding_window_given_to_attention_is_the_one_the_layer_s_own_forward_gives():
    # Mistral's forward passes its config's sliding_window, Qwen2's and Qwen3's their per-layer attribute, Llama's none.
    seen = {}
    for kind, extra in (("mistral", dict(sliding_window=6)), ("qwen2", dict(use_sliding_window=True, sliding_window=6,
                                                                             max_window_layers=1)),
                        ("qwen3", {}), ("llama", {})):
        model = _tiny(kind, **extra)
        seen[kind] = [prologue_torch._sliding_window(layer.self_attn) for layer in model.model.layers]
    assert seen == {"mistral": [6, 6], "qwen2": [None, 6], "qwen3": [None, None], "llama": [None, None]}


def test_generate_follows_the_width_transformers_rotates_not_a_partial_factor_it_ignores(monkeypatch):
    # Qwen3's default RoPE ignores rope_parameters["partial_rotary_factor"] (it rotates the whole head); the config
    # alone says half. The Spec follows the model's own inv_freq (rotary.torch.spec_of_module).
    model = _tiny("qwen3", rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})
    assert model.model.rotary_emb.inv_freq.numel() * 2 == 16
    from rotary.torch import spec_of_module
    assert spec_of_module(model.model.rotary_emb, model.config).rotary_dim == 16
    ids = torch.randint(1, 96, (1, 6), generator=torch.Generator().manual_seed(5))
    want = _generate(model, ids)
    prologue_torch.patch_prologue(model)
    try:
        got = _generate(model, ids)
    finally:
        prologue_torch.unpatch_prologue(model)
    _assert_generated_alike(got, want)


def test_patch_prologue_refuses_attention_it_does_not_reproduce_and_unpatch_restores_exactly():
    # Gemma2's attention softcaps its logits: the fused forward would have dropped that silently.
    cfg = transformers.Gemma2Config(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, attn_logit_softcapping=1.0)
    gemma = transformers.Gemma2ForCausalLM(cfg).eval()
    with pytest.raises(NotImplementedError, match=r"\[rotary.patch_prologue\] Gemma2ForCausalLM: .*got Gemma2Attention"):
        prologue_torch.patch_prologue(gemma)
    assert not any(hasattr(m, "_rotary_original_forward") for m in gemma.modules())
    model = _tiny("llama")
    layers = prologue_torch.patch_prologue(model)
    prologue_torch.unpatch_prologue(model)
    for layer in layers:  # no instance attribute left: the class's forward again
        assert "forward" not in layer.__dict__ and not any(k.startswith("_rotary") for k in layer.__dict__)


def test_a_patched_model_saved_whole_loads_patched_and_generates_the_same(monkeypatch):
    # torch.save pickles the patched forwards: bound methods of the class pickled as getattr(module, "forward")
    # and failed at torch.load.
    import io

    model = _tiny("qwen3")
    ids = torch.randint(1, 96, (1, 6), generator=torch.Generator().manual_seed(7))
    want = _generate(model, ids)
    prologue_torch.patch_prologue(model)
    buf = io.BytesIO()
    torch.save(model, buf)
    prologue_torch.unpatch_prologue(model)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    calls = []
    real = _prologue.prologue
    monkeypatch.setattr(_prologue, "prologue", lambda *a, **kw: (calls.append(1), real(*a, **kw))[1])
    got = _generate(loaded, ids)
    assert len(calls) == loaded.config.num_hidden_layers * 10  # the loaded layers take the fused path
    _assert_generated_alike(got, want)
    prologue_torch.unpatch_prologue(loaded)
    assert not any(k.startswith("_rotary") or k == "forward" for m in loaded.modules() for k in m.__dict__)


def test_patched_layers_apply_the_attention_dropout_in_training_mode():
    # A model in train() mode under no_grad (e.g. Monte Carlo dropout at inference) drops attention weights as its own
    # forward does; the fused forward passed dropout=0.0 always.
    model = _tiny("llama", attention_dropout=0.25)
    prologue_torch.patch_prologue(model)
    seen = []
    try:
        for layer in model.model.layers:
            real = layer.self_attn._rotary_eager
            layer.self_attn._rotary_eager = lambda *a, _real=real, **kw: (seen.append(kw["dropout"]), _real(*a, **kw))[1]
        ids = torch.randint(1, 96, (1, 5), generator=torch.Generator().manual_seed(2))
        for training in (False, True):
            model.train(training)
            with torch.no_grad():
                model(ids, cache=transformers.StaticCache(config=model.config, max_cache_len=16), use_cache=True)
    finally:
        prologue_torch.unpatch_prologue(model)
    assert seen == [0.0, 0.0, 0.25, 0.25]


def _decode_graphs(model, patched: bool):
    """Graphs and graph breaks of three compiled decode steps (torch.compile without fullgraph, as generate()'s own
    compilation), and their logits."""
    if patched:
        prologue_torch.patch_prologue(model)
    ids = torch.randint(1, 96, (2, 7), generator=torch.Generator().manual_seed(3))
    cache = transformers.StaticCache(config=model.config, max_cache_len=30)
    graphs, logits = [], []
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    try:
        with torch.no_grad():
            model(ids, cache=cache, use_cache=True)

            def step(tok, pos):
                return model(input_ids=tok, cache=cache, use_cache=True, cache_position=pos,
                             position_ids=pos[None].expand(2, 1)).logits

            f = torch.compile(step, backend=lambda gm, ex: (graphs.append(gm), gm.forward)[1])
            tok = ids[:, -1:]
            for s in range(3):
                logits.append(f(tok, torch.tensor([7 + s])))
                tok = logits[-1][:, -1:].argmax(-1)
        breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    finally:
        if patched:
            prologue_torch.unpatch_prologue(model)
        torch._dynamo.reset()
    return len(graphs), breaks, logits


@pytest.mark.parametrize("kind,extra", [("qwen3", {}), ("qwen2", {}), ("mistral", {}),
                                        ("gemma3", dict(layer_types=["sliding_attention", "full_attention"]))])
def test_a_compiled_patched_model_makes_the_graphs_the_unpatched_one_makes(kind, extra):
    # The start of the new tokens in the cache stays a tensor: int(cumulative_length) broke the graph in every
    # patched layer (12 graphs and 15 breaks where the unpatched model makes 2 graphs over three decode steps).
    # Each patched class, and Gemma 3's mix of fused and own forwards, compiles as its unpatched model does.
    model = _tiny(kind, **extra)
    n_want, breaks_want, want = _decode_graphs(model, False)
    n_got, breaks_got, got = _decode_graphs(model, True)
    assert (n_got, breaks_got) == (n_want, breaks_want) and breaks_got == 0
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_a_batch_or_prompt_the_static_cache_cannot_hold_fails_as_in_the_unpatched_model():
    # The patched layers leave such calls to the original forward, whose StaticCache update reports them (the fused
    # call accepted a batch of 1 into a cache of 2 and failed later in o_proj; a long prompt named cache_positions).
    ids = torch.randint(1, 96, (2, 7), generator=torch.Generator().manual_seed(3))
    errors = {}
    for patched in (False, True):
        model = _tiny("llama")
        if patched:
            prologue_torch.patch_prologue(model)
        with torch.no_grad():
            short = transformers.StaticCache(config=model.config, max_cache_len=5)
            with pytest.raises(Exception) as long_prompt:
                model(ids, cache=short, use_cache=True)
            cache = transformers.StaticCache(config=model.config, max_cache_len=20)
            model(ids, cache=cache, use_cache=True)
            with pytest.raises(Exception) as other_batch:
                model(ids[:1, :1], cache=cache, use_cache=True)
        errors[patched] = [(type(e.value), str(e.value)) for e in (long_prompt, other_batch)]
    assert errors[True] == errors[False]


def test_a_k_norm_eps_other_than_q_norms_is_refused_or_left_to_the_original_forward():
    # The fused call takes one eps: the patched layers used q_norm's for k too (k's rows normalised with the wrong eps).
    model = _tiny("qwen3")
    model.model.layers[1].self_attn.k_norm.variance_epsilon = 0.25
    with pytest.raises(NotImplementedError, match=r"^\[rotary.patch_prologue\] Qwen3ForCausalLM: layer 1's q_norm eps "
                                                  r"1e-06 and k_norm eps 0.25 differ \(the fused call takes one\)"):
        prologue_torch.patch_prologue(model)
    assert not any(hasattr(m, "_rotary_original_forward") for m in model.modules())  # nothing patched
    # Changed after patching: that layer takes its original forward, with the model's results.
    model = _tiny("qwen3")
    ids = torch.randint(1, 96, (2, 7), generator=torch.Generator().manual_seed(3))
    prologue_torch.patch_prologue(model)
    model.model.layers[1].self_attn.k_norm.variance_epsilon = 0.25
    try:
        got = _generate(model, ids)
    finally:
        prologue_torch.unpatch_prologue(model)
    want = _generate(model, ids)
    _assert_generated_alike(got, want)


def test_norms_with_torch_s_default_eps_take_the_fused_path_with_that_eps():
    # torch.nn.RMSNorm(eps=None) normalises with the input dtype's machine eps: patch_prologue read float(None).
    model = _tiny("qwen3")
    for layer in model.model.layers:
        for name in ("q_norm", "k_norm"):
            old = getattr(layer.self_attn, name)
            norm = torch.nn.RMSNorm(16, eps=None)
            with torch.no_grad():
                norm.weight.copy_(old.weight)
            setattr(layer.self_attn, name, norm)
    ids = torch.randint(1, 96, (1, 6), generator=torch.Generator().manual_seed(5))
    want = _generate(model, ids)
    assert len(prologue_torch.patch_prologue(model)) == 2
    try:
        got = _generate(model, ids)
    finally:
        prologue_torch.unpatch_prologue(model)
    _assert_generated_alike(got, want)


def test_the_model_benchmark_script_runs_and_reports_both_implementations():
    # scripts/bench_prologue_model.py (docs/performance.md's whole-model numbers), shrunk to one layer and a few tokens.
    import pathlib
    import subprocess
    import sys

    script = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "bench_prologue_model.py"
    out = subprocess.run([sys.executable, str(script), "--layers", "1", "--prompt", "8", "--new", "2", "--rounds", "1",
                          "--dtype", "f32"], capture_output=True, text=True, timeout=300, check=True).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(r["impl"], r["round"]) for r in lines[:2]] == [("unpatched", 0), ("patched", 0)]
    summary = lines[-1]
    assert summary["prefill_ms"]["patched"] > 0 and summary["decode_ms_per_token"]["unpatched"] > 0
    assert summary["same_tokens"] is True  # f32: the patched model decodes the same tokens
