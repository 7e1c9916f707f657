"""Package-level behaviour: Spec API, configs and presets, importing without torch, stub accuracy."""
from __future__ import annotations

import ast
import json
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import rotary

STUB = pathlib.Path(rotary.__file__).with_name("_rotary.pyi")


def test_spec_properties_and_roundtrip():
    s = rotary.Spec(128, 64, 5e5, pairing="interleaved", rope_type="yarn", factor=4.0,
                    original_max_position_embeddings=4096, max_position_embeddings=16384, name="t")
    assert (s.head_dim, s.rotary_dim, s.base, s.pairing, s.rope_type) == (128, 64, 5e5, "interleaved", "yarn")
    assert s.factor == 4.0 and s.original_max_position_embeddings == 4096 and s.name == "t"
    assert s.inv_freq().shape == (32,) and s.inv_freq().dtype == np.float64
    assert s.attention_factor == pytest.approx(0.1 * np.log(4.0) + 1.0)
    assert rotary.Spec(**s.to_dict()) == s
    assert pickle.loads(pickle.dumps(s)) == s
    assert hash(rotary.Spec(**s.to_dict())) == hash(s)
    assert s.replace(base=1e4) != s and s.replace(base=1e4).base == 1e4
    with pytest.raises(AttributeError):
        s.base = 3.0  # immutable: the cached cos/sin table can never go stale
    assert "yarn" in repr(s)
    assert rotary.Spec(64).rotary_dim == 64  # 0 resolves to head_dim


def test_default_inv_freq_formula():
    np.testing.assert_allclose(rotary.Spec(64, base=10000.0).inv_freq(),
                               1.0 / 10000.0 ** (np.arange(0, 64, 2) / 64), rtol=1e-15)
    np.testing.assert_allclose(rotary.default_inv_freq(500000.0, 32), 1.0 / 500000.0 ** (np.arange(0, 32, 2) / 32),
                               rtol=1e-15)


def test_from_hf_config_dict_path_and_json(tmp_path):
    cfg = {"hidden_size": 2048, "num_attention_heads": 16, "max_position_embeddings": 8192,
           "rope_theta": 10000.0, "rope_scaling": {"type": "linear", "factor": 2.0}}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    a = rotary.Spec.from_hf_config(cfg)
    b = rotary.Spec.from_hf_config(p)
    c = rotary.Spec.from_hf_config(str(p))
    d = rotary.Spec.from_hf_config(json.dumps(cfg))
    for s in (a, b, c, d):
        assert (s.head_dim, s.rope_type, s.factor) == (128, "linear", 2.0)
        np.testing.assert_allclose(s.inv_freq(), 1.0 / 10000.0 ** (np.arange(0, 128, 2) / 128) / 2.0, rtol=1e-15)
    with pytest.raises(OSError):
        rotary.Spec.from_hf_config(tmp_path / "missing.json")
    bad = dict(cfg, rope_scaling={"type": "linear", "factor": "x"})
    with pytest.raises(ValueError, match="factor"):
        rotary.Spec.from_hf_config(bad)
    with pytest.raises(TypeError):
        rotary.Spec.from_hf_config(42)


def test_presets():
    names = rotary.presets()
    assert len(names) >= 3 and len(set(names)) == len(names)
    for n in names:
        s = rotary.Spec.preset(n)
        assert s.head_dim > 0 and s.inv_freq().shape == (s.rotary_dim // 2,)
        assert rotary.preset_description(n)
        # a preset equals the spec parsed from its own embedded config.json
        assert rotary.Spec.from_hf_config(rotary.preset_config_json(n)).inv_freq().tolist() == s.inv_freq().tolist()
    with pytest.raises(ValueError, match=names[0]):
        rotary.Spec.preset("definitely-not-a-model")


def test_import_and_apply_without_torch():
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch blocked for this test")
        sys.meta_path.insert(0, Block())
        import numpy as np, rotary
        y = rotary.apply(np.ones((1, 3, 1, 8), np.float32), 0, rotary.Spec(8))
        assert y.shape == (1, 3, 1, 8)
        assert "torch" not in sys.modules
        try:
            import rotary.torch
        except ImportError:
            print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def _signatures(tree: ast.AST) -> dict:
    sigs = {}

    def visit(node, prefix=""):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                sigs[prefix + child.name] = "class"
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.FunctionDef):
                a = child.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
                # A list per name: overloads (Spec.__init__'s two) are compared one by one, none hiding another.
                sigs.setdefault(prefix + child.name, []).append(
                    tuple(names) + (("*",) if a.vararg else ()) + (("**",) if a.kwarg else ()))
    visit(tree)
    return sigs


def test_stub_matches_the_extension(tmp_path):
    """python/rotary/_rotary.pyi lists exactly the extension's names and parameters (regenerated via stubgen)."""
    stubgen = pytest.importorskip("nanobind.stubgen")
    out = tmp_path / "_rotary.pyi"
    r = subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "rotary._rotary", "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    fresh = _signatures(ast.parse(out.read_text()))
    shipped = _signatures(ast.parse(STUB.read_text()))
    assert fresh == shipped, "regenerate with: python -m nanobind.stubgen -m rotary._rotary -o python/rotary/_rotary.pyi"
    assert STUB.with_name("py.typed").exists()


def test_public_api_is_typed_and_documented():
    for name in rotary.__all__:
        obj = getattr(rotary, name)
        assert obj.__doc__, name
