"""PyTorch integration: autograd-aware RoPE, a drop-in RoPE nn.Module, HF's apply_rotary_pos_emb, transformers patching.

Importing this module imports torch; `import rotary` alone does not.

    import torch, rotary.torch as rt
    rope = rt.RoPE(n_embed=64)                      # drop-in for the classic nn.Module (same constructor)
    y = rope(torch.randn(2, 16, 64, requires_grad=True))
    y.sum().backward()                               # backward = inverse rotation, through rotary's kernel

    model = transformers.LlamaForCausalLM(config)
    rt.patch(model)                                  # cos/sin from rotary's exact table, rotation by rotary
    model.generate(...)
    rt.unpatch(model)
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Optional, Tuple

import numpy as np
import torch

import rotary as _rotary
from rotary import _rotary as _native

__all__ = ["RotaryFunction", "apply", "apply_qk", "RoPE", "apply_rotary_pos_emb", "patch", "unpatch", "is_patched"]

_KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class RotaryFunction(torch.autograd.Function):
    """y = RoPE(x) with a spec's frequencies; backward is the inverse rotation (itself differentiable)."""

    @staticmethod
    def forward(ctx, x, positions, spec, layout, pairing, inverse, seq_len, threads, backend):  # noqa: D401
        ctx.rope_args = (positions, spec, layout, pairing, inverse, seq_len, threads, backend)
        return _rotary.apply(x.detach(), positions, spec, layout=layout, pairing=pairing, inverse=inverse,
                             seq_len=seq_len, threads=threads, backend=backend)

    @staticmethod
    def backward(ctx, grad):
        positions, spec, layout, pairing, inverse, seq_len, threads, backend = ctx.rope_args
        g = RotaryFunction.apply(grad, positions, spec, layout, pairing, not inverse, seq_len, threads, backend)
        return g, None, None, None, None, None, None, None, None


def apply(x: torch.Tensor, positions: Any, spec: "_rotary.Spec", *, layout: str = "bshd",
          pairing: Optional[str] = None, inverse: bool = False, seq_len: Optional[int] = None,
          threads: int = 0, backend: str = "auto") -> torch.Tensor:
    """rotary.apply for tensors, differentiable with respect to x. Arguments as in rotary.apply."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"[rotary] x must be a torch.Tensor, got {type(x).__name__}")
    if isinstance(positions, torch.Tensor) and positions.device.type != "cpu":
        positions = positions.cpu()
    if x.device.type != "cpu":
        return _apply_off_cpu(x, positions, spec, layout=layout, pairing=pairing, inverse=inverse, seq_len=seq_len)
    return RotaryFunction.apply(x, positions, spec, layout, pairing, inverse, seq_len, threads, backend)


def apply_qk(q: torch.Tensor, k: torch.Tensor, positions: Any, spec: "_rotary.Spec", **kwargs
             ) -> Tuple[torch.Tensor, torch.Tensor]:
    """apply() to q and k; one fused kernel call when no gradient is needed."""
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)
    if needs_grad or q.device.type != "cpu" or q.dtype != k.dtype:
        return apply(q, positions, spec, **kwargs), apply(k, positions, spec, **kwargs)
    return _rotary.apply_qk(q, k, positions, spec, **kwargs)


def _rotate_with_tables(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: str,
                        inverse: bool) -> torch.Tensor:
    """Plain torch rotation (used off CPU): cos/sin [..., R/2] broadcastable against x[..., :R]."""
    half = cos.shape[-1]
    rot = 2 * half
    ct = torch.promote_types(x.dtype, torch.float32)
    xr = x[..., :rot].to(ct)
    cos, sin = cos.to(ct), sin.to(ct)
    if pairing == "interleaved":
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
    else:
        x1, x2 = xr[..., :half], xr[..., half:]
    s = -sin if inverse else sin
    y1 = x1 * cos - x2 * s
    y2 = x2 * cos + x1 * s
    y = torch.stack((y1, y2), dim=-1).flatten(-2) if pairing == "interleaved" else torch.cat((y1, y2), dim=-1)
    return torch.cat((y.to(x.dtype), x[..., rot:]), dim=-1)


def _apply_off_cpu(x, positions, spec, *, layout, pairing, inverse, seq_len):
    """Non-CPU tensors: cos/sin from rotary's exact table, rotation in torch on x's device."""
    if spec.mrope_section:
        raise NotImplementedError("[rotary] M-RoPE on non-CPU tensors is not supported by rotary.torch")
    if layout == "thd":
        n_tok = x.shape[0]
    else:
        n_tok = x.shape[1] if layout == "bshd" else x.shape[2]
    if isinstance(positions, (int, np.integer)) or positions is None:
        pos = np.arange(int(positions or 0), int(positions or 0) + n_tok, dtype=np.int64)
    else:
        pos = positions.cpu().numpy() if isinstance(positions, torch.Tensor) else np.asarray(positions)
    c, s = _rotary.cos_sin(spec, pos, seq_len=seq_len)
    c = torch.from_numpy(c).to(x.device)
    s = torch.from_numpy(s).to(x.device)
    # c: [S, h] or [B, S, h] -> broadcast over heads
    if layout == "bshd":
        c, s = c.unsqueeze(-2), s.unsqueeze(-2)
    elif layout == "bhsd":
        c, s = (c.unsqueeze(-3), s.unsqueeze(-3)) if c.ndim == 3 else (c, s)
    else:
        c, s = c.unsqueeze(-2), s.unsqueeze(-2)
    return _rotate_with_tables(x, c, s, pairing or spec.pairing, inverse)


class RoPE(torch.nn.Module):
    """Drop-in replacement for the classic RoPE module (`RoPE(n_embed, base=10000)`, forward on (B, T, C)).

    forward(x) takes x of shape (..., T, C) with C == n_embed, rotates channel pairs (i, i + C/2) of token t
    by t * base^(-2i/C) and returns a tensor of x's shape with dtype promote(x.dtype, float32), as the
    module that builds float32 cos/sin caches does. Angles are exact (computed in double, rounded once),
    where the original loses accuracy at large t; gradients flow through rotary's inverse rotation.
    """

    def __init__(self, n_embed: int, base: float = 10000):
        super().__init__()
        self.base = base
        self.n_embed = n_embed
        self.spec = _rotary.Spec(int(n_embed), base=float(base), name="RoPE")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 2:
            raise ValueError(f"[rotary] RoPE expects (..., T, C), got shape {tuple(x.shape)}")
        T, C = x.shape[-2], x.shape[-1]
        if C != self.n_embed:
            raise ValueError(f"[rotary] RoPE(n_embed={self.n_embed}) got last dimension {C}")
        out_dtype = torch.promote_types(x.dtype, torch.float32)
        xx = x if x.dtype == out_dtype else x.to(out_dtype)
        x4 = xx.reshape(-1, T, 1, C)
        y = apply(x4, 0, self.spec, layout="bshd")
        return y.reshape(xx.shape)

    def extra_repr(self) -> str:
        return f"n_embed={self.n_embed}, base={self.base}"


def _readable(t: torch.Tensor) -> torch.Tensor:
    """t detached, materialised if it broadcasts along an axis (the core rejects zero strides there)."""
    t = t.detach()
    if any(st == 0 and n > 1 for st, n in zip(t.stride(), t.shape)):
        t = t.contiguous()
    return t


class _CallerTableRotation(torch.autograd.Function):
    """HF-style rotation with caller cos/sin halves [B, S, R/2] / [S, R/2]; backward rotates by -angle."""

    @staticmethod
    def forward(ctx, q, k, cos_h, sin_h, layout):
        ctx.tables = (cos_h, sin_h, layout)
        q_out = torch.empty_like(q)
        k_out = torch.empty_like(k)
        _native._apply_cos_sin(cos_h, sin_h, _readable(q), q_out=q_out, k=_readable(k), k_out=k_out, layout=layout,
                               pairing="half")
        return q_out, k_out

    @staticmethod
    def backward(ctx, gq, gk):
        cos_h, sin_h, layout = ctx.tables
        outs = []
        for g in (gq, gk):
            if g is None:
                outs.append(None)
                continue
            gi = torch.empty_like(g)
            _native._apply_cos_sin(cos_h, sin_h, _readable(g), q_out=gi, layout=layout, pairing="half", inverse=True)
            outs.append(gi)
        return outs[0], outs[1], None, None, None


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _hf_formula(q, k, cos, sin, unsqueeze_dim):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    r = cos.shape[-1]
    if r == q.shape[-1]:
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
    qr = q[..., :r] * cos + _rotate_half(q[..., :r]) * sin
    kr = k[..., :r] * cos + _rotate_half(k[..., :r]) * sin
    return torch.cat((qr, q[..., r:]), dim=-1), torch.cat((kr, k[..., r:]), dim=-1)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         unsqueeze_dim: int = 1) -> Tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's apply_rotary_pos_emb, computed by rotary's kernel.

    q: [B, Hq, S, D] and k: [B, Hk, S, D] for unsqueeze_dim=1 ([B, S, H, D] for unsqueeze_dim=2; GQA allowed).
    cos/sin: HF's tables [B, S, R] (or [S, R]) as returned by a *RotaryEmbedding module: the angle values
    duplicated over both halves (HF's `cat((freqs, freqs))`); only the first R/2 columns are read. R may be
    smaller than D (channels R.. pass through). The values are used as given (attention scaling included).
    Falls back to HF's torch formula for non-CPU tensors, gradients with respect to cos/sin, or shapes the
    kernel does not take; results are the same up to floating-point rounding.
    """
    ud = unsqueeze_dim % 4 if q.dim() == 4 else unsqueeze_dim
    r = cos.shape[-1]
    use_kernel = (
        q.dim() == 4 and k.dim() == 4 and ud in (1, 2) and cos.dim() in (2, 3) and cos.shape == sin.shape
        and q.device.type == "cpu" and k.device.type == "cpu" and cos.device.type == "cpu"
        and sin.device.type == "cpu" and q.dtype == k.dtype and q.dtype in _KERNEL_DTYPES
        and cos.dtype in _KERNEL_DTYPES and sin.dtype == cos.dtype and r % 2 == 0 and 0 < r <= q.shape[-1]
        and q.shape[-1] == k.shape[-1]
        and not (torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad))
    )
    if use_kernel:
        layout = "bhsd" if ud == 1 else "bshd"
        seq_axis = 2 if ud == 1 else 1
        s_len = q.shape[seq_axis]
        h = r // 2
        c, s = cos[..., :h], sin[..., :h]
        if c.dim() == 3:
            if c.shape[0] == 1 and q.shape[0] != 1:
                c, s = c.expand(q.shape[0], -1, -1), s.expand(q.shape[0], -1, -1)
            use_kernel = c.shape[0] == q.shape[0] and c.shape[1] == s_len
        else:
            use_kernel = c.shape[0] == s_len
    if not use_kernel:
        return _hf_formula(q, k, cos, sin, unsqueeze_dim)
    return _CallerTableRotation.apply(q, k, _readable(c), _readable(s), layout)


# ----------------------------------------------------------------------------- transformers patching

_patch_lock = threading.Lock()
_module_patches: dict = {}  # python module name -> [original apply_rotary_pos_emb, refcount]


def _rotary_embedding_modules(model: torch.nn.Module):
    for name, mod in model.named_modules():
        if type(mod).__name__.endswith("RotaryEmbedding") and hasattr(mod, "inv_freq"):
            yield name, mod


def _make_forward(spec: "_rotary.Spec"):
    def forward(x, position_ids, layer_type=None, **_ignored):
        if layer_type is not None:
            raise NotImplementedError("[rotary] per-layer-type rope (layer_type=...) is not supported by patch()")
        pos = position_ids.detach().to("cpu")
        c, s = _rotary.cos_sin(spec, pos)  # exact f32, attention factor folded in: [B, S, R/2]
        c = torch.from_numpy(c)
        s = torch.from_numpy(s)
        cos = torch.cat((c, c), dim=-1).to(device=x.device, dtype=x.dtype)
        sin = torch.cat((s, s), dim=-1).to(device=x.device, dtype=x.dtype)
        return cos, sin

    return forward


def patch(model: torch.nn.Module, spec: Optional["_rotary.Spec"] = None) -> torch.nn.Module:
    """Makes a transformers Llama-family model compute RoPE with rotary; returns the model.

    Every `*RotaryEmbedding` submodule's forward is replaced by one returning cos/sin built from rotary's
    exact cos/sin table for the spec read from the module's config (or `spec`), and the
    `apply_rotary_pos_emb` function of each attention module's Python module (e.g.
    transformers.models.llama.modeling_llama) is replaced by rotary.torch.apply_rotary_pos_emb, so the
    rotation of q and k in every forward and generate() step runs in rotary's kernel.
    The function replacement is per Python module and reference-counted across patched models; it
    computes the same function as HF's. Undo with unpatch(model).
    """
    if getattr(model, "_rotary_patch", None) is not None:
        return model
    state = {"forwards": [], "modules": []}
    found = False
    for _, mod in _rotary_embedding_modules(model):
        rope_type = getattr(mod, "rope_type", "default")
        if isinstance(rope_type, dict):
            raise NotImplementedError("[rotary] models with per-layer-type rope parameters are not supported")
        mod_spec = spec if spec is not None else _rotary.Spec.from_hf_config(mod.config)
        had_own = "forward" in mod.__dict__
        state["forwards"].append((mod, had_own, mod.__dict__.get("forward")))
        mod.forward = _make_forward(mod_spec)
        mod._rotary_spec = mod_spec
        found = True
    if not found:
        raise ValueError("[rotary] patch(): the model has no *RotaryEmbedding submodule with inv_freq")
    py_modules = set()
    for mod in model.modules():
        pm = sys.modules.get(type(mod).__module__)
        if pm is not None and callable(getattr(pm, "apply_rotary_pos_emb", None)):
            py_modules.add(pm.__name__)
    with _patch_lock:
        for name in sorted(py_modules):
            pm = sys.modules[name]
            if name in _module_patches:
                _module_patches[name][1] += 1
            else:
                _module_patches[name] = [pm.apply_rotary_pos_emb, 1]
                pm.apply_rotary_pos_emb = apply_rotary_pos_emb
            state["modules"].append(name)
    model._rotary_patch = state
    return model


def unpatch(model: torch.nn.Module) -> torch.nn.Module:
    """Undoes patch(model) (restores forwards; restores module functions when no patched model remains)."""
    state = getattr(model, "_rotary_patch", None)
    if state is None:
        return model
    for mod, had_own, fwd in state["forwards"]:
        if had_own:
            mod.forward = fwd
        else:
            mod.__dict__.pop("forward", None)
        mod.__dict__.pop("_rotary_spec", None)
    with _patch_lock:
        for name in state["modules"]:
            entry = _module_patches.get(name)
            if entry is None:
                continue
            entry[1] -= 1
            if entry[1] == 0:
                sys.modules[name].apply_rotary_pos_emb = entry[0]
                del _module_patches[name]
    model._rotary_patch = None
    return model


def is_patched(model: torch.nn.Module) -> bool:
    """True if patch(model) is in effect."""
    return getattr(model, "_rotary_patch", None) is not None
