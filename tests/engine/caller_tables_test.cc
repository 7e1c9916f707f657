// Caller cos/sin tables (apply_cos_sin, rotary_apply_cos_sin) vs flash-attn's own reference formula in fp64:
// int / per-batch offsets, varlen cu_seqlens with per-sequence offsets, in place, both pairings, backward, fused q+k.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "rotary/rotary.h"
#include "rotary/rotary_c.h"
#include "testing/shared.h"
#include "testing/tolerances.h"

namespace rotary {
namespace {

// ---- flash-attn's reference (flash_attn/layers/rotary.py apply_rotary_emb_torch, tests/test_rotary.py
// index_cos_sin), transcribed in double:
//   cos_pt[b, s] = cos[seqlen_offsets (+ [b]) + s];  ro_dim = 2 * cos.shape[-1]
//   cos -> "... d -> ... 1 (2 d)" (half-split) or "... d -> ... 1 (d 2)" (interleaved), sin likewise
//   rotate_half(x) = cat(-x2, x1) over halves, or interleave(-x_odd, x_even)
//   out = cat(x[..., :ro] * cos + rotate_half(x[..., :ro]) * sin, x[..., ro:])
//   backward (conjugate=True): the same with sin -> -sin.
std::vector<double> fa_rotate(const std::vector<double>& x, const std::vector<double>& c_half,
                              const std::vector<double>& s_half, bool interleaved, bool conjugate) {
  const size_t h = c_half.size(), ro = 2 * h;
  std::vector<double> cos(ro), sin(ro), rot(ro);
  for (size_t k = 0; k < ro; ++k) {
    const size_t j = interleaved ? k / 2 : k % h;
    cos[k] = c_half[j];
    sin[k] = conjugate ? -s_half[j] : s_half[j];
  }
  for (size_t k = 0; k < ro; ++k) {
    if (!interleaved) rot[k] = k < h ? -x[k + h] : x[k - h];
    else rot[k] = k % 2 == 0 ? -x[k + 1] : x[k - 1];
  }
  std::vector<double> out = x;
  for (size_t k = 0; k < ro; ++k) out[k] = x[k] * cos[k] + rot[k] * sin[k];
  return out;
}

/// A random cos/sin table [rows, h] (flash-attn's generate_cos_sin: random angles in [0, 2π)), f32 values.
struct Table {
  int64_t rows, h;
  std::vector<float> cos, sin;
  Table(int64_t rows_, int64_t h_, uint64_t seed) : rows(rows_), h(h_) {
    const auto a = testing::randn_f64(static_cast<size_t>(rows * h), seed);
    for (double v : a) {
      cos.push_back(static_cast<float>(std::cos(3.0 * v)));
      sin.push_back(static_cast<float>(std::sin(3.0 * v)));
    }
  }
  std::vector<double> row(const std::vector<float>& t, int64_t r) const {
    return std::vector<double>(t.begin() + r * h, t.begin() + (r + 1) * h);
  }
  TensorView cos_view() { return TensorView::contiguous(cos.data(), DType::kF32, {rows, h}); }
  TensorView sin_view() { return TensorView::contiguous(sin.data(), DType::kF32, {rows, h}); }
};

const double kTol = testing::output_abs_tol(DType::kF32);

/// Checks y[t, hh, :] == fa_rotate(x[t, hh, :], table row of `row_of(t)`).
template <class RowOf>
void expect_flash_attn(const std::vector<float>& x, const std::vector<float>& y, int64_t T, int64_t H, int64_t D,
                       const Table& tab, bool interleaved, bool conjugate, RowOf row_of, const std::string& what) {
  int bad = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t hh = 0; hh < H; ++hh) {
      const std::vector<double> xv(x.begin() + (t * H + hh) * D, x.begin() + (t * H + hh + 1) * D);
      const int64_t r = row_of(t);
      const auto want = fa_rotate(xv, tab.row(tab.cos, r), tab.row(tab.sin, r), interleaved, conjugate);
      for (int64_t d = 0; d < D; ++d) {
        const double got = y[static_cast<size_t>((t * H + hh) * D + d)];
        if (!(std::fabs(got - want[static_cast<size_t>(d)]) <= kTol) && bad++ < 4)
          ADD_FAILURE() << what << " t" << t << " h" << hh << " d" << d << ": " << got << " vs " << want[static_cast<size_t>(d)];
      }
    }
}

// flash-attn test_rotary_emb_func: x [B, S, H, D], seqlen_offsets 0 / int / [B], rotary_fraction 1 and 0.5,
// interleaved or not, in place or not, then the backward (conjugate) of the output.
TEST(CallerTablesFlashAttn, BatchedWithIntAndPerBatchOffsets) {
  const int64_t B = 3, S = 17, H = 2, D = 16;
  for (int64_t R : {D, D / 2})
    for (bool interleaved : {false, true})
      for (bool inplace : {false, true})
        for (int offsets_kind : {0, 1, 2}) {
          const std::string what = "R" + std::to_string(R) + (interleaved ? " interleaved" : " half") +
                                   (inplace ? " inplace" : "") + " offsets" + std::to_string(offsets_kind);
          SCOPED_TRACE(what);
          Table tab(2 * S, R / 2, 5 + R);
          std::vector<int64_t> bo = {0, 5, S};  // per-batch offsets (flash-attn: randint(0, seqlen + 1, (B,)))
          const int64_t int_off = offsets_kind == 1 ? 9 : 0;
          auto row = [&](int64_t b, int64_t s) { return (offsets_kind == 2 ? bo[static_cast<size_t>(b)] : int_off) + s; };
          const auto x = testing::randn(static_cast<size_t>(B * S * H * D), 77);
          std::vector<float> y(x.size(), -9.0f), work = x;
          ApplyArgs a;
          a.q = TensorView::contiguous(inplace ? work.data() : const_cast<float*>(x.data()), DType::kF32, {B, S, H, D});
          if (!inplace) a.q_out = TensorView::contiguous(y.data(), DType::kF32, {B, S, H, D});
          a.positions = Positions::contiguous(int_off);
          if (offsets_kind == 2) a.positions.batch_offsets = TensorView::contiguous(bo.data(), DType::kI64, {B});
          a.pairing = interleaved ? Pairing::kInterleaved : Pairing::kHalfSplit;
          apply_cos_sin(tab.cos_view(), tab.sin_view(), a);
          const std::vector<float>& out = inplace ? work : y;
          expect_flash_attn(x, out, B * S, H, D, tab, interleaved, false, [&](int64_t t) { return row(t / S, t % S); }, "forward");
          // Backward of the output: the conjugate rotation, which gives x back.
          std::vector<float> g = out, gx(x.size());
          ApplyArgs bw = a;
          bw.q = TensorView::contiguous(g.data(), DType::kF32, {B, S, H, D});
          bw.q_out = TensorView::contiguous(gx.data(), DType::kF32, {B, S, H, D});
          bw.direction = Direction::kInverse;
          apply_cos_sin(tab.cos_view(), tab.sin_view(), bw);
          expect_flash_attn(g, gx, B * S, H, D, tab, interleaved, true, [&](int64_t t) { return row(t / S, t % S); }, "backward");
          for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(gx[i], x[i], 4 * kTol) << i;  // |cos|^2+|sin|^2 ~ 1 (f32)
        }
}

// flash-attn test_rotary_emb_varlen_func: packed [T, H, D] with cu_seqlens; seqlen_offsets int or [N].
TEST(CallerTablesFlashAttn, VarlenWithPerSequenceOffsets) {
  const int64_t H = 3, D = 12;
  const std::vector<int32_t> cu = {0, 7, 7, 16, 20};  // lengths 7, 0, 9, 4
  const int64_t T = cu.back(), N = static_cast<int64_t>(cu.size()) - 1;
  for (bool interleaved : {false, true})
    for (bool per_seq : {false, true})
      for (bool inplace : {false, true}) {
        SCOPED_TRACE(std::string(interleaved ? "interleaved" : "half") + (per_seq ? " [N] offsets" : " int offset") +
                     (inplace ? " inplace" : ""));
        Table tab(40, D / 2, 3);
        const std::vector<int64_t> off = per_seq ? std::vector<int64_t>{3, 30, 0, 20} : std::vector<int64_t>(4, 11);
        auto row = [&](int64_t t) {
          int64_t n = 0;
          while (!(cu[static_cast<size_t>(n)] <= t && t < cu[static_cast<size_t>(n) + 1])) ++n;
          return t - cu[static_cast<size_t>(n)] + off[static_cast<size_t>(n)];
        };
        const auto x = testing::randn(static_cast<size_t>(T * H * D), 91);
        std::vector<float> y(x.size()), work = x;
        ApplyArgs a;
        a.layout = Layout::kTHD;
        a.q = TensorView::contiguous(inplace ? work.data() : const_cast<float*>(x.data()), DType::kF32, {T, H, D});
        if (!inplace) a.q_out = TensorView::contiguous(y.data(), DType::kF32, {T, H, D});
        a.positions = Positions::packed(TensorView::contiguous(cu.data(), DType::kI32, {N + 1}),
                                        TensorView::contiguous(off.data(), DType::kI64, {N}));
        a.pairing = interleaved ? Pairing::kInterleaved : Pairing::kHalfSplit;
        apply_cos_sin(tab.cos_view(), tab.sin_view(), a);
        expect_flash_attn(x, inplace ? work : y, T, H, D, tab, interleaved, false, row, "varlen forward");
        a.direction = Direction::kInverse;
        std::vector<float> again = inplace ? work : y, back(x.size());
        a.q = TensorView::contiguous(again.data(), DType::kF32, {T, H, D});
        a.q_out = TensorView::contiguous(back.data(), DType::kF32, {T, H, D});
        apply_cos_sin(tab.cos_view(), tab.sin_view(), a);
        expect_flash_attn(again, back, T, H, D, tab, interleaved, true, row, "varlen backward");
      }
}

// flash-attn apply_rotary_emb_qkv_ (GQA): q and k slices of one fused [B, S, Hq + 2 Hk, D] buffer, rotated in
// place in one call with the caller's table; v untouched.
TEST(CallerTablesFlashAttn, FusedQkvInPlaceGqa) {
  const int64_t B = 2, S = 9, Hq = 4, Hk = 2, D = 8, W = (Hq + 2 * Hk) * D;
  for (bool interleaved : {false, true}) {
    Table tab(S + 4, D / 2, 17);
    const auto qkv0 = testing::randn(static_cast<size_t>(B * S * W), 5);
    std::vector<float> qkv = qkv0;
    ApplyArgs a;
    a.q = TensorView::strided(qkv.data(), DType::kF32, {B, S, Hq, D}, {S * W, W, D, 1});
    a.k = TensorView::strided(qkv.data() + Hq * D, DType::kF32, {B, S, Hk, D}, {S * W, W, D, 1});
    a.positions = Positions::contiguous(4);
    a.pairing = interleaved ? Pairing::kInterleaved : Pairing::kHalfSplit;
    apply_cos_sin(tab.cos_view(), tab.sin_view(), a);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t hh = 0; hh < Hq + 2 * Hk; ++hh) {
          const size_t o = static_cast<size_t>((b * S + s) * W + hh * D);
          const std::vector<double> xv(qkv0.begin() + o, qkv0.begin() + o + D);
          const auto want = hh < Hq + Hk ? fa_rotate(xv, tab.row(tab.cos, 4 + s), tab.row(tab.sin, 4 + s), interleaved, false) : xv;
          for (int64_t d = 0; d < D; ++d) ASSERT_NEAR(qkv[o + d], want[static_cast<size_t>(d)], kTol) << b << s << hh << d;
        }
  }
}

// The C API takes the same calls: packed positions with per-sequence offsets, in place, inverse, interleaved.
TEST(CallerTablesC, PackedInPlaceInverseInterleaved) {
  const int64_t H = 2, D = 8;
  const std::vector<int64_t> cu = {0, 3, 8}, off = {6, 1};
  const int64_t T = 8;
  Table tab(16, D / 2, 21);
  const auto x = testing::randn(static_cast<size_t>(T * H * D), 8);
  std::vector<float> work = x;
  rotary_tensor_t cos_t, sin_t;
  const int64_t cs_shape[2] = {tab.rows, tab.h}, x_shape[3] = {T, H, D}, cu_shape[1] = {3}, off_shape[1] = {2};
  ASSERT_EQ(rotary_tensor_contiguous(&cos_t, tab.cos.data(), ROTARY_DTYPE_F32, 2, cs_shape), ROTARY_OK);
  ASSERT_EQ(rotary_tensor_contiguous(&sin_t, tab.sin.data(), ROTARY_DTYPE_F32, 2, cs_shape), ROTARY_OK);
  rotary_apply_args_t a;
  rotary_apply_args_init(&a);
  ASSERT_EQ(rotary_tensor_contiguous(&a.q, work.data(), ROTARY_DTYPE_F32, 3, x_shape), ROTARY_OK);
  a.layout = ROTARY_LAYOUT_THD;
  a.pairing = ROTARY_PAIRING_INTERLEAVED;
  a.direction = ROTARY_DIRECTION_INVERSE;
  a.positions.kind = ROTARY_POSITIONS_PACKED;
  ASSERT_EQ(rotary_tensor_contiguous(&a.positions.cu_seqlens, const_cast<int64_t*>(cu.data()), ROTARY_DTYPE_I64, 1, cu_shape), ROTARY_OK);
  ASSERT_EQ(rotary_tensor_contiguous(&a.positions.seq_offsets, const_cast<int64_t*>(off.data()), ROTARY_DTYPE_I64, 1, off_shape), ROTARY_OK);
  ASSERT_EQ(rotary_apply_cos_sin(&cos_t, &sin_t, &a), ROTARY_OK) << rotary_last_error();
  expect_flash_attn(x, work, T, H, D, tab, true, true, [&](int64_t t) { return t < 3 ? t + 6 : t - 3 + 1; }, "C packed");
}

}  // namespace
}  // namespace rotary
