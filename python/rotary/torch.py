"""PyTorch integration: rotary's operators (torch.ops.rotary.*) behind autograd-, compile- and export-ready functions.

Importing this module imports torch and registers the operators; `import rotary` alone does neither.

    import torch, rotary.torch as rt
    rope = rt.RoPE(n_embed=64)                      # drop-in for the classic nn.Module (same constructor)
    y = rope(torch.randn(2, 16, 64, requires_grad=True))
    y.sum().backward()                               # backward = inverse rotation, through rotary's kernel
    torch.compile(rope, fullgraph=True)              # one graph, no breaks; torch.export works too

    q, k = rt.apply_qk(q, k, positions, spec)        # torch.ops.rotary.apply_qk; inplace=True -> apply_qk_
    model = transformers.LlamaForCausalLM(config)
    rt.patch(model)                                  # cos/sin from rotary's exact table, rotation by rotary
    model.generate(...)
    rt.unpatch(model)

Every function here calls the operators (rotary/_torch_ops.py documents them), so torch.compile(fullgraph=True),
torch.export, FakeTensor/meta tracing and CUDA graphs see one operator per rotation. In plain eager code on CPU
tensors that need no gradient (no compile, mode, transform, tracer or profiler active) the operator's CPU kernel
is called directly, which is the same computation without the dispatcher's Python round trip. Under torch.func transforms
(grad, vmap, jvp, jacrev, ...) the same operators run inside an autograd.Function with setup_context, jvp and a
generated vmap rule. Threads: a call uses torch.get_num_threads() unless `threads` says otherwise.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Optional, Tuple

import numpy as np
import torch

import rotary as _rotary
from rotary import _torch_ops
from rotary._arrays import _check_rank
from rotary._torch_composite import rotate as _rotate_with_tables  # noqa: F401  (plain-torch formula, for tests)
from rotary._torch_autograd import has_tangent as _has_tangent
from rotary._torch_checks import AS_K, AS_Q, AS_X, FLASH, check_k_like_q, dims, named, raise_named
from rotary._torch_ops import key_of, spec_from_key, spec_key
from rotary._torch_positions import _functorch_active, _peek_functorch, _positions, raise_offsets_error

__all__ = ["apply", "apply_qk", "apply_cos_sin", "apply_rotary_emb", "apply_rotary_emb_qkv_", "apply_rotary_emb_kv_", "RoPE", "apply_rotary_pos_emb", "cos_sin", "spec_key",
           "spec_from_key", "patch", "unpatch", "is_patched", "supported_models", "spec_of_module"]

ops = torch.ops.rotary
_Tensor = torch.Tensor
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_tracing_state = torch._C._get_tracing_state
_profiler = torch.autograd.profiler
_forward_ad = torch.autograd.forward_ad
_kernel = {name: fns[_torch_ops._CPU_KEYS] for name, fns in _torch_ops.KERNELS.items()}


def _eager(*tensors: Any) -> bool:
    """True when calling the operator's CPU kernel directly is indistinguishable from calling the operator: plain CPU
    tensors needing no gradient, outside torch.compile, torch.func, dispatch/function modes, jit tracing and the
    profiler (any of those sees the operator itself). Saves the dispatcher's Python-kernel round trip in eager code
    (docs/performance.md, "PyTorch operators")."""
    if torch.compiler.is_compiling() or _forward_ad._current_level >= 0:  # forward AD: the operator's Autograd kernel
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is not None and (type(t) is not _Tensor or not t.is_cpu or (grad and t.requires_grad)):
            return False
    return not (_dispatch_modes() or _function_modes() or _peek_functorch() is not None
                or _tracing_state() is not None or _profiler._is_profiler_enabled)


@torch.compiler.assume_constant_result
def _key(spec: Any, where: str) -> str:
    """spec_key(spec) (a non-Spec refused in the words of the entry point `where`), a constant for torch.compile
    (the Spec is guarded on, never traced)."""
    return key_of(spec, where)


def _check_backend(backend: str) -> None:
    if backend not in ("auto", "cpu", "cuda"):
        raise ValueError(f"[rotary_apply] backend must be \"auto\", \"cpu\" or \"cuda\" (rotary.torch runs rotary's "
                         f"CPU/CUDA kernels; the others are available through rotary.apply), got \"{backend}\"")


# ----------------------------------------------------------------------------------------------- torch.func

class _SpecRotation(torch.autograd.Function):
    """torch.ops.rotary.apply for torch.func transforms: setup_context, jvp (the rotation is linear in x) and a
    generated vmap rule; backward is the inverse rotation, itself differentiable."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, positions, offset, key, layout, pairing, inverse, seq_len, threads):
        return ops.apply(x, positions, offset, key, layout, pairing, inverse, seq_len, threads)

    @staticmethod
    def setup_context(ctx, inputs, output):
        from rotary._torch_autograd import refuse_position_grad

        positions = inputs[1]
        refuse_position_grad(positions)
        ctx.has_positions = positions is not None
        if positions is not None:
            ctx.save_for_backward(positions)
            ctx.save_for_forward(positions)  # jvp reads ctx.saved_tensors too
        ctx.rest = inputs[2:]

    @staticmethod
    def _args(ctx, flip: bool):
        positions = ctx.saved_tensors[0] if ctx.has_positions else None
        offset, key, layout, pairing, inverse, seq_len, threads = ctx.rest
        return positions, offset, key, layout, pairing, (not inverse) if flip else inverse, seq_len, threads

    @staticmethod
    def backward(ctx, grad):
        return (_SpecRotation.apply(grad, *_SpecRotation._args(ctx, True)),) + (None,) * 8

    @staticmethod
    def jvp(ctx, x_t, positions_t, *_):
        if positions_t is not None:  # torch.func.jvp with respect to the positions: no derivative, not a silent 0
            from rotary._arrays import _position_derivative_error

            raise _position_derivative_error("rotary_apply", "carries a forward-mode tangent")
        return _SpecRotation.apply(x_t, *_SpecRotation._args(ctx, False))


class _TableRotation(torch.autograd.Function):
    """torch.ops.rotary.apply_cos_sin for torch.func transforms (gradients for x and for the tables)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, cos, sin, positions, offset, layout, pairing, inverse, threads):
        return ops.apply_cos_sin(x, cos, sin, positions, offset, layout, pairing, inverse, threads)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, cos, sin, positions = inputs[:4]
        ctx.has_positions = positions is not None
        saved = (x, cos, sin) + ((positions,) if positions is not None else ())
        ctx.save_for_backward(*saved)
        ctx.save_for_forward(*saved)
        ctx.rest = inputs[4:]

    @staticmethod
    def backward(ctx, grad):
        from rotary._torch_autograd import _table_grads

        x, cos, sin = ctx.saved_tensors[:3]
        positions = ctx.saved_tensors[3] if ctx.has_positions else None
        offset, layout, pairing, inverse, threads = ctx.rest
        dx = _TableRotation.apply(grad, cos, sin, positions, offset, layout, pairing, not inverse, threads)
        dcos = dsin = None
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            dcos, dsin = _table_grads([(x, grad)], cos, sin, positions, offset, layout, pairing, inverse)
        return (dx, dcos, dsin) + (None,) * 6

    @staticmethod
    def jvp(ctx, x_t, cos_t, sin_t, *_):
        x, cos, sin = ctx.saved_tensors[:3]
        positions = ctx.saved_tensors[3] if ctx.has_positions else None
        offset, layout, pairing, inverse, threads = ctx.rest
        out = None
        if x_t is not None:
            out = _TableRotation.apply(x_t, cos, sin, positions, offset, layout, pairing, inverse, threads)
        if cos_t is not None or sin_t is not None:
            # bilinear: d/dtables = the rotated part of x by (cos_t, sin_t); pass-through channels get 0
            ct = cos_t if cos_t is not None else torch.zeros_like(cos)
            st = sin_t if sin_t is not None else torch.zeros_like(sin)
            r = 2 * cos.shape[-1]
            dt = _TableRotation.apply(x, ct, st, positions, offset, layout, pairing, inverse, threads)
            if r < x.shape[-1]:
                dt = torch.cat((dt[..., :r], torch.zeros_like(dt[..., r:])), dim=-1)
            out = dt if out is None else out + dt
        return out


# ----------------------------------------------------------------------------------------------- functions

def apply(x: torch.Tensor, positions: Any, spec: "_rotary.Spec", *, layout: str = "bshd",
          pairing: Optional[str] = None, inverse: bool = False, seq_len: Optional[int] = None, threads: int = 0,
          backend: str = "auto", inplace: bool = False, cu_seqlens: Any = None, seq_offsets: Any = None,
          batch_offsets: Any = None) -> torch.Tensor:
    """RoPE of x by a Spec: torch.ops.rotary.apply (apply_ with inplace=True), differentiable in x.

    x: [B, S, H, D] ("bshd"), [B, H, S, D] ("bhsd") or [T, H, D] ("thd"); any strides, float32/16, bfloat16, float64.
    positions: an int offset (token s at offset + s), an integer tensor [S] / [B, S] / [T] (M-RoPE: [3, B, S] /
      [3, T]), a float tensor (fractional), a numpy array or a list; on any device (never read on the host for
      device tensors). cu_seqlens/seq_offsets (thd) and batch_offsets ([B], added to an int offset) become ids.
    pairing: None = the spec's. inverse: rotate by -angle. seq_len: the length dynamic/longrope scaling sees.
    threads: 0 = torch.get_num_threads(). inplace=True rotates x itself and returns it (on a tensor that needs a
      gradient this is recorded as torch records its in-place ops; a leaf that requires grad raises RuntimeError).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"[rotary_apply] x must be a torch.Tensor, got {type(x).__name__}")
    _check_rank(x, "x", "rotary_apply")  # (with the shape, which the extension's conversion omits)
    _check_backend(backend)
    key = _key(spec, "rotary_apply")
    pos, offset = _positions(positions, x, layout, cu_seqlens, seq_offsets, batch_offsets)
    p = pairing or ""
    try:  # the kernel's errors name x as q
        if _functorch_active():  # in place too: the out-of-place Function, copied back (functorch records copy_)
            y = _SpecRotation.apply(x, pos, offset, key, layout, p, inverse, seq_len, threads)
            return x.copy_(y) if inplace else y
        if _eager(x, pos):
            if inplace:
                _kernel["apply_"](x, pos, offset, key, layout, p, inverse, seq_len, threads)
                return x
            return _kernel["apply"](x, pos, offset, key, layout, p, inverse, seq_len, threads)
        if inplace:
            ops.apply_(x, pos, offset, key, layout, p, inverse, seq_len, threads)
            return x
        return ops.apply(x, pos, offset, key, layout, p, inverse, seq_len, threads)
    except (ValueError, TypeError) as e:
        raise_offsets_error(e, x, layout, positions, cu_seqlens, seq_offsets, batch_offsets)
        raise_named(e, AS_X)
        raise


def apply_qk(q: torch.Tensor, k: torch.Tensor, positions: Any, spec: "_rotary.Spec", *, layout: str = "bshd",
             pairing: Optional[str] = None, inverse: bool = False, seq_len: Optional[int] = None, threads: int = 0,
             backend: str = "auto", inplace: bool = False, cu_seqlens: Any = None, seq_offsets: Any = None,
             batch_offsets: Any = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """apply() to q and k (own head counts: GQA) in one kernel call: torch.ops.rotary.apply_qk (apply_qk_ with
    inplace=True). Returns (q, k). q and k of different dtypes take one call each, k checked against q as the joint
    call does before either is written."""
    if not isinstance(q, torch.Tensor) or not isinstance(k, torch.Tensor):
        raise TypeError(f"[rotary_apply] q and k must be torch.Tensors, got {type(q).__name__} and {type(k).__name__}")
    _check_rank(q, "q", "rotary_apply")  # (the extension's conversion would call q x)
    _check_rank(k, "k", "rotary_apply")
    _check_backend(backend)
    if q.dtype != k.dtype:  # two calls, k checked against q and validated before either is written
        check_k_like_q(q, k, layout)
        kw = dict(layout=layout, pairing=pairing, inverse=inverse, seq_len=seq_len, threads=threads,
                  cu_seqlens=cu_seqlens, seq_offsets=seq_offsets, batch_offsets=batch_offsets)
        if not inplace:
            return named(AS_Q, apply, q, positions, spec, **kw), named(AS_K, apply, k, positions, spec, **kw)
        # eager: a refused write of k raises first, q untouched (torch.compile and torch.func transforms cannot run
        # these checks: there the writes are functionalised)
        if not torch.compiler.is_compiling() and not _functorch_active() and (
                _torch_ops.refused_in_place(k, torch.is_grad_enabled() and k.requires_grad)
                or torch._debug_has_internal_overlap(k) == 1):
            named(AS_K, apply, k, positions, spec, inplace=True, **kw)  # its refusal, q untouched
        ky = named(AS_K, apply, k, positions, spec, **kw)
        named(AS_Q, apply, q, positions, spec, inplace=True, **kw)
        return q, k.copy_(ky)
    key = _key(spec, "rotary_apply")
    pos, offset = _positions(positions, q, layout, cu_seqlens, seq_offsets, batch_offsets)
    p = pairing or ""
    if _functorch_active():
        qy = _SpecRotation.apply(q, pos, offset, key, layout, p, inverse, seq_len, threads)
        ky = _SpecRotation.apply(k, pos, offset, key, layout, p, inverse, seq_len, threads)
        if inplace:
            _torch_ops.write_all((q, k), (qy, ky))  # a refused write first: q is not left rotated
            return q, k
        return qy, ky
    try:
        if _eager(q, k, pos):
            if inplace:
                _kernel["apply_qk_"](q, k, pos, offset, key, layout, p, inverse, seq_len, threads)
                return q, k
            return _kernel["apply_qk"](q, k, pos, offset, key, layout, p, inverse, seq_len, threads)
        if inplace:
            ops.apply_qk_(q, k, pos, offset, key, layout, p, inverse, seq_len, threads)
            return q, k
        return ops.apply_qk(q, k, pos, offset, key, layout, p, inverse, seq_len, threads)
    except (ValueError, TypeError) as e:
        raise_offsets_error(e, q, layout, positions, cu_seqlens, seq_offsets, batch_offsets)
        raise


def apply_cos_sin(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: Any = None, *,
                  layout: str = "bshd", pairing: str = "half", inverse: bool = False, inplace: bool = False,
                  threads: int = 0, backend: str = "auto", cu_seqlens: Any = None, seq_offsets: Any = None,
                  batch_offsets: Any = None) -> torch.Tensor:
    """Rotation by caller cos/sin tables (ONNX RotaryEmbedding semantics): torch.ops.rotary.apply_cos_sin.

    cos/sin: [max_pos, R/2] indexed by the positions (an int offset, ids, packed or per-batch schemes as in apply),
    or [B, S, R/2] ([1, T, R/2] for thd) already gathered per token. Channels R.. pass through. Differentiable in x
    and in cos/sin. A position outside the table raises ValueError (CPU) or fails a device assertion.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"[rotary_apply] x must be a torch.Tensor, got {type(x).__name__}")
    for t, what in ((x, "x"), (cos, "cos"), (sin, "sin")):
        _check_rank(t, what, "rotary_apply")  # (with the shape, which the extension's conversion omits)
    _check_backend(backend)
    pos, offset = _positions(positions, x, layout, cu_seqlens, seq_offsets, batch_offsets)
    try:  # the kernel's errors name x as q
        if _functorch_active():  # the Function saves x for the tables' gradients: in place, it reads a copy
            y = _TableRotation.apply(x.clone() if inplace else x, cos, sin, pos, offset, layout, pairing, inverse,
                                     threads)
            return x.copy_(y) if inplace else y
        if _eager(x, cos, sin, pos):
            if inplace:
                _kernel["apply_cos_sin_"](x, cos, sin, pos, offset, layout, pairing, inverse, threads)
                return x
            return _kernel["apply_cos_sin"](x, cos, sin, pos, offset, layout, pairing, inverse, threads)
        if inplace:
            ops.apply_cos_sin_(x, cos, sin, pos, offset, layout, pairing, inverse, threads)
            return x
        return ops.apply_cos_sin(x, cos, sin, pos, offset, layout, pairing, inverse, threads)
    except (ValueError, TypeError) as e:
        raise_offsets_error(e, x, layout, positions, cu_seqlens, seq_offsets, batch_offsets)
        raise_named(e, AS_X)
        raise


def apply_rotary_emb(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False,
                     inplace: bool = False, seqlen_offsets: Any = 0, cu_seqlens: Any = None,
                     max_seqlen: Optional[int] = None) -> torch.Tensor:
    """flash-attn's flash_attn.layers.rotary.apply_rotary_emb, computed by rotary (apply_cos_sin; differentiable).

    x: [B, S, H, D], or [T, H, D] with cu_seqlens [N+1] (varlen). cos/sin: [max_pos, R/2] (R <= D; channels R..
    pass through). interleaved: pairs (2i, 2i+1) instead of (i, i + R/2). seqlen_offsets: an int, or [B] ([N] for
    varlen): each sequence's first position (KV-cache decoding). max_seqlen is accepted and not needed.
    Unlike flash-attn, a position at or past max_pos raises ValueError instead of leaving x unrotated, and
    cu_seqlens must run from 0 to x's token count (flash-attn leaves tokens past its last entry alone).
    inplace=True on a leaf that requires grad (or a view of one) writes x and returns a tensor that carries the
    gradient, as flash-attn's does; float seqlen_offsets raise TypeError, as flash-attn asserts integer dtypes.
    """
    del max_seqlen  # rotary reads the sequence lengths from cu_seqlens
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"[rotary_apply] x must be a torch.Tensor, got {type(x).__name__}")
    pairing = "interleaved" if interleaved else "half"
    if isinstance(seqlen_offsets, (bool, np.bool_, float, np.floating)) or (
            isinstance(seqlen_offsets, torch.Tensor) and (seqlen_offsets.is_floating_point()
                                                          or seqlen_offsets.dtype == torch.bool)):
        what = seqlen_offsets.dtype if isinstance(seqlen_offsets, torch.Tensor) else type(seqlen_offsets).__name__
        raise TypeError(f"[rotary_apply] seqlen_offsets must be an int or an integer tensor, got {what}")
    # is_leaf last: torch refuses to read it on a view made under no_grad whose base was written since (a packed
    # qkv's k after its q, apply_rotary_emb_qkv_ under no_grad), and it matters only with a gradient to track.
    if inplace and torch.is_grad_enabled() and x.requires_grad and (x.is_leaf or (x._base is not None
                                                                             and x._base.is_leaf)):
        # flash-attn's form: its Function writes x (a leaf that requires grad, or a view of one) and differentiates
        # the returned tensor. torch refuses an in-place op on a leaf, so the rotation is recorded out of place and
        # written into x's memory outside autograd; gradients flow through the returned tensor. (Table gradients
        # need x's values: those read a copy, which the write leaves alone.)
        src = x.clone() if cos.requires_grad or sin.requires_grad else x
        y = apply_rotary_emb(src, cos, sin, interleaved, False, seqlen_offsets, cu_seqlens)
        with torch.no_grad():
            x.copy_(y)
        return y
    scalar = isinstance(seqlen_offsets, (int, np.integer)) or (
        isinstance(seqlen_offsets, torch.Tensor) and seqlen_offsets.dim() == 0)
    try:  # errors name flash-attn's arguments (seqlen_offsets, not positions.batch_offsets)
        if cu_seqlens is not None:
            if scalar:
                return apply_cos_sin(x, cos, sin, int(seqlen_offsets), layout="thd", pairing=pairing, inplace=inplace,
                                     cu_seqlens=cu_seqlens)
            return apply_cos_sin(x, cos, sin, None, layout="thd", pairing=pairing, inplace=inplace,
                                 cu_seqlens=cu_seqlens, seq_offsets=seqlen_offsets)
        if scalar:
            return apply_cos_sin(x, cos, sin, int(seqlen_offsets), layout="bshd", pairing=pairing, inplace=inplace)
        return apply_cos_sin(x, cos, sin, None, layout="bshd", pairing=pairing, inplace=inplace,
                             batch_offsets=seqlen_offsets)
    except (ValueError, TypeError) as e:
        raise_named(e, FLASH)
        raise


def cos_sin(positions: Any, spec: "_rotary.Spec", *, seq_len: Optional[int] = None
            ) -> Tuple[torch.Tensor, torch.Tensor]:
    """rotary's exact f32 cos/sin (attention factor folded in): torch.ops.rotary.cos_sin.

    positions: an int n (0..n-1) or an integer/float tensor of any shape, on any device. Returns (cos, sin) of
    shape positions.shape + (rotary_dim // 2,). M-RoPE specs take [3, ...] ids (one row per axis t, h, w: an int
    n or text-only ids are not taken here) and return shape positions.shape[1:] + (rotary_dim // 2,), each
    frequency from its section's axis.
    """
    if isinstance(positions, (int, np.integer)) and not isinstance(positions, (bool, np.bool_)):
        if positions < 0:
            raise ValueError(f"[rotary_cos_sin] positions must be an int n >= 0 (positions 0..n-1) or a tensor, got {positions}")
        positions = torch.arange(int(positions))
    elif not isinstance(positions, torch.Tensor):
        positions = torch.as_tensor(np.asarray(positions))
    if _eager(positions):
        return _kernel["cos_sin"](positions, _key(spec, "rotary_cos_sin"), seq_len)
    return ops.cos_sin(positions, _key(spec, "rotary_cos_sin"), seq_len)


class RoPE(torch.nn.Module):
    """Drop-in replacement for the classic RoPE module (`RoPE(n_embed, base=10000)`, forward on (B, T, C)).

    forward(x) takes x of shape (..., T, C) with C == n_embed, rotates channel pairs (i, i + C/2) of token t
    by t * base^(-2i/C) and returns a tensor of x's shape with dtype promote(x.dtype, float32), as the
    module that builds float32 cos/sin caches does. Angles are exact (computed in double, rounded once),
    where the original loses accuracy at large t; gradients flow through rotary's inverse rotation.
    One torch.ops.rotary.apply call: torch.compile(fullgraph=True) and torch.export trace it.
    """

    def __init__(self, n_embed: int, base: float = 10000):
        super().__init__()
        try:
            even = int(n_embed) == n_embed and n_embed > 0 and int(n_embed) % 2 == 0
        except (TypeError, ValueError, OverflowError):
            even = False
        if not even:
            raise ValueError(f"[rotary.RoPE] n_embed must be a positive even int (channel pairs), got {n_embed!r}")
        self.base = base
        self.n_embed = n_embed
        self.spec = _rotary.Spec(int(n_embed), base=float(base), name="RoPE")
        self._key = spec_key(self.spec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 2:
            raise ValueError(f"[rotary.RoPE] x must have shape (..., T, C) for RoPE, got shape {dims(x.shape)}")
        T, C = x.shape[-2], x.shape[-1]
        if C != self.n_embed:
            raise ValueError(f"[rotary.RoPE] x must have last dimension C = n_embed = {self.n_embed}, got {C} "
                             f"(shape {dims(x.shape)})")
        out_dtype = torch.promote_types(x.dtype, torch.float32)
        xx = x if x.dtype == out_dtype else x.to(out_dtype)
        x4 = xx.reshape(math.prod(xx.shape[:-2]), T, 1, C)  # T = 0 or an empty batch: an empty result
        if _functorch_active():
            y = _SpecRotation.apply(x4, None, 0, self._key, "bshd", "", False, None, 0)
        elif _eager(x4):
            y = _kernel["apply"](x4, None, 0, self._key, "bshd", "", False, None, 0)
        else:
            y = ops.apply(x4, None, 0, self._key, "bshd", "", False, None, 0)
        return y.reshape(xx.shape)

    def extra_repr(self) -> str:
        return f"n_embed={self.n_embed}, base={self.base}"


# ----------------------------------------------------------------------------------------------- HF tables

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


def _rotate_qk_by_halves(q, k, c, s, unsqueeze_dim):
    """q, k rotated by per-token half tables c/s [B or 1, S, R/2]; None if the shapes do not fit. A 2-D table is
    not taken: HF's formula broadcasts cos.unsqueeze(1) = [S, 1, R] against [B, H, S, D], pairing its rows with
    the heads, and the fallback reproduces that (or its broadcasting error) exactly."""
    ud = unsqueeze_dim % 4 if q.dim() == 4 else unsqueeze_dim
    if not (q.dim() == 4 and k.dim() == 4 and ud in (1, 2) and c.dim() == 3 and c.shape == s.shape
            and q.shape[-1] == k.shape[-1] and 0 < 2 * c.shape[-1] <= q.shape[-1]):
        return None
    layout = "bhsd" if ud == 1 else "bshd"
    s_len = q.shape[2 if ud == 1 else 1]
    if c.shape[1] != s_len or c.shape[0] not in (1, q.shape[0]) or k.shape[0] != q.shape[0]:
        return None
    if c.shape[0] != q.shape[0]:
        c, s = c.expand(q.shape[0], -1, -1), s.expand(q.shape[0], -1, -1)
    positions = None
    # HF's q * cos promotes (bf16 q under autocast with f32 tables gives f32): the kernel returns q's dtype.
    tables = functools.reduce(torch.promote_types, (c.dtype, s.dtype))
    q, k = q.to(torch.promote_types(q.dtype, tables)), k.to(torch.promote_types(k.dtype, tables))
    if q.dtype != k.dtype:
        return (apply_cos_sin(q, c, s, positions, layout=layout), apply_cos_sin(k, c, s, positions, layout=layout))
    if _functorch_active():
        return (_TableRotation.apply(q, c, s, positions, 0, layout, "half", False, 0),
                _TableRotation.apply(k, c, s, positions, 0, layout, "half", False, 0))
    if _eager(q, k, c, s):
        return _kernel["apply_qk_cos_sin"](q, k, c, s, None, 0, layout, "half", False, 0)
    return ops.apply_qk_cos_sin(q, k, c, s, None, 0, layout, "half", False, 0)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         unsqueeze_dim: int = 1) -> Tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's apply_rotary_pos_emb, computed by rotary's kernel (torch.ops.rotary.apply_qk_cos_sin).

    q: [B, Hq, S, D] and k: [B, Hk, S, D] for unsqueeze_dim=1 ([B, S, H, D] for unsqueeze_dim=2; GQA allowed).
    cos/sin: HF's tables [B, S, R] (or [1, S, R]) as returned by a *RotaryEmbedding module: the angle values
    duplicated over both halves (HF's `cat((freqs, freqs))`); only the first R/2 columns are read. R may be
    smaller than D (channels R.. pass through). The values are used as given (attention scaling included).
    The result has HF's dtype (q's, promoted with the tables'). Differentiable in q and k; tables that require
    grad (with grad mode on) and other shapes (2-D tables, which HF's formula broadcasts against the heads) are
    computed by HF's torch formula, so cos and sin get HF's gradients, each half its own.
    """
    r = cos.shape[-1]
    tables_need_grad = ((cos.requires_grad or sin.requires_grad) and torch.is_grad_enabled()) or (
        _forward_ad._current_level >= 0 and _has_tangent(cos, sin))
    if r % 2 == 0 and cos.shape == sin.shape and not tables_need_grad:
        h = r // 2
        out = _rotate_qk_by_halves(q, k, cos[..., :h], sin[..., :h], unsqueeze_dim)
        if out is not None:
            return out
    return _hf_formula(q, k, cos, sin, unsqueeze_dim)


# ----------------------------------------------------------------------------------------------- transformers patching

from rotary._torch_patch import is_patched, patch, spec_of_module, supported_models, unpatch  # noqa: E402,F401
from rotary._torch_flash import apply_rotary_emb_kv_, apply_rotary_emb_qkv_  # noqa: E402,F401
