"""Multimodal / cross-framework variants: 2-D vision RoPE vs transformers' live vision rotary modules and fp64,
ggml frequencies, context-parallel shards == unsharded, q/k weight permutation (HF permute, logit invariance)."""
from __future__ import annotations

import numpy as np
import pytest

import rotary
from hf_models import hf_model_modules
from reference import rotate

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _rotate_half_np(x, emb):
    """x * cos(emb) + rotate_half(x) * sin(emb) in float64 (HF's apply form, full head)."""
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return x * np.cos(emb) + rot * np.sin(emb)


VISION = [
    # module, config class, rotary class, convention, kwargs
    ("qwen2_vl", "Qwen2VLVisionConfig", "Qwen2VLVisionRotaryEmbedding", "qwen2vl", dict(embed_dim=160, num_heads=2)),
    ("qwen3_vl", "Qwen3VLVisionConfig", "Qwen3VLVisionRotaryEmbedding", "qwen2vl",
     dict(hidden_size=128, num_heads=2)),
    ("pixtral", "PixtralVisionConfig", "PixtralVisionRotaryEmbedding", "pixtral",
     dict(hidden_size=128, num_attention_heads=2, head_dim=64)),
]


@pytest.mark.parametrize("model,cfg_cls,rope_cls,convention,kw", VISION, ids=[v[0] for v in VISION])
def test_vision_matches_transformers(model, cfg_cls, rope_cls, convention, kw):
    cfg_mod, mdl_mod = hf_model_modules(model)
    config = getattr(cfg_mod, cfg_cls)(**kw)
    try:
        hf_rope = getattr(mdl_mod, rope_cls)(config)
    except Exception as e:  # pragma: no cover - older transformers have other signatures
        pytest.skip(f"{rope_cls}(config) not constructible here: {e}")
    D = hf_rope.inv_freq.shape[0] * (4 if convention == "qwen2vl" else 2)
    base = float(config.rope_parameters["rope_theta"])
    hg, wg = 6, 9
    ids = rotary.grid_positions(hg, wg)  # [2, T]
    T = ids.shape[1]
    pos_hf = torch.from_numpy(ids.T.copy())  # HF takes (N, 2) (row, col) per patch
    x = torch.randn(T, 3, D, generator=torch.Generator().manual_seed(1))
    cos, sin = hf_rope(x, pos_hf)  # [T, D]
    assert cos.shape == (T, D)
    # HF's own application: q*cos + rotate_half(q)*sin, cos broadcast over heads.
    hf = (x.double() * cos[:, None, :].double() + torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1).double()
          * sin[:, None, :].double()).numpy()
    f = rotary.vision_frequencies(convention, D, base)
    ours = rotary.apply_axes(x, torch.from_numpy(ids), f, layout="thd").numpy()
    # HF's angles are float32 products of positions < 10 (error < 1e-6 rad).
    np.testing.assert_allclose(ours, hf, rtol=0, atol=1e-5)
    # fp64 truth with rotary's frequencies and HF's channel layout (emb = cat(angles, angles)).
    ang = ids[f.axis_of_freq, :].T * f.inv_freq  # [T, D/2]
    emb = np.concatenate([ang, ang], -1)[:, None, :]
    np.testing.assert_allclose(ours, _rotate_half_np(x.double().numpy(), emb), rtol=0, atol=4e-6)


def test_llama4_vision_is_the_qwen2vl_convention_interleaved_at_col_plus_1_row_plus_1():
    """Llama 4's vision RoPE (Llama4VisionRotaryEmbedding + vision_apply_rotary_emb, live) is expressible without a
    convention of its own (docs/multimodal.md): qwen2vl frequencies, interleaved pairs, ids (col + 1, row + 1) per
    patch and (0, 0) for the class token, which transformers puts last."""
    cfg_mod, mdl_mod = hf_model_modules("llama4")
    config = cfg_mod.Llama4VisionConfig(hidden_size=256, num_attention_heads=4, image_size=64, patch_size=16)
    freqs_ci = mdl_mod.Llama4VisionRotaryEmbedding(config).freqs_ci  # [patches + 1, 1, D/2] complex
    D, side = 64, 4
    T = side * side + 1
    x = torch.randn(1, T, 2, D, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    hf, _ = mdl_mod.vision_apply_rotary_emb(x, x, freqs_ci)
    g = rotary.grid_positions(side, side)  # [2, side*side] (row, col)
    ids = np.concatenate([np.stack([g[1] + 1, g[0] + 1]), np.zeros((2, 1), np.int64)], 1)
    f = rotary.vision_frequencies("qwen2vl", D, float(config.rope_parameters["rope_theta"]), pairing="interleaved")
    ours = rotary.apply_axes(x[0].numpy(), ids, f, layout="thd")
    # transformers forms the angles in float32 (positions <= 5): error < 1e-6.
    np.testing.assert_allclose(ours, hf[0].numpy(), rtol=0, atol=2e-6)


def test_vision_conventions_differ_and_pixtral_mistral_is_interleaved():
    D, base = 32, 10000.0
    q2 = rotary.vision_frequencies("qwen2vl", D, base)
    px = rotary.vision_frequencies("pixtral", D, base)
    gg = rotary.vision_frequencies("ggml-vision", D, base)
    np.testing.assert_array_equal(q2.inv_freq, gg.inv_freq)
    assert not np.allclose(q2.inv_freq, px.inv_freq)
    f = base ** (-np.arange(0, D, 2) / D)
    np.testing.assert_allclose(px.inv_freq, np.concatenate([f[0::2], f[1::2]]), rtol=1e-15)
    # mistral's reference: complex pairs (2j, 2j+1) times exp(i * cat(row*f[::2], col*f[1::2])).
    ids = rotary.grid_positions(3, 4)
    x = np.random.default_rng(0).standard_normal((12, 2, D))
    fm = rotary.vision_frequencies("pixtral", D, base, pairing="interleaved")
    ours = rotary.apply_axes(x, ids, fm, layout="thd")
    ang = np.concatenate([np.outer(ids[0], f[0::2]), np.outer(ids[1], f[1::2])], -1)[:, None, :]
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * ang)
    want = np.stack([z.real, z.imag], -1).reshape(x.shape)
    np.testing.assert_allclose(ours, want, atol=2e-7)  # cos/sin rows are f32 (one rounding, 6e-8)


def test_ggml_frequencies_formula():
    # NEOX + YaRN: theta_j * (fs (1 - mix) + mix), mscale = attn (1 + 0.1 ln(1/fs)).
    g = rotary.ggml_frequencies("neox", 64, freq_base=1e6, freq_scale=0.25, ext_factor=1.0, n_ctx_orig=4096)
    assert g.pairing == "half" and g.n_axes == 1 and g.rotary_dim == 64
    assert g.attention_factor == pytest.approx(1 + 0.1 * np.log(4.0), rel=1e-15)
    j = np.arange(32)
    theta = 1e6 ** (-2 * j / 64)

    def corr(beta):
        return 64 * np.log(4096 / (beta * 2 * np.pi)) / (2 * np.log(1e6))

    low, high = max(0, np.floor(corr(32))), min(63, np.ceil(corr(1)))
    mix = 1 - np.clip((j - low) / max(0.001, high - low), 0, 1)
    np.testing.assert_allclose(g.inv_freq, theta * (0.25 * (1 - mix) + mix), rtol=1e-13)
    # NORMAL is interleaved; multi-rope modes have 4 position rows.
    assert rotary.ggml_frequencies("normal", 32).pairing == "interleaved"
    m = rotary.ggml_frequencies("imrope", 64, sections=[12, 10, 10, 0])
    assert m.n_axes == 4 and set(np.unique(m.axis_of_freq)) <= {0, 1, 2, 3}
    with pytest.raises(ValueError, match="n_dims must be even"):
        rotary.ggml_frequencies("neox", 63)


def test_mrope_frequencies_via_apply_axes_equal_rotary_apply():
    spec = rotary.Spec(32, base=1e6, mrope_section=[4, 6, 6], mrope_interleaved=True)
    f = rotary.mrope_frequencies(spec)
    assert f.n_axes == 3
    r = np.random.default_rng(3)
    x = r.standard_normal((2, 5, 2, 32)).astype(np.float32)
    pos = r.integers(0, 100, (3, 2, 5))
    a = rotary.apply(x, pos, spec)
    b = rotary.apply_axes(x, pos, f)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("cp", [1, 2, 4])
def test_context_parallel_shards_equal_unsharded(cp):
    spec = rotary.Spec(16, rope_type="dynamic", factor=2.0, max_position_embeddings=16)
    r = np.random.default_rng(cp)
    B, S, H, D = 2, 32, 2, 16
    x = r.standard_normal((B, S, H, D)).astype(np.float32)
    full = rotary.apply(x, 0, spec)
    for rank in range(cp):
        pos = rotary.cp_positions(rank, cp, S // cp)
        shard = np.ascontiguousarray(x[:, pos])
        got = rotary.apply_context_parallel(shard, spec, rank, cp)
        np.testing.assert_array_equal(got, full[:, pos])
    # thd with global cu_seqlens
    cu = np.array([0, 8, 8, 24], dtype=np.int64)
    xt = r.standard_normal((24, H, D)).astype(np.float32)
    fullt = rotary.apply(xt, 0, spec, layout="thd", cu_seqlens=cu)
    if 8 % (2 * cp) == 0 and 16 % (2 * cp) == 0:
        for rank in range(cp):
            local = rotary.cp_local_cu_seqlens(rank, cp, cu)
            pos = rotary.cp_positions_packed(rank, cp, cu)
            rows = np.concatenate([cu[n] + pos[local[n]:local[n + 1]] for n in range(len(cu) - 1)])
            got = rotary.apply_context_parallel(np.ascontiguousarray(xt[rows]), spec, rank, cp, layout="thd",
                                                cu_seqlens=cu)
            np.testing.assert_array_equal(got, fullt[rows])
            # an offset starts every sequence there (TransformerEngine's RotaryPositionEmbedding(offset=)); thd
            # shards dropped it
            got = rotary.apply_context_parallel(np.ascontiguousarray(xt[rows]), spec, rank, cp, layout="thd",
                                                cu_seqlens=cu, offset=100)
            ids = np.concatenate([np.arange(cu[n + 1] - cu[n]) for n in range(len(cu) - 1)]) + 100
            want = rotary.apply(xt, ids, spec, layout="thd", seq_len=16 + 100)
            np.testing.assert_array_equal(got, want[rows])


def test_context_parallel_arguments_are_checked_not_truncated():
    spec = rotary.Spec(16)
    x = np.ones((1, 4, 3, 16), np.float32)
    for off in (2.5, True, "2"):  # int() truncated 2.5 to 2 and read True as 1
        with pytest.raises(TypeError, match=r"^\[rotary_apply_context_parallel\] offset must be an int"):
            rotary.apply_context_parallel(x, spec, 0, 2, offset=off)
    want = rotary.apply_context_parallel(x, spec, 0, 2, offset=3)
    for off in (np.int64(3), np.array(3), torch.tensor(3)):  # integers in any form are taken
        np.testing.assert_array_equal(rotary.apply_context_parallel(x, spec, 0, 2, offset=off), want)
    with pytest.raises(ValueError, match=r"^\[rotary_apply_context_parallel\] layout must be bshd, bhsd or thd"):
        rotary.apply_context_parallel(x, spec, 0, 2, layout="sbhd")  # was "local_len must be even ... got 3"


def _hf_permute(w, n_heads, dim1, dim2):
    # transformers/models/llama/convert_llama_weights_to_hf.py permute
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_permute_matches_hf_converter_and_round_trips(dtype):
    n, D, inp = 4, 16, 12
    w = torch.randn(n * D, inp, generator=torch.Generator().manual_seed(0)).to(dtype)
    p = rotary.permute_qk_weight(w, n, D)
    assert torch.equal(p, _hf_permute(w, n, n * D, inp))
    back = rotary.permute_qk_weight(p, n, D, src="half", dst="interleaved")
    assert torch.equal(back, w)
    wn = w.float().numpy()
    np.testing.assert_array_equal(rotary.permute_qk_weight(wn, n, D), _hf_permute(w.float(), n, n * D, inp).numpy())


def test_permute_logit_invariance_gqa_partial():
    r = np.random.default_rng(7)
    hq, hk, D, R, inp, S = 8, 2, 24, 16, 40, 6
    x = r.standard_normal((S, inp))
    wq, wk = r.standard_normal((hq * D, inp)), r.standard_normal((hk * D, inp))
    spec_meta = rotary.Spec(D, R, pairing="interleaved")
    spec_hf = rotary.Spec(D, R, pairing="half")

    def logits(wq, wk, spec):
        q = (x @ wq.T).reshape(1, S, hq, D)
        k = (x @ wk.T).reshape(1, S, hk, D)
        q, k = rotary.apply_qk(q, k, 100, spec)
        k = np.repeat(k, hq // hk, axis=2)
        return np.einsum("bmhd,bnhd->hmn", q, k)

    a = logits(wq, wk, spec_meta)
    b = logits(rotary.permute_qk_weight(wq, hq, D, rotary_dim=R), rotary.permute_qk_weight(wk, hk, D, rotary_dim=R),
               spec_hf)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-10 * np.abs(a).max())
    assert np.abs(a - logits(wq, wk, spec_hf)).max() > 1e-2 * np.abs(a).max()


def test_fractional_positions_match_fp64():
    spec = rotary.Spec(32, base=500000.0)
    r = np.random.default_rng(2)
    x = r.standard_normal((2, 7, 2, 32))
    pos = r.uniform(0, 1e5, (2, 7))
    y = rotary.apply(x, pos, spec)
    inv, af = spec.frequencies()
    truth = rotate(x, (pos[..., None] * inv)[:, :, None, :], scale=af)
    np.testing.assert_allclose(y, truth, rtol=0, atol=2e-7)  # f64 x, f32 cos/sin rows
    # integer-valued floats == integers, bit for bit (f32)
    xi = x.astype(np.float32)
    p = r.integers(0, 70000, (2, 7))
    np.testing.assert_array_equal(rotary.apply(xi, p, spec), rotary.apply(xi, p.astype(np.float64), spec))


def _axes_reference(x, pos, freqs, pairing, inverse=False):
    """Plain-torch float64 rotation by AxisFrequencies: pair j turns by pos[axis[j]] * inv_freq[j], cos/sin scaled by
    attention_factor (bshd, positions [n_axes, B, S])."""
    inv = torch.from_numpy(np.asarray(freqs.inv_freq, dtype=np.float64))
    axis = torch.from_numpy(np.asarray(freqs.axis_of_freq, dtype=np.int64))
    ang = pos.double()[axis].permute(1, 2, 0) * inv  # [B, S, h]
    c = (ang.cos() * freqs.attention_factor)[:, :, None]
    s = (ang.sin() * freqs.attention_factor * (-1 if inverse else 1))[:, :, None]
    from torch_reference import rotate_by_tables
    return rotate_by_tables(x, c, s, pairing)


@pytest.mark.parametrize("kind", ["vision", "ggml_mrope_scaled", "ggml_neox_signed"])
def test_apply_axes_gradients_equal_autograd_through_fp64_reference(kind):
    # The output of apply_axes on tensors requiring grad did not require grad: the gradient of q/k through the vision /
    # M-RoPE rotation was silently lost; out=x wrote a leaf that requires grad.
    freqs = {"vision": rotary.vision_frequencies("qwen2vl", 16),
             "ggml_mrope_scaled": rotary.ggml_frequencies("mrope", 16, attn_factor=1.5, sections=[2, 3, 3, 0]),
             "ggml_neox_signed": rotary.ggml_frequencies("neox", 12, attn_factor=0.75)}[kind]
    g = torch.Generator().manual_seed(11)
    lo = -20 if freqs.signed_positions else 0
    pos = torch.randint(lo, 50, (freqs.n_axes, 2, 5), generator=g)
    x = torch.randn(2, 5, 3, 16, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(2, 5, 1, 16, dtype=torch.float64, generator=g, requires_grad=True)
    wx, wk = torch.randn_like(x), torch.randn_like(k)
    tol = dict(rtol=0, atol=1e-6)  # the kernel's angles from float32 frequencies (2^-24 relative)
    for inverse in (False, True):
        for kk in (None, k):
            got = rotary.apply_axes(x, pos, freqs, k=kk, inverse=inverse)
            got = got if kk is not None else (got,)
            assert all(t.requires_grad for t in got)
            loss = (got[0] * wx).sum() + (0 if kk is None else (got[1] * wk).sum())
            gx = torch.autograd.grad(loss, (x,) if kk is None else (x, k))
            ref = [_axes_reference(x, pos, freqs, freqs.pairing, inverse)]
            if kk is not None:
                ref.append(_axes_reference(k, pos, freqs, freqs.pairing, inverse))
            torch.testing.assert_close(got, tuple(ref), **tol)
            rloss = (ref[0] * wx).sum() + (0 if kk is None else (ref[1] * wk).sum())
            want = torch.autograd.grad(rloss, (x,) if kk is None else (x, k))
            torch.testing.assert_close(gx, want, **tol)
    # only k requires grad; an unused 0-head q gets autograd's zero-stride empty gradient
    q0 = torch.randn(2, 5, 0, 16, dtype=torch.float64)
    qo, ko = rotary.apply_axes(q0, pos, freqs, k=k)
    (gk,) = torch.autograd.grad((ko * wk).sum() + qo.sum(), k)
    ref = _axes_reference(k, pos, freqs, freqs.pairing)
    torch.testing.assert_close(gk, torch.autograd.grad((ref * wk).sum(), k)[0], **tol)
    torch.autograd.gradcheck(lambda u: rotary.apply_axes(u, pos[:, :1, :2], freqs), (x[:1, :2],))
    t = torch.randn_like(x)  # forward-mode AD (a tangent without requires_grad) and torch.func
    with torch.autograd.forward_ad.dual_level():
        y = rotary.apply_axes(torch.autograd.forward_ad.make_dual(x.detach(), t), pos, freqs)
        jt = torch.autograd.forward_ad.unpack_dual(y).tangent
    torch.testing.assert_close(jt, _axes_reference(t, pos, freqs, freqs.pairing), **tol)
    _, jt = torch.func.jvp(lambda u: rotary.apply_axes(u, pos, freqs), (x.detach(),), (t,))
    torch.testing.assert_close(jt, _axes_reference(t, pos, freqs, freqs.pairing), **tol)
    gx = torch.func.grad(lambda u: (rotary.apply_axes(u, pos, freqs) * wx).sum())(x.detach())
    torch.testing.assert_close(gx, _axes_reference(wx, pos, freqs, freqs.pairing, inverse=True), **tol)
    torch.autograd.gradgradcheck(lambda u: rotary.apply_axes(u, pos[:, :1, :2], freqs), (x[:1, :2],))
    with pytest.raises(ValueError, match=r"^\[rotary_apply_axes\] out must be None when x requires grad"):
        rotary.apply_axes(x, pos, freqs, out=x)
    with pytest.raises(RuntimeError, match=r"^\[rotary_apply_axes\] positions requires grad"):
        rotary.apply_axes(x, pos.double().requires_grad_(), freqs)
    with torch.no_grad():  # no gradient wanted: the array path, out= allowed
        y = x.detach().clone()
        rotary.apply_axes(y, pos, freqs, out=y)
    torch.testing.assert_close(y, _axes_reference(x.detach(), pos, freqs, freqs.pairing), **tol)


def test_permute_qk_weight_of_a_parameter_carries_the_gradient():
    # permute_qk_weight on an nn.Parameter returned a tensor that did not require grad.
    g = torch.Generator().manual_seed(12)
    w = torch.nn.Parameter(torch.randn(3 * 16, 5, dtype=torch.float64, generator=g))
    wo = torch.randn(3 * 16, 5, dtype=torch.float64, generator=g)
    for src, dst in (("interleaved", "half"), ("half", "interleaved")):
        out = rotary.permute_qk_weight(w, n_heads=3, head_dim=16, src=src, dst=dst)
        assert out.requires_grad
        ref = _hf_permute(w, 3, 48, 5)
        if src == "half":  # the inverse permutation: ref is interleaved -> half, so w = ref(out)
            ref = out.detach().clone()
            assert torch.equal(_hf_permute(ref, 3, 48, 5), w.detach())
            (g_got,) = torch.autograd.grad((out * wo).sum(), w)
            (g_want,) = torch.autograd.grad((_hf_permute(wo, 3, 48, 5) * w).sum(), w)
            torch.testing.assert_close(g_got, g_want, rtol=0, atol=0)
            continue
        assert torch.equal(out.detach(), ref.detach())
        (g_got,) = torch.autograd.grad((out * wo).sum(), w)
        (g_want,) = torch.autograd.grad((ref * wo).sum(), w)
        torch.testing.assert_close(g_got, g_want, rtol=0, atol=0)
    torch.autograd.gradcheck(lambda u: rotary.permute_qk_weight(u, n_heads=3, head_dim=16, rotary_dim=8), (w[:, :2],))


def test_apply_axes_refuses_x_and_k_of_different_array_types():
    # A torch x with a numpy k gave (Tensor, ndarray) without grad, and "[rotary] q and k must be the same array
    # type" with x requiring grad: both are refused now, in apply_axes' words, before anything is written.
    torch = pytest.importorskip("torch")
    fr = rotary.mrope_frequencies(rotary.Spec(16))
    p = np.zeros((1, 3), np.int64)
    xn = np.random.default_rng(5).standard_normal((1, 3, 2, 16)).astype(np.float32)
    kn = xn[:, :, :1].copy()
    for x, k, types in ((torch.from_numpy(xn.copy()), kn, "Tensor and ndarray"),
                        (torch.from_numpy(xn.copy()).requires_grad_(), kn, "Tensor and ndarray"),
                        (xn, torch.from_numpy(kn.copy()), "ndarray and Tensor"),
                        (xn, torch.from_numpy(kn.copy()).requires_grad_(), "ndarray and Tensor")):
        msg = rf"^\[rotary_apply_axes\] x and k must be the same array type, got {types}$"
        with pytest.raises(TypeError, match=msg):
            rotary.apply_axes(x, p, fr, k=k)
    out = np.zeros_like(xn)
    with pytest.raises(TypeError, match="x and k must be the same array type"):
        rotary.apply_axes(xn, p, fr, k=torch.from_numpy(kn.copy()), out=out)
    assert not out.any()
    y, yk = rotary.apply_axes(torch.from_numpy(xn.copy()), p, fr, k=torch.from_numpy(kn.copy()))  # same types: fine
    np.testing.assert_array_equal(yk.numpy(), rotary.apply_axes(xn, p, fr, k=kn)[1])


def test_wrong_shapes_and_ids_past_int64_are_refused_in_the_entry_points_words():
    # apply_context_parallel of a 0-D / 1-D x raised a bare IndexError; apply_axes' wrong ranks said
    # "[rotary_apply] q must have rank 4" (the core's apply words); an out= of another shape or dtype and uint64 ids
    # past int64 said "[rotary] ...". Nothing is written before the refusal.
    spec, fr = rotary.Spec(8), rotary.mrope_frequencies(rotary.Spec(8, mrope_section=[2, 1, 1]))
    x = np.ones((1, 4, 2, 8), np.float32)
    big = np.array([0, 1, 2**63 + 5, 3], np.uint64)
    out = np.zeros((1, 4, 2, 4), np.float32)
    cases = [
        (lambda: rotary.apply_context_parallel(np.ones((), np.float32), spec, 0, 1),
         "[rotary_apply_context_parallel] x must have rank 4 [B,S,H,D] for layout bshd, got rank 0 (shape [])"),
        (lambda: rotary.apply_context_parallel(np.ones(8, np.float32), spec, 0, 1, layout="bhsd"),
         "[rotary_apply_context_parallel] x must have rank 4 [B,H,S,D] for layout bhsd, got rank 1 (shape [8])"),
        (lambda: rotary.apply_axes(np.ones((), np.float32), np.zeros((3, 3), np.int64), fr),
         "[rotary_apply_axes] x must have rank 4 [B,S,H,D] for layout bshd, got rank 0 (shape [])"),
        (lambda: rotary.apply_axes(x, np.zeros((3, 4), np.int64), fr, k=x[0]),
         "[rotary_apply_axes] k must have rank 4 [B,S,H,D] for layout bshd, got rank 3"),
        (lambda: rotary.apply_axes(x, np.zeros((3, 4), np.int64), fr, out=out),
         "[rotary_apply_axes] out must have the input's shape (1, 4, 2, 8), got (1, 4, 2, 4)"),
        (lambda: rotary.apply_axes(x, np.stack([big] * 3), fr),
         "[rotary_apply_axes] positions[0,2] must fit in int64, got 9223372036854775813"),
        (lambda: rotary.apply(x, 0, spec, out=out), "[rotary_apply] out must have the input's shape (1, 4, 2, 8)"),
        (lambda: rotary.apply_qk(x, x, 0, spec, q_out=out, k_out=np.zeros_like(x)),
         "[rotary_apply] q_out must have the input's shape"),
        (lambda: rotary.apply(x, big, spec), "[rotary_apply] positions[2] must fit in int64, got 9223372036854775813"),
        (lambda: rotary.apply_qk(x, x, big, spec), "[rotary_apply] positions[2] must fit in int64"),
        (lambda: rotary.apply_cos_sin(x, np.ones((8, 4), np.float32), np.zeros((8, 4), np.float32), big),
         "[rotary_apply] positions[2] must fit in int64"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value).startswith(message), str(info.value)
    with pytest.raises(TypeError, match=r"^\[rotary_apply\] out must have the input's dtype float32, got float64"):
        rotary.apply(x, 0, spec, out=np.zeros(x.shape, np.float64))
    assert not out.any()


def test_axis_frequencies_built_by_the_caller_may_take_signed_positions():
    # Axial rotations over coordinates centred on zero (rotary-embedding-torch's 'pixel' frequencies rotate by
    # positions in [-1, 1]) build their own AxisFrequencies with signed_positions=True: negative fractional positions
    # then rotate by pos * theta as fp64 does. Without the flag they are refused by name, nothing written.
    torch = pytest.importorskip("torch")
    per_axis = np.linspace(1.0, 5.0, 4) * np.pi  # 'pixel' frequencies, max_freq 10, 8 channels per axis
    inv, axis = np.concatenate([per_axis, per_axis]), np.repeat(np.arange(2, dtype=np.uint8), 4)
    signed = rotary.AxisFrequencies(inv, axis, 2, "interleaved", 1.0, signed_positions=True)
    rng = np.random.default_rng(3)
    pos = rng.uniform(-1.0, 1.0, (2, 2, 5))
    x = rng.standard_normal((2, 5, 3, 16))
    want = _axes_reference(torch.from_numpy(x), torch.from_numpy(pos), signed, "interleaved").numpy()
    np.testing.assert_allclose(rotary.apply_axes(x, pos, signed), want, rtol=0, atol=1e-6)
    unsigned = rotary.AxisFrequencies(inv, axis, 2, "interleaved", 1.0)
    out = np.zeros_like(x)
    with pytest.raises(ValueError, match=r"^\[rotary_apply_axes\] positions\.ids\[0,0,0\] must be >= 0"):
        rotary.apply_axes(x, pos, unsigned, out=out)
    assert not out.any()


def test_uint64_ids_past_int64_are_refused_by_their_real_value_in_the_callers_words():
    # The torch path read uint64 ids through .to(int64) / .long(): 2**64 - 1 was "got -1" ("positions.ids[3] must be
    # >= 0"); cu_seqlens / seq_offsets / batch_offsets (numpy or torch) and rotary.cos_sin's ids said "[rotary] ...".
    import rotary.torch as rt

    spec, big = rotary.Spec(8), 2**64 - 1
    x, xt = np.ones((1, 4, 2, 8), np.float32), np.ones((4, 2, 8), np.float32)
    cos, sin = rotary.cos_sin(spec, 8)
    u = np.array([0, 1, 2, big], np.uint64)

    def tu(a):
        return torch.from_numpy(a.view(np.int64)).view(torch.uint64)

    ids = rf"positions\[3\] must fit in int64, got {big}$"
    cases = [(lambda: rt.apply(torch.from_numpy(x), tu(u), spec), "rotary_apply", ids),
             (lambda: rotary.apply(torch.from_numpy(x).requires_grad_(True), tu(u), spec), "rotary_apply", ids),
             (lambda: rt.apply_cos_sin(torch.from_numpy(x), torch.from_numpy(cos), torch.from_numpy(sin), tu(u)),
              "rotary_apply", ids),
             (lambda: rt.cos_sin(tu(u), spec), "rotary_cos_sin", ids),
             (lambda: rotary.cos_sin(spec, u), "rotary_cos_sin", ids),
             (lambda: rotary.cos_sin(spec, tu(u)), "rotary_cos_sin", ids)]
    for name, kw in (("cu_seqlens", {}), ("seq_offsets", {"cu_seqlens": np.array([0, 4])}), ("batch_offsets", {})):
        v = np.array([big], np.uint64) if name == "batch_offsets" else np.array([0, big], np.uint64)
        arr, layout = (x, "bshd") if name == "batch_offsets" else (xt, "thd")
        msg = rf"positions\.{name}\[{len(v) - 1}\] must fit in int64, got {big}$"
        for conv, fn in ((lambda a: a, rotary.apply), (tu, rotary.apply), (tu, rt.apply)):
            torch_call = conv is tu
            extra = {k: torch.from_numpy(a) if torch_call else a for k, a in kw.items()}
            xa = torch.from_numpy(arr) if torch_call else arr
            cases.append((lambda f=fn, xa=xa, v=conv(v), e=extra, n=name, lay=layout: f(xa, None, spec, layout=lay,
                                                                                          **{n: v}, **e),
                          "rotary_apply", msg))
        cases.append((lambda v=v, n=name, lay=layout, a=arr: rotary.apply_cos_sin(a, cos, sin, None, layout=lay,
                                                                                  **{n: v}, **kw), "rotary_apply", msg))
    for call, where, message in cases:
        with pytest.raises(ValueError, match=rf"^\[{where}\] {message}"):
            call()
    with pytest.raises(TypeError, match=r"^\[rotary_apply\] positions\.cu_seqlens must be an integer array, got "
                                        r"dtype float64"):
        rotary.apply(xt, None, spec, layout="thd", cu_seqlens=np.array([0.0, 4.0]))
