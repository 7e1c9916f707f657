"""rotary.torch.patch / unpatch: transformers models computing RoPE with rotary, per supported model family.

A family is recognised by its RoPE module's class; patch() replaces that module's forward (cos/sin from
torch.ops.rotary.cos_sin: rotary's exact table, attention factor folded in, returned in HF's shape and dtype) and
the rotation functions of the family's modeling module (torch.ops.rotary.apply_qk_cos_sin). It then runs a check
forward (2 tokens, no cache) counting the rotations: every decoder layer must have rotated through rotary, else the
patch is undone and NotImplementedError("[rotary.patch] <model class>: ...") raised. A model whose RoPE module is
of another class is refused by name. unpatch() restores every replaced attribute exactly.
"""
from __future__ import annotations

import functools
import importlib
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

import rotary as _rotary
from rotary._torch_ops import key_of

ops = torch.ops.rotary


# ----------------------------------------------------------------------------------------------- patched forwards

# Module-level functions bound to their Spec key with functools.partial (not closures), so that a patched model
# pickles: torch.save(model) / torch.load give a model patched the same way (its _GlobalsHold re-swaps on load).

def _dup_forward(key: str, x, position_ids, *args, **kwargs):
    """HF's usual RoPE module: cos/sin [B, S, R] with the angle values duplicated over both halves."""
    c, s = ops.cos_sin(position_ids, key)
    return torch.cat((c, c), dim=-1).to(x.dtype), torch.cat((s, s), dim=-1).to(x.dtype)


def _halves_forward(key: str, x, position_ids, *args, **kwargs):
    """gpt-oss: cos/sin [B, S, R/2] (no duplication)."""
    c, s = ops.cos_sin(position_ids, key)
    return c.to(x.dtype), s.to(x.dtype)


def _layer_type_forward(keys: Dict[str, str], x, position_ids, layer_type=None, *args, **kwargs):
    """Gemma 3: one Spec per layer type, forward(x, position_ids, layer_type)."""
    if layer_type not in keys:
        raise ValueError(f"[rotary.patch] layer_type must be one of {sorted(keys)}, got {layer_type!r}")
    c, s = ops.cos_sin(position_ids, keys[layer_type])
    return torch.cat((c, c), dim=-1).to(x.dtype), torch.cat((s, s), dim=-1).to(x.dtype)


def _mrope_forward(key: str, x, position_ids, *args, **kwargs):
    """Qwen2-VL / Qwen2.5-VL text model: position_ids [3, B, S] (or [B, S], or [1, B, S]: generate() continuing from a
    cache passes text positions + rope_deltas so, which HF's forward broadcasts over the sections), sections merged as
    HF does."""
    if position_ids.dim() == 2:
        position_ids = position_ids.expand(3, -1, -1)
    elif position_ids.dim() == 3 and position_ids.shape[0] == 1:
        position_ids = position_ids.expand(3, -1, -1)
    c, s = ops.cos_sin(position_ids, key)
    return torch.cat((c, c), dim=-1).to(x.dtype), torch.cat((s, s), dim=-1).to(x.dtype)


# ----------------------------------------------------------------------------------------------- rotations

def _apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    from rotary.torch import apply_rotary_pos_emb

    return apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)


def _apply_rotary_pos_emb_halves(q, k, cos, sin, unsqueeze_dim=1):
    """gpt-oss's apply_rotary_pos_emb: cos/sin [B, S, R/2] pairing (i, i + R/2) of q/k."""
    from rotary.torch import _hf_formula, _rotate_qk_by_halves

    out = _rotate_qk_by_halves(q, k, cos, sin, unsqueeze_dim)
    if out is not None:
        return out
    return _hf_formula(q, k, torch.cat((cos, cos), -1), torch.cat((sin, sin), -1), unsqueeze_dim)


def _deinterleave(x: torch.Tensor) -> torch.Tensor:
    """Channels (x0, x1, x2, x3, ...) -> (x0, x2, ..., x1, x3, ...)."""
    return x.unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2)


def _apply_rotary_pos_emb_interleave(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """DeepSeek-V3's apply_rotary_pos_emb_interleave: interleaved pairs rotated and written de-interleaved
    (the first half holds the pairs' first elements), i.e. de-interleave then rotate_half."""
    from rotary.torch import apply_rotary_pos_emb

    return apply_rotary_pos_emb(_deinterleave(q), _deinterleave(k), cos, sin, unsqueeze_dim)


# ----------------------------------------------------------------------------------------------- families


@dataclass(frozen=True)
class Family:
    name: str                                # how docs and messages name it
    embedding: str                           # the text RoPE module's class
    forward: str                             # "dup", "halves", "layer_type" or "mrope"
    rotations: Tuple[Tuple[str, Callable], ...]  # modeling-module globals replaced


_STD = (("apply_rotary_pos_emb", _apply_rotary_pos_emb),)
FAMILIES: Tuple[Family, ...] = (
    Family("Llama (every rope_type)", "LlamaRotaryEmbedding", "dup", _STD),
    Family("Mistral", "MistralRotaryEmbedding", "dup", _STD),
    Family("Qwen2", "Qwen2RotaryEmbedding", "dup", _STD),
    Family("Qwen3 (qk-norm)", "Qwen3RotaryEmbedding", "dup", _STD),
    Family("Phi-3 (longrope, partial rotary)", "Phi3RotaryEmbedding", "dup", _STD),
    Family("GPT-NeoX (partial rotary)", "GPTNeoXRotaryEmbedding", "dup", _STD),
    Family("gpt-oss", "GptOssRotaryEmbedding", "halves", (("apply_rotary_pos_emb", _apply_rotary_pos_emb_halves),)),
    Family("Gemma 3 (local/global RoPE per layer type)", "Gemma3RotaryEmbedding", "layer_type", _STD),
    Family("Qwen2-VL (M-RoPE text model; vision tower left alone)", "Qwen2VLRotaryEmbedding", "mrope", _STD),
    Family("Qwen2.5-VL (M-RoPE text model; vision tower left alone)", "Qwen2_5_VLRotaryEmbedding", "mrope", _STD),
    Family("DeepSeek-V3 (interleave then rotate_half)", "DeepseekV3RotaryEmbedding", "dup",
           _STD + (("apply_rotary_pos_emb_interleave", _apply_rotary_pos_emb_interleave),)),
)
_BY_EMBEDDING = {f.embedding: f for f in FAMILIES}
# RoPE modules of vision towers, left alone (their attention rotates with their own functions).
_VISION_EMBEDDINGS = {"VisionRotaryEmbedding", "Qwen2VLVisionRotaryEmbedding", "Qwen2_5_VLVisionRotaryEmbedding",
                      "PixtralVisionRotaryEmbedding"}


def supported_models() -> List[str]:
    """The model families patch() supports (every other model is refused by name)."""
    return [f.name for f in FAMILIES]


def _refuse(model: torch.nn.Module, why: str) -> NotImplementedError:
    return NotImplementedError(f"[rotary.patch] {type(model).__name__}: {why}")


def _layer_type_specs(config: Any) -> Dict[str, _rotary.Spec]:
    """Gemma 3's Spec per layer type, from transformers' per-layer-type rope_parameters."""
    lts = getattr(_rotary, "LayerTypeSpecs", None)
    if lts is not None:
        specs = lts.from_hf_config(config)
        return {t: s for t, s in specs.specs.items() if s is not None}
    base = config.to_dict()
    out = {}
    for layer_type, params in (config.rope_parameters or {}).items():
        if params is None:
            continue
        d = dict(base)
        d["rope_parameters"] = dict(params)
        d.pop("rope_scaling", None)
        d.pop("layer_types", None)
        out[layer_type] = _rotary.Spec.from_hf_config(d)
    return out


# ----------------------------------------------------------------------------------------------- patch / unpatch

_lock = threading.Lock()
_verify_lock = threading.Lock()  # patch()'s check forwards, one at a time (_verify)
_globals: Dict[Tuple[str, str], list] = {}  # (module, name) -> [original, patched, refcount]


def _replacement(original: Any, fn: Callable) -> Callable:
    """What replaces the modeling-module global `original` by rotary's `fn`: `fn` itself, unless the global is
    an nn.Module. With the `kernels` package installed, transformers makes these globals nn.Module wrappers, and
    each attention layer holds a private copy of one that pickles as "a new instance of the type of the module's
    global" (kernels' _rebuild_kernel_func calls that type with no arguments). A plain function in the global
    made a saved model fail to load while any model was patched. So the replacement is then an instance of a
    subclass of the wrapper's class whose forward is `fn`, and whose class, called with no arguments as the
    rebuild does, makes a plain wrapper of the original class: a loaded model holds what it would hold unpatched."""
    if not isinstance(original, torch.nn.Module):
        return fn
    base = type(original)

    def __new__(cls, *args, **kwargs):  # noqa: N807 — the rebuild's call gives the original class's wrapper
        return base(*args, **kwargs)

    def forward(self, *args, **kwargs):
        return fn(*args, **kwargs)

    sub = type(base.__name__, (base,), {"__new__": __new__, "forward": forward, "_rotary_fn": staticmethod(fn),
                                         "__module__": base.__module__, "__qualname__": base.__qualname__})
    inst = object.__new__(sub)
    torch.nn.Module.__init__(inst)
    return inst


def _function_of(global_value: Any) -> Any:
    """The function a modeling-module global runs when it is rotary's replacement (_replacement): the global
    itself, or the function inside the wrapper that replaces an nn.Module global."""
    return getattr(type(global_value), "_rotary_fn", global_value)


def _swap_globals(names: List[Tuple[str, str, Callable]]) -> None:
    with _lock:
        for mod_name, name, fn in names:
            entry = _globals.get((mod_name, name))
            if entry is None:
                pm = sys.modules[mod_name]
                original = getattr(pm, name)
                replacement = _replacement(original, fn)
                _globals[(mod_name, name)] = [original, replacement, 1]
                setattr(pm, name, replacement)
            else:
                entry[2] += 1


def _release_globals(names: List[Tuple[str, str]]) -> None:
    with _lock:
        for key in names:
            entry = _globals.get(key)
            if entry is None:
                continue
            entry[2] -= 1
            if entry[2] == 0:
                setattr(sys.modules[key[0]], key[1], entry[0])
                del _globals[key]


_SPEC_TYPES = {"default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional"}


def spec_of_module(mod: torch.nn.Module, config: Any) -> _rotary.Spec:
    """The Spec of a transformers RoPE module: read from `config`, with the rotated width transformers itself uses.

    Some families' default frequency functions (Llama, Mistral, Qwen2/3) ignore a partial_rotary_factor in the
    config that Spec.from_hf_config (like the shared scaling functions) honours; the module's own inv_freq buffer
    says how many pairs it rotates. A width that no rotary_dim can give raises NotImplementedError, as does a config
    that does not read as the module's rope_type (e.g. a Phi-3 config switched to yarn after it was built: rotary
    reads the file form, in which transformers renames Phi-3's "yarn" to longrope)."""
    try:
        spec = _rotary.Spec.from_hf_config(config)
    except ValueError as e:
        raise NotImplementedError(f"[rotary.patch] {type(mod).__name__}: its config does not read as a rotary Spec "
                                  f"({e}); pass spec= explicitly") from e
    runs = getattr(mod, "rope_type", None)  # the frequency function transformers' module computes with
    if isinstance(runs, str) and runs in _SPEC_TYPES and runs != spec.rope_type:
        raise NotImplementedError(f"[rotary.patch] {type(mod).__name__} computes rope_type {runs!r}, but its config "
                                  f"reads as {spec.rope_type!r}; pass spec= explicitly")
    inv = getattr(mod, "original_inv_freq", None)
    if not isinstance(inv, torch.Tensor):
        inv = getattr(mod, "inv_freq", None)
    if not isinstance(inv, torch.Tensor) or inv.dim() != 1:
        return spec
    width = 2 * int(inv.numel())
    if width == spec.rotary_dim:
        return spec
    if width > spec.head_dim:
        raise NotImplementedError(f"[rotary.patch] {type(mod).__name__} rotates {width} channels of a head of "
                                  f"{spec.head_dim} (its inv_freq has {width // 2} values); pass spec= explicitly")
    d = spec.to_dict()
    d.update(rotary_dim=width, partial_rotary_factor=1.0)
    return _rotary.Spec(**d)


class _GlobalsHold:
    """A patched model's place in the replaced functions' reference counts. A deep copy of the model copies its
    patched forwards, so the copy takes a place of its own (unpatching either leaves the other patched); so does a
    model loaded from a pickle (torch.load), which replaces the functions again in the loading process."""

    def __init__(self, swaps: List[Tuple[str, str, Callable]]) -> None:
        self.swaps = list(swaps)
        self.names = [(a, b) for a, b, _ in self.swaps]

    def __deepcopy__(self, memo: Dict[int, Any]) -> "_GlobalsHold":
        with _lock:
            for key in self.names:
                entry = _globals.get(key)
                if entry is not None:
                    entry[2] += 1
        return _GlobalsHold(self.swaps)

    def __reduce__(self):
        return (_hold_after_load, (self.swaps,))


def _hold_after_load(swaps: List[Tuple[str, str, Callable]]) -> _GlobalsHold:
    """Unpickling a patched model: its modeling modules' functions replaced (again) for it."""
    for mod_name, _, _ in swaps:
        importlib.import_module(mod_name)
    _swap_globals(swaps)
    return _GlobalsHold(swaps)


def _rope_modules(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if type(m).__name__.endswith("RotaryEmbedding")]


def patch(model: torch.nn.Module, spec: Optional[_rotary.Spec] = None, *, verify: bool = True) -> torch.nn.Module:
    """Makes a transformers model of a supported family compute RoPE with rotary; returns the model.

    The RoPE module's forward returns cos/sin from rotary's exact table (torch.ops.rotary.cos_sin, for the spec
    read from the module's config, or `spec`), and the family's rotation functions in its modeling module run
    rotary's kernel (torch.ops.rotary.apply_qk_cos_sin); both compile with torch.compile(fullgraph=True). The
    function replacement is per Python module and reference-counted across patched models; while it is in place,
    other callers of those functions get rotary.torch.apply_rotary_pos_emb, which reads the first half of cos/sin
    (the two halves are equal in every table transformers' RoPE modules return). verify=True runs a 2-token check
    forward and raises NotImplementedError (undoing the patch) unless every decoder layer rotated through rotary.
    Models of other families raise NotImplementedError naming the model class (rotary.torch.supported_models()
    lists families). Undo with unpatch(model). A model one of whose RoPE modules is already patched through another
    module (one containing it or inside it) raises RuntimeError.
    """
    if getattr(model, "_rotary_patch", None) is not None:
        return model
    ropes = _rope_modules(model)
    text = [(n, m) for n, m in ropes if type(m).__name__ not in _VISION_EMBEDDINGS]
    if not text:
        raise _refuse(model, "no RoPE module (*RotaryEmbedding) found; supported: " + "; ".join(supported_models()))
    unknown = sorted({type(m).__name__ for _, m in text if type(m).__name__ not in _BY_EMBEDDING})
    if unknown:
        raise _refuse(model, f"its RoPE module {', '.join(unknown)} is not supported by patch(); supported: "
                      + "; ".join(supported_models()))
    inner = [n or type(model).__name__ for n, m in text if "_rotary_spec" in m.__dict__]
    if inner:  # patched through a module containing it, or inside it: a second patch would take rotary's forward
        # for the original, and unpatching both in either order would leave it in place
        raise RuntimeError(f"[rotary.patch] {type(model).__name__}: its RoPE module {inner[0]} is already patched by "
                           "patch() of another module (one containing it or inside it); unpatch that one first")
    state: Dict[str, Any] = {"forwards": [], "globals": []}
    swaps: List[Tuple[str, str, Callable]] = []
    for _, mod in text:
        fam = _BY_EMBEDDING[type(mod).__name__]
        config = mod.config
        if fam.forward == "layer_type":
            specs = {t: spec for t in _layer_type_specs(config)} if spec is not None else _layer_type_specs(config)
            fwd = functools.partial(_layer_type_forward, {t: key_of(s, "rotary.patch") for t, s in specs.items()})
            mod_spec = specs
        else:
            mod_spec = spec if spec is not None else spec_of_module(mod, config)
            key = key_of(mod_spec, "rotary.patch")
            fwd = functools.partial({"dup": _dup_forward, "halves": _halves_forward, "mrope": _mrope_forward}[fam.forward], key)
        state["forwards"].append((mod, "forward" in mod.__dict__, mod.__dict__.get("forward")))
        mod.forward = fwd
        mod._rotary_spec = mod_spec
        pm = type(mod).__module__
        for name, fn in fam.rotations:
            if callable(getattr(sys.modules.get(pm), name, None)) and (pm, name) not in [(a, b) for a, b, _ in swaps]:
                swaps.append((pm, name, fn))
    _swap_globals(swaps)
    state["globals"] = [(a, b) for a, b, _ in swaps]
    state["hold"] = _GlobalsHold(swaps)
    model._rotary_patch = state
    if verify:
        try:
            _verify(model, state)
        except BaseException:
            unpatch(model)
            raise
    return model


def _expected_rotations(model: torch.nn.Module) -> int:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    n = getattr(config, "num_hidden_layers", None)
    if not n:
        raise _refuse(model, "its config has no num_hidden_layers to check the patch against")
    return int(n)


def _verify(model: torch.nn.Module, state: Dict[str, Any]) -> None:
    """A 2-token forward (no cache) counting rotary's rotations and cos/sin calls: this thread's only (models of the
    same family that other threads run meanwhile call the same module functions), one check at a time (a second
    check's wrappers would be swapped out by the first's restore)."""
    with _verify_lock:
        _verify_locked(model, state)


def _verify_locked(model: torch.nn.Module, state: Dict[str, Any]) -> None:
    counts = {"rotations": 0, "tables": 0}
    me = threading.get_ident()

    def counting(fn: Callable, what: str) -> Callable:
        def wrapper(*args, **kwargs):
            if threading.get_ident() == me:
                counts[what] += 1
            return fn(*args, **kwargs)

        return wrapper

    expected = _expected_rotations(model)
    with _lock:
        originals = {}
        for key in state["globals"]:
            pm = sys.modules[key[0]]
            originals[key] = getattr(pm, key[1])
            setattr(pm, key[1], counting(originals[key], "rotations"))
    forwards = [(mod, mod.forward) for mod, _, _ in state["forwards"]]
    for mod, fwd in forwards:
        mod.forward = counting(fwd, "tables")
    try:
        param = next(model.parameters(), None)
        device = param.device if param is not None else torch.device("cpu")
        ids = torch.zeros((1, 2), dtype=torch.long, device=device)
        try:
            with torch.no_grad():
                model(input_ids=ids, use_cache=False)
        except Exception as e:
            raise _refuse(model, f"the check forward after patching failed ({type(e).__name__}: {e})") from e
    finally:
        with _lock:
            for key, fn in originals.items():
                setattr(sys.modules[key[0]], key[1], fn)
        for mod, fwd in forwards:
            mod.forward = fwd
    if counts["tables"] == 0 or counts["rotations"] != expected:
        raise _refuse(model, f"after patching, {counts['rotations']} of {expected} decoder layers rotated q/k through "
                      f"rotary and its RoPE module ran {counts['tables']} times; the model computes RoPE in a way "
                      "patch() does not replace")


def unpatch(model: torch.nn.Module) -> torch.nn.Module:
    """Undoes patch(model) exactly (module forwards, modeling-module functions once no patched model uses them)."""
    state = getattr(model, "_rotary_patch", None)
    if state is None:
        return model
    for mod, had_own, fwd in state["forwards"]:
        if had_own:
            mod.forward = fwd
        else:
            mod.__dict__.pop("forward", None)
        mod.__dict__.pop("_rotary_spec", None)
    _release_globals(state["globals"])
    del model._rotary_patch
    return model


def is_patched(model: torch.nn.Module) -> bool:
    """True if patch(model) is in effect."""
    return getattr(model, "_rotary_patch", None) is not None
