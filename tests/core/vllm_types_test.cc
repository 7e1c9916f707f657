// vLLM's rope types that HF does not define (ntk, mixed ntk, dynamic NTK-alpha): golden fp64 values, configs, errors, C API.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "rotary/apply.h"
#include "rotary/config.h"
#include "rotary/freqs.h"
#include "rotary/rotary_c.h"

namespace {

using rotary::RopeType;
using rotary::Spec;

// Independent truth: vLLM's formulas (ntk_scaling_rope.py, dynamic_ntk_alpha_rope.py) written as sums of
// logarithms in long double, not as the implementation's products of powers.
long double ntk_fixed(long double base, long double f, int64_t R, int64_t i) {
  return expl(-(2.0L * i / R) * logl(base) - ((2.0L * i + 2.0L) / R) * logl(f));
}
long double ntk_mixed(long double base, long double f, long double b, int64_t R, int64_t i) {
  return expl(-(2.0L * i / R) * logl(base) - logl(f) * powl((i + 1.0L) / (R / 2.0L), b));
}
long double ntk_alpha(long double base, long double alpha, int64_t R, int64_t i) {
  return expl(-(2.0L * i / R) * (logl(base) + (static_cast<long double>(R) / (R - 2)) * logl(alpha)));
}

/// theta_i of a config, compared with `want(i)` to 4 ulp of double (relative 1e-15).
void expect_golden(const std::string& json, int64_t R, const std::function<long double(int64_t)>& want) {
  const Spec s = rotary::spec_from_hf_config_json(json, "t.json");
  const auto f = rotary::compute_frequencies(s);
  ASSERT_EQ(static_cast<int64_t>(f.inv_freq.size()), R / 2);
  EXPECT_EQ(f.attention_factor, 1.0);
  for (int64_t i = 0; i < R / 2; ++i) {
    const double w = static_cast<double>(want(i));
    EXPECT_NEAR(f.inv_freq[static_cast<size_t>(i)], w, 1e-15 * w) << json << " i=" << i;
  }
}

TEST(VllmTypes, NtkFixedGolden) {
  for (auto [base, f, hd] : {std::tuple{10000.0, 4.0, 128}, std::tuple{500000.0, 2.5, 64}, std::tuple{1e6, 16.0, 80}}) {
    const std::string json = "{\"head_dim\": " + std::to_string(hd) + ", \"rope_theta\": " + std::to_string(base) +
                             ", \"rope_scaling\": {\"rope_type\": \"ntk\", \"factor\": " + std::to_string(f) + "}}";
    expect_golden(json, hd, [&](int64_t i) { return ntk_fixed(base, f, hd, i); });
  }
  // The lowest frequency is divided by exactly the factor, the highest by factor^(2/R).
  const Spec s = rotary::spec_from_hf_config_json(R"({"head_dim": 64, "rope_scaling": {"rope_type": "ntk", "factor": 8}})");
  const auto f = rotary::compute_frequencies(s).inv_freq;
  const auto d = rotary::default_inv_freq(10000.0, 64);
  EXPECT_NEAR(d.back() / f.back(), 8.0, 1e-13);
  EXPECT_NEAR(d[0] / f[0], std::pow(8.0, 2.0 / 64), 1e-14);
}

TEST(VllmTypes, NtkMixedGolden) {
  for (auto [f, b, hd] : {std::tuple{4.0, 0.625, 128}, std::tuple{8.0, 2.0, 64}, std::tuple{2.0, 1.0, 96}}) {
    const std::string json = "{\"head_dim\": " + std::to_string(hd) + ", \"rope_theta\": 10000, \"rope_scaling\": "
                             "{\"rope_type\": \"ntk\", \"factor\": " + std::to_string(f) + ", \"mixed_b\": " + std::to_string(b) + "}}";
    expect_golden(json, hd, [&](int64_t i) { return ntk_mixed(10000.0L, f, b, hd, i); });
  }
}

TEST(VllmTypes, DynamicAlphaGoldenAndStatic) {
  // Hunyuan's config form: "type": "dynamic" with alpha, a factor of 1 and YaRN keys that are not used.
  const char* hunyuan = R"({"head_dim": 128, "max_position_embeddings": 32768, "rope_theta": 10000.0,
    "rope_scaling": {"alpha": 1000.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "type": "dynamic"}})";
  expect_golden(hunyuan, 128, [](int64_t i) { return ntk_alpha(10000.0L, 1000.0L, 128, i); });
  const Spec s = rotary::spec_from_hf_config_json(hunyuan);
  EXPECT_EQ(s.scaling.type, RopeType::kDynamic);
  ASSERT_TRUE(s.scaling.alpha.has_value());
  EXPECT_FALSE(s.length_dependent());
  EXPECT_EQ(rotary::compute_frequencies(s, 1 << 20).inv_freq, rotary::compute_frequencies(s).inv_freq);
  // No factor needed, no max_position_embeddings needed.
  expect_golden(R"({"head_dim": 64, "rope_parameters": {"rope_type": "dynamic", "alpha": 4.5, "rope_theta": 1e6}})", 64,
                [](int64_t i) { return ntk_alpha(1e6L, 4.5L, 64, i); });
  // Partial rotary: the exponent uses the rotated width R (vLLM's rotary_dim).
  expect_golden(R"({"head_dim": 64, "partial_rotary_factor": 0.5, "rope_scaling": {"type": "dynamic", "alpha": 3}})", 32,
                [](int64_t i) { return ntk_alpha(10000.0L, 3.0L, 32, i); });
}

TEST(VllmTypes, RopeRowsFollowTheFrequencies) {
  // A Rope over an ntk spec rotates by the spec's frequencies (the engine sees only inv_freq).
  const Spec s = rotary::spec_from_hf_config_json(R"({"head_dim": 8, "rope_scaling": {"rope_type": "ntk", "factor": 4, "mixed_b": 0.5}})");
  rotary::Rope rope(s);
  const int64_t pos[3] = {0, 7, 100000};
  float cos_v[12], sin_v[12];
  rope.cos_sin(rotary::TensorView::contiguous(pos, rotary::DType::kI64, {3}), std::nullopt, cos_v, sin_v);
  for (int64_t p = 0; p < 3; ++p)
    for (int64_t i = 0; i < 4; ++i) {
      const long double a = pos[p] * ntk_mixed(10000.0L, 4.0L, 0.5L, 8, i);
      EXPECT_NEAR(cos_v[p * 4 + i], static_cast<double>(cosl(a)), 6e-8);
      EXPECT_NEAR(sin_v[p * 4 + i], static_cast<double>(sinl(a)), 6e-8);
    }
}

std::string error_of(const std::string& json) {
  try {
    (void)rotary::spec_from_hf_config_json(json, "t.json");
  } catch (const rotary::Error& e) {
    return e.what();
  }
  return "";
}

TEST(VllmTypes, FieldErrorsAreNamed) {
  struct Bad {
    const char* json;
    const char* needle;
  } cases[] = {
      {R"({"head_dim": 8, "rope_scaling": {"rope_type": "ntk"}})", "rope_scaling.factor is required for rope_type ntk"},
      {R"({"head_dim": 8, "rope_scaling": {"rope_type": "ntk", "factor": 0.5}})", "scaling.factor must be >= 1, got 0.5"},
      {R"({"head_dim": 8, "rope_scaling": {"rope_type": "ntk", "factor": 2, "mixed_b": "x"}})", "rope_scaling.mixed_b must be a number, got \"x\""},
      {R"({"head_dim": 8, "rope_scaling": {"rope_type": "ntk", "factor": 2, "mixed_b": -1}})", "scaling.mixed_b must be > 0, got -1"},
      {R"({"head_dim": 8, "rope_scaling": {"rope_type": "ntk", "factor": 2, "mixed_b": 0}})", "scaling.mixed_b must be > 0, got 0"},
      {R"({"head_dim": 8, "rope_scaling": {"type": "dynamic", "alpha": 0.5}})", "scaling.alpha must be >= 1 (1 = no scaling), got 0.5"},
      {R"({"head_dim": 8, "rope_scaling": {"type": "dynamic", "alpha": 0}})", "scaling.alpha must be >= 1"},
      {R"({"head_dim": 8, "rope_scaling": {"type": "dynamic", "alpha": [2]}})", "rope_scaling.alpha must be a number, got [2]"},
      {R"({"head_dim": 2, "rope_scaling": {"type": "dynamic", "alpha": 2}})", "rotary_dim must be > 2 for rope_type dynamic"},
      // Spec::validate evaluates the NTK-alpha base: base * alpha^(R/(R-2)) overflowing is refused, naming alpha.
      {R"({"head_dim": 8, "rope_scaling": {"type": "dynamic", "alpha": 1e300}})", "scaling.alpha 1e+300 gives the NTK-alpha base inf"},
      {R"({"head_dim": 8, "max_position_embeddings": 64, "rope_scaling": {"type": "dynamic"}})", "rope_scaling.factor is required for rope_type dynamic"},
      {R"({"head_dim": 8, "rope_scaling": {"type": "ntk-alpha"}})", "must be one of default, linear, dynamic, yarn, longrope, llama3, proportional, ntk"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of(c.json);
    EXPECT_NE(msg.find(c.needle), std::string::npos) << c.json << "\n got: " << msg;
  }
  EXPECT_EQ(rotary::parse_rope_type("ntk"), RopeType::kNtk);
  EXPECT_STREQ(rotary::rope_type_name(RopeType::kNtk), "ntk");
}

TEST(VllmTypes, SpecJsonRoundTrips) {
  for (const char* json : {R"({"head_dim": 64, "rope_scaling": {"rope_type": "ntk", "factor": 4}})",
                           R"({"head_dim": 64, "rope_scaling": {"rope_type": "ntk", "factor": 4, "mixed_b": 0.75}})",
                           R"({"head_dim": 64, "rope_scaling": {"type": "dynamic", "alpha": 50, "factor": 1}})"}) {
    const Spec s = rotary::spec_from_hf_config_json(json, "x").normalized();
    const std::string text = rotary::spec_to_json(s);
    const Spec back = rotary::spec_from_hf_config_json(text, "x").normalized();
    EXPECT_EQ(rotary::spec_to_json(back), text) << json;
    EXPECT_EQ(rotary::compute_frequencies(back).inv_freq, rotary::compute_frequencies(s).inv_freq) << json;
  }
}

TEST(VllmTypesC, DescriptorFieldsAndTheOldLayout) {
  rotary_spec_desc_t d;
  rotary_spec_desc_init(&d);
  d.head_dim = 64;
  d.rope_type = ROTARY_ROPE_NTK;
  d.factor = 4.0;
  d.mixed_b = 0.625;
  rotary_spec_t* s = nullptr;
  ASSERT_EQ(rotary_spec_create(&d, &s), ROTARY_OK) << rotary_last_error();
  double inv[32];
  int64_t n = 0;
  ASSERT_EQ(rotary_spec_inv_freq(s, -1, inv, 32, &n), ROTARY_OK);
  for (int64_t i = 0; i < 32; ++i)
    EXPECT_NEAR(inv[i], static_cast<double>(ntk_mixed(10000.0L, 4.0L, 0.625L, 64, i)), 1e-15 * inv[i]);
  rotary_spec_desc_t back;
  rotary_spec_desc_init(&back);
  ASSERT_EQ(rotary_spec_describe(s, &back), ROTARY_OK);
  EXPECT_EQ(back.rope_type, ROTARY_ROPE_NTK);
  EXPECT_EQ(back.mixed_b, 0.625);
  EXPECT_EQ(back.alpha, 0.0);
  rotary_spec_free(s);

  rotary_spec_desc_init(&d);
  d.head_dim = 64;
  d.rope_type = ROTARY_ROPE_DYNAMIC;
  d.alpha = 1000.0;
  ASSERT_EQ(rotary_spec_create(&d, &s), ROTARY_OK) << rotary_last_error();
  ASSERT_EQ(rotary_spec_inv_freq(s, 1 << 20, inv, 32, &n), ROTARY_OK);
  for (int64_t i = 0; i < 32; ++i)
    EXPECT_NEAR(inv[i], static_cast<double>(ntk_alpha(10000.0L, 1000.0L, 64, i)), 1e-15 * inv[i]);
  // A caller built against the 0.1.0 header (no alpha/mixed_b): its struct_size is accepted, the fields unset,
  // and describe writes no byte past that layout.
  const size_t old_size = offsetof(rotary_spec_desc_t, alpha);
  rotary_spec_desc_t old;
  std::memset(&old, 0xAB, sizeof old);
  old.struct_size = old_size;
  ASSERT_EQ(rotary_spec_describe(s, &old), ROTARY_OK);
  EXPECT_EQ(old.struct_size, old_size);
  EXPECT_EQ(old.rope_type, ROTARY_ROPE_DYNAMIC);
  unsigned char tail[sizeof(rotary_spec_desc_t) - offsetof(rotary_spec_desc_t, alpha)];
  std::memcpy(tail, reinterpret_cast<const unsigned char*>(&old) + old_size, sizeof tail);
  for (unsigned char b : tail) EXPECT_EQ(b, 0xAB);
  // Any other struct_size (a caller that never ran rotary_spec_desc_init, a larger or smaller layout) is refused
  // naming the field, and describe writes nothing.
  for (size_t size : {size_t(0), size_t(8), old_size + 8, sizeof(rotary_spec_desc_t) + 8}) {
    SCOPED_TRACE(size);
    alignas(rotary_spec_desc_t) unsigned char buf[sizeof(rotary_spec_desc_t) + 64];
    std::memset(buf, 0xCD, sizeof buf);
    rotary_spec_desc_t* wrong = reinterpret_cast<rotary_spec_desc_t*>(buf);
    wrong->struct_size = size;
    ASSERT_EQ(rotary_spec_describe(s, wrong), ROTARY_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(rotary_last_error()).find("[rotary_spec_describe] desc->struct_size must be sizeof(rotary_spec_desc_t)"),
              std::string::npos) << rotary_last_error();
    for (size_t i = sizeof(size_t); i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xCD) << "byte " << i;
  }
  old.head_dim = 64;
  old.rope_type = ROTARY_ROPE_LINEAR;
  old.factor = 2.0;
  rotary_spec_t* s2 = nullptr;
  EXPECT_EQ(rotary_spec_create(&old, &s2), ROTARY_OK) << rotary_last_error();  // alpha/mixed_b bytes ignored
  rotary_spec_free(s2);
  rotary_spec_free(s);
  d.rope_type = 8;
  EXPECT_EQ(rotary_spec_create(&d, &s), ROTARY_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(rotary_last_error()).find("[0, 7], got 8"), std::string::npos) << rotary_last_error();
}

}  // namespace
