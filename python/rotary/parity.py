"""rotary.check and rotary.export_tables: audit another engine's RoPE data against a config; exact tables in its layout.

    import rotary
    r = rotary.check("qwen2.5-7b-yarn", layout="vllm", cos_sin="cos_sin_cache.pt")
    print(r.text)                # the same report as `rotary check`
    r["verdict"], r["diagnoses"] # the same fields as `rotary check --json`
    t = rotary.export_tables(rotary.Spec.preset("llama-3.1-8b"), layout="hf", max_pos=8192)   # {"cos": ..., "sin": ...}

Data may be numpy arrays, torch tensors, or paths to .npy, .safetensors or .pt files (.pt is read with
torch.load(weights_only=True); a state_dict is searched by tensor name). Semantics, layouts and the diagnosis
codes: docs/parity.md.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Union

import numpy as np

from . import _rotary
from ._rotary import Spec

__all__ = ["CheckResult", "ExportedTables", "check", "export_tables"]

_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int32": "i32", "int64": "i64"}
_NP = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i32": np.int32, "i64": np.int64}


class CheckResult(dict):
    """The JSON fields of `rotary check --json` (verdict, diagnoses, bands, precision, ...); `.text` is the report."""

    text: str = ""

    @property
    def agree(self) -> bool:
        return self["verdict"] == "agree"


class ExportedTables(dict):
    """{tensor name: array} in the layout's names; `.metadata` holds the layout's string metadata (ggml parameters)."""

    metadata: Dict[str, str]


def _spec(spec: Any) -> Spec:
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, str) and not os.path.exists(spec) and not spec.lstrip().startswith("{") and spec in _rotary.presets():
        return Spec.preset(spec)
    return Spec.from_hf_config(spec)


def _encode(name: str, a: Any) -> tuple:
    """(name, dtype, shape, bytes) of a numpy array or torch tensor."""
    if isinstance(a, (list, tuple)):
        a = np.asarray(a)
    if not isinstance(a, np.ndarray):
        import torch  # only reached for tensors, so torch is already imported
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"[rotary_check] {name} must be an array, a tensor or a file path, got {type(a).__name__}")
        t = a.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            return (name, "bf16", list(t.shape), t.view(torch.int16).numpy().tobytes())
        a = t.numpy()
    if a.dtype.kind == "V" and a.dtype.type.__name__ == "bfloat16":
        return (name, "bf16", list(a.shape), np.ascontiguousarray(a).view(np.uint16).tobytes())
    if a.dtype == np.uint16:  # raw bfloat16 bit patterns, as rotary writes bf16 to .npy
        return (name, "bf16", list(a.shape), np.ascontiguousarray(a).tobytes())
    code = _DTYPES.get(a.dtype.name)
    if code is None:
        raise TypeError(f"[rotary_check] {name} has unsupported dtype {a.dtype} (expected float32, float16, bfloat16, "
                        "float64, int32 or int64)")
    return (name, code, list(a.shape), np.ascontiguousarray(a).tobytes())


def _load_pt(path: str, name: str) -> list:
    import torch
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for a bad file
        raise OSError(f"[rotary_check] {path}: cannot be read by torch.load(weights_only=True): {e}") from e
    if isinstance(obj, torch.Tensor):
        return [_encode(name, obj)]
    if isinstance(obj, dict):
        out = [_encode(str(k), v) for k, v in obj.items() if isinstance(v, torch.Tensor)]
        if out:
            return out
    raise ValueError(f"[rotary_check] {path}: expected a tensor or a dict of tensors, got {type(obj).__name__}")


def _tensors(name: str, value: Any, meta: dict) -> list:
    """The tensors of one argument: a path (.npy, .safetensors, .pt), an array, or a dict (tensors and ggml params)."""
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if path.endswith(".pt") or path.endswith(".pth"):
            return _load_pt(path, name)
        tensors, m = _rotary._load_tensor_file(path, name)
        meta.update(m)
        return list(tensors)
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            if isinstance(v, (str, int, float)) and not isinstance(v, bool):
                meta[str(k)] = repr(float(v)) if isinstance(v, float) else str(v)
            else:
                out.append(_encode(str(k), v))
        return out
    return [_encode(name, value)]


def _one(role: str, value: Any, meta: dict, names: tuple) -> tuple:
    """The single tensor of `value` for `role` (its only tensor or one named like `names`), renamed to `role`."""
    ts = _tensors(role, value, meta)
    if len(ts) == 1:
        return (role,) + tuple(ts[0][1:])
    for n in names:
        for t in ts:
            if t[0] == n or t[0].endswith("." + n):
                return (role,) + tuple(t[1:])
    raise ValueError(f"[rotary_check] {role}: {len(ts)} tensors and none named {names[0]}")


def check(spec: Any, *, layout: str, inv_freq: Any = None, cos_sin: Any = None, cos: Any = None, sin: Any = None,
          rotated: Any = None, input: Any = None, positions: Any = None, max_pos: Optional[int] = None) -> CheckResult:
    """Audits an engine's RoPE data against `spec` (a rotary.Spec, a preset name, a config.json path, dict or
    transformers config), exactly as `rotary check` does. Give one of: inv_freq; cos_sin (the layout's one-file
    table: vllm/flashinfer cos_sin_cache, te freqs, or a file holding cos and sin); cos and sin; rotated, input
    and positions (q or k as the engine rotated it). For ggml, inv_freq is a .safetensors file with the
    ggml_rope_ext parameters as metadata, or a dict {"mode": "neox", "n_dims": 128, "freq_base": ..., "freq_factors": array}.
    Returns a CheckResult (a dict of the --json fields, with .text and .agree). Input errors raise ValueError/TypeError/OSError.
    """
    s = _spec(spec)
    meta: dict = {}
    given = [n for n, v in (("inv_freq", inv_freq), ("cos_sin", cos_sin), ("cos/sin", cos if cos is not None else sin),
                            ("rotated", rotated if rotated is not None else input)) if v is not None]
    if len(given) != 1:
        raise ValueError("[rotary_check] give exactly one of inv_freq, cos_sin, cos+sin, rotated+input+positions; got "
                         f"{given or 'none'}")
    if inv_freq is not None:
        kind, ts = "inv_freq", _tensors("inv_freq", inv_freq, meta)
    elif cos_sin is not None:
        kind, ts = "cos_sin", _tensors("table", cos_sin, meta)
    elif cos is not None or sin is not None:
        if cos is None or sin is None:
            raise ValueError("[rotary_check] cos and sin go together")
        kind, ts = "cos_sin", [_one("cos", cos, meta, ("cos", "cos_cache")), _one("sin", sin, meta, ("sin", "sin_cache"))]
    else:
        if rotated is None or input is None or positions is None:
            raise ValueError("[rotary_check] rotated, input and positions go together")
        kind = "rotated"
        ts = [_one("rotated", rotated, meta, ("rotated",)), _one("input", input, meta, ("input",)),
              _one("positions", positions, meta, ("positions", "position_ids"))]
    js, text = _rotary._check(s, kind, layout, ts, {k: str(v) for k, v in meta.items()},
                              None if max_pos is None else int(max_pos))
    r = CheckResult(json.loads(js))
    r.text = text
    return r


def export_tables(spec: Any, layout: str = "hf", *, what: str = "cos_sin", dtype: Union[str, Any] = "float32",
                  max_pos: Optional[int] = None, framework: str = "numpy") -> ExportedTables:
    """rotary's exact tables in an engine's layout, as `rotary export` writes them: {name: array}.

    layout: hf (cos, sin [N, R]), vllm / flashinfer (cos_sin_cache [N, R]), te (freqs [N, 1, 1, R], angles),
    onnx (cos_cache, sin_cache [N, R/2]), raw (cos, sin [N, R/2]), ggml (freq_factors + .metadata parameters).
    what: "cos_sin" or "inv_freq". dtype: float32, float16 or bfloat16 (torch or numpy dtypes, or names).
    max_pos: rows (default max_position_embeddings, 4096 if unknown). framework: "numpy" or "torch".
    bfloat16 numpy arrays are ml_dtypes.bfloat16.
    """
    s = _spec(spec)
    aliases = {"float32": "f32", "f32": "f32", "float16": "f16", "f16": "f16", "bfloat16": "bf16", "bf16": "bf16",
               "float64": "f64", "f64": "f64"}
    name = str(dtype).replace("torch.", "")
    if name not in aliases:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            pass
    code = aliases.get(name)
    if code is None:
        raise TypeError(f"[rotary_export] dtype must be float32, float16 or bfloat16, got {dtype}")
    if what not in ("cos_sin", "inv_freq"):
        raise ValueError(f'[rotary_export] what must be "cos_sin" or "inv_freq", got "{what}"')
    if layout == "ggml":
        what = "inv_freq"
    tensors, meta = _rotary._export(s, layout, what, code, 0 if max_pos is None else int(max_pos))
    out = ExportedTables()
    out.metadata = dict(meta)
    for name, dt, shape, data in tensors:
        if dt == "bf16":
            import ml_dtypes
            arr = np.frombuffer(data, dtype=np.uint16).view(ml_dtypes.bfloat16).reshape(shape).copy()
        else:
            arr = np.frombuffer(data, dtype=_NP[dt]).reshape(shape).copy()
        if framework == "torch":
            import torch
            arr = (torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16) if dt == "bf16" else torch.from_numpy(arr))
        elif framework != "numpy":
            raise ValueError(f'[rotary_export] framework must be "numpy" or "torch", got "{framework}"')
        out[name] = arr
    return out
