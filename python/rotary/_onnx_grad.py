"""The gradient of rotary.onnx_rotary_embedding with respect to a torch X that requires one: the inverse rotation."""
from __future__ import annotations

from typing import Any, Callable

_FUNCTION = None


def with_gradient(evaluate: Callable[[Any, bool], Any], X: Any, cos_cache: Any, sin_cache: Any, inverse: bool) -> Any:
    """Y = evaluate(X, inverse), recorded by autograd: dY/dX is the rotation by the opposite angle, so the gradient is
    evaluate(grad_Y, not inverse) (channels past rotary_embedding_dim pass through both ways). The caches' gradients
    are not computed: a cache that requires one is refused rather than silently left out of the graph."""
    import torch

    global _FUNCTION
    for name, t in (("cos_cache", cos_cache), ("sin_cache", sin_cache)):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise ValueError(f"[onnx_rotary_embedding] {name} must not require grad (gradients with respect to the "
                             f"caches are not computed here; rotary.torch.apply_cos_sin computes them), got a tensor "
                             f"that requires grad")
    if _FUNCTION is None:
        class OnnxRotaryEmbedding(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any, run: Callable[[Any, bool], Any], inv: bool) -> Any:
                ctx.run, ctx.inv = run, inv
                return run(x, inv)

            @staticmethod
            @torch.autograd.function.once_differentiable
            def backward(ctx: Any, grad: Any) -> Any:
                return ctx.run(grad.contiguous(), not ctx.inv), None, None

        _FUNCTION = OnnxRotaryEmbedding
    return _FUNCTION.apply(X, evaluate, bool(inverse))
