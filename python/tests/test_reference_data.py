"""tests/data is what its producers make: Hugging Face transformers' RoPE code and ONNX's RotaryEmbedding cases, rerun here."""
from __future__ import annotations

import inspect
import json
import warnings

import numpy as np
import pytest

import rotary
from conftest import reference_data_dir

HF = reference_data_dir() / "hf"
ONNX_DIR = reference_data_dir() / "onnx"
HF_MANIFEST = json.loads((HF / "manifest.json").read_text())
ONNX_MANIFEST = json.loads((ONNX_DIR / "manifest.json").read_text())
ONNX_ABS_TOL = 1e-6  # as test_onnx.py: f32 data in [0, 1), rotary rounds once


def _hf_config(entry):
    """The transformers config object for a manifest entry (v4 or v5 style input, as the generator built it)."""
    from transformers import GPTNeoXConfig, LlamaConfig

    cls = GPTNeoXConfig if entry["model_class_for_default"] == "gpt_neox" else LlamaConfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = cls(**entry["config_input"])
    if "partial_rotary_factor" in entry["config_input"]:
        cfg.rope_parameters["partial_rotary_factor"] = entry["config_input"]["partial_rotary_factor"]
    return cfg


def _hf_inv_freq(entry):
    import transformers.modeling_rope_utils as mru
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = _hf_config(entry)
    rope_type = cfg.rope_parameters["rope_type"]
    if rope_type == "default":
        emb = GPTNeoXRotaryEmbedding if entry["model_class_for_default"] == "gpt_neox" else LlamaRotaryEmbedding
        inv, af = emb.compute_default_rope_parameters(cfg)
    else:
        inv, af = mru.ROPE_INIT_FUNCTIONS[rope_type](cfg, None, seq_len=entry["seq_len_passed"])
    return inv.numpy(), float(af)


@pytest.mark.parametrize("entry", HF_MANIFEST["inv_freq_configs"], ids=lambda e: e["name"])
def test_hf_inv_freq_regenerates(entry):
    """The installed transformers computes the vendored inv_freq bit for bit (and the same attention factor)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    inv, af = _hf_inv_freq(entry)
    want = np.load(HF / entry["inv_freq_file"])
    assert inv.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(inv, want)
    assert af == pytest.approx(entry["attention_factor"], rel=1e-15)
    np.testing.assert_array_equal(want.astype(np.float64), np.asarray(entry["inv_freq_float64"]))


def _bf16(bits):
    import torch

    return torch.from_numpy(bits.astype(np.int32) << 16).view(torch.float32).to(torch.bfloat16)


def _bits(t):
    import torch

    return (t.to(torch.float32).view(torch.int32).numpy() >> 16).astype(np.uint16)


@pytest.mark.parametrize("case", HF_MANIFEST["apply_cases"], ids=lambda c: c["name"])
def test_hf_apply_regenerates(case):
    """The installed transformers' rotary module + apply_rotary_pos_emb reproduce the vendored cos/sin and outputs
    from the vendored inputs (f32 and bf16)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.gpt_neox import modeling_gpt_neox as neox
    from transformers.models.llama import modeling_llama as llama

    entry = next(c for c in HF_MANIFEST["inv_freq_configs"] if c["name"] == case["config_name"])
    cfg = _hf_config(entry)
    is_neox = entry["model_class_for_default"] == "gpt_neox"
    module = (neox.GPTNeoXRotaryEmbedding if is_neox else llama.LlamaRotaryEmbedding)(cfg)
    apply = neox.apply_rotary_pos_emb if is_neox else llama.apply_rotary_pos_emb
    d = HF / case["dir"]
    pos = torch.from_numpy(np.load(d / "position_ids.npy"))
    q, k = (torch.from_numpy(np.load(d / f"{n}_f32.npy")) for n in ("q", "k"))
    cos, sin = module(q, pos)
    # torch's f32 cos/sin differ between builds by up to one ulp (the vendored data came from torch 1.13),
    # and that difference carries into the products: f32 cos/sin (times the attention factor) within 2 ulps, outputs within 4 ulps of
    # their largest value; bf16 within one bf16 ulp. Most values are bit-equal (checked below).
    np.testing.assert_array_max_ulp(cos.numpy(), np.load(d / "cos_f32.npy"), maxulp=2)
    np.testing.assert_array_max_ulp(sin.numpy(), np.load(d / "sin_f32.npy"), maxulp=2)
    np.testing.assert_array_equal(module.inv_freq.numpy(), np.load(d / "inv_freq_used_f32.npy"))
    q2, k2 = apply(q, k, cos, sin)
    for got, name in ((q2, "q"), (k2, "k")):
        want = np.load(d / f"{name}_embed_f32.npy")
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=4 * np.spacing(np.abs(want).max()))
        assert np.mean(got.numpy() == want) > 0.9
    qb, kb = (_bf16(np.load(d / f"{n}_bf16_bits.npy")) for n in ("q", "k"))
    cb, sb = module(qb, pos)
    qb2, kb2 = apply(qb, kb, cb, sb)
    for got, name in ((cb, "cos"), (sb, "sin"), (qb2, "q_embed"), (kb2, "k_embed")):
        want = _bf16(np.load(d / f"{name}_bf16_bits.npy")).float().numpy()
        g = got.float().numpy()
        np.testing.assert_allclose(g, want, rtol=2.0**-7, atol=2.0**-7 * np.abs(want).max() * 2.0**-7)
        assert np.mean(g == want) > 0.9, name

def _installed_onnx_cases():
    """Every RotaryEmbedding case that the installed onnx package defines (its backend test case module), captured
    with the inputs and the expected outputs of onnx's own reference implementation. Random inputs are seeded."""
    onnx = pytest.importorskip("onnx")
    from onnx.backend.test.case.node import rotaryembedding as mod

    captured = []

    def capture(node, inputs, outputs, name, **kwargs):
        captured.append((name, node, inputs, outputs))

    saved = mod.expect
    mod.expect = capture
    try:
        for fname, fn in inspect.getmembers(mod.RotaryEmbedding, predicate=inspect.isfunction):
            if fname.startswith("export"):
                np.random.seed(0)
                fn()
    finally:
        mod.expect = saved
    assert onnx.defs.get_schema("RotaryEmbedding").since_version == 23
    return captured


def test_onnx_cases_from_installed_onnx():
    """rotary.onnx_rotary_embedding reproduces every case of the installed onnx package (outputs of onnx's own
    reference implementation), and the vendored cases are among them with the same attributes and shapes."""
    pytest.importorskip("onnx")
    from onnx import helper

    cases = _installed_onnx_cases()
    assert len(cases) >= 5
    vendored = {t["dir"]: t for t in ONNX_MANIFEST["tests"] if not t["expanded"]}
    names = {name for name, *_ in cases}
    assert set(vendored) <= names, f"vendored cases that onnx no longer defines: {set(vendored) - names}"
    for name, node, inputs, outputs in cases:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        x, cos, sin = inputs[:3]
        pos = inputs[3] if len(inputs) > 3 else None
        y = rotary.onnx_rotary_embedding(x, cos, sin, pos, interleaved=int(attrs.get("interleaved", 0)),
                                         rotary_embedding_dim=int(attrs.get("rotary_embedding_dim", 0)),
                                         num_heads=int(attrs.get("num_heads", 0)))
        assert y.shape == outputs[0].shape, name
        np.testing.assert_allclose(y, outputs[0], rtol=0, atol=ONNX_ABS_TOL, err_msg=name)
        if name in vendored:
            meta = vendored[name]
            assert {k: v for k, v in attrs.items()} == (meta.get("attributes") or {}), name
            assert [list(a.shape) for a in inputs] == [i["shape"] for i in meta["inputs"]], name


@pytest.mark.parametrize("meta", ONNX_MANIFEST["tests"], ids=lambda t: t["dir"])
def test_onnx_vendored_outputs_regenerate(meta):
    """onnx's reference evaluator, run on each vendored model and inputs, gives the vendored expected output."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, numpy_helper
    from onnx.reference import ReferenceEvaluator

    d = ONNX_DIR / meta["dir"]
    model = onnx.load(str(d / "model.onnx"))
    feeds = {}
    for i, inp in enumerate(model.graph.input):
        t = TensorProto()
        t.ParseFromString((d / "test_data_set_0" / f"input_{i}.pb").read_bytes())
        feeds[inp.name] = numpy_helper.to_array(t)
    out = TensorProto()
    out.ParseFromString((d / "test_data_set_0" / "output_0.pb").read_bytes())
    (got,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(got, numpy_helper.to_array(out), rtol=0, atol=1e-6)
