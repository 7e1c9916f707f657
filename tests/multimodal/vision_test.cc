// 2-D vision RoPE conventions (Qwen2-VL ViT, ggml VISION, Pixtral HF/mistral) via apply_axes vs fp64 formulas.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <optional>
#include <cstring>
#include <vector>

#include "multimodal/mm_testing.h"
#include "rotary/rotary.h"
#include "testing/tolerances.h"

namespace rotary {
namespace {

/// Each convention in the form its upstream code has, in long double. `row`, `col`: the patch position.
/// Returns the rotated head (length D).
using Truth = std::function<std::vector<double>(const std::vector<double>&, long double row, long double col)>;

/// HF rotate_half application with a full-width angle vector emb[D]: y = x cos(emb) + rotate_half(x) sin(emb).
std::vector<double> rotate_half_apply(const std::vector<double>& x, const std::vector<long double>& emb) {
  const std::size_t D = x.size(), h = D / 2;
  std::vector<double> y(D);
  for (std::size_t d = 0; d < D; ++d) {
    const long double rot = d < h ? -static_cast<long double>(x[d + h]) : static_cast<long double>(x[d - h]);
    y[d] = static_cast<double>(x[d] * cosl(emb[d]) + rot * sinl(emb[d]));
  }
  return y;
}

// Qwen2-VL ViT: inv = 1/base^(arange(0, D/2, 2)/(D/2)); angles = cat(row*inv, col*inv); emb = cat(angles, angles).
std::vector<double> qwen2vl(const std::vector<double>& x, long double row, long double col, long double base) {
  const int64_t D = static_cast<int64_t>(x.size()), spatial = D / 2;
  std::vector<long double> inv;
  for (int64_t i = 0; i < spatial; i += 2) inv.push_back(1.0L / powl(base, static_cast<long double>(i) / spatial));
  std::vector<long double> angles;
  for (long double f : inv) angles.push_back(row * f);
  for (long double f : inv) angles.push_back(col * f);
  std::vector<long double> emb = angles;
  emb.insert(emb.end(), angles.begin(), angles.end());
  return rotate_half_apply(x, emb);
}

// ggml VISION (n_dims = D/2, clip sections {D/4 x4}, positions rows (row, col, row, col)): per pair j < n_dims,
// sector = j % D; theta restarts at each section start and is multiplied by base^(-2/n_dims) each step;
// pairs (j, j + n_dims).
std::vector<double> ggml_vision(const std::vector<double>& x, long double row, long double col, long double base) {
  const int64_t D = static_cast<int64_t>(x.size()), n_dims = D / 2, sec = D / 4;
  const long double pos[4] = {row, col, row, col};
  return mmtest::rotate_head(x, n_dims, Pairing::kHalfSplit, [&](int64_t j) {
    const int64_t sector = j % D, section = sector / sec, k = sector - section * sec;
    return pos[section] * powl(base, -2.0L * k / n_dims);
  });
}

// Pixtral HF: freqs = 1/base^(arange(0, D, 2)/D); inv2d = cat(freqs[0::2], freqs[1::2]);
// angles = cat(row*inv2d[:D/4], col*inv2d[D/4:]); emb = cat(angles, angles); rotate_half.
std::vector<double> pixtral_hf(const std::vector<double>& x, long double row, long double col, long double base) {
  const int64_t D = static_cast<int64_t>(x.size());
  std::vector<long double> freqs;
  for (int64_t i = 0; i < D; i += 2) freqs.push_back(1.0L / powl(base, static_cast<long double>(i) / D));
  std::vector<long double> inv2d;
  for (std::size_t i = 0; i < freqs.size(); i += 2) inv2d.push_back(freqs[i]);
  for (std::size_t i = 1; i < freqs.size(); i += 2) inv2d.push_back(freqs[i]);
  std::vector<long double> angles;
  for (int64_t i = 0; i < D / 4; ++i) angles.push_back(row * inv2d[i]);
  for (int64_t i = D / 4; i < D / 2; ++i) angles.push_back(col * inv2d[i]);
  std::vector<long double> emb = angles;
  emb.insert(emb.end(), angles.begin(), angles.end());
  return rotate_half_apply(x, emb);
}

// Pixtral, mistral's reference (complex): freqs_2d = cat(outer(row, freqs[::2]), outer(col, freqs[1::2])),
// x viewed as complex pairs (x[2j], x[2j+1]) multiplied by exp(i freqs_2d[j]).
std::vector<double> pixtral_mistral(const std::vector<double>& x, long double row, long double col, long double base) {
  const int64_t D = static_cast<int64_t>(x.size());
  std::vector<long double> freqs;
  for (int64_t i = 0; i < D; i += 2) freqs.push_back(1.0L / powl(base, static_cast<long double>(i) / D));
  std::vector<long double> f2d;
  for (std::size_t i = 0; i < freqs.size(); i += 2) f2d.push_back(row * freqs[i]);
  for (std::size_t i = 1; i < freqs.size(); i += 2) f2d.push_back(col * freqs[i]);
  std::vector<double> y(x.size());
  for (int64_t j = 0; j < D / 2; ++j) {
    const long double re = x[2 * j], im = x[2 * j + 1], c = cosl(f2d[j]), s = sinl(f2d[j]);
    y[2 * j] = static_cast<double>(re * c - im * s);
    y[2 * j + 1] = static_cast<double>(re * s + im * c);
  }
  return y;
}

struct Conv {
  const char* name;
  VisionConvention convention;
  std::optional<Pairing> pairing;
  std::function<std::vector<double>(const std::vector<double>&, long double, long double, long double)> truth;
};

std::vector<Conv> conventions() {
  return {{"qwen2vl", VisionConvention::kQwen2VL, std::nullopt, qwen2vl},
          {"ggml-vision", VisionConvention::kGgmlVision, std::nullopt, ggml_vision},
          {"pixtral (HF)", VisionConvention::kPixtral, std::nullopt, pixtral_hf},
          {"pixtral (mistral, interleaved)", VisionConvention::kPixtral, Pairing::kInterleaved, pixtral_mistral}};
}

TEST(Vision, EveryConventionMatchesItsFp64Formula) {
  for (const Conv& c : conventions()) {
    for (int64_t D : {16, 64, 80}) {
      for (double base : {10000.0, 100.0}) {
        SCOPED_TRACE(std::string(c.name) + " D " + std::to_string(D) + " base " + std::to_string(base));
        VisionSpec vs{c.convention, D, base, c.pairing};
        const AxisFrequencies af = vision_frequencies(vs);
        ASSERT_EQ(af.n_axes, 2);
        ASSERT_EQ(af.rotary_dim(), D);
        const int64_t Hg = 5, Wg = 7, T = Hg * Wg, H = 3;
        const auto ids = grid_positions(Hg, Wg);  // [2, T]
        mmtest::Thd q(T, H, D, static_cast<uint64_t>(D));
        const auto x = q.data;
        ApplyArgs a;
        a.layout = Layout::kTHD;
        a.q = q.view();
        a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {2, T}));
        apply_axes(af, a);
        double worst = 0;
        for (int64_t t = 0; t < T; ++t)
          for (int64_t h = 0; h < H; ++h) {
            std::vector<double> head(x.begin() + (t * H + h) * D, x.begin() + (t * H + h + 1) * D);
            const auto want = c.truth(head, static_cast<long double>(t / Wg), static_cast<long double>(t % Wg), base);
            for (int64_t d = 0; d < D; ++d) worst = std::max(worst, std::fabs(q.data[(t * H + h) * D + d] - want[d]));
          }
        EXPECT_LE(worst, testing::kAccuracyContractF32);
      }
    }
  }
}

// The conventions really differ (a test comparing the wrong one would fail): Qwen2-VL vs Pixtral differ
// in the col frequencies; HF Pixtral vs mistral Pixtral in the pairing.
TEST(Vision, ConventionsAreDistinguishable) {
  const int64_t D = 32;
  const auto q2 = vision_frequencies({VisionConvention::kQwen2VL, D, 10000.0, std::nullopt});
  const auto px = vision_frequencies({VisionConvention::kPixtral, D, 10000.0, std::nullopt});
  EXPECT_EQ(q2.axis_of_freq, px.axis_of_freq);
  EXPECT_EQ(q2.freqs.inv_freq[0], px.freqs.inv_freq[0]);
  EXPECT_NE(q2.freqs.inv_freq[D / 4], px.freqs.inv_freq[D / 4]);
  // Pixtral's col frequency k is base^(-(4k+2)/D), Qwen2-VL's base^(-4k/D).
  for (int64_t k = 0; k < D / 4; ++k) {
    EXPECT_NEAR(px.freqs.inv_freq[D / 4 + k], std::pow(10000.0, -(4.0 * k + 2) / D), 1e-15);
    EXPECT_NEAR(q2.freqs.inv_freq[D / 4 + k], std::pow(10000.0, -4.0 * k / D), 1e-15);
  }
}

TEST(Vision, BshdWithBatchedGridsAndBroadcastIds) {
  // Two images of the same grid in a batch, [2, S] ids broadcast over the batch, k with fewer heads.
  const int64_t B = 2, Hg = 3, Wg = 4, S = Hg * Wg, Hq = 4, Hk = 2, D = 24;
  const AxisFrequencies af = vision_frequencies({VisionConvention::kQwen2VL, D, 10000.0, std::nullopt});
  const auto ids = grid_positions(Hg, Wg);
  auto q = testing::randn(static_cast<std::size_t>(B * S * Hq * D), 1);
  auto k = testing::randn(static_cast<std::size_t>(B * S * Hk * D), 2);
  const auto q0 = q, k0 = k;
  ApplyArgs a;
  a.q = TensorView::contiguous(q.data(), DType::kF32, {B, S, Hq, D});
  a.k = TensorView::contiguous(k.data(), DType::kF32, {B, S, Hk, D});
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {2, S}));
  apply_axes(af, a);
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t off = ((b * S + s) * Hq + h) * D;
        const auto want = qwen2vl(std::vector<double>(q0.begin() + off, q0.begin() + off + D), s / Wg, s % Wg, 10000.0L);
        for (int64_t d = 0; d < D; ++d) worst = std::max(worst, std::fabs(q[off + d] - want[d]));
      }
      for (int64_t h = 0; h < Hk; ++h) {
        const int64_t off = ((b * S + s) * Hk + h) * D;
        const auto want = qwen2vl(std::vector<double>(k0.begin() + off, k0.begin() + off + D), s / Wg, s % Wg, 10000.0L);
        for (int64_t d = 0; d < D; ++d) worst = std::max(worst, std::fabs(k[off + d] - want[d]));
      }
    }
  EXPECT_LE(worst, testing::kAccuracyContractF32);
  // Inverse direction undoes the rotation.
  a.direction = Direction::kInverse;
  apply_axes(af, a);
  double back = 0;
  for (std::size_t i = 0; i < q.size(); ++i) back = std::max(back, std::fabs(double(q[i]) - q0[i]));
  EXPECT_LE(back, 1e-5);
}

// M-RoPE through the generic multi-axis path equals Rope's M-RoPE path bit-exactly (same rows).
TEST(Vision, MropeFrequenciesThroughApplyAxesEqualRope) {
  for (bool interleaved : {false, true}) {
    Spec spec;
    spec.head_dim = 32;
    spec.base = 1e6;
    spec.mrope = {{4, 6, 6}, interleaved};
    RopeOptions o;
    o.mode = CosSinMode::kOnTheFly;
    Rope rope(spec, o);
    const AxisFrequencies af = mrope_frequencies(spec);
    EXPECT_EQ(af.n_axes, 3);
    const int64_t T = 9, H = 2;
    std::vector<int64_t> ids(3 * T);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 53) % 97);
    mmtest::Thd a1(T, H, 32, 3), a2(T, H, 32, 3);
    ApplyArgs a;
    a.layout = Layout::kTHD;
    a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {3, T}));
    a.q = a1.view();
    rope.apply(a);
    a.q = a2.view();
    apply_axes(af, a);
    EXPECT_EQ(0, std::memcmp(a1.data.data(), a2.data.data(), a1.data.size() * 4));
  }
}

// ggml modes end to end: rotary's apply_axes with ggml_frequencies rotates the same pairs as ggml's
// rotate_pairs (NORMAL interleaved, NEOX/MROPE/IMROPE (j, j + n_dims/2), VISION (j, j + n_dims)),
// checked against the fp64 formula with the mode's own pair layout.
TEST(Vision, GgmlModesRotateTheRightPairs) {
  struct M { GgmlRopeMode mode; int64_t n_dims, D; std::array<int64_t, 4> sections; };
  for (const M m : {M{GgmlRopeMode::kNormal, 16, 24, {0, 0, 0, 0}}, M{GgmlRopeMode::kNeox, 16, 24, {0, 0, 0, 0}},
                    M{GgmlRopeMode::kMrope, 24, 24, {4, 4, 3, 1}}, M{GgmlRopeMode::kImrope, 24, 24, {4, 4, 4, 0}},
                    M{GgmlRopeMode::kVision, 12, 24, {6, 6, 6, 6}}}) {
    SCOPED_TRACE(ggml_rope_mode_name(m.mode));
    GgmlRopeParams p;
    p.mode = m.mode;
    p.n_dims = m.n_dims;
    p.sections = m.sections;
    const AxisFrequencies af = ggml_frequencies(p);
    const int64_t T = 6, H = 2;
    std::vector<int64_t> ids(static_cast<std::size_t>(af.n_axes * T));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 29) % 41);
    mmtest::Thd q(T, H, m.D, 4);
    const auto x = q.data;
    ApplyArgs a;
    a.layout = Layout::kTHD;
    a.q = q.view();
    a.positions = af.n_axes == 1 ? Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {T}))
                                 : Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {af.n_axes, T}));
    apply_axes(af, a);
    const int64_t pairs = static_cast<int64_t>(af.freqs.inv_freq.size());
    const Pairing pairing = m.mode == GgmlRopeMode::kNormal ? Pairing::kInterleaved : Pairing::kHalfSplit;
    double worst = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> head(x.begin() + (t * H + h) * m.D, x.begin() + (t * H + h + 1) * m.D);
        const auto want = mmtest::rotate_head(head, pairs, pairing, [&](int64_t j) {
          return static_cast<long double>(ids[af.axis_of_freq[j] * T + t]) * af.freqs.inv_freq[j];
        });
        for (int64_t d = 0; d < m.D; ++d) worst = std::max(worst, std::fabs(q.data[(t * H + h) * m.D + d] - want[d]));
      }
    EXPECT_LE(worst, testing::kAccuracyContractF32);
  }
}

TEST(Vision, RejectsBadSpecsAndIds) {
  auto msg = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg([] { (void)vision_frequencies({VisionConvention::kQwen2VL, 18, 10000.0, std::nullopt}); })
                .find("head_dim must be a positive multiple of 4"),
            std::string::npos);
  EXPECT_NE(msg([] { (void)vision_frequencies({VisionConvention::kPixtral, 16, 1.0, std::nullopt}); }).find("base must be"),
            std::string::npos);
  EXPECT_EQ(parse_vision_convention("pixtral"), VisionConvention::kPixtral);
  EXPECT_EQ(parse_vision_convention("qwen2.5-vl"), VisionConvention::kQwen2VL);
  EXPECT_NE(msg([] { (void)parse_vision_convention("llama4"); }).find("qwen2vl, ggml-vision, pixtral"), std::string::npos);

  const AxisFrequencies af = vision_frequencies({VisionConvention::kQwen2VL, 16, 10000.0, std::nullopt});
  mmtest::Thd q(4, 1, 16, 1);
  const auto x = q.data;
  std::vector<int64_t> ids3(12, 1), ids2 = {0, 1, 2, 3, 0, 1, -2, 3};
  ApplyArgs a;
  a.layout = Layout::kTHD;
  a.q = q.view();
  a.positions = Positions::from_ids(TensorView::contiguous(ids3.data(), DType::kI64, {3, 4}));
  EXPECT_NE(msg([&] { apply_axes(af, a); }).find("positions.ids must have shape [2,T]"), std::string::npos)
      << msg([&] { apply_axes(af, a); });
  a.positions = Positions::from_ids(TensorView::contiguous(ids2.data(), DType::kI64, {2, 4}));
  EXPECT_NE(msg([&] { apply_axes(af, a); }).find("positions.ids[1,2] must be >= 0"), std::string::npos)
      << msg([&] { apply_axes(af, a); });
  a.positions = Positions::contiguous(0);
  EXPECT_NE(msg([&] { apply_axes(af, a); }).find("positions must be ids of shape [2,T]"), std::string::npos);
  EXPECT_EQ(q.data, x);  // nothing written on error
  AxisFrequencies bad = af;
  bad.axis_of_freq[3] = 2;
  EXPECT_NE(msg([&] { bad.validate(); }).find("axis_of_freq[3] must be < n_axes 2, got 2"), std::string::npos);
}

}  // namespace
}  // namespace rotary
