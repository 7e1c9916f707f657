"""rotary's PyTorch entries at the edges of differentiation: refused writes, positions, dual outputs, transforms."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import numpy as np  # noqa: E402

import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402

fwAD = torch.autograd.forward_ad
SPEC = rotary.Spec(head_dim=16)


def _tables(n=8):
    return tuple(torch.from_numpy(t) for t in rotary.cos_sin(SPEC, n))


@pytest.mark.parametrize("case", ["k leaf requires grad", "k inference tensor, cos requires grad",
                                  "q leaf requires grad"])
def test_apply_qk_cos_sin_in_place_refused_write_leaves_both_unchanged(case):
    # The gradient path rotated q in place, then k's write was refused: q was left rotated (|q - q0| ~ 3).
    c, s = _tables()
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 4, 2, 16, generator=g), torch.randn(1, 4, 1, 16, generator=g)
    if case == "k leaf requires grad":
        k.requires_grad_()
    elif case == "q leaf requires grad":
        q.requires_grad_()
    else:
        with torch.inference_mode():
            k = torch.randn(1, 4, 1, 16)
        c = c.clone().requires_grad_()
    q0, k0 = q.detach().clone(), k.detach().clone()
    with pytest.raises(RuntimeError, match="leaf Variable|inference tensor"):
        rotary.apply_qk_cos_sin(q, k, c, s, 0, inplace=True)
    assert torch.equal(q.detach(), q0) and torch.equal(k.detach(), k0)


def test_apply_qk_cos_sin_in_place_records_both_rotations():
    c, s = _tables()
    c = c.clone().requires_grad_()
    qa, ka = torch.randn(1, 4, 2, 16, requires_grad=True), torch.randn(1, 4, 1, 16, requires_grad=True)
    q, k = qa * 1, ka * 1
    rq, rk = rotary.apply_qk_cos_sin(q, k, c, s, 0, inplace=True)
    assert rq is q and rk is k
    ref_q, ref_k = rt.apply_cos_sin(qa, c, s, 0), rt.apply_cos_sin(ka, c, s, 0)
    assert torch.allclose(q, ref_q) and torch.allclose(k, ref_k)
    w = torch.randn_like(q), torch.randn_like(k)
    got = torch.autograd.grad((q * w[0]).sum() + (k * w[1]).sum(), (qa, ka, c))
    want = torch.autograd.grad((ref_q * w[0]).sum() + (ref_k * w[1]).sum(), (qa, ka, c))
    for a, b in zip(got, want):
        assert torch.allclose(a, b, atol=1e-5)
