"""rotary.torch.patch on tiny random transformers models of every supported family: logits, generate(), refusals."""
from __future__ import annotations

import importlib
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from rotary import _torch_ops, _torch_patch  # noqa: E402

BASE = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
LLAMA_ROPE = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
    # max_position_embeddings 16 < prompt: dynamic NTK rescales on every step (as transformers does)
    "dynamic": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16},
    "longrope": {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0 + 0.1 * i for i in range(8)],
                 "long_factor": [2.0 + 0.3 * i for i in range(8)], "original_max_position_embeddings": 16},
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
}
# (transformers model, config class, model class, config keywords)
MODELS = {
    **{f"llama-{k}": ("llama", "LlamaConfig", "LlamaForCausalLM",
                      dict(BASE, head_dim=16, rope_parameters=dict(v),
                           max_position_embeddings=16 if k == "dynamic" else 64)) for k, v in LLAMA_ROPE.items()},
    # Llama's default RoPE rotates the whole head whatever partial_rotary_factor the config carries.
    "llama-partial-factor-ignored": ("llama", "LlamaConfig", "LlamaForCausalLM",
                                     dict(BASE, head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                              "partial_rotary_factor": 0.5})),
    "mistral": ("mistral", "MistralConfig", "MistralForCausalLM", dict(BASE, head_dim=16)),
    "qwen2": ("qwen2", "Qwen2Config", "Qwen2ForCausalLM", dict(BASE)),
    "qwen3": ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", dict(BASE, head_dim=16)),
    "phi3-longrope-partial": ("phi3", "Phi3Config", "Phi3ForCausalLM",
                              dict(BASE, partial_rotary_factor=0.5, original_max_position_embeddings=16,
                                   rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                    "short_factor": [1.0, 1.1, 1.2, 1.5],
                                                    "long_factor": [2.0, 3.0, 4.0, 6.0],
                                                    "original_max_position_embeddings": 16,
                                                    "partial_rotary_factor": 0.5})),
    "gpt_neox-partial": ("gpt_neox", "GPTNeoXConfig", "GPTNeoXForCausalLM",
                         dict(BASE, rotary_pct=0.25, num_key_value_heads=None)),
    "gpt_oss": ("gpt_oss", "GptOssConfig", "GptOssForCausalLM",
                dict(BASE, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=8,
                     rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0,
                                      "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 16})),
    "gemma3": ("gemma3", "Gemma3TextConfig", "Gemma3ForCausalLM",
               dict(BASE, head_dim=16, sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                    rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                     "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0,
                                                        "factor": 8.0}})),
    "deepseek_v3-interleave": ("deepseek_v3", "DeepseekV3Config", "DeepseekV3ForCausalLM",
                               dict(BASE, num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16,
                                    qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, n_routed_experts=4,
                                    num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1,
                                    moe_intermediate_size=32, rope_interleave=True)),
}
_VL_TEXT = dict(BASE, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]})


def _module(model: str, what: str):
    try:
        return importlib.import_module(f"transformers.models.{model}.{what}_{model}")
    except ImportError as e:  # pragma: no cover - depends on the installed transformers
        pytest.skip(f"transformers has no {model}: {e}")


def build(case: str, seed: int = 0):
    if case in ("qwen2_vl", "qwen2_5_vl"):
        cfg_cls = {"qwen2_vl": "Qwen2VLConfig", "qwen2_5_vl": "Qwen2_5_VLConfig"}[case]
        mdl_cls = {"qwen2_vl": "Qwen2VLForConditionalGeneration", "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration"}
        cfg = getattr(_module(case, "configuration"), cfg_cls)(
            text_config=dict(_VL_TEXT), vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2,
                                                           out_hidden_size=64, intermediate_size=64))
        cls = getattr(_module(case, "modeling"), mdl_cls[case])
    else:
        model, cfg_name, cls_name, kw = MODELS[case]
        cfg = getattr(_module(model, "configuration"), cfg_name)(**kw)
        cls = getattr(_module(model, "modeling"), cls_name)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    return cls(cfg).eval()


_FORWARD_STATE = {"rope_deltas"}  # attributes transformers' Qwen2-VL models set in forward


def _snapshot(model):
    """Every module's attributes (by identity), except the state transformers itself changes in forward."""
    return {n: {k: id(v) for k, v in m.__dict__.items() if k not in _FORWARD_STATE} for n, m in model.named_modules()}


def _kernel_calls_counted(monkeypatch):
    """Counts runs of rotary's CPU kernel by the operators (rotary._torch_ops._run: one per rotation of q and k)."""
    calls = [0]
    original = _torch_ops._run

    def counting(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(_torch_ops, "_run", counting)
    return calls


@pytest.mark.parametrize("case", sorted(MODELS) + ["qwen2_vl", "qwen2_5_vl"])
def test_patched_model_matches_transformers(case, monkeypatch):
    """Logits within 1e-5 (f32) of transformers' own RoPE, identical greedy generate() tokens, every decoder layer
    rotating through rotary (prefill and each cached step), and unpatch restoring the model exactly."""
    model = build(case)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 97, (2, 24), generator=gen)  # 24 > 16: yarn/longrope/dynamic past their original range
    kw = dict(max_new_tokens=6, do_sample=False, use_cache=True, pad_token_id=0)
    rot_mods = {sys.modules[type(m).__module__] for _, m in model.named_modules()}
    with torch.no_grad():
        ref = model(ids).logits
        ref_tokens = model.generate(ids, **kw)
        # transformers' dynamic/longrope modules change their own state in forward: the state to restore is this one
        ref_now = model(ids).logits
        fwd_before = _snapshot(model)
        globals_before = {(pm.__name__, k): v for pm in rot_mods for k, v in vars(pm).items() if "rotary" in k}
        calls = _kernel_calls_counted(monkeypatch)
        rt.patch(model)
        assert rt.is_patched(model)
        calls[0] = 0
        got = model(ids).logits
        assert calls[0] == model.config.get_text_config().num_hidden_layers
        calls[0] = 0
        got_tokens = model.generate(ids, **kw)
        assert calls[0] == kw["max_new_tokens"] * model.config.get_text_config().num_hidden_layers
        rt.unpatch(model)
        assert not rt.is_patched(model)
        assert _snapshot(model) == fwd_before
        assert {(pm.__name__, k): v for pm in rot_mods for k, v in vars(pm).items() if "rotary" in k} == globals_before
        again = model(ids).logits
    assert (got - ref).abs().max().item() <= 1e-5
    assert torch.equal(got_tokens, ref_tokens)
    assert torch.equal(again, ref_now)


@pytest.mark.parametrize("case", ["qwen2_vl", "qwen2_5_vl"])
def test_patched_vl_model_continues_generation_from_its_cache(case):
    """generate() continuing from a returned cache passes position_ids [1, B, S] (text positions + rope_deltas),
    which transformers' M-RoPE forward broadcasts over the sections: the patched model's tokens and scores equal
    the unpatched model's."""
    model = build(case)
    ids = torch.randint(3, 97, (1, 7), generator=torch.Generator().manual_seed(2))
    kw = dict(do_sample=False, max_new_tokens=3, min_new_tokens=3, return_dict_in_generate=True, output_scores=True,
              pad_token_id=0)
    runs = []
    with torch.no_grad():
        for patched in (False, True):
            if patched:
                rt.patch(model)
            first = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kw)
            seq = first.sequences
            runs.append(model.generate(input_ids=seq, attention_mask=torch.ones_like(seq),
                                       past_key_values=first.past_key_values, **kw))
        rt.unpatch(model)
    assert torch.equal(runs[1].sequences, runs[0].sequences)
    assert len(runs[1].scores) == 3
    for a, b in zip(runs[0].scores, runs[1].scores):  # -inf where min_new_tokens masks the end token
        torch.testing.assert_close(b, a, atol=1e-5, rtol=0)


def test_a_config_edited_to_another_rope_type_than_its_file_form_reads_is_refused():
    """A Phi-3 config switched to yarn after it was built (as transformers' rope-scaling tests do): the module
    computes yarn, but rotary reads the config as its file form, in which Phi-3's "yarn" means longrope. patch()
    refuses naming the module instead of rotating with other frequencies or failing on a longrope field."""
    cfg = transformers.Phi3Config(**dict(BASE, num_key_value_heads=4, max_position_embeddings=512))
    cfg.rope_parameters = dict(cfg.rope_parameters or {}, rope_type="yarn", factor=10.0, rope_theta=10000.0)
    model = transformers.Phi3ForCausalLM(cfg).eval()
    assert model.model.rotary_emb.rope_type == "yarn"
    with pytest.raises(NotImplementedError, match=r"^\[rotary\.patch\] Phi3RotaryEmbedding: its config does not read "
                                                   r"as a rotary Spec \(.*short_factor"):
        rt.patch(model)
    assert not rt.is_patched(model)
    # A config that reads as a valid Spec of another type than the module computes is refused too.
    llama = build("llama-default")
    llama.model.rotary_emb.rope_type = "linear"
    with pytest.raises(NotImplementedError, match=r"computes rope_type 'linear', but its config reads as 'default'"):
        rt.patch(llama)
    assert not rt.is_patched(llama)


def test_patch_detects_a_wrong_spec():
    """The comparison can fail: a different base changes the logits."""
    model = build("llama-default")
    ids = torch.randint(3, 97, (1, 20), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = model(ids).logits
        rt.patch(model, spec=rotary.Spec(16, base=500.0))
        try:
            got = model(ids).logits
        finally:
            rt.unpatch(model)
    assert (got - ref).abs().max() > 1e-3


def test_unsupported_models_are_refused_by_name():
    cfg = transformers.OlmoConfig(**dict(BASE, num_key_value_heads=4))
    model = transformers.OlmoForCausalLM(cfg).eval()
    with pytest.raises(NotImplementedError, match=r"^\[rotary\.patch\] OlmoForCausalLM: its RoPE module "
                                                   r"OlmoRotaryEmbedding is not supported"):
        rt.patch(model)
    assert not rt.is_patched(model)

    class NoRope(torch.nn.Module):
        def forward(self, x):
            return x

    with pytest.raises(NotImplementedError, match=r"^\[rotary\.patch\] NoRope: no RoPE module"):
        rt.patch(NoRope())
    assert "Gemma 3" in " ".join(rt.supported_models())


def test_patch_refuses_when_a_layer_does_not_rotate_through_rotary(monkeypatch):
    """The check forward counts rotary's rotations: a family whose rotation function is not replaced (the old
    DeepSeek-V3 case) raises, and the model is left exactly as it was."""
    families = tuple(f if f.embedding != "DeepseekV3RotaryEmbedding" else
                     _torch_patch.Family(f.name, f.embedding, f.forward, f.rotations[:1]) for f in _torch_patch.FAMILIES)
    monkeypatch.setattr(_torch_patch, "_BY_EMBEDDING", {f.embedding: f for f in families})
    model = build("deepseek_v3-interleave")
    before = _snapshot(model)
    mod = sys.modules[type(model.model.rotary_emb).__module__]
    original = mod.apply_rotary_pos_emb
    with pytest.raises(NotImplementedError, match=r"^\[rotary\.patch\] DeepseekV3ForCausalLM: after patching, 0 of 2 "
                                                   r"decoder layers rotated q/k through rotary"):
        rt.patch(model)
    assert not rt.is_patched(model)
    assert _snapshot(model) == before
    assert mod.apply_rotary_pos_emb is original


def test_patch_refcount_across_models():
    a, b = build("llama-default"), build("llama-default", seed=1)
    mod = sys.modules[type(a.model.rotary_emb).__module__]
    original = mod.apply_rotary_pos_emb
    rt.patch(a)
    rt.patch(b)
    rt.unpatch(a)
    assert mod.apply_rotary_pos_emb is not original  # b still patched
    rt.unpatch(b)
    assert mod.apply_rotary_pos_emb is original
    # A deep copy of a patched model is patched too (its forwards are copies of the patched ones): it holds its own
    # reference, so unpatching the copy first leaves the original patched.
    import copy

    rt.patch(a)
    c = copy.deepcopy(a)
    assert rt.is_patched(c)
    rt.unpatch(c)
    assert mod.apply_rotary_pos_emb is not original and rt.is_patched(a)
    rt.unpatch(a)
    assert mod.apply_rotary_pos_emb is original


def test_mistral3_is_patched_through_its_mistral_text_model_and_leaves_pixtral_s_vision_rope_alone():
    """Mistral3 (Pixtral vision tower + Mistral text model) was refused: PixtralVisionRotaryEmbedding was not among
    the vision RoPE modules patch() leaves alone."""
    T = pytest.importorskip("transformers")
    if not hasattr(T, "Mistral3ForConditionalGeneration"):  # pragma: no cover - depends on transformers
        pytest.skip("transformers has no Mistral3")
    text = dict(model_type="mistral", vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6}, sliding_window=None)
    vision = dict(model_type="pixtral", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, image_size=28, patch_size=14, head_dim=16)
    torch.manual_seed(0)
    model = T.Mistral3ForConditionalGeneration(T.Mistral3Config(text_config=text, vision_config=vision,
                                                                image_token_index=96, spatial_merge_size=1)).eval()
    ids = torch.randint(3, 90, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(input_ids=ids).logits
        rt.patch(model)
        try:
            got = model(input_ids=ids).logits
            vision_ropes = [m for m in model.modules() if type(m).__name__ == "PixtralVisionRotaryEmbedding"]
            assert vision_ropes and all("_rotary_spec" not in m.__dict__ for m in vision_ropes)
        finally:
            rt.unpatch(model)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_patch_checks_count_only_their_own_model_while_another_thread_runs_the_same_family():
    """patch()'s check forward counted every call of the modeling module's apply_rotary_pos_emb, so a server thread
    running another Llama meanwhile made patching a second one fail ('7 of 2 decoder layers rotated q/k'), or could
    make up for a layer that does not rotate through rotary. Here the other model runs inside the check, on another
    thread, deterministically (a hook on the checked model's first layer)."""
    import threading

    server, model = build("llama-default", seed=1), build("llama-default")
    rt.patch(server)
    ids = torch.zeros((1, 4), dtype=torch.long)
    runs = []

    def serve(*_):
        def run():
            with torch.no_grad():
                server(input_ids=ids)
            runs.append(1)

        t = threading.Thread(target=run)
        t.start()
        t.join()

    hook = model.model.layers[0].register_forward_pre_hook(serve)
    try:
        rt.patch(model)
    finally:
        hook.remove()
    assert runs and rt.is_patched(model)
    with torch.no_grad():
        want = model(input_ids=ids).logits
        rt.unpatch(model)
        torch.testing.assert_close(model(input_ids=ids).logits, want, rtol=0, atol=1e-5)
    rt.unpatch(server)


def test_a_patched_model_saved_whole_loads_patched_with_its_own_reference():
    # torch.save of a patched model failed (the patched RoPE forwards were closures). The loaded model is patched
    # (same logits), holds its own reference to the replaced modeling functions, and unpatches like any other.
    import io

    a = build("llama-default")
    mod = sys.modules[type(a.model.rotary_emb).__module__]
    original = mod.apply_rotary_pos_emb
    ids = torch.randint(3, 97, (1, 9), generator=torch.Generator().manual_seed(4))
    rt.patch(a)
    buf = io.BytesIO()
    torch.save(a, buf)
    buf.seek(0)
    b = torch.load(buf, weights_only=False)
    assert rt.is_patched(b)
    with torch.no_grad():
        torch.testing.assert_close(b(ids).logits, a(ids).logits, rtol=0, atol=0)
    rt.unpatch(a)
    assert mod.apply_rotary_pos_emb is not original  # b still patched
    rt.unpatch(b)
    assert mod.apply_rotary_pos_emb is original and not rt.is_patched(b)
    assert "forward" not in b.model.rotary_emb.__dict__


def test_patched_model_compiles_without_graph_breaks():
    """forward and generate()'s prefill step (with a cache) trace as one graph; the compiled forward (inductor)
    gives the eager logits and drives generate()."""
    model = build("llama-default")
    ids = torch.randint(3, 97, (2, 12), generator=torch.Generator().manual_seed(2))
    cache_cls = transformers.DynamicCache
    with torch.no_grad():
        rt.patch(model)
        try:
            for kw in ({}, {"past_key_values": cache_cls(config=model.config), "use_cache": True}):
                torch._dynamo.reset()
                ex = torch._dynamo.explain(model)(input_ids=ids, **kw)
                assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
            torch._dynamo.reset()
            eager = model(ids).logits
            eager_tokens = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
            compiled = torch.compile(model, fullgraph=True, dynamic=False)  # inductor: one forward
            torch.testing.assert_close(compiled(ids).logits, eager, rtol=0, atol=1e-5)
            torch._dynamo.reset()
            # generate() through a compiled forward (prefill and decode shapes; aot_eager keeps CI time down)
            model.forward = torch.compile(model.forward, fullgraph=True, backend="aot_eager")
            tokens = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
            assert torch.equal(tokens, eager_tokens)
        finally:
            model.__dict__.pop("forward", None)
            rt.unpatch(model)
            torch._dynamo.reset()


@pytest.mark.parametrize("rope", ["default", "linear", "longrope", "dynamic"])
def test_patched_model_on_the_device_path_generates_past_max_position_embeddings(rope):
    """transformers' RoPE computes any position; the device path's table stopped at max_position_embeddings, so a
    patched model failed "a position is outside the device table" once generate() passed it (dynamic NTK too)."""
    from rotary import _torch_composite

    kw = dict(BASE, head_dim=16, max_position_embeddings=16, rope_parameters=dict(LLAMA_ROPE[rope]))
    cfg = transformers.LlamaConfig(**kw)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(3, 97, (1, 20), generator=torch.Generator().manual_seed(1))
    gen = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = model.generate(ids, **gen)
        rt.patch(model)
        try:
            with _torch_composite.forced():
                got = model.generate(ids, **gen)
        finally:
            rt.unpatch(model)
    assert torch.equal(got, want)


def test_a_spec_that_is_no_spec_is_refused_in_patchs_words():
    """rt.patch(spec="...") said "[rotary.spec_key] ..." (the helper it called), and "[rotary] ..." before that."""
    model = build("llama-default")
    with pytest.raises(TypeError, match=r"^\[rotary\.patch\] spec must be a rotary\.Spec, got str$"):
        rt.patch(model, spec="llama", verify=False)
    assert not rt.is_patched(model)
