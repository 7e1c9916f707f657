// Properties of the frequency math checked against independent formulas (no golden numbers).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "rotary/freqs.h"
#include "rotary/spec.h"

namespace {

using rotary::compute_frequencies;
using rotary::RopeType;
using rotary::Spec;

Spec base_spec(int64_t head_dim, double base, int64_t max_pos = 4096) {
  Spec s;
  s.head_dim = head_dim;
  s.base = base;
  s.max_position_embeddings = max_pos;
  return s;
}

/// theta_i = exp(-(2i/d) ln base): a different formula from the library's pow-based one.
double independent_theta(double base, int64_t d, int64_t i) {
  return std::exp(-(2.0 * static_cast<double>(i) / static_cast<double>(d)) * std::log(base));
}

TEST(FreqProperties, DefaultIsBasePowerMinus2iOverD) {
  for (double base : {10000.0, 500000.0, 1e6, 150000.0}) {
    for (int64_t d : {64, 80, 96, 128, 256}) {
      Spec s = base_spec(d, base);
      const auto f = compute_frequencies(s);
      ASSERT_EQ(f.inv_freq.size(), static_cast<size_t>(d / 2));
      EXPECT_EQ(f.attention_factor, 1.0);
      EXPECT_EQ(f.inv_freq[0], 1.0);
      for (int64_t i = 0; i < d / 2; ++i)
        EXPECT_NEAR(f.inv_freq[i] / independent_theta(base, d, i), 1.0, 1e-13) << "base " << base << " d " << d;
      EXPECT_EQ(f.inv_freq, rotary::default_inv_freq(base, d));
    }
  }
}

TEST(FreqProperties, PartialRotaryUsesRotaryDimAsDenominator) {
  Spec s = base_spec(96, 10000.0);
  s.rotary_dim = 24;  // GPT-NeoX-20B
  const auto f = compute_frequencies(s);
  ASSERT_EQ(f.inv_freq.size(), 12u);
  for (int64_t i = 0; i < 12; ++i) EXPECT_NEAR(f.inv_freq[i] / independent_theta(10000.0, 24, i), 1.0, 1e-13);
}

TEST(FreqProperties, LinearIsDefaultDividedByFactor) {
  for (double factor : {1.0, 2.0, 4.0, 7.5}) {
    Spec s = base_spec(128, 10000.0);
    const auto def = compute_frequencies(s);
    s.scaling.type = RopeType::kLinear;
    s.scaling.factor = factor;
    const auto lin = compute_frequencies(s);
    ASSERT_EQ(lin.inv_freq.size(), def.inv_freq.size());
    for (size_t i = 0; i < def.inv_freq.size(); ++i) EXPECT_DOUBLE_EQ(lin.inv_freq[i], def.inv_freq[i] / factor);
    EXPECT_EQ(lin.attention_factor, 1.0);
  }
}

TEST(FreqProperties, DynamicWithinContextEqualsDefault) {
  Spec s = base_spec(128, 10000.0, 4096);
  const auto def = compute_frequencies(s);
  s.scaling.type = RopeType::kDynamic;
  for (double factor : {2.0, 3.7}) {
    s.scaling.factor = factor;
    for (std::optional<int64_t> len : {std::optional<int64_t>{}, std::optional<int64_t>{1},
                                       std::optional<int64_t>{1000}, std::optional<int64_t>{4096}}) {
      const auto dyn = compute_frequencies(s, len);
      for (size_t i = 0; i < def.inv_freq.size(); ++i)
        EXPECT_NEAR(dyn.inv_freq[i] / def.inv_freq[i], 1.0, 1e-14) << "factor " << factor << " i " << i;
    }
  }
}

TEST(FreqProperties, DynamicBeyondContextRaisesBase) {
  Spec s = base_spec(128, 10000.0, 4096);
  s.scaling.type = RopeType::kDynamic;
  s.scaling.factor = 2.0;
  const auto dyn = compute_frequencies(s, 8192);
  // base' = base * (2*8192/4096 - 1)^(128/126) = base * 3^(64/63)
  const double new_base = 10000.0 * std::pow(3.0, 128.0 / 126.0);
  for (int64_t i = 0; i < 64; ++i) EXPECT_NEAR(dyn.inv_freq[i] / independent_theta(new_base, 128, i), 1.0, 1e-13);
}

TEST(FreqProperties, Llama3KeepsHighBandsAndDividesLowBandsExactly) {
  struct Case {
    double base, factor, low, high;
    int64_t d, orig;
  };
  for (const Case& c : {Case{500000.0, 8.0, 1.0, 4.0, 128, 8192}, Case{500000.0, 32.0, 1.0, 4.0, 64, 8192},
                        Case{10000.0, 4.0, 2.0, 8.0, 128, 2048}}) {
    Spec s = base_spec(c.d, c.base, 131072);
    const auto def = compute_frequencies(s);
    s.scaling.type = RopeType::kLlama3;
    s.scaling.factor = c.factor;
    s.scaling.low_freq_factor = c.low;
    s.scaling.high_freq_factor = c.high;
    s.scaling.original_max_position_embeddings = c.orig;
    const auto l3 = compute_frequencies(s);
    int high = 0, low = 0, medium = 0;
    for (size_t i = 0; i < def.inv_freq.size(); ++i) {
      const double wavelen = 2.0 * std::numbers::pi / def.inv_freq[i];
      if (wavelen < c.orig / c.high) {
        EXPECT_EQ(l3.inv_freq[i], def.inv_freq[i]) << "high band i=" << i;
        ++high;
      } else if (wavelen > c.orig / c.low) {
        EXPECT_EQ(l3.inv_freq[i], def.inv_freq[i] / c.factor) << "low band i=" << i;
        ++low;
      } else {
        EXPECT_LT(l3.inv_freq[i], def.inv_freq[i]) << "medium band i=" << i;
        EXPECT_GT(l3.inv_freq[i], def.inv_freq[i] / c.factor) << "medium band i=" << i;
        ++medium;
      }
    }
    EXPECT_GT(high, 0);
    EXPECT_GT(low, 0);
    EXPECT_GT(medium, 0);
    EXPECT_EQ(l3.attention_factor, 1.0);
  }
}

TEST(FreqProperties, YarnRampEndsAreExtrapolationAndInterpolation) {
  Spec s = base_spec(128, 10000.0, 16384);
  const auto def = compute_frequencies(s);
  s.scaling.type = RopeType::kYarn;
  s.scaling.factor = 4.0;
  s.scaling.original_max_position_embeddings = 4096;
  const auto y = compute_frequencies(s);
  // corr(r) = d ln(orig/(2 pi r)) / (2 ln base); low = floor(corr(32)), high = ceil(corr(1))
  auto corr = [](double r) { return 128.0 * std::log(4096.0 / (2.0 * std::numbers::pi * r)) / (2.0 * std::log(10000.0)); };
  const double low = std::floor(corr(32.0)), high = std::ceil(corr(1.0));
  for (int64_t j = 0; j < 64; ++j) {
    if (j <= low) EXPECT_EQ(y.inv_freq[j], def.inv_freq[j]) << j;
    else if (j >= high) EXPECT_NEAR(y.inv_freq[j] / (def.inv_freq[j] / 4.0), 1.0, 1e-15) << j;
    else {
      const double ramp = (j - low) / (high - low);
      EXPECT_NEAR(y.inv_freq[j] / (def.inv_freq[j] * (1 - ramp) + def.inv_freq[j] / 4.0 * ramp), 1.0, 1e-14) << j;
    }
  }
  EXPECT_DOUBLE_EQ(y.attention_factor, 0.1 * std::log(4.0) + 1.0);
}

TEST(FreqProperties, YarnAttentionFactorQuirks) {
  Spec s = base_spec(64, 10000.0, 163840);
  s.scaling.type = RopeType::kYarn;
  s.scaling.factor = 40.0;
  s.scaling.original_max_position_embeddings = 4096;
  const double plain = 0.1 * std::log(40.0) + 1.0;
  EXPECT_DOUBLE_EQ(compute_frequencies(s).attention_factor, plain);
  s.scaling.mscale = 1.0;  // mscale alone is ignored (HF needs both)
  EXPECT_DOUBLE_EQ(compute_frequencies(s).attention_factor, plain);
  s.scaling.mscale_all_dim = 1.0;  // DeepSeek-V3: ratio of equal mscales = 1
  EXPECT_DOUBLE_EQ(compute_frequencies(s).attention_factor, 1.0);
  s.scaling.mscale = 0.707;
  EXPECT_DOUBLE_EQ(compute_frequencies(s).attention_factor, (0.1 * 0.707 * std::log(40.0) + 1.0) / plain);
  s.scaling.mscale = 0.0;  // falsy in HF: back to the plain formula
  EXPECT_DOUBLE_EQ(compute_frequencies(s).attention_factor, plain);
  s.scaling.attention_factor = 0.5;  // explicit wins
  EXPECT_EQ(compute_frequencies(s).attention_factor, 0.5);
  s.scaling.attention_factor.reset();
  s.scaling.factor.reset();  // factor = max_pos / orig = 40
  EXPECT_DOUBLE_EQ(compute_frequencies(s).attention_factor, plain);
}

TEST(FreqProperties, YarnZeroBetasMeanDefaults) {
  Spec s = base_spec(128, 10000.0, 16384);
  s.scaling.type = RopeType::kYarn;
  s.scaling.factor = 4.0;
  const auto ref = compute_frequencies(s);
  s.scaling.beta_fast = 0.0;
  s.scaling.beta_slow = 0.0;
  EXPECT_EQ(compute_frequencies(s).inv_freq, ref.inv_freq);
}

TEST(FreqProperties, LongRopeSwitchesAboveOriginalContext) {
  Spec s = base_spec(8, 10000.0, 16384);
  s.scaling.type = RopeType::kLongRope;
  s.scaling.original_max_position_embeddings = 4096;
  s.scaling.short_factor = {1.0, 1.5, 2.0, 2.5};
  s.scaling.long_factor = {3.0, 4.0, 5.0, 6.0};
  const auto def = rotary::default_inv_freq(10000.0, 8);
  for (std::optional<int64_t> len : {std::optional<int64_t>{}, std::optional<int64_t>{0},
                                     std::optional<int64_t>{4096}, std::optional<int64_t>{4097}}) {
    const auto f = compute_frequencies(s, len);
    const bool use_long = len && *len > 4096;
    const auto& ext = use_long ? s.scaling.long_factor : s.scaling.short_factor;
    for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(f.inv_freq[i] / (def[i] / ext[i]), 1.0, 1e-15);
    EXPECT_DOUBLE_EQ(f.attention_factor, std::sqrt(1.0 + std::log(4.0) / std::log(4096.0)));
  }
  s.scaling.factor = 1.0;  // factor <= 1: attention factor 1
  EXPECT_EQ(compute_frequencies(s).attention_factor, 1.0);
}

TEST(FreqProperties, ProportionalZerosBeyondRotatedPart) {
  Spec s = base_spec(256, 1e6);
  s.scaling.type = RopeType::kProportional;
  s.partial_rotary_factor = 0.25;
  s.scaling.factor = 2.0;
  const auto f = compute_frequencies(s);
  ASSERT_EQ(f.inv_freq.size(), 128u);
  for (int64_t i = 0; i < 128; ++i) {
    if (i < 32) EXPECT_NEAR(f.inv_freq[i] / (independent_theta(1e6, 256, i) / 2.0), 1.0, 1e-13) << i;
    else EXPECT_EQ(f.inv_freq[i], 0.0) << i;
  }
}

TEST(FreqProperties, MropeDoesNotChangeFrequencies) {
  Spec s = base_spec(128, 1e6);
  const auto plain = compute_frequencies(s);
  s.mrope.section = {16, 24, 24};
  EXPECT_EQ(compute_frequencies(s).inv_freq, plain.inv_freq);
}

TEST(FreqProperties, NegativeSeqLenRejected) {
  EXPECT_THROW(compute_frequencies(base_spec(64, 1e4), -1), rotary::Error);
}

}  // namespace
