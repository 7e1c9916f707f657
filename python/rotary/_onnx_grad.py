"""rotary.onnx_rotary_embedding on torch tensors that need a derivative or a torch.func transform: autograd, forward
AD, vmap."""
from __future__ import annotations

from typing import Any, Callable

_FUNCTION = None


def _refuse_cache_derivative(name: str, how: str) -> ValueError:
    got = how.replace("carry", "carries").replace("require", "requires")
    return ValueError(f"[onnx_rotary_embedding] {name} must not {how} (derivatives with respect to the caches are not "
                      f"computed here; rotary.torch.apply_cos_sin computes them), got a tensor that {got}")


def with_gradient(evaluate: Callable[..., Any], X: Any, cos_cache: Any, sin_cache: Any, position_ids: Any,
                  inverse: bool) -> Any:
    """Y = evaluate(X, cos_cache, sin_cache, position_ids, inverse) (the kernel call on plain tensors), recorded for
    both AD modes and torch.func: dY/dX is the rotation by the opposite angle (the gradient is evaluate(grad_Y, ...,
    not inverse); channels past rotary_embedding_dim pass through both ways), the jvp the rotation of X's tangent,
    and vmap one call per item. The caches' derivatives are not computed: a cache that requires grad or carries a
    forward-mode tangent is refused rather than silently left out."""
    import torch

    from ._arrays import _carries_tangent

    global _FUNCTION
    for name, t in (("cos_cache", cos_cache), ("sin_cache", sin_cache)):
        if isinstance(t, torch.Tensor):
            if t.requires_grad and torch.is_grad_enabled():
                raise _refuse_cache_derivative(name, "require grad")
            if _carries_tangent(t):
                raise _refuse_cache_derivative(name, "carry a forward-mode tangent")
    if _FUNCTION is None:
        class OnnxRotaryEmbedding(torch.autograd.Function):
            @staticmethod
            def forward(x: Any, cos: Any, sin: Any, ids: Any, run: Callable[..., Any], inv: bool) -> Any:
                return run(x, cos, sin, ids, inv)

            @staticmethod
            def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
                x, cos, sin, ids, ctx.run, ctx.inv = inputs
                ctx.set_materialize_grads(False)  # the caches' missing tangents arrive as None, not zeros
                ctx.tensors = tuple(isinstance(t, torch.Tensor) for t in (cos, sin, ids))
                saved = [t for t in (cos, sin, ids) if isinstance(t, torch.Tensor)]
                ctx.others = tuple(None if isinstance(t, torch.Tensor) else t for t in (cos, sin, ids))
                ctx.save_for_backward(*saved)
                ctx.save_for_forward(*saved)

            @staticmethod
            def _tables(ctx: Any) -> tuple:
                saved = iter(ctx.saved_tensors)
                return tuple(next(saved) if is_t else o for is_t, o in zip(ctx.tensors, ctx.others))

            @staticmethod
            def backward(ctx: Any, grad: Any) -> Any:
                if grad is None:
                    return (None,) * 6
                y = OnnxRotaryEmbedding.apply(grad.contiguous(), *OnnxRotaryEmbedding._tables(ctx), ctx.run,
                                              not ctx.inv)
                return y, None, None, None, None, None

            @staticmethod
            def jvp(ctx: Any, x_t: Any, cos_t: Any, sin_t: Any, *_: Any) -> Any:
                for name, t in (("cos_cache", cos_t), ("sin_cache", sin_t)):
                    if t is not None:
                        raise _refuse_cache_derivative(name, "carry a forward-mode tangent")
                return OnnxRotaryEmbedding.apply(x_t, *OnnxRotaryEmbedding._tables(ctx), ctx.run, ctx.inv)

            @staticmethod
            def vmap(info: Any, in_dims: Any, x: Any, cos: Any, sin: Any, ids: Any, run: Any, inv: bool) -> Any:
                def item(t: Any, d: Any, i: int) -> Any:
                    return t if d is None else t.select(d, i)

                ys = [OnnxRotaryEmbedding.apply(*(item(t, d, i) for t, d in zip((x, cos, sin, ids), in_dims[:4])),
                                                run, inv) for i in range(info.batch_size)]
                return torch.stack(ys), 0

        _FUNCTION = OnnxRotaryEmbedding
    return _FUNCTION.apply(X, cos_cache, sin_cache, position_ids, evaluate, bool(inverse))
