"""rotary's in-place torch operators under torch.func transforms (their FuncTorchDynamicLayerFrontMode kernels).

torch.func checks an in-place op before it lifts the op's arguments to the transform's level: mutating a tensor
captured from outside the transformed function is refused ("would mutate a captured Tensor"), because the write is
invisible to the transform (a silent zero gradient or tangent). torch recognises an in-place op by its schema
returning its first argument; rotary's in-place operators return (), so they get that check here, on the arguments
as the caller passed them. Then, at a grad / jvp / functionalize level, the operator is the functional operator plus
copy_ (as torch's composite in-place ops), so the transform's own rules - its check of copy_ into a view of a
captured tensor included - apply to each part; at a vmap level the operator's vmap rule runs on the unbatched
tensors one level down (as torch.library.register_vmap's kernel does). Outside torch.func transforms this key is not
dispatched to, and the operators' other kernels (rotary/_torch_autograd.py) run as they are.
"""
from __future__ import annotations

import torch

from ._torch_autograd import _vmap_rule
from ._torch_ops import LIB, full_args, write_all

ops = torch.ops.rotary

try:
    from torch._functorch.autograd_function import VmapInfo
    from torch._functorch.pyfunctorch import TransformType, retrieve_current_functorch_interpreter
    from torch._functorch.vmap import unwrap_batched
except ImportError:  # pragma: no cover - another torch: the operators keep torch's own front-mode handling
    retrieve_current_functorch_interpreter = None

_ku = torch._C._functorch
_WHICH = {"Grad": "torch.func.grad / vjp / jacrev", "Jvp": "torch.func.jvp / jacfwd"}


def captured_error(name: str, arg: str, transform: str) -> RuntimeError:
    return RuntimeError(
        f"[rotary_{name}] {arg} must be a tensor made inside the function that {transform} transforms, got a "
        f"tensor captured from outside it: its in-place rotation would be invisible to the transform (a zero "
        f"gradient or tangent; torch refuses its own in-place ops on captured tensors likewise). Clone it inside "
        f"the function ({arg} = {arg}.clone()) and use the clone, or call the functional operator "
        f"torch.ops.rotary.{name[:-1]}")


def _front_kernel(name: str, n: int):
    op = getattr(ops, name).default
    functional = getattr(ops, name[:-1]).default
    names = [a.name for a in op._schema.arguments[:n]]
    tables = "cos_sin" in name
    rule = _vmap_rule(name)

    def kernel(keyset, *args):
        args = tuple(_ku.unwrap_if_dead(a) if isinstance(a, torch.Tensor) else a for a in full_args(name, args))
        interpreter = retrieve_current_functorch_interpreter()
        kind, level = interpreter.key(), interpreter.level()
        if kind == TransformType.Vmap:
            unwrapped, in_dims = unwrap_batched(args, level)
            with interpreter.lower():
                if all(d is None for d in in_dims):  # nothing batched at this level
                    op(*unwrapped)
                else:
                    info = VmapInfo(batch_size=interpreter.batch_size(), randomness=interpreter.randomness())
                    rule(info, in_dims, *unwrapped)
            return None
        if kind.name in _WHICH:
            for arg, t in zip(names, args[:n]):
                if _ku.maybe_get_level(t) != level:
                    raise captured_error(name, arg, _WHICH[kind.name])
            if n == 2:  # a write torch refuses (a view of a captured tensor, of a leaf) raises here, before either
                for t in args[:2]:  # is written: the same check on an empty view of each, which writes nothing
                    empty = t[..., :0]
                    empty.copy_(empty)
        # the functional operator saves its rotated inputs when the tables need a gradient (at any level): it
        # rotates clones, so copy_ below leaves what it saved as it was
        call = tuple(a.clone() for a in args[:n]) if tables else args[:n]
        outs = functional(*call, *args[n:])
        if n == 1:
            args[0].copy_(outs)
        else:  # a write torch refuses goes first: q is left as it was
            write_all(args[:2], outs)
        return None

    return kernel


if retrieve_current_functorch_interpreter is not None:
    for _name, _n in (("apply_", 1), ("apply_qk_", 2), ("apply_cos_sin_", 1), ("apply_qk_cos_sin_", 2)):
        LIB.impl(_name, _front_kernel(_name, _n), "FuncTorchDynamicLayerFrontMode", with_keyset=True)
