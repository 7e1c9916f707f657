"""rotary.torch: the seed module drop-in, autograd (gradcheck, grads vs reference), HF apply_rotary_pos_emb."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from reference import default_inv_freq, rotate  # noqa: E402
from torch_reference import rotate_by_tables  # noqa: E402


# ----------------------------------------------------------------------------- the seed's module, verbatim
class SeedRoPE(nn.Module):
    def __init__(self, n_embed, base=10000):
        super().__init__()
        self.base = base
        self.n_embed = n_embed
        self.register_buffer('cos_cache', None)  # (T, C)
        self.register_buffer('sin_cache', None)

    def _build_cache(self, x):
        seq_len = x.size(-2)
        if self.cos_cache is not None and seq_len <= self.cos_cache.size(-2):
            return
        theta = 1. / (self.base ** (torch.arange(0, self.n_embed, 2).float() / self.n_embed))
        seq_idx = torch.arange(seq_len, device=x.device)
        idx_theta = torch.outer(seq_idx, theta)  # (T, C / 2)
        idx_theta = torch.cat([idx_theta, idx_theta], dim=-1)  # (T, C)
        self.cos_cache = idx_theta.cos()
        self.sin_cache = idx_theta.sin()

    def forward(self, x):
        # x: (B, T, C)
        seq_len = x.size(-2)
        self._build_cache(x)
        cos = self.cos_cache[:seq_len, :]
        sin = self.sin_cache[:seq_len, :]

        # [x_front, x_back] -> [-x_back, x_front]
        x_front, x_back = torch.chunk(x, 2, dim=-1)
        x_shift = torch.cat([-x_back, x_front], dim=-1)

        x_rope = x * cos + x_shift * sin
        return x_rope
# -----------------------------------------------------------------------------


def _truth(x: torch.Tensor, base: float) -> np.ndarray:
    """float64 truth for the seed's computation on x (..., T, C)."""
    T, C = x.shape[-2:]
    ang = np.arange(T, dtype=np.float64)[:, None] * default_inv_freq(base, C)[None, :]
    return rotate(x.double().numpy(), ang)


@pytest.mark.parametrize("shape,base", [((2, 16, 64), 10000), ((3, 200, 128), 10000), ((1, 1024, 32), 500000),
                                        ((2, 3, 50, 16), 10000), ((40, 8), 10000)])
def test_seed_module_dropin(shape, base):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    seed = SeedRoPE(shape[-1], base=base)
    ours = rt.RoPE(shape[-1], base=base)
    y_seed = seed(x)
    y = ours(x)
    assert y.shape == y_seed.shape and y.dtype == y_seed.dtype
    T = shape[-2]
    # The seed forms angles t*theta in float32 (error ~ t * theta * 2^-24 rad) and its theta in float32 pow;
    # rotary's angles are exact. Their difference is bounded by the seed's angle error times |x| (~4):
    seed_angle_err = 4 * 2.0 ** -24 * (T + 1) + 1e-6
    np.testing.assert_allclose(y.numpy(), y_seed.numpy(), rtol=0, atol=4 * seed_angle_err + 4e-6)
    truth = _truth(x, base)
    err_ours = np.abs(y.double().numpy() - truth).max()
    err_seed = np.abs(y_seed.double().numpy() - truth).max()
    assert err_ours <= 4e-6, err_ours
    assert err_ours <= err_seed + 1e-7


def test_seed_module_dtype_promotion_and_state():
    x = torch.randn(2, 8, 32, dtype=torch.bfloat16)
    y_seed = SeedRoPE(32)(x)
    y = rt.RoPE(32)(x)
    assert y.dtype == y_seed.dtype == torch.float32
    np.testing.assert_allclose(y.numpy(), y_seed.numpy(), atol=1e-5)
    assert dict(rt.RoPE(32).state_dict()) == dict(SeedRoPE(32).state_dict()) == {}
    assert y.shape == x.shape


def test_seed_module_rejects_wrong_width():
    with pytest.raises(ValueError, match="n_embed"):
        rt.RoPE(32)(torch.randn(1, 4, 16))


def test_gradcheck_f64():
    spec = rotary.Spec(16, 12, base=100.0)
    for layout, shape in (("bshd", (2, 5, 3, 16)), ("bhsd", (1, 2, 6, 16))):
        x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
        pos = torch.tensor([3, 1, 4, 1, 5] if layout == "bshd" else [0, 2, 4, 6, 8, 10])
        assert torch.autograd.gradcheck(lambda t: rt.apply(t, pos, spec, layout=layout), (x,), eps=1e-6, atol=1e-7)
        assert torch.autograd.gradgradcheck(lambda t: rt.apply(t, pos, spec, layout=layout), (x,), eps=1e-6,
                                            atol=1e-7)
    seed = rt.RoPE(8)
    x = torch.randn(2, 7, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(seed, (x,), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_gradients_equal_autograd_through_reference(pairing):
    torch.manual_seed(1)
    spec = rotary.Spec(32, 24, base=1e4, pairing=pairing, rope_type="linear", factor=2.0)
    x = torch.randn(2, 9, 4, 32, dtype=torch.float32, requires_grad=True)
    pos = torch.randint(0, 1000, (2, 9))
    w = torch.randn(2, 9, 4, 32)
    (rt.apply(x, pos, spec) * w).sum().backward()
    g_ours = x.grad.clone()

    # autograd through a torch transcription of the reference formula (float64 angles)
    inv, af = spec.frequencies()
    ang = pos.numpy()[..., None, None] * inv  # [B, S, 1, h], float64
    c = torch.from_numpy(np.cos(ang) * af).float()
    s = torch.from_numpy(np.sin(ang) * af).float()
    x2 = x.detach().clone().requires_grad_(True)
    h = inv.shape[0]
    if pairing == "half":
        a, b = x2[..., :h], x2[..., h:2 * h]
        y = torch.cat((a * c - b * s, b * c + a * s, x2[..., 2 * h:]), dim=-1)
    else:
        a, b = x2[..., 0:2 * h:2], x2[..., 1:2 * h:2]
        y = torch.cat((torch.stack((a * c - b * s, b * c + a * s), -1).flatten(-2), x2[..., 2 * h:]), dim=-1)
    (y * w).sum().backward()
    np.testing.assert_allclose(g_ours.numpy(), x2.grad.numpy(), atol=1e-5)


# ----------------------------------------------------------------------------- HF apply_rotary_pos_emb
transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402


def _hf_cos_sin(head_dim, positions, dtype, rope_parameters=None):
    cfg = LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                      max_position_embeddings=4096, rope_parameters=rope_parameters)
    emb = modeling_llama.LlamaRotaryEmbedding(cfg)
    x = torch.zeros(1, dtype=dtype)
    return emb(x, positions)


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-6), (torch.bfloat16, 1.6e-2)])
@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_apply_rotary_pos_emb_matches_transformers(dtype, atol, unsqueeze_dim):
    torch.manual_seed(2)
    B, S, Hq, Hk, D = 2, 13, 8, 2, 64  # GQA
    pos = torch.randint(0, 2000, (B, S))
    cos, sin = _hf_cos_sin(D, pos, dtype, {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                                           "original_max_position_embeddings": 1024})
    if unsqueeze_dim == 1:
        q, k = torch.randn(B, Hq, S, D).to(dtype), torch.randn(B, Hk, S, D).to(dtype)
    else:
        q, k = torch.randn(B, S, Hq, D).to(dtype), torch.randn(B, S, Hk, D).to(dtype)
    qh, kh = modeling_llama.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    qr, kr = rt.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    assert qr.dtype == qh.dtype and kr.shape == kh.shape
    ud = unsqueeze_dim
    c64, s64 = cos.double().unsqueeze(ud), sin.double().unsqueeze(ud)
    for x, ours, hf in ((q, qr, qh), (k, kr, kh)):
        x64 = x.double()
        a, b = x64 * c64, modeling_llama.rotate_half(x64) * s64
        truth = (a + b).numpy()  # the same cos/sin values, exact arithmetic
        o, h = ours.double().numpy(), hf.double().numpy()
        if dtype == torch.float32:
            # rotary: f32 arithmetic, one rounding; HF: two products and a sum rounded in f32.
            bound = 2.0 ** -23 * (np.abs(a.numpy()) + np.abs(b.numpy())) + 1e-7
            assert np.all(np.abs(o - truth) <= bound)
            assert np.all(np.abs(o - h) <= 2 * bound)
        else:
            # bf16: rotary rounds once (half an ulp of the result, 2^-8 relative); HF rounds each product and
            # the sum to bf16, so it may be ~1.5 ulp of max(|q*cos|, |rot(q)*sin|) away from the truth.
            half_ulp = 2.0 ** -8 * np.abs(truth) + 1e-30
            assert np.all(np.abs(o - truth) <= half_ulp * 1.001)
            hf_bound = 2.0 ** -8 * (np.abs(a.numpy()) + np.abs(b.numpy()) + np.abs(truth))
            assert np.all(np.abs(h - truth) <= hf_bound)
            assert np.all(np.abs(o - h) <= hf_bound + half_ulp)
        np.testing.assert_allclose(o, h, rtol=0, atol=atol * 2)


def test_apply_rotary_pos_emb_autograd_and_fallbacks():
    torch.manual_seed(3)
    B, S, H, D = 1, 6, 2, 16
    pos = torch.arange(S)[None]
    cos, sin = _hf_cos_sin(D, pos, torch.float64)
    q = torch.randn(B, H, S, D, dtype=torch.float64, requires_grad=True)
    k = torch.randn(B, H, S, D, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rt.apply_rotary_pos_emb(a, b, cos, sin), (q, k), eps=1e-6,
                                    atol=1e-7)
    # tables requiring grad take the torch formula: HF's values and HF's gradients, each half of cos and sin its own
    # (through the kernel, which reads the first R/2 columns, the second halves got zeros and the first the sums)
    grads = []
    for fn in (rt.apply_rotary_pos_emb, modeling_llama.apply_rotary_pos_emb):
        c2, s2 = cos.clone().requires_grad_(True), sin.clone().requires_grad_(True)
        qa, ka = fn(q, k, c2, s2)
        (qa * torch.linspace(-1, 1, D, dtype=torch.float64) + ka).sum().backward()
        grads.append((qa.detach(), c2.grad, s2.grad))
    for ours, hf in zip(*grads):
        torch.testing.assert_close(ours, hf, rtol=0, atol=1e-12)
    assert grads[0][1][..., D // 2:].abs().sum() > 0
    # partial rotary (R < D): channels R.. pass through
    cos2, sin2 = cos[:, :, :8], sin[:, :, :8]
    qb, kb = rt.apply_rotary_pos_emb(q.detach(), k.detach(), cos2, sin2)
    c4, s4 = cos2[..., :4].numpy()[:, None], sin2[..., :4].numpy()[:, None]  # the values used as given
    x = q.detach().numpy()
    want = x.copy()
    want[..., :4] = x[..., :4] * c4 - x[..., 4:8] * s4
    want[..., 4:8] = x[..., 4:8] * c4 + x[..., :4] * s4
    np.testing.assert_allclose(qb.numpy(), want, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(qb.numpy()[..., 8:], x[..., 8:])
    # 2-D [S, D] tables: HF's cos.unsqueeze(1) = [S, 1, D] pairs the rows with the heads of [B, H, S, D]; rotary gives
    # HF's result (it used to pair row s with position s, so with H == S the two differed), or HF's error.
    qs, ks = torch.randn(2, 4, 4, 16, dtype=torch.float64), torch.randn(2, 4, 4, 16, dtype=torch.float64)
    c2d, s2d = _hf_cos_sin(D, torch.arange(4)[None], torch.float64)
    for ud in (0, 1):
        for ours, hf in zip(rt.apply_rotary_pos_emb(qs, ks, c2d[0], s2d[0], unsqueeze_dim=ud),
                            modeling_llama.apply_rotary_pos_emb(qs, ks, c2d[0], s2d[0], unsqueeze_dim=ud)):
            torch.testing.assert_close(ours, hf, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="must match the size"):
        rt.apply_rotary_pos_emb(q.detach(), k.detach(), cos[0], sin[0])  # H 2 != S 6, as HF raises
    # dtypes as HF's promotion gives them: a bf16 q (autocast) with f32 tables gives f32; q and k each their own
    qb16 = torch.randn(1, 2, 6, 16).to(torch.bfloat16)
    c32, s32 = cos.float(), sin.float()
    for ours, hf in zip(rt.apply_rotary_pos_emb(qb16, qb16.double(), c32, s32),
                        modeling_llama.apply_rotary_pos_emb(qb16, qb16.double(), c32, s32)):
        assert ours.dtype == hf.dtype
        torch.testing.assert_close(ours, hf, rtol=0, atol=1e-6)


@pytest.mark.parametrize("layout,shape", [("bshd", (2, 7, 3, 32)), ("bhsd", (2, 3, 7, 32)), ("thd", (7, 3, 32))])
@pytest.mark.parametrize("pos_rank", [0, 1, 2])
def test_device_composite_matches_kernel(layout, shape, pos_rank):
    """The torch-composite path used for device tensors (forced here on CPU) equals the kernel path."""
    from rotary import _torch_composite

    if layout == "thd" and pos_rank == 2:
        pytest.skip("thd takes 1-D positions")
    torch.manual_seed(4)
    spec = rotary.Spec(32, 24, base=1e4, pairing="interleaved")
    x = torch.randn(*shape, dtype=torch.float64)
    pos = {0: 5, 1: torch.arange(3, 10), 2: torch.randint(0, 99, (2, 7))}[pos_rank]
    for inverse in (False, True):
        with _torch_composite.forced():
            a = rt.apply(x, pos, spec, layout=layout, inverse=inverse)
        b = rt.apply(x, pos, spec, layout=layout, inverse=inverse)
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7)


def test_empty_calls_are_validated_like_the_others():
    """13.15: an empty call with a wrong head_dim, an integer dtype or a negative offset is refused like a
    non-empty one (the operators used to return before validating anything)."""
    spec = rotary.Spec(8)
    rt.apply(torch.zeros(0, 3, 2, 8), 0, spec)  # valid and empty: nothing to do
    with pytest.raises(ValueError, match="head_dim"):
        rt.apply(torch.zeros(0, 3, 2, 7), 0, spec)
    with pytest.raises(ValueError, match="offset"):
        rt.apply(torch.zeros(1, 0, 2, 8), -5, spec)
    with pytest.raises(TypeError):
        rt.apply(torch.zeros(0, 3, 2, 8, dtype=torch.int32), 0, spec)
    with pytest.raises(ValueError, match="head_dim"):
        rt.apply_qk(torch.zeros(0, 3, 2, 8), torch.zeros(0, 3, 2, 6), 0, spec)


def test_rope_module_on_empty_inputs():
    """13.20: RoPE on T = 0 (or an empty batch) returns an empty tensor of the input's shape."""
    rope = rt.RoPE(16)
    for shape in ((2, 0, 16), (0, 5, 16), (0, 16)):
        y = rope(torch.randn(shape))
        assert y.shape == shape and y.dtype == torch.float32


_rotate_by_tables = rotate_by_tables


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_thd_per_token_tables_get_their_gradients(pairing):
    # thd with per-token tables [1, T, R/2] that require grad: backward raised torch's "size {[1, 7, 6]} is not
    # expandable to size {[7, 6]}" (the tables' gradient was built [T, R/2] and summed to [1, T, R/2]).
    g = torch.Generator().manual_seed(21)
    T, H, D, h = 7, 3, 16, 6
    x = torch.randn(T, H, D, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(T, 1, D, dtype=torch.float64, generator=g, requires_grad=True)
    cos = torch.rand(1, T, h, dtype=torch.float64, generator=g, requires_grad=True)
    sin = torch.rand(1, T, h, dtype=torch.float64, generator=g, requires_grad=True)
    wx, wk = torch.randn_like(x), torch.randn_like(k)
    ops = torch.ops.rotary
    ref_x = _rotate_by_tables(x, cos[0][:, None], sin[0][:, None], pairing)
    ref_k = _rotate_by_tables(k, cos[0][:, None], sin[0][:, None], pairing)
    want = torch.autograd.grad((ref_x * wx).sum(), (x, cos, sin), retain_graph=True)
    want_qk = torch.autograd.grad((ref_x * wx).sum() + (ref_k * wk).sum(), (x, k, cos, sin))
    for f in (lambda: rt.apply_cos_sin(x, cos, sin, layout="thd", pairing=pairing),
              lambda: ops.apply_cos_sin(x, cos, sin, None, 0, "thd", pairing)):
        got = torch.autograd.grad((f() * wx).sum(), (x, cos, sin))
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    qo, ko = ops.apply_qk_cos_sin(x, k, cos, sin, None, 0, "thd", pairing)
    got = torch.autograd.grad((qo * wx).sum() + (ko * wk).sum(), (x, k, cos, sin))
    torch.testing.assert_close(got, want_qk, rtol=0, atol=1e-12)
    xf, cf, sf = x.detach().float(), cos.detach().float().requires_grad_(), sin.detach().float().requires_grad_()
    got = torch.autograd.grad((ops.apply_cos_sin(xf, cf, sf, None, 0, "thd", pairing) * wx.float()).sum(), (cf, sf))
    torch.testing.assert_close(got, want[1:], rtol=0, atol=1e-5, check_dtype=False)
    gc = torch.func.grad(lambda c: (rt.apply_cos_sin(x.detach(), c, sin.detach(), layout="thd", pairing=pairing)
                                    * wx).sum())(cos.detach())
    torch.testing.assert_close(gc, want[1], rtol=0, atol=1e-12)
    torch.autograd.gradcheck(lambda c, s: ops.apply_cos_sin(x.detach()[:3], c, s, None, 0, "thd", pairing),
                             (cos[:, :3].detach().requires_grad_(), sin[:, :3].detach().requires_grad_()))


def test_forward_mode_ad_rotates_the_tangents():
    # With torch.autograd.forward_ad the tangents came back None through rt.apply / ops.apply / apply_qk / RoPE /
    # apply_rotary_emb / apply_rotary_pos_emb, unrotated through in-place ops.apply_ / rt.apply(inplace=True), and
    # torch.func.jvp of torch.ops.rotary.* gave zeros (the registered formulas give reverse mode only).
    fwd = torch.autograd.forward_ad
    ops = torch.ops.rotary
    spec = rotary.Spec(16)
    key = rt.spec_key(spec)
    g = torch.Generator().manual_seed(31)
    x = torch.randn(2, 4, 3, 16, dtype=torch.float64, generator=g)
    t = torch.randn(2, 4, 3, 16, dtype=torch.float64, generator=g)
    pos = torch.tensor([[0, 3, 5, 9], [2, 2, 7, 1]])
    ang = pos[..., None].double() * torch.from_numpy(default_inv_freq(1e4, 16))
    c, s = ang.cos()[:, :, None], ang.sin()[:, :, None]
    want = _rotate_by_tables(t, c, s, "half")
    tc, ts = torch.randn(12, 8, dtype=torch.float64, generator=g), torch.randn(12, 8, dtype=torch.float64, generator=g)
    table = torch.arange(12)[:, None].double() * torch.from_numpy(default_inv_freq(1e4, 16))
    cos, sin = table.cos(), table.sin()
    tol = dict(rtol=0, atol=1e-6)  # the kernel's float32 cos/sin (f32 tensors: f32 rounding)
    calls = {"rt.apply": lambda d: rt.apply(d, pos, spec), "ops.apply": lambda d: ops.apply(d, pos, 0, key),
             "rt.apply_qk": lambda d: rt.apply_qk(d, x[:, :, :1], pos, spec)[0],
             "ops.apply_qk k": lambda d: ops.apply_qk(x[:, :, :2], d, pos, 0, key)[1],
             "ops.apply_cos_sin f32": lambda d: ops.apply_cos_sin(d.float(), cos.float(), sin.float(), pos).double(),
             "rt.apply_cos_sin": lambda d: rt.apply_cos_sin(d, cos, sin, pos),
             "ops.apply_qk_cos_sin": lambda d: ops.apply_qk_cos_sin(d, x, cos, sin, pos)[0],
             "ops.apply_": lambda d: (ops.apply_(d, pos, 0, key), d)[1],
             "rt.apply inplace": lambda d: rt.apply(d, pos, spec, inplace=True),
             "ops.apply_qk_": lambda d: (ops.apply_qk_(d, x.clone(), pos, 0, key), d)[1],
             "ops.apply_cos_sin_": lambda d: (ops.apply_cos_sin_(d, cos, sin, pos), d)[1]}
    for name, f in calls.items():
        with fwd.dual_level():
            y = f(fwd.make_dual(x.clone(), t.clone()))
            got = fwd.unpack_dual(y).tangent
        assert got is not None, name
        torch.testing.assert_close(got, want, **tol, msg=name)
    xs = x[:, :, 0].contiguous()  # RoPE and flash-attn's apply_rotary_emb at positions 0..3
    ang0 = torch.arange(4)[:, None].double() * torch.from_numpy(default_inv_freq(1e4, 16))
    want0 = _rotate_by_tables(t[:, :, 0], ang0.cos(), ang0.sin(), "half")
    for name, f in {"RoPE": lambda d: rt.RoPE(16)(d),
                    "apply_rotary_emb": lambda d: rt.apply_rotary_emb(d[:, :, None], cos.float(), sin.float())[:, :, 0],
                    "apply_rotary_pos_emb": lambda d: rt.apply_rotary_pos_emb(
                        d[:, None], d[:, None], torch.cat((ang0.cos(), ang0.cos()), -1)[None],
                        torch.cat((ang0.sin(), ang0.sin()), -1)[None])[0][:, 0]}.items():
        with fwd.dual_level():
            y = f(fwd.make_dual(xs.float() if name == "apply_rotary_emb" else xs, t[:, :, 0].clone()))
            got = fwd.unpack_dual(y).tangent
        assert got is not None, name
        torch.testing.assert_close(got.double(), want0, **tol, msg=name)
    # torch.func.jvp of the operators, tables' tangents included (against the plain-torch formula's jvp)
    for f in (lambda u: ops.apply(u, pos, 0, key), lambda u: ops.apply_qk(u, x, pos, 0, key)[0]):
        torch.testing.assert_close(torch.func.jvp(f, (x,), (t,))[1], want, **tol)
    xf, cf, sf = x.float(), cos.float(), sin.float()
    got = torch.func.jvp(lambda u, a, b: ops.apply_cos_sin(u, a, b, pos), (xf, cf, sf), (t.float(), tc.float(),
                                                                                        ts.float()))[1]
    ref = torch.func.jvp(lambda u, a, b: _rotate_by_tables(u, a[pos][:, :, None], b[pos][:, :, None], "half"),
                         (x, cos, sin), (t, tc, ts))[1]
    torch.testing.assert_close(got.double(), ref, rtol=0, atol=1e-5)
    xg = x[:1, :2, :1].clone().requires_grad_()
    torch.autograd.gradcheck(lambda u: rt.apply(u, pos[:1, :2], spec), (xg,), check_forward_ad=True)
    torch.autograd.gradcheck(lambda u, a, b: ops.apply_cos_sin(u, a, b, pos[:1, :2]),
                             (xg, cos.clone().requires_grad_(), sin.clone().requires_grad_()), check_forward_ad=True)


def test_forward_over_reverse_through_caller_tables():
    # grad(create_graph=True) inside a forward-AD level (gradgradcheck's check_fwd_over_rev, Hessian-vector products)
    # gave the gradients no tangent through the caller-table operators: the backward's saved x/cos/sin had lost theirs.
    fwd = torch.autograd.forward_ad
    ops = torch.ops.rotary
    g = torch.Generator().manual_seed(41)
    x, w, tx = (torch.randn(2, 3, 2, 6, dtype=torch.float64, generator=g) for _ in range(3))
    cos, sin, tc = (torch.randn(5, 2, dtype=torch.float64, generator=g) for _ in range(3))  # 4 rotated, 2 pass
    pos = torch.tensor([[0, 4, 2], [1, 1, 3]])
    calls = {"ops.apply_cos_sin": lambda u, c, s: ops.apply_cos_sin(u, c, s, pos),
             "rt.apply_cos_sin": lambda u, c, s: rt.apply_cos_sin(u, c, s, pos, pairing="interleaved"),
             "ops.apply_qk_cos_sin": lambda u, c, s: ops.apply_qk_cos_sin(u, u * 2, c, s, pos)[1],
             "ops.apply_cos_sin_": lambda u, c, s: (ops.apply_cos_sin_(v := u.clone(), c, s, pos), v)[1]}
    for name, f in calls.items():
        pairing = "interleaved" if name == "rt.apply_cos_sin" else "half"

        def ref(u, c, s):
            return _rotate_by_tables(u, c[pos][:, :, None], s[pos][:, :, None], pairing) * (2 if "qk" in name else 1)

        with fwd.dual_level():
            xd = fwd.make_dual(x.clone(), tx).requires_grad_()
            cd = fwd.make_dual(cos.clone(), tc).requires_grad_()
            sd = sin.clone().requires_grad_()
            got = [fwd.unpack_dual(t).tangent for t in torch.autograd.grad(
                (f(xd, cd, sd) * w).sum(), (xd, cd, sd), create_graph=True)]
            want = [fwd.unpack_dual(t).tangent for t in torch.autograd.grad(
                (ref(xd, cd, sd) * w).sum(), (xd, cd, sd), create_graph=True)]
        for a, b in zip(got, want):
            assert a is not None, name
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12, msg=name)
        args = (x[:, :, :1].clone().requires_grad_(), cos.clone().requires_grad_(), sin.clone().requires_grad_())
        assert torch.autograd.gradgradcheck(f, args, check_fwd_over_rev=True), name


def test_array_functions_carry_forward_mode_tangents():
    # rotary.apply / apply_qk / apply_cos_sin / apply_qk_cos_sin (in place too) / apply_context_parallel dropped a
    # dual x's tangent (None; unrotated in place) and torch.func.jvp(rotary.apply) raised nanobind's "incompatible
    # function arguments": only requires_grad sent a tensor through rotary.torch.
    fwd = torch.autograd.forward_ad
    spec = rotary.Spec(8)
    g = torch.Generator().manual_seed(43)
    x, t = (torch.randn(1, 3, 2, 8, dtype=torch.float64, generator=g) for _ in range(2))
    ang = torch.arange(3)[:, None].double() * torch.from_numpy(default_inv_freq(1e4, 8))
    cos, sin = ang.cos(), ang.sin()
    want = _rotate_by_tables(t, cos[:, None], sin[:, None], "half")
    calls = {"apply": lambda a: rotary.apply(a, 0, spec), "apply_qk": lambda a: rotary.apply_qk(x, a, 0, spec)[1],
             "apply_qk inplace": lambda a: rotary.apply_qk(a, a[:, :, :1].clone(), 0, spec, inplace=True)[0],
             "apply_cos_sin": lambda a: rotary.apply_cos_sin(a, cos, sin),
             "apply_qk_cos_sin": lambda a: rotary.apply_qk_cos_sin(a, x, cos, sin)[0],
             "apply_qk_cos_sin inplace": lambda a: rotary.apply_qk_cos_sin(x.clone(), a, cos, sin, inplace=True)[1],
             "apply_context_parallel": lambda a: rotary.apply_context_parallel(a, spec, 0, 1)}
    for name, f in calls.items():
        with fwd.dual_level():
            got = fwd.unpack_dual(f(fwd.make_dual(x.clone(), t.clone()))).tangent
        assert got is not None, name
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6, msg=name)  # float32 cos/sin
    got = torch.func.jvp(lambda a: rotary.apply(a, 0, spec), (x,), (t,))[1]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_array_functions_carry_the_tables_derivatives_and_record_in_place_tables():
    # rotary.apply_cos_sin / apply_qk_cos_sin dropped a tangent or grad on cos/sin (only x was checked): tangent None,
    # the output not requiring grad; and apply_qk_cos_sin(inplace=True) refused a non-leaf q requiring grad as an out=.
    fwd = torch.autograd.forward_ad
    g = torch.Generator().manual_seed(44)
    x, tc = (torch.randn(1, 3, 2, 8, dtype=torch.float64, generator=g) for _ in range(2))
    ang = torch.arange(3)[:, None].double() * torch.from_numpy(default_inv_freq(1e4, 8))
    cos, sin = ang.cos(), ang.sin()
    tcos = tc[0, :, 0, :4]
    want = _rotate_by_tables(x, tcos[:, None], torch.zeros_like(tcos)[:, None], "half")  # d/dcos, sin fixed
    for name, f in {"apply_cos_sin": lambda c: rotary.apply_cos_sin(x, c, sin),
                    "apply_qk_cos_sin": lambda c: rotary.apply_qk_cos_sin(x, x[:, :, :1], c, sin)[0]}.items():
        with fwd.dual_level():
            got = fwd.unpack_dual(f(fwd.make_dual(cos.clone(), tcos.clone()))).tangent
        assert got is not None, name
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12, msg=name)
        c = cos.clone().requires_grad_()
        y = f(c)
        assert y.requires_grad, name
        (gc,) = torch.autograd.grad((y * x).sum(), c)
        (want_gc,) = torch.autograd.grad((_rotate_by_tables(x, c[:, None], sin[:, None], "half") * x).sum(), c)
        torch.testing.assert_close(gc, want_gc, rtol=0, atol=1e-12, msg=name)
    leaf = x.clone().requires_grad_()
    q, k = leaf * 1, leaf[:, :, :1] * 2
    qo, _ = rotary.apply_qk_cos_sin(q, k, cos, sin, inplace=True)
    assert qo is q and q.grad_fn is not None
    (gq,) = torch.autograd.grad(q.sum(), leaf)
    (want_gq,) = torch.autograd.grad(_rotate_by_tables(leaf, cos[:, None], sin[:, None], "half").sum(), leaf)
    torch.testing.assert_close(gq, want_gq, rtol=0, atol=1e-6)
