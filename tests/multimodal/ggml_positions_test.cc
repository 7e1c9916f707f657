// ggml positions of any sign: apply_axes with ggml_frequencies rotates by pos * theta for pos < 0 too (llama.cpp's K-shift).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "multimodal/mm_testing.h"
#include "rotary/ggml.h"
#include "rotary/multimodal.h"
#include "testing/shared.h"
#include "testing/tolerances.h"

namespace rotary {
namespace {

using testing::error_of;

struct Mode {
  GgmlRopeMode mode;
  int64_t n_dims, D;
  std::array<int64_t, 4> sections;
};
const Mode kModes[] = {{GgmlRopeMode::kNormal, 16, 24, {0, 0, 0, 0}}, {GgmlRopeMode::kNeox, 16, 24, {0, 0, 0, 0}},
                       {GgmlRopeMode::kMrope, 24, 24, {4, 4, 3, 1}},  {GgmlRopeMode::kImrope, 24, 24, {4, 4, 4, 0}},
                       {GgmlRopeMode::kVision, 12, 24, {6, 6, 6, 6}}};

AxisFrequencies freqs_of(const Mode& m) {
  GgmlRopeParams p;
  p.mode = m.mode;
  p.n_dims = m.n_dims;
  p.sections = m.sections;
  p.freq_scale = 0.5;  // YaRN on: the per-pair mix and the magnitude apply to negative positions alike
  p.ext_factor = 1.0;
  p.n_ctx_orig = 4096;
  return ggml_frequencies(p);
}

/// Rotates q [T, H, D] with ids [n_axes, T] (n_axes rows of T), in `dir`.
template <class Id>
void rotate(const AxisFrequencies& af, mmtest::Thd& q, std::vector<Id>& ids, DType dtype,
            Direction dir = Direction::kForward) {
  ApplyArgs a;
  a.layout = Layout::kTHD;
  a.q = q.view();
  a.direction = dir;
  a.positions = af.n_axes == 1 ? Positions::from_ids(TensorView::contiguous(ids.data(), dtype, {q.T}))
                               : Positions::from_ids(TensorView::contiguous(ids.data(), dtype, {af.n_axes, q.T}));
  apply_axes(af, a);
}

// Every ggml mode, integer ids of both signs up to |2^24| (the accuracy contract's range): the fp64 rotation by
// pos * theta_j (cos even, sin odd), within the f32 contract; a negative id gives exactly the inverse rotation
// by its magnitude (same bytes as Direction::kInverse at |pos|).
TEST(GgmlPositions, NegativeIdsRotateByTheSignedAngle) {
  const int64_t vals[] = {-1, -7, -4096, -65537, -(int64_t(1) << 24), -16777215, -1234567, -3};
  for (const Mode& m : kModes) {
    SCOPED_TRACE(ggml_rope_mode_name(m.mode));
    const AxisFrequencies af = freqs_of(m);
    EXPECT_TRUE(af.signed_positions);
    const int64_t T = 8, H = 2;
    std::vector<int64_t> ids(static_cast<std::size_t>(af.n_axes * T)), mag(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ids[i] = vals[(i * 3 + i / 8) % 8];
      mag[i] = -ids[i];
    }
    mmtest::Thd q(T, H, m.D, 11), inv = q;
    const auto x = q.data;
    rotate(af, q, ids, DType::kI64);
    rotate(af, inv, mag, DType::kI64, Direction::kInverse);
    EXPECT_EQ(q.data, inv.data);
    const int64_t pairs = static_cast<int64_t>(af.freqs.inv_freq.size());
    const Pairing pairing = m.mode == GgmlRopeMode::kNormal ? Pairing::kInterleaved : Pairing::kHalfSplit;
    double worst = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const std::vector<double> head(x.begin() + (t * H + h) * m.D, x.begin() + (t * H + h + 1) * m.D);
        const auto want = mmtest::rotate_head(
            head, pairs, pairing,
            [&](int64_t j) { return static_cast<long double>(ids[af.axis_of_freq[j] * T + t]) * af.freqs.inv_freq[j]; },
            af.freqs.attention_factor);
        for (int64_t d = 0; d < m.D; ++d) worst = std::max(worst, std::fabs(q.data[(t * H + h) * m.D + d] - want[d]));
      }
    EXPECT_LE(worst, testing::kAccuracyContractF32 * af.freqs.attention_factor);
  }
}

// llama.cpp's K-shift: keys rotated at p, then ggml_rope_ext with positions = delta < 0, equal keys rotated at
// p + delta directly (within twice the contract: two rotations), for i32 and fractional f64 ids. Plain RoPE: with
// YaRN's magnitude each rotation scales by it, as in ggml (a shift must pass a compensating attn_factor).
TEST(GgmlPositions, KShiftByANegativeDeltaEqualsRotatingAtTheShiftedPosition) {
  const Mode m = kModes[1];
  GgmlRopeParams gp;
  gp.mode = m.mode;
  gp.n_dims = m.n_dims;
  gp.freq_base = 1e6;
  const AxisFrequencies af = ggml_frequencies(gp);
  const int64_t T = 6;
  std::vector<int32_t> p = {100, 4096, 70000, 5, 1 << 20, 33}, delta = {-50, -4000, -69999, -5, -(1 << 19), -40};
  std::vector<int32_t> shifted(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) shifted[i] = p[i] + delta[i];
  mmtest::Thd k(T, 3, m.D, 5), direct = k;
  rotate(af, k, p, DType::kI32);
  rotate(af, k, delta, DType::kI32);
  rotate(af, direct, shifted, DType::kI32);
  double worst = 0;
  for (std::size_t i = 0; i < k.data.size(); ++i) worst = std::max(worst, double(std::fabs(k.data[i] - direct.data[i])));
  EXPECT_LE(worst, 2 * testing::kAccuracyContractF32 * af.freqs.attention_factor);

  std::vector<double> frac = {-0.5, -2.25, -1e6, -3.0, -7.75, -16777216.0}, fmag(frac.size());
  for (std::size_t i = 0; i < frac.size(); ++i) fmag[i] = -frac[i];
  mmtest::Thd a(T, 1, m.D, 6), b = a;
  rotate(af, a, frac, DType::kF64);
  rotate(af, b, fmag, DType::kF64, Direction::kInverse);
  EXPECT_EQ(a.data, b.data);
}

// |pos| must stay below 2^31 (int32 ids fit); nothing is written on error. Other conventions keep refusing
// negative positions.
TEST(GgmlPositions, BoundsAndScope) {
  const AxisFrequencies af = freqs_of(kModes[1]);
  mmtest::Thd q(2, 1, 24, 3);
  const auto x = q.data;
  std::vector<int64_t> ids = {-5, -(int64_t(1) << 31)};
  EXPECT_NE(error_of([&] { rotate(af, q, ids, DType::kI64); })
                .find("[rotary_apply] positions.ids[1] must be > -2^31, got -2147483648"),
            std::string::npos)
      << error_of([&] { rotate(af, q, ids, DType::kI64); });
  std::vector<double> fids = {-5.0, -2147483648.0};
  EXPECT_NE(error_of([&] { rotate(af, q, fids, DType::kF64); }).find("positions.ids[1] must be > -2^31"),
            std::string::npos);
  EXPECT_EQ(q.data, x);

  const AxisFrequencies vision = vision_frequencies({VisionConvention::kQwen2VL, 24, 10000.0, std::nullopt});
  EXPECT_FALSE(vision.signed_positions);
  std::vector<int64_t> v = {0, -1, 0, 1};
  EXPECT_NE(error_of([&] { rotate(vision, q, v, DType::kI64); }).find("positions.ids[0,1] must be >= 0"),
            std::string::npos);
  EXPECT_EQ(q.data, x);
}

// One axis (ggml NORMAL / NEOX) takes ids in every documented form: the axes forms [1,B,S], [1,S] and [1,T] rotate
// exactly as the plain [B,S], [S] and [T] do; a leading dim other than 1 is refused.
TEST(GgmlPositions, OneAxisTakesTheAxesFormsOfIds) {
  const AxisFrequencies af = freqs_of(kModes[1]);
  ASSERT_EQ(af.n_axes, 1);
  const int64_t B = 2, S = 5, H = 3, D = 24;
  const std::vector<float> x0 = testing::randn(static_cast<size_t>(B * S * H * D), 7);
  const std::vector<int64_t> ids = {3, 9, 0, 70000, 12, 5, 1, 2, 44444, 8};  // [B,S], a different row per batch
  auto rotated = [&](Layout layout, std::initializer_list<int64_t> shape, std::initializer_list<int64_t> qshape) {
    std::vector<float> q = x0;
    ApplyArgs a;
    a.layout = layout;
    a.q = TensorView::contiguous(q.data(), DType::kF32, qshape);
    a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, shape));
    apply_axes(af, a);
    return q;
  };
  const auto bshd = {B, S, H, D}, thd = {B * S, H, D};
  EXPECT_EQ(rotated(Layout::kBSHD, {1, B, S}, bshd), rotated(Layout::kBSHD, {B, S}, bshd));
  EXPECT_EQ(rotated(Layout::kBSHD, {1, S}, bshd), rotated(Layout::kBSHD, {S}, bshd));
  EXPECT_EQ(rotated(Layout::kTHD, {1, B * S}, thd), rotated(Layout::kTHD, {B * S}, thd));
  EXPECT_NE(rotated(Layout::kBSHD, {1, B, S}, bshd), x0);
  EXPECT_NE(error_of([&] { rotated(Layout::kBSHD, {2, 1, S}, bshd); }).find("positions.ids"), std::string::npos);
}

}  // namespace
}  // namespace rotary
