"""torch.ops.rotary.prologue / prologue_q_out / rerotate_cache (torch.library ops writing the caches), patch_prologue.

The ops take the Spec as its JSON text (``json.dumps(spec.to_dict())``, see ``spec_key``) because a
torch.library schema holds tensors and plain values only. Their schemas mark every tensor they write as
``Tensor(a!)`` (prologue: q, or q_out when given, which its schema cannot tell apart, so both; prologue_q_out:
q_out, never q); the fake (meta) kernels write nothing and return nothing, so torch.compile and FakeTensor
tracing see the mutations without running rotary.

``patch_prologue(model)`` makes each attention layer of a transformers Gemma 3, Llama, Mistral, Qwen2 or Qwen3 model
(Gemma 3 and Qwen3 with their q/k RMSNorm) run q_norm/k_norm, the rotation and the StaticCache write as ONE rotary
call per layer, writing k and v straight into the StaticCache's [B, Hkv, S_max, D] tensors (cache_layout "bhsd").
"""
from __future__ import annotations

import functools
import json
from typing import Any, List, Optional

import torch

from . import _prologue
from ._rotary import Spec
from ._torch_checks import raise_named
from ._torch_ops import check_fake_devices
from .torch import _eager

__all__ = ["spec_key", "patch_prologue", "unpatch_prologue"]


def spec_key(spec: Spec) -> str:
    """The text the ops take for a Spec (its fields as JSON)."""
    return json.dumps(spec.to_dict(), sort_keys=True)


class _NotAnObject(ValueError):
    pass


@functools.lru_cache(maxsize=256)
def _spec_of(key: str) -> Spec:
    fields = json.loads(key)
    if not isinstance(fields, dict):
        raise _NotAnObject
    return Spec(**fields)


def _spec(key: str, where: str, name: str = "spec") -> Spec:
    """The Spec of an op's spec text; text that is not a JSON object is refused naming the op's argument."""
    try:
        return _spec_of(key)
    except (json.JSONDecodeError, _NotAnObject, TypeError, ValueError) as e:  # Spec's own: unknown or bad fields
        why = (f" ({e.msg} at character {e.pos})" if isinstance(e, json.JSONDecodeError) else
               " (not an object)" if isinstance(e, _NotAnObject) else f" ({e})")
        shown = repr(key) if len(key) <= 60 else f"{key[:60]!r}... ({len(key)} characters)"
        raise ValueError(f"[{where}] {name} must be a Spec's JSON text (an object, prologue_torch.spec_key(spec)), "
                         f"got {shown}{why}") from None


_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _scale_arg(where: str, cache: torch.Tensor, cache_name: str, tensor: Optional[torch.Tensor], tensor_name: str,
               value: float, value_name: str) -> Any:
    """The scale the Python API takes for `cache`: an fp8 cache's per-tensor scale, the float `value` or a
    one-element float32 `tensor` (vLLM keeps its fp8 scales as tensors; a tensor also stays a graph input under
    torch.compile, where float(tensor) cannot), else the int8 scale `tensor` (or None). A float scale given to a
    cache of the other kind, or an fp8 scale given twice, is an error, never ignored."""
    if cache.dtype in _FP8:
        if tensor is not None:
            if value != 1.0:
                raise ValueError(f"[{where}] an fp8 cache's per-tensor scale is {value_name} (a float) or a "
                                 f"one-element {tensor_name} tensor, got both ({value_name} {value} and a "
                                 f"{tensor_name} tensor of shape {list(tensor.shape)})")
            return tensor
        return value
    if value != 1.0:
        raise ValueError(f"[{where}] {value_name} is the scale of an fp8 cache, but {cache_name} dtype is {cache.dtype}; "
                         f"got {value_name} {value}")
    return tensor


def _prologue_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, spec: str,
                   k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: Optional[torch.Tensor],
                   cache_positions: Optional[torch.Tensor], cache_layout: str, layout: str,
                   q_norm_weight: Optional[torch.Tensor], k_norm_weight: Optional[torch.Tensor], norm_eps: float,
                   norm_offset: float, k_scale: Optional[torch.Tensor], v_scale: Optional[torch.Tensor],
                   fp8_k_scale: float, fp8_v_scale: float, q_out: Optional[torch.Tensor], threads: int) -> None:
    """q rotated in place (after its norm) or into q_out; k and v written into the caches; int8 scales written.

    k_scale / v_scale: the int8 caches' scale tensors (written); fp8_k_scale / fp8_v_scale: the fp8 caches'
    per-tensor scales (stored = fp8(x / scale)), or instead one-element k_scale / v_scale tensors (only read). A
    float scale for a cache of the other kind, or an fp8 scale given both ways, is an error, never ignored."""
    ks = _scale_arg("rotary_prologue", k_cache, "k_cache", k_scale, "k_scale", fp8_k_scale, "fp8_k_scale")
    vs = _scale_arg("rotary_prologue", v_cache, "v_cache", v_scale, "v_scale", fp8_v_scale, "fp8_v_scale")
    try:
        _prologue.prologue(q, k, v, positions, _spec(spec, "rotary_prologue"), k_cache=k_cache, v_cache=v_cache,
                           slot_mapping=slot_mapping, cache_positions=cache_positions, cache_layout=cache_layout,
                           q_norm_weight=q_norm_weight, k_norm_weight=k_norm_weight, norm_eps=norm_eps,
                           norm_offset=norm_offset, k_scale=ks, v_scale=vs, q_out=q_out, layout=layout, threads=threads)
    except (TypeError, ValueError) as e:  # an fp8 cache's scale is the op's fp8_k_scale / fp8_v_scale
        raise_named(e, tuple((old, new) for old, new, cache, tensor in (("k_scale", "fp8_k_scale", k_cache, k_scale),
                                                                         ("v_scale", "fp8_v_scale", v_cache, v_scale))
                             if cache is not None and cache.dtype in _FP8 and tensor is None), "rotary_prologue")
        raise


_prologue_op = torch.library.custom_op("rotary::prologue",
                                       mutates_args=("q", "q_out", "k_cache", "v_cache", "k_scale", "v_scale"),
                                       device_types="cpu")(_prologue_impl)


def _prologue_q_out_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, spec: str,
                         k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: Optional[torch.Tensor],
                         cache_positions: Optional[torch.Tensor], cache_layout: str, layout: str,
                         q_norm_weight: Optional[torch.Tensor], k_norm_weight: Optional[torch.Tensor], norm_eps: float,
                         norm_offset: float, k_scale: Optional[torch.Tensor], v_scale: Optional[torch.Tensor],
                         fp8_k_scale: float, fp8_v_scale: float, q_out: torch.Tensor, threads: int) -> None:
    """rotary::prologue with q only read: its rotation (after its norm) is written to q_out, which must not share
    memory with q (the schema marks q unwritten, so torch.compile neither copies q nor orders it after the call)."""
    _check_q_out_apart(q, q_out)
    _prologue_impl(q, k, v, positions, spec, k_cache, v_cache, slot_mapping, cache_positions, cache_layout, layout,
                   q_norm_weight, k_norm_weight, norm_eps, norm_offset, k_scale, v_scale, fp8_k_scale, fp8_v_scale,
                   q_out, threads)


def _check_q_out_apart(q: torch.Tensor, q_out: Optional[torch.Tensor]) -> None:
    """ValueError when prologue_q_out's q_out is None or q itself (at q's address): its schema says q is not written.
    Any other q_out overlapping q is refused by the prologue's own aliasing check. Two data_ptr() calls on the
    common path: comparing the byte ranges here cost ~2 µs of a ~9 µs decode call."""
    if q_out is None:
        raise ValueError("[rotary_prologue] q_out must be a tensor in prologue_q_out (it takes q's rotation), got None; "
                         "rotate q in place with prologue and q_out None")
    try:
        same = q.data_ptr() == q_out.data_ptr()
    except (AttributeError, RuntimeError):  # not tensors, or without storage: the implementation reports them
        return
    if same and q_out.numel() > 0:
        raise ValueError("[rotary_prologue] q_out must not be q in prologue_q_out (q is only read there), got a q_out "
                         "at q's address; rotate q in place with prologue and q_out None")


_prologue_q_out_op = torch.library.custom_op("rotary::prologue_q_out",
                                             mutates_args=("q_out", "k_cache", "v_cache", "k_scale", "v_scale"),
                                             device_types="cpu")(_prologue_q_out_impl)


def _call_prologue(q, k, v, positions, spec, k_cache, v_cache, slot_mapping, cache_positions, cache_layout, layout,
                   q_norm_weight, k_norm_weight, norm_eps, norm_offset, k_scale, v_scale, fp8_k_scale, fp8_v_scale,
                   q_out, threads) -> None:
    """torch.ops.rotary.prologue(...), or prologue_q_out(...) with a q_out (its schema leaves q unwritten), or the
    op's implementation called directly where that is indistinguishable (rotary.torch._eager: plain CPU tensors
    needing no gradient, outside torch.compile, torch.func, dispatch and function modes, jit tracing and the
    profiler), with the mutated tensors' version counters bumped as the operator's dispatch does. The
    dispatcher's layers cost ~14 µs per call, most of a decode step's prologue."""
    if not _eager(q, k, v, positions, k_cache, v_cache, slot_mapping, cache_positions, q_norm_weight, k_norm_weight,
                  k_scale, v_scale, q_out):
        op = torch.ops.rotary.prologue if q_out is None else torch.ops.rotary.prologue_q_out
        return op(q, k, v, positions, spec, k_cache, v_cache, slot_mapping, cache_positions, cache_layout, layout,
                  q_norm_weight, k_norm_weight, norm_eps, norm_offset, k_scale, v_scale, fp8_k_scale, fp8_v_scale, q_out,
                  threads)
    # The op's mutates_args, bumped before the kernel runs (as its ADInplaceOrView layer does, error or not).
    torch._C._increment_version([t for t in (q if q_out is None else None, q_out, k_cache, v_cache, k_scale, v_scale)
                                 if t is not None])
    impl = _prologue_impl if q_out is None else _prologue_q_out_impl
    impl(q, k, v, positions, spec, k_cache, v_cache, slot_mapping, cache_positions, cache_layout, layout,
         q_norm_weight, k_norm_weight, norm_eps, norm_offset, k_scale, v_scale, fp8_k_scale, fp8_v_scale, q_out, threads)


_IMPL = torch.library.Library("rotary", "IMPL")  # noqa: TOR901 - the prologue op's Autograd kernel below


def _refuse_grad_kernel(op: Any, names: tuple, where: str) -> Any:
    """An Autograd-key kernel for `op` (mutating, no formula): with grad mode on, an argument of `names` that
    requires grad is a RuntimeError raised before anything is written (custom_op's own layer would run the kernel
    with grad mode off and leave autograd unaware of the writes); otherwise the call goes on below autograd."""
    args = op._schema.arguments
    index = [i for i, a in enumerate(args) if a.name in names]
    after = torch._C._after_autograd_keyset

    def kernel(keyset, *call):
        if torch.is_grad_enabled():
            _prologue._refuse_autograd([(args[i].name, call[i]) for i in index if i < len(call)], where)
        with torch._C._AutoDispatchBelowAutograd():
            return op.redispatch(keyset & after, *call)

    return kernel


def _register_refusal(name: str, names: tuple, where: str) -> None:
    kernel = _refuse_grad_kernel(getattr(torch.ops.rotary, name).default, names, where)
    # custom_op registered its own Autograd kernel; torch releases before allow_override refuse a second Python
    # one (there the operator keeps custom_op's, and the Python API's own check is the guard).
    import inspect

    if "allow_override" in inspect.signature(torch.library.Library.impl).parameters:
        _IMPL.impl(name, kernel, "Autograd", with_keyset=True, allow_override=True)
        return
    try:
        _IMPL.impl(name, kernel, "Autograd", with_keyset=True)
    except RuntimeError:
        pass


def _register_views(name: str) -> None:
    """Negative-bit and conjugate views reach the kernel as they are (as the ops of _torch_ops.py): it resolves
    those it only reads and refuses, by name and before any write, those it writes. torch's fallback would
    materialise them, run the kernel on the copies and then fail to copy back (the ops return nothing)."""
    _IMPL.impl(name, torch.library.fallthrough_kernel, "Negative")
    _IMPL.impl(name, torch.library.fallthrough_kernel, "Conjugate")


for _name in ("prologue", "prologue_q_out"):
    _register_refusal(_name, _prologue.GRAD_REFUSED, "rotary_prologue")
    _register_views(_name)


@_prologue_op.register_fake
def _prologue_fake(q, k, v, positions, spec, k_cache, v_cache, slot_mapping, cache_positions, cache_layout, layout,
                   q_norm_weight, k_norm_weight, norm_eps, norm_offset, k_scale, v_scale, fp8_k_scale, fp8_v_scale,
                   q_out, threads) -> None:
    check_fake_devices("rotary_prologue", q=q, k=k, v=v, positions=positions, k_cache=k_cache, v_cache=v_cache,
                       slot_mapping=slot_mapping, cache_positions=cache_positions, q_norm_weight=q_norm_weight,
                       k_norm_weight=k_norm_weight, k_scale=k_scale, v_scale=v_scale, q_out=q_out)
    return None


_prologue_q_out_op.register_fake(_prologue_fake)


@torch.library.custom_op("rotary::rerotate_cache", mutates_args=("k_cache", "k_scale"), device_types="cpu")
def _rerotate_op(k_cache: torch.Tensor, slots: torch.Tensor, from_positions: torch.Tensor, to_positions: torch.Tensor,
                 spec: str, to_spec: Optional[str], cache_layout: str, k_scale: Optional[torch.Tensor],
                 fp8_scale: float, threads: int, from_seq_len: Optional[int] = None,
                 to_seq_len: Optional[int] = None) -> None:
    """Cached keys re-rotated in place from (spec, from_positions) to (to_spec or spec, to_positions).

    from_seq_len / to_seq_len: the lengths a dynamic/longrope spec sees (None: the largest position of the rows
    not skipped, + 1), e.g. dynamic NTK's base switch as a sequence grows."""
    scale = _scale_arg("rotary_rerotate_cache", k_cache, "k_cache", k_scale, "k_scale", fp8_scale, "fp8_scale")
    where = "rotary_rerotate_cache"
    try:
        _prologue.rerotate_cache(k_cache, slots, from_positions, to_positions, _spec(spec, where),
                                 to_spec=None if to_spec is None else _spec(to_spec, where, "to_spec"),
                                 cache_layout=cache_layout, k_scale=scale, threads=threads,
                                 from_seq_len=from_seq_len, to_seq_len=to_seq_len)
    except (TypeError, ValueError) as e:  # an fp8 cache's scale is the op's fp8_scale
        raise_named(e, (("k_scale", "fp8_scale"),) if k_cache.dtype in _FP8 and k_scale is None else (), where)
        raise


@_rerotate_op.register_fake
def _rerotate_fake(k_cache, slots, from_positions, to_positions, spec, to_spec, cache_layout, k_scale, fp8_scale,
                   threads, from_seq_len=None, to_seq_len=None) -> None:
    check_fake_devices("rotary_rerotate_cache", k_cache=k_cache, slots=slots, from_positions=from_positions,
                       to_positions=to_positions, k_scale=k_scale)
    return None


_register_refusal("rerotate_cache", ("k_cache", "k_scale"), "rotary_rerotate_cache")
_register_views("rerotate_cache")


# ---------------------------------------------------------------- Hugging Face attention with the fused prologue


def _static_layer(cache: Any, layer_idx: int):
    layers = getattr(cache, "layers", None)
    if layers is None or layer_idx >= len(layers):
        return None
    layer = layers[layer_idx]
    if type(layer).__name__ != "StaticLayer":  # sliding / dynamic layers keep the model's own path
        return None
    return layer


def _original_forward(self, *args, **kwargs):
    """The forward patch_prologue replaced: the instance's own, else the class's."""
    own = self._rotary_original_forward
    return own(*args, **kwargs) if own is not None else type(self).forward(self, *args, **kwargs)


def _one_eps(norm: Any, dtype: torch.dtype) -> Optional[float]:
    """A norm's eps (None: no norm); torch.nn.RMSNorm's eps=None is the input dtype's machine eps, as it computes."""
    if norm is None:
        return None
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
    return float(torch.finfo(dtype).eps if eps is None else eps)


def _norm_eps(q_norm: Any, k_norm: Any, dtype: torch.dtype) -> Optional[float]:
    """The eps of a layer's q/k norms for the fused call (which takes one): None where the two differ."""
    q_eps, k_eps = _one_eps(q_norm, dtype), _one_eps(k_norm, dtype)
    if q_eps is not None and k_eps is not None and q_eps != k_eps:
        return None
    return q_eps if q_eps is not None else k_eps if k_eps is not None else 1e-6


# The RMSNorm classes whose formula the fused call reproduces (a class or a subclass of one, by name: transformers'
# modules are not imported here): x * r * (1 + w), Gemma's (norm_offset 1.0), and x * r * w (norm_offset 0.0).
_NORM_OFFSETS = {"Gemma3RMSNorm": 1.0, "Gemma2RMSNorm": 1.0, "GemmaRMSNorm": 1.0,
                 "Qwen3RMSNorm": 0.0, "LlamaRMSNorm": 0.0, "RMSNorm": 0.0}


def _one_offset(norm: Any) -> Optional[float]:
    """A norm's norm_offset (None: a class the fused call does not know, e.g. a kernel library's replacement)."""
    if norm is None:
        return 0.0
    for cls in type(norm).__mro__:
        if cls.__name__ in _NORM_OFFSETS and (cls.__name__ != "RMSNorm" or cls is torch.nn.RMSNorm):
            return _NORM_OFFSETS[cls.__name__]
    return None


def _norm_offset(q_norm: Any, k_norm: Any) -> Optional[float]:
    """The norm_offset of a layer's q/k norms for the fused call: 1.0 for Gemma's x * (1 + w), 0.0 for x * w (or no
    norm); None where the two differ or either is of a class the fused call does not know."""
    q, k = _one_offset(q_norm), _one_offset(k_norm)
    if q is None or k is None or (q_norm is not None and k_norm is not None and q != k):
        return None
    return q if q_norm is not None else k


def _fused_forward(self, hidden_states: torch.Tensor, position_embeddings, attention_mask, cache=None, **kwargs):
    """The model's attention forward with q/k norm + RoPE + StaticCache write as one rotary.prologue call."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if cache is None:
        cache = kwargs.pop("past_key_values", None)
    layer = _static_layer(cache, self.layer_idx) if cache is not None else None
    position_ids = kwargs.get("position_ids")
    # A gradient to track (the input's, or a trainable projection's or norm's): the original forward, which autograd
    # sees (the prologue is not differentiable).
    needs_grad = torch.is_grad_enabled() and (hidden_states.requires_grad or any(p.requires_grad for p in self.parameters()))
    # A model on a GPU: the original forward (the prologue runs on the CPU).
    q_norm, k_norm = getattr(self, "q_norm", None), getattr(self, "k_norm", None)
    eps, norm_offset = _norm_eps(q_norm, k_norm, hidden_states.dtype), _norm_offset(q_norm, k_norm)
    # A k_norm eps or kind other than q_norm's (changed after patching; patch_prologue refuses it), or a layer type
    # without RoPE: the original forward.
    if (layer is None or position_ids is None or needs_grad or hidden_states.device.type != "cpu" or eps is None
            or norm_offset is None or self._rotary_spec_key is None):
        return _original_forward(self, hidden_states, position_embeddings, attention_mask, cache=cache, **kwargs)
    B, S = hidden_states.shape[:2]
    q = self.q_proj(hidden_states).view(B, S, -1, self.head_dim)      # [B, S, Hq, D]
    k = self.k_proj(hidden_states).view(B, S, -1, self.head_dim)
    v = self.v_proj(hidden_states).view(B, S, -1, self.head_dim)
    if not layer.is_initialized:
        layer.lazy_initialization(k.transpose(1, 2), v.transpose(1, 2))
    # A batch or a length the cache cannot hold: the original forward, whose StaticCache update reports it.
    if layer.keys.shape[0] != B or S > layer.keys.shape[2]:
        return _original_forward(self, hidden_states, position_embeddings, attention_mask, cache=cache, **kwargs)
    # Each sequence's start in the cache, kept a tensor (no host read: one graph under torch.compile).
    start = layer.cumulative_length.to(torch.int64).reshape(1).expand(B).contiguous()
    query = torch.empty((B, q.shape[2], S, self.head_dim), dtype=q.dtype)  # [B, Hq, S, D], written by the op
    _call_prologue(
        q, k, v, position_ids.expand(B, S).contiguous(), self._rotary_spec_key,
        layer.keys, layer.values, None, start, "bhsd", "bshd",
        None if q_norm is None else q_norm.weight.detach(), None if k_norm is None else k_norm.weight.detach(),
        eps, norm_offset, None, None, 1.0, 1.0, query.transpose(1, 2), 1)
    layer.cumulative_length.add_(S)
    attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, None)
    if attention_interface is None:
        attention_interface = self._rotary_eager
    attn_output, attn_weights = attention_interface(
        self, query, layer.keys, layer.values, attention_mask,
        dropout=self.attention_dropout if self.training else 0.0, scaling=self.scaling,
        sliding_window=_sliding_window(self), **kwargs)
    attn_output = attn_output.reshape(B, S, -1).contiguous()
    return self.o_proj(attn_output), attn_weights


# Attention classes whose forward _fused_forward reproduces (q/k/v/o projections, with or without biases, Qwen3's
# per-head q/k RMSNorm before a half-split rotation, scaled dot-product attention with an optional sliding window,
# nothing else).
_PROLOGUE_ATTENTION = ("Gemma3Attention", "LlamaAttention", "MistralAttention", "Qwen2Attention", "Qwen3Attention")


def _sliding_window(self) -> Optional[int]:
    """The sliding_window the layer's own forward gives its attention function: Mistral's config's, Gemma 3's and
    Qwen2/Qwen3's per-layer attribute (None for full-attention layers), none for Llama."""
    if type(self).__name__ == "MistralAttention":
        return getattr(self.config, "sliding_window", None)
    return getattr(self, "sliding_window", None)


def patch_prologue(model: Any, spec: Optional[Spec] = None) -> List[Any]:
    """Routes every Gemma 3/Llama/Mistral/Qwen2/Qwen3 attention layer of `model` through
    torch.ops.rotary.prologue_q_out; returns them.

    A layer's q_norm / k_norm (Qwen3's x * w, Gemma 3's x * (1 + w): norm_offset 1.0) become the prologue's norm
    weights; Gemma 3's layers take the RoPE of their layer type (sliding or full attention). Only layers whose
    cache layer is a StaticLayer take the fused path (pass a transformers StaticCache to generate); anything else
    (no cache, a dynamic cache, a sliding-window ring, a gradient to track: grad mode on with the input or a
    parameter of the layer requiring grad) runs the layer's original forward. spec: the model's RoPE for every
    layer (default: from its config, per layer type where the config nests it, with the rotated width of the
    model's own RoPE module; rotary.torch.spec_of_module). A model with attention of another class (other
    softcapping, norms, pairings...), or a layer whose k_norm eps or kind differs from its q_norm's (the fused call
    takes one) or whose norm class is unknown, raises NotImplementedError naming it, before anything is patched.
    """
    import sys

    attention = [m for m in model.modules()
                 if all(hasattr(m, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj", "layer_idx", "head_dim"))]
    other = sorted({type(m).__name__ for m in attention if type(m).__name__ not in _PROLOGUE_ATTENTION})
    if other or not attention:
        found = ", ".join(other) if other else "no attention layer"
        raise NotImplementedError(f"[rotary.patch_prologue] {type(model).__name__}: supports {', '.join(_PROLOGUE_ATTENTION)} "
                                  f"layers (their forward is what the fused call reproduces), got {found}")
    for module in attention:
        q_norm, k_norm = getattr(module, "q_norm", None), getattr(module, "k_norm", None)
        dtype = getattr(getattr(module.q_proj, "weight", None), "dtype", torch.float32)
        if _norm_eps(q_norm, k_norm, dtype) is None:
            raise NotImplementedError(f"[rotary.patch_prologue] {type(model).__name__}: layer {module.layer_idx}'s q_norm eps "
                                      f"{_one_eps(q_norm, dtype):g} and k_norm eps {_one_eps(k_norm, dtype):g} differ (the "
                                      "fused call takes one)")
        for name, norm in (("q_norm", q_norm), ("k_norm", k_norm)):
            if _one_offset(norm) is None:
                raise NotImplementedError(f"[rotary.patch_prologue] {type(model).__name__}: layer {module.layer_idx}'s {name} "
                                          f"is a {type(norm).__name__}, whose formula the fused call does not know (it "
                                          f"reproduces {', '.join(sorted(_NORM_OFFSETS))} and their subclasses)")
        if _norm_offset(q_norm, k_norm) is None:
            raise NotImplementedError(f"[rotary.patch_prologue] {type(model).__name__}: layer {module.layer_idx}'s q_norm "
                                      f"{type(q_norm).__name__} and k_norm {type(k_norm).__name__} scale differently, "
                                      "x * (1 + w) and x * w (the fused call takes one norm_offset)")
    keys = _layer_spec_keys(model, attention, spec)
    patched = []
    for module in attention:
        if hasattr(module, "_rotary_original_forward"):
            continue
        mod = sys.modules[type(module).__module__]
        module._rotary_eager = getattr(mod, "eager_attention_forward")
        module._rotary_spec_key = keys[module.layer_idx]
        module._rotary_own_forward = "forward" in module.__dict__  # restored exactly by unpatch_prologue
        # The instance's own forward or None (the class's, called through the type): a bound method of the
        # class would pickle as getattr(module, "forward"). A partial, not a bound method, for the same reason:
        # torch.save / torch.load of a patched model keep the patch.
        module._rotary_original_forward = module.__dict__.get("forward")
        module.forward = functools.partial(_fused_forward, module)
        patched.append(module)
    return patched


def _layer_spec_keys(model: Any, attention: List[Any], spec: Optional[Spec]) -> dict:
    """Each attention layer's Spec text (None: a layer type without RoPE, which keeps its own forward): `spec` for
    every layer when given; else the Spec of the layer's type where the config nests rope_parameters per layer type
    (Gemma 3's sliding and full-attention layers), else the model's one RoPE (the width its RoPE module rotates)."""
    from ._torch_patch import _rope_modules, spec_of_module
    from .layer_types import LayerTypeSpecs

    if spec is not None:
        return {m.layer_idx: spec_key(spec) for m in attention}
    config = model.config
    text = getattr(config, "text_config", None) or config  # a multimodal model's language model (Gemma 3's)
    if getattr(text, "layer_types", None) and isinstance(getattr(text, "rope_parameters", None), dict):
        specs = LayerTypeSpecs.from_hf_config(text)
        if specs.nested:
            types = specs.layer_types
            return {m.layer_idx: None if specs.specs.get(types[m.layer_idx]) is None
                    else spec_key(specs.specs[types[m.layer_idx]]) for m in attention}
    if any(type(m).__name__ == "Gemma3Attention" for m in attention):
        raise NotImplementedError(f"[rotary.patch_prologue] {type(model).__name__}: Gemma 3 layers need the config's RoPE "
                                  "per layer type (rope_parameters nested by layer_types); pass spec= to use one for all")
    ropes = [m for _, m in _rope_modules(model)]
    one = spec_of_module(ropes[0], config) if len(ropes) == 1 else Spec.from_hf_config(config)
    return {m.layer_idx: spec_key(one) for m in attention}


def unpatch_prologue(model: Any) -> None:
    """Restores the attention forwards patch_prologue replaced (an instance attribute only where there was one)."""
    for module in model.modules():
        if hasattr(module, "_rotary_original_forward"):
            if getattr(module, "_rotary_own_forward", False):
                module.forward = module._rotary_original_forward
            else:
                del module.forward  # the class's forward again
            for a in ("_rotary_original_forward", "_rotary_eager", "_rotary_spec_key", "_rotary_own_forward"):
                if hasattr(module, a):
                    delattr(module, a)
