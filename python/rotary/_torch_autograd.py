"""Autograd and vmap registrations of rotary's torch operators (see rotary/_torch_ops.py for the registration style).

Backward of a rotation is the inverse rotation with the same cos/sin (grad_x = R(-angle) grad_y, attention factor
included), computed by the same operator, so it is differentiable again. Caller cos/sin operators also give
gradients for cos and sin (torch composite, only when they require grad). In-place operators record the functional
operator plus copy_ when a gradient is needed, as torch does for its own in-place ops. Inputs that carry forward-mode
tangents get the rotated tangents attached to the outputs (make_dual; registered formulas are reverse mode only).
At a torch.func transform's level the formulas are recorded with a single-level autograd Function (torch.func
refuses register_autograd's generated one).
"""
from __future__ import annotations

import torch

from ._arrays import _refuse_position_derivative as refuse_position_derivative
from ._torch_ops import KERNELS, LIB, OPS, full_args, spec_of_key, write_all

ops = torch.ops.rotary
_AFTER_AUTOGRAD = torch._C._after_autograd_keyset
_FWD = torch.autograd.forward_ad
_N_ROTATED = {"apply": 1, "apply_": 1, "apply_qk": 2, "apply_qk_": 2, "apply_cos_sin": 1, "apply_cos_sin_": 1,
              "apply_qk_cos_sin": 2, "apply_qk_cos_sin_": 2}


def has_tangent(*args) -> bool:
    """Whether a tensor among args carries a forward-mode AD tangent (torch.autograd.forward_ad, torch.func.jvp)."""
    if _FWD._current_level < 0:
        return False
    return any(isinstance(a, torch.Tensor) and _FWD.unpack_dual(a).tangent is not None for a in args)


def _with_tangents(name: str, args: tuple):
    """An operator call whose inputs carry forward-mode tangents (torch.autograd.forward_ad, torch.func.jvp): the
    registered formulas give reverse mode only (a torch.library limitation), so the primal outputs are computed from
    the primals and get their tangents with make_dual. The rotation is linear in x: x's tangent is rotated the same
    way; caller tables add the rotation of x by their tangents (pass-through channels 0). In place: the result is
    copied back (copy_ carries the tangent). Under torch.func the in-place operators do not reach this: _torch_func
    runs them as the functional operator and copy_."""
    args = full_args(name, args)
    n = _N_ROTATED[name]
    tables = "cos_sin" in name
    refuse_position_derivative(args[n + 2 if tables else n], "rotary_apply")  # its tangent would be dropped
    inplace = name.endswith("_")
    split = [_FWD.unpack_dual(a) if isinstance(a, torch.Tensor) else (a, None) for a in args]
    primals = tuple(p for p, _ in split)
    functional = getattr(ops, name[:-1] if inplace else name)
    if tables and torch.is_grad_enabled() and torch._C._any_requires_grad(*args):
        return _tables_both_modes(functional, args, primals, n, inplace)
    outs = functional(*primals)
    outs = outs if n == 2 else (outs,)
    single = ops.apply_cos_sin if tables else ops.apply
    rest = primals[n:]
    duals = []
    for i, out in enumerate(outs):
        t = None if split[i][1] is None else single(split[i][1], *rest)
        if tables and (split[n][1] is not None or split[n + 1][1] is not None):
            cos, sin = rest[0], rest[1]
            ct = split[n][1] if split[n][1] is not None else torch.zeros_like(cos)
            st = split[n + 1][1] if split[n + 1][1] is not None else torch.zeros_like(sin)
            dt = single(primals[i], ct, st, *rest[2:])
            r = 2 * cos.shape[-1]
            if r < dt.shape[-1]:
                dt = torch.cat((dt[..., :r], torch.zeros_like(dt[..., r:])), dim=-1)
            t = dt if t is None else t + dt
        duals.append(out if t is None else _FWD.make_dual(out, t))
    if not inplace:
        return tuple(duals) if n == 2 else duals[0]
    if n == 1:
        args[0].copy_(duals[0])
    else:  # a write torch refuses goes first: q is left as it was
        write_all(args[:2], duals)
    return None


def _tables_both_modes(functional, args: tuple, primals: tuple, n: int, inplace: bool):
    """Caller tables with tangents and a reverse-mode gradient (forward-over-reverse: gradgradcheck, Hessian-vector
    products): the backward's results depend on the saved x, cos and sin, whose tangents the primal call would drop
    (a silent zero), so the tangents and the graph come from torch's own formula on the dual tensors (differentiable
    in both modes to any order, each tangent in its primal's dtype). The primal values are the operator's own: it
    runs on the primals without a graph (its checks too), and its results are written into the formula's outputs
    (no_grad, through detach(): the graph and the tangents stay the formula's; no backward saves these outputs)."""
    from ._torch_composite import dual_table_rotation

    with torch.no_grad():
        exact = functional(*primals)
    exact = exact if n == 2 else (exact,)
    cos, sin, positions, offset, layout, pairing, inverse = args[n:n + 7]
    rotated = [a.clone() if inplace else a for a in args[:n]]  # copy_ below must not change what backward saved
    outs = tuple(dual_table_rotation(a, cos, sin, positions, offset, layout, pairing, inverse) for a in rotated)
    with torch.no_grad():
        for out, value in zip(outs, exact):
            out.detach().copy_(value)
    if not inplace:
        return outs if n == 2 else outs[0]
    if n == 1:
        args[0].copy_(outs[0])
    else:  # a write torch refuses goes first: q is left as it was
        write_all(args[:2], outs)
    return None


_functorch_active = torch._C._are_functorch_transforms_active
try:
    from torch._functorch.utils import enable_single_level_autograd_function as _single_level
    from torch.autograd.function import _SingleLevelFunction
except ImportError:  # pragma: no cover - another torch: torch.func keeps the generated Function's own error
    _SingleLevelFunction = None


def _single_level_function(name: str, op, backward, setup_context):
    """The operator's formula as an autograd Function of one autograd level, for calls at a torch.func transform's
    level (grad, jacrev, hessian, vmap(grad), jvp(grad), ...). register_autograd's generated autograd.Function is
    refused there (torch.func asks a Function for setup_context and a vmap rule, as if it ran above the transforms),
    but the Autograd kernel already runs at one level, on that level's tensors: the Function records the formula
    there, as torch's own kernels do, and its forward redispatches below autograd to the next level (whose
    tangents, batching and gradients the operator's rules handle in turn); its backward calls the operators, so
    every composition of transforms differentiates it again. Arguments: the operator's, all of them, then the
    dispatch key set."""

    def forward(ctx, *args):
        keyset, args = args[-1], args[:-1]
        # the Function turns both modes off; the levels below have their own (as torch.func's own Functions do)
        with torch.enable_grad(), _FWD._set_fwd_grad_enabled(True), torch._C._AutoDispatchBelowAutograd():
            out = op.redispatch(keyset & _AFTER_AUTOGRAD, *args)
        setup_context(ctx, args, out)
        return out

    def backward_all(ctx, *grads):
        needs = ctx.needs_input_grad
        ctx.needs_input_grad = needs[:-1]
        try:
            return tuple(backward(ctx, *grads)) + (None,)
        finally:
            ctx.needs_input_grad = needs

    return type(f"SingleLevel_rotary_{name}", (_SingleLevelFunction,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward_all)})


def _register_autograd(name: str, backward, setup_context) -> None:
    """torch.library.register_autograd's formula for a functional operator, in an Autograd kernel that calls the
    backend kernel straight away when no gradient is needed and the tensors are plain CPU/CUDA tensors outside any
    mode (one trip through the dispatcher instead of two; measured in docs/performance.md)."""
    op = getattr(ops, name).default
    try:
        from torch._library.autograd import Info, make_autograd_impl  # what register_autograd itself uses
    except ImportError:  # pragma: no cover - another torch: the public API, without the shortcut
        torch.library.register_autograd(f"rotary::{name}", backward, setup_context=setup_context, lib=LIB)
        return
    with_grad = make_autograd_impl(op, Info(backward, setup_context))
    kernels = KERNELS[name]
    single = _single_level_function(name, op, backward, setup_context) if _SingleLevelFunction else None
    at = _N_ROTATED[name] + (2 if "cos_sin" in name else 0)  # the positions argument

    def kernel(keyset, *args):
        grad = torch.is_grad_enabled() and torch._C._any_requires_grad(*args)
        if grad and len(args) > at:  # before torch.func's refusal of registered formulas (torch.func.grad over positions)
            refuse_position_derivative(args[at], "rotary_apply")
        if grad and single is not None and _functorch_active():  # a torch.func transform's level
            with _single_level():
                return single.apply(*full_args(name, args), keyset)
        if _FWD._current_level >= 0 and has_tangent(*args):
            return _with_tangents(name, args)
        if grad:
            return with_grad(keyset, *args)
        below = keyset & _AFTER_AUTOGRAD
        direct = kernels.get(below.raw_repr())
        if direct is not None:
            return direct(*args)
        with torch._C._AutoDispatchBelowAutograd():
            return op.redispatch(below, *args)

    LIB.impl(name, kernel, "Autograd", with_keyset=True)

# ----------------------------------------------------------------------------------------------- spec operators


def refuse_position_grad(positions) -> None:
    """Fractional positions that require grad: rotary has no derivative with respect to them, and a silent None
    would read as a zero gradient; torch's ops without a formula raise likewise."""
    if positions is not None and positions.requires_grad:
        from ._arrays import _position_derivative_error

        raise _position_derivative_error("rotary_apply", "requires grad")


def _setup_spec(ctx, inputs, output):
    n = ctx._rotary_n
    positions = inputs[n]
    refuse_position_grad(positions)
    ctx.has_positions = positions is not None
    if positions is not None:
        ctx.save_for_backward(positions)  # version-checked: positions changed before backward raise
    ctx.rest = tuple(inputs[n + 1:])  # offset, spec, layout, pairing, inverse, seq_len, threads


def _spec_args(ctx):
    positions = ctx.saved_tensors[0] if ctx.has_positions else None
    offset, spec, layout, pairing, inverse, seq_len, threads = ctx.rest
    return positions, offset, spec, layout, pairing, not inverse, seq_len, threads


def _setup_apply(ctx, inputs, output):
    ctx._rotary_n = 1
    _setup_spec(ctx, inputs, output)


def _backward_apply(ctx, grad):
    return (ops.apply(grad, *_spec_args(ctx)),) + (None,) * 8


def _setup_apply_qk(ctx, inputs, output):
    ctx._rotary_n = 2
    _setup_spec(ctx, inputs, output)


def _backward_apply_qk(ctx, gq, gk):
    dq, dk = ops.apply_qk(gq, gk, *_spec_args(ctx))
    return (dq, dk) + (None,) * 8


_register_autograd("apply", _backward_apply, _setup_apply)
_register_autograd("apply_qk", _backward_apply_qk, _setup_apply_qk)

# ----------------------------------------------------------------------------------------------- caller cos/sin


def _split(x: torch.Tensor, half: int, pairing: str):
    xr = x[..., :2 * half]
    return (xr[..., 0::2], xr[..., 1::2]) if pairing == "interleaved" else (xr[..., :half], xr[..., half:])


def _head_axis(layout: str) -> int:
    return 1 if layout == "bhsd" else -2


def _table_grads(pairs, cos, sin, positions, offset, layout, pairing, inverse):
    """d loss / d cos and d sin for y = rotation of x by the caller's tables, given (x, grad_y) pairs."""
    half = cos.shape[-1]
    ct = torch.float64 if cos.dtype == torch.float64 else torch.float32
    gc = gs = None
    for x, g in pairs:
        if g is None:
            continue
        x1, x2 = (t.to(ct) for t in _split(x, half, pairing))
        g1, g2 = (t.to(ct) for t in _split(g, half, pairing))
        dc = (g1 * x1 + g2 * x2).sum(_head_axis(layout))
        ds = (g2 * x1 - g1 * x2).sum(_head_axis(layout))
        if inverse:
            ds = -ds
        gc = dc if gc is None else gc + dc
        gs = ds if gs is None else gs + ds
    # gc: per token, [B, S, h] (bshd/bhsd) or [T, h] (thd)
    if cos.dim() == 3:  # [B or 1, S, h] ([1, T, h] for thd): a table shared by the batch gets the sum over it
        if gc.dim() == 2:  # thd: [T, h] -> [1, T, h]
            gc, gs = gc.unsqueeze(0), gs.unsqueeze(0)
        return gc.sum_to_size(cos.shape).to(cos.dtype), gs.sum_to_size(sin.shape).to(sin.dtype)
    if positions is None:
        n = gc.shape[-2]
        ids = torch.arange(offset, offset + n, device=gc.device).expand(gc.shape[:-1])
    else:
        ids = positions.to(device=gc.device, dtype=torch.long).expand(gc.shape[:-1])
    flat = ids.reshape(-1)
    dcos = torch.zeros(cos.shape, dtype=ct, device=gc.device).index_put((flat,), gc.reshape(-1, half), accumulate=True)
    dsin = torch.zeros(sin.shape, dtype=ct, device=gs.device).index_put((flat,), gs.reshape(-1, half), accumulate=True)
    return dcos.to(cos.dtype), dsin.to(sin.dtype)


def _setup_tables(ctx, inputs, n):
    tensors = inputs[:n]
    cos, sin, positions = inputs[n], inputs[n + 1], inputs[n + 2]
    ctx.table_grads = any(ctx.needs_input_grad[n:n + 2])
    ctx.has_positions = positions is not None
    saved = [cos, sin] + ([positions] if positions is not None else [])
    if ctx.table_grads:
        saved += list(tensors)
    ctx.save_for_backward(*saved)
    ctx.rest = tuple(inputs[n + 3:])  # offset, layout, pairing, inverse, threads
    ctx.n = n


def _table_args(ctx):
    saved = ctx.saved_tensors
    cos, sin = saved[0], saved[1]
    positions = saved[2] if ctx.has_positions else None
    xs = saved[3 if ctx.has_positions else 2:]
    return cos, sin, positions, xs


def _setup_apply_cos_sin(ctx, inputs, output):
    _setup_tables(ctx, inputs, 1)


def _backward_apply_cos_sin(ctx, grad):
    cos, sin, positions, xs = _table_args(ctx)
    offset, layout, pairing, inverse, threads = ctx.rest
    dx = dcos = dsin = None
    if ctx.needs_input_grad[0]:
        dx = ops.apply_cos_sin(grad, cos, sin, positions, offset, layout, pairing, not inverse, threads)
    if ctx.table_grads:
        dcos, dsin = _table_grads([(xs[0], grad)], cos, sin, positions, offset, layout, pairing, inverse)
    return (dx, dcos, dsin) + (None,) * 6


def _setup_apply_qk_cos_sin(ctx, inputs, output):
    _setup_tables(ctx, inputs, 2)


def _backward_apply_qk_cos_sin(ctx, gq, gk):
    cos, sin, positions, xs = _table_args(ctx)
    offset, layout, pairing, inverse, threads = ctx.rest
    dq = dk = dcos = dsin = None
    if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
        dq, dk = ops.apply_qk_cos_sin(gq, gk, cos, sin, positions, offset, layout, pairing, not inverse, threads)
    if ctx.table_grads:
        dcos, dsin = _table_grads([(xs[0], gq), (xs[1], gk)], cos, sin, positions, offset, layout, pairing, inverse)
    return (dq, dk, dcos, dsin) + (None,) * 6


_register_autograd("apply_cos_sin", _backward_apply_cos_sin, _setup_apply_cos_sin)
_register_autograd("apply_qk_cos_sin", _backward_apply_qk_cos_sin, _setup_apply_qk_cos_sin)

# ----------------------------------------------------------------------------------------------- in-place operators

def _inplace_autograd(name: str, n_mutated: int):
    op = getattr(ops, name).default
    functional = getattr(ops, name[:-1]).default
    kernels = KERNELS[name]

    def kernel(keyset, *args):
        grad = torch.is_grad_enabled() and torch._C._any_requires_grad(*args)
        if _FWD._current_level >= 0 and not (grad and _functorch_active()) and has_tangent(*args):
            return _with_tangents(name, args)
        if grad:
            # As torch does for its in-place ops: the functional op is recorded and copy_ writes its result into the
            # mutated tensors (torch refuses a leaf requiring grad here, and bumps the version counters).
            # The functional op saves its rotated inputs when the tables need a gradient; copy_ below would change
            # them under it (torch's "modified by an inplace operation" in backward), so it rotates clones then.
            call = args
            if any(isinstance(a, torch.Tensor) and a.requires_grad for a in args[n_mutated:]):
                call = tuple(a.clone() if i < n_mutated else a for i, a in enumerate(args))
            outs = functional(*call)
            if n_mutated == 1:
                args[0].copy_(outs)
            else:  # a write torch refuses (k a leaf requiring grad, ...) goes first: q is left as it was
                write_all(args[:2], outs)
            return None
        below = keyset & _AFTER_AUTOGRAD
        direct = kernels.get(below.raw_repr())
        if direct is not None:
            return direct(*args)
        return op.redispatch(below, *args)

    LIB.impl(name, kernel, "Autograd", with_keyset=True)


_inplace_autograd("apply_", 1)
_inplace_autograd("apply_qk_", 2)
_inplace_autograd("apply_cos_sin_", 1)
_inplace_autograd("apply_qk_cos_sin_", 2)

# ----------------------------------------------------------------------------------------------- vmap

def _merge_spec_call(name, batch, in_dims, args):
    """Spec operators: the vmapped axis folded into the batch axis (thd becomes bshd); None if not possible."""
    n = _N_ROTATED[name]
    inplace = name.endswith("_")
    positions, offset, spec, layout = args[n], args[n + 1], args[n + 2], args[n + 3]
    pd = in_dims[n]
    if spec_of_key(spec, "rotary_apply").mrope_section:
        return None  # M-RoPE ids [3, ...] (or text-only ids of such a spec): one call per item
    if positions is not None and (positions.is_floating_point() or positions.dim() > (2 if pd is None else 3)):
        return None  # M-RoPE ids and others: one call per item
    if positions is not None and positions.dim() == (3 if pd is None else 4):
        return None
    rotated = []
    for t, d in zip(args[:n], in_dims[:n]):
        if d is None:
            if inplace:
                raise ValueError("[rotary_apply] vmap: an in-place rotation needs its tensors batched")
            t = t.unsqueeze(0).expand((batch,) + tuple(t.shape))
        else:
            t = t.movedim(d, 0)
        rotated.append(t)
    b0 = rotated[0].shape[1] if layout != "thd" else 1
    new_layout = "bshd" if layout == "thd" else layout
    seq_axis = {"bshd": 2, "bhsd": 3, "thd": 1}[layout]
    s = rotated[0].shape[seq_axis]
    merged = []
    for t in rotated:
        if layout == "thd":
            merged.append(t)
        else:
            try:
                merged.append(t.view((batch * t.shape[1],) + tuple(t.shape[2:])) if inplace
                              else t.reshape((batch * t.shape[1],) + tuple(t.shape[2:])))
            except RuntimeError:
                return None
    if positions is not None:
        p = positions.movedim(pd, 0) if pd is not None else positions.unsqueeze(0)
        if layout == "thd":  # [N or 1, T] -> ids [N, S]
            p = p.expand(batch, s)
        else:
            p = p if p.dim() == 3 else p.unsqueeze(1)  # [N or 1, B or 1, S]
            p = p.expand(batch, b0, s).reshape(batch * b0, s)
        positions = p
    op = getattr(ops, name).default
    out = op(*merged, positions, offset, spec, new_layout, *args[n + 4:])
    if inplace:
        return None, None
    outs = out if n == 2 else (out,)
    if layout != "thd":
        outs = tuple(o.reshape((batch, b0) + tuple(o.shape[1:])) for o in outs)
    return (outs if n == 2 else outs[0]), ((0, 0) if n == 2 else 0)


def _loop(name, batch, in_dims, args):
    """One operator call per vmapped item (views of the mutated tensors for in-place operators)."""
    op = getattr(ops, name).default
    inplace = name.endswith("_")
    if inplace:
        n = _N_ROTATED[name]
        if any(d is None for d in in_dims[:n]):
            raise ValueError("[rotary_apply] vmap: an in-place rotation needs its tensors batched")
    if batch == 0:  # an empty vmapped axis: one call on a zero item gives the items' shapes (and checks the rest)
        if inplace:
            return None, None
        item = [torch.zeros(a.shape[:d] + a.shape[d + 1:], dtype=a.dtype, device=a.device) if d is not None else a
                for a, d in zip(args, in_dims)]
        out = op(*item)
        empty = tuple(o.new_empty((0,) + tuple(o.shape)) for o in (out if isinstance(out, tuple) else (out,)))
        return (empty, (0,) * len(empty)) if isinstance(out, tuple) else (empty[0], 0)
    results = []
    for i in range(batch):
        item = [a.select(d, i) if d is not None else a for a, d in zip(args, in_dims)]
        results.append(op(*item))
    if inplace:
        return None, None
    if isinstance(results[0], tuple):
        return tuple(torch.stack(r) for r in zip(*results)), tuple(0 for _ in results[0])
    return torch.stack(results), 0


def _own_lengths(name, in_dims, args) -> bool:
    """Spec operators whose result depends on the length (dynamic, LongRoPE without seq_len) with batched positions:
    each item's length is max(its own positions) + 1, which one merged call would take over every item."""
    n = _N_ROTATED[name]
    if in_dims[n] is None or args[n + 6] is not None:  # positions not batched, or seq_len given
        return False
    return spec_of_key(args[n + 2], "rotary_apply").length_dependent


def _vmap_rule(name: str):
    spec_op = "cos_sin" not in name

    def rule(info, in_dims, *args):
        args = full_args(name, args)
        in_dims = tuple(in_dims) + (None,) * (len(args) - len(in_dims))
        if spec_op and not _own_lengths(name, in_dims, args):
            merged = _merge_spec_call(name, info.batch_size, in_dims, args)
            if merged is not None:
                return merged
        return _loop(name, info.batch_size, in_dims, args)

    return rule


def _cos_sin_vmap(info, in_dims, *args):
    """One call over every item where it equals the items' own calls: positions of one axis whose frequencies do
    not depend on the length (or with seq_len given). M-RoPE ids [3, ...] (the batch axis must follow the axes'
    one) and a length taken from each item's own positions take one call per item."""
    args = full_args("cos_sin", args)
    positions, spec, seq_len = args
    d = in_dims[0]
    if d is None:
        return ops.cos_sin(positions, spec, seq_len), (None, None)
    s = spec_of_key(spec, "rotary_cos_sin")
    if s.mrope_section or (seq_len is None and s.length_dependent):
        return _loop("cos_sin", info.batch_size, tuple(in_dims) + (None,) * (3 - len(in_dims)), args)
    c, sn = ops.cos_sin(positions, spec, seq_len)
    return (c, sn), (d % positions.dim(), d % positions.dim())


def _cos_sin_autograd(keyset, *args):
    """cos_sin has no derivative with respect to its positions: positions that need one are refused (torch's fallback
    gave outputs with a grad_fn and a None gradient), others go to the backend kernel."""
    refuse_position_derivative(args[0], "rotary_cos_sin")
    with torch._C._AutoDispatchBelowAutograd():
        return ops.cos_sin.default.redispatch(keyset & _AFTER_AUTOGRAD, *args)


LIB.impl("cos_sin", _cos_sin_autograd, "Autograd", with_keyset=True)

for _name in OPS:
    if _name == "cos_sin":
        torch.library.register_vmap("rotary::cos_sin", _cos_sin_vmap, lib=LIB)
    else:
        torch.library.register_vmap(f"rotary::{_name}", _vmap_rule(_name), lib=LIB)
