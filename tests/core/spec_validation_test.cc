// One test per validation rule: every invalid Spec or config is an Error whose message names the field and value.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "rotary/config.h"
#include "rotary/freqs.h"
#include "rotary/spec.h"

namespace {

using rotary::Error;
using rotary::RopeType;
using rotary::Spec;

/// Runs `f`, returns the Error it throws (fails the test if it throws nothing).
template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected rotary::Error, nothing was thrown";
  return Error(Error::Kind::kInternal, "");
}

/// Validation error of `spec`: kInvalidArgument, from rotary_spec, containing every fragment.
void expect_invalid(const Spec& spec, std::initializer_list<const char*> fragments) {
  Error e = error_of([&] { spec.validate(); });
  EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
  const std::string msg = e.what();
  EXPECT_EQ(msg.rfind("[rotary_spec] ", 0), 0u) << msg;
  for (const char* f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  // compute_frequencies refuses the same spec.
  EXPECT_THROW(rotary::compute_frequencies(spec), Error);
}

Spec llama(RopeType type = RopeType::kDefault) {
  Spec s;
  s.head_dim = 128;
  s.base = 10000.0;
  s.max_position_embeddings = 4096;
  s.scaling.type = type;
  return s;
}

Spec yarn() {
  Spec s = llama(RopeType::kYarn);
  s.scaling.factor = 4.0;
  s.scaling.original_max_position_embeddings = 4096;
  return s;
}

Spec longrope() {
  Spec s = llama(RopeType::kLongRope);
  s.scaling.short_factor.assign(64, 1.0);
  s.scaling.long_factor.assign(64, 2.0);
  return s;
}

Spec llama3() {
  Spec s = llama(RopeType::kLlama3);
  s.scaling.factor = 8.0;
  s.scaling.original_max_position_embeddings = 1024;
  return s;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(SpecValidation, ValidSpecsPass) {
  EXPECT_NO_THROW(llama().validate());
  EXPECT_NO_THROW(yarn().validate());
  EXPECT_NO_THROW(longrope().validate());
  EXPECT_NO_THROW(llama3().validate());
}

TEST(SpecValidation, FactorBelowOne) {
  for (RopeType t : {RopeType::kLinear, RopeType::kDynamic, RopeType::kYarn, RopeType::kLlama3}) {
    Spec s = t == RopeType::kYarn ? yarn() : t == RopeType::kLlama3 ? llama3() : llama(t);
    s.scaling.factor = 0.5;
    expect_invalid(s, {"scaling.factor must be >= 1, got 0.5"});
  }
  Spec lr = longrope();
  lr.scaling.factor = 0.25;
  expect_invalid(lr, {"scaling.factor", "0.25"});
}

TEST(SpecValidation, FactorRequiredWhereHfRequiresIt) {
  expect_invalid(llama(RopeType::kLinear), {"scaling.factor is required for rope_type linear"});
  Spec s = llama3();
  s.scaling.factor.reset();
  expect_invalid(s, {"scaling.factor is required for rope_type llama3"});
}

TEST(SpecValidation, BetaFastNotAboveBetaSlow) {
  Spec s = yarn();
  s.scaling.beta_fast = 1.0;
  s.scaling.beta_slow = 2.0;
  expect_invalid(s, {"scaling.beta_fast must be > scaling.beta_slow (2)", "got 1"});
  s.scaling.beta_fast = 2.0;  // equal is rejected too
  expect_invalid(s, {"scaling.beta_fast", "got 2"});
  s.scaling.beta_fast = -3.0;
  expect_invalid(s, {"scaling.beta_fast must be > 0", "-3"});
}

TEST(SpecValidation, ShortFactorWrongLength) {
  Spec s = longrope();
  s.scaling.short_factor.resize(63, 1.0);
  expect_invalid(s, {"scaling.short_factor must have rotary_dim/2 = 64 entries, got 63"});
}

TEST(SpecValidation, LongFactorWrongLength) {
  Spec s = longrope();
  s.rotary_dim = 64;  // lists of 64 no longer fit rotary_dim/2 = 32
  expect_invalid(s, {"scaling.short_factor", "32", "got 64"});
  s = longrope();
  s.scaling.long_factor.clear();
  expect_invalid(s, {"scaling.long_factor must have rotary_dim/2 = 64 entries, got 0"});
}

TEST(SpecValidation, FactorListEntriesPositive) {
  Spec s = longrope();
  s.scaling.long_factor[5] = 0.0;
  expect_invalid(s, {"scaling.long_factor[5] must be > 0, got 0"});
}

TEST(SpecValidation, LowFreqFactorNotAboveHigh) {
  Spec s = llama3();
  s.scaling.low_freq_factor = 5.0;
  s.scaling.high_freq_factor = 4.0;
  expect_invalid(s, {"scaling.low_freq_factor must be <= scaling.high_freq_factor (4), got 5"});
  s.scaling.low_freq_factor = 4.0;  // equal (Llama 4 Scout): valid, no blend band
  EXPECT_NO_THROW(s.validate());
}

TEST(SpecValidation, OddRotaryDim) {
  Spec s = llama();
  s.rotary_dim = 31;
  expect_invalid(s, {"rotary_dim must be even, got 31"});
  s = llama();
  s.head_dim = 65;  // rotary_dim 0 -> head_dim
  expect_invalid(s, {"rotary_dim must be even, got 65"});
}

TEST(SpecValidation, RotaryDimAboveHeadDim) {
  Spec s = llama();
  s.rotary_dim = 130;
  expect_invalid(s, {"rotary_dim must be <= head_dim (128), got 130"});
  s.rotary_dim = -2;
  expect_invalid(s, {"rotary_dim must be >= 0", "-2"});
}

TEST(SpecValidation, HeadDimNotPositive) {
  Spec s = llama();
  s.head_dim = 0;
  expect_invalid(s, {"head_dim must be > 0, got 0"});
  s.head_dim = -64;
  expect_invalid(s, {"head_dim must be > 0, got -64"});
}

TEST(SpecValidation, NonPositiveBase) {
  Spec s = llama();
  s.base = 0.0;
  expect_invalid(s, {"base must be > 0, got 0"});
  s.base = -10000.0;
  expect_invalid(s, {"base must be > 0, got -10000"});
}

TEST(SpecValidation, NanAndInfAnywhere) {
  struct Case {
    const char* field;
    void (*poison)(Spec&, double);
    Spec (*make)();
  };
  const Case cases[] = {
      {"base", [](Spec& s, double v) { s.base = v; }, [] { return llama(); }},
      {"partial_rotary_factor", [](Spec& s, double v) { s.partial_rotary_factor = v; }, [] { return llama(); }},
      {"scaling.factor", [](Spec& s, double v) { s.scaling.factor = v; }, [] { return yarn(); }},
      {"scaling.beta_fast", [](Spec& s, double v) { s.scaling.beta_fast = v; }, [] { return yarn(); }},
      {"scaling.beta_slow", [](Spec& s, double v) { s.scaling.beta_slow = v; }, [] { return yarn(); }},
      {"scaling.mscale", [](Spec& s, double v) { s.scaling.mscale = v; }, [] { return yarn(); }},
      {"scaling.mscale_all_dim", [](Spec& s, double v) { s.scaling.mscale_all_dim = v; }, [] { return yarn(); }},
      {"scaling.attention_factor", [](Spec& s, double v) { s.scaling.attention_factor = v; }, [] { return yarn(); }},
      {"scaling.short_factor[3]", [](Spec& s, double v) { s.scaling.short_factor[3] = v; }, [] { return longrope(); }},
      {"scaling.long_factor[0]", [](Spec& s, double v) { s.scaling.long_factor[0] = v; }, [] { return longrope(); }},
      {"scaling.low_freq_factor", [](Spec& s, double v) { s.scaling.low_freq_factor = v; }, [] { return llama3(); }},
      {"scaling.high_freq_factor", [](Spec& s, double v) { s.scaling.high_freq_factor = v; }, [] { return llama3(); }},
  };
  for (const Case& c : cases) {
    for (double bad : {kNaN, kInf, -kInf}) {
      SCOPED_TRACE(std::string(c.field) + " = " + std::to_string(bad));
      Spec s = c.make();
      c.poison(s, bad);
      expect_invalid(s, {c.field, "must be a finite number"});
    }
  }
}

TEST(SpecValidation, UnknownRopeType) {
  Error e = error_of([] { rotary::parse_rope_type("ntk-by-parts"); });
  EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
  EXPECT_STREQ(e.what(),
               "[rotary_spec] rope_type must be one of default, linear, dynamic, yarn, longrope, llama3, "
               "proportional, ntk, got \"ntk-by-parts\"");
  e = error_of([] { rotary::parse_rope_type("Yarn", "scaling.type"); });
  EXPECT_NE(std::string(e.what()).find("scaling.type must be one of"), std::string::npos);
  for (RopeType t : {RopeType::kDefault, RopeType::kLinear, RopeType::kDynamic, RopeType::kYarn,
                     RopeType::kLongRope, RopeType::kLlama3, RopeType::kProportional})
    EXPECT_EQ(rotary::parse_rope_type(rotary::rope_type_name(t)), t);

  Spec s = llama();
  s.scaling.type = static_cast<RopeType>(42);
  expect_invalid(s, {"scaling.type", "42"});
}

TEST(SpecValidation, MissingOriginalContext) {
  Spec s = yarn();
  s.max_position_embeddings = 0;
  s.scaling.original_max_position_embeddings = 0;
  expect_invalid(s, {"scaling.original_max_position_embeddings is required for rope_type yarn"});
  Spec d = llama(RopeType::kDynamic);
  d.scaling.factor = 2.0;
  d.max_position_embeddings = 0;
  expect_invalid(d, {"max_position_embeddings is required for rope_type dynamic"});
}

TEST(SpecValidation, MropeSectionSum) {
  Spec s = llama();
  s.mrope.section = {16, 24, 23};
  expect_invalid(s, {"mrope.section must sum to rotary_dim/2 = 64, got 63"});
}

TEST(SpecValidation, MropeSectionNegative) {
  Spec s = llama();
  s.mrope.section = {40, 32, -8};
  expect_invalid(s, {"mrope.section[2] must be >= 0, got -8"});
}

TEST(SpecValidation, MropeSectionCount) {
  Spec s = llama();
  s.mrope.section = {32, 32};
  expect_invalid(s, {"mrope.section must have exactly 3 entries (t, h, w), got 2"});
  s.mrope.section = {16, 24, 24};
  EXPECT_NO_THROW(s.validate());
}

TEST(SpecValidation, MropeInterleavedNeedsSections) {
  Spec s = llama();
  s.mrope.interleaved = true;
  expect_invalid(s, {"mrope.interleaved needs mrope.section (3 entries: t, h, w), got no section"});
  s.mrope.section = {24, 20, 20};
  EXPECT_NO_THROW(s.validate());
}

TEST(SpecValidation, ProportionalRotatesWholeHead) {
  Spec s = llama(RopeType::kProportional);
  s.partial_rotary_factor = 0.25;
  EXPECT_NO_THROW(s.validate());
  s.rotary_dim = 32;
  expect_invalid(s, {"rotary_dim must equal head_dim (128) for rope_type proportional", "got 32"});
}

// A Spec built field by field rotates rotary_dim (0 = head_dim) whatever partial_rotary_factor says (documented:
// the factor is informational there; from_hf_config derives rotary_dim from it).
TEST(SpecValidation, RotaryDimZeroIsTheHeadWhateverThePartialFactor) {
  Spec s = llama();
  s.rotary_dim = 0;
  s.partial_rotary_factor = 0.5;
  EXPECT_EQ(s.effective_rotary_dim(), 128);
  EXPECT_EQ(s.normalized().rotary_dim, 128);
  s.rotary_dim = 64;
  EXPECT_EQ(s.normalized().rotary_dim, 64);
}

TEST(SpecValidation, AttentionFactorPositive) {
  Spec s = yarn();
  s.scaling.attention_factor = 0.0;
  expect_invalid(s, {"scaling.attention_factor must be > 0, got 0"});
}

TEST(SpecValidation, NormalizedResolvesDefaults) {
  Spec s = yarn();
  s.scaling.original_max_position_embeddings = 0;
  const Spec n = s.normalized();
  EXPECT_EQ(n.rotary_dim, 128);
  EXPECT_EQ(n.scaling.original_max_position_embeddings, 4096);
}

// ----------------------------------------------------------------- config-level rules

Error config_error(const std::string& text) {
  return error_of([&] { rotary::spec_from_hf_config_json(text, "test.json"); });
}

void expect_config_error(const std::string& text, const std::string& expected_fragment) {
  Error e = config_error(text);
  EXPECT_NE(std::string(e.what()).find(expected_fragment), std::string::npos)
      << "'" << expected_fragment << "' not in: " << e.what();
}

TEST(ConfigValidation, TypeErrorNamesField) {
  Error e = config_error(
      R"({"head_dim": 64, "rope_scaling": {"type": "linear", "factor": "x"}})");
  EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
  EXPECT_STREQ(e.what(), "[rotary_config] rope_scaling.factor must be a number, got \"x\"");
  expect_config_error(R"({"head_dim": 64, "rope_theta": [1]})", "[rotary_config] rope_theta must be a number, got [1]");
  expect_config_error(R"({"head_dim": 64.5})", "head_dim must be an integer, got 64.5");
  expect_config_error(R"({"head_dim": 64, "rope_parameters": {"rope_type": "yarn", "factor": 2, "truncate": "no"}})",
                      "rope_parameters.truncate must be true or false, got \"no\"");
  expect_config_error(R"({"head_dim": 64, "rope_scaling": 3})", "rope_scaling must be an object, got 3");
}

TEST(ConfigValidation, UnknownRopeTypeNamesField) {
  expect_config_error(R"({"head_dim": 64, "rope_scaling": {"type": "su", "factor": 2}})",
                      "[rotary_config] rope_scaling.type must be one of");
  expect_config_error(R"({"head_dim": 64, "rope_parameters": {"rope_type": "ntk-by-parts"}})",
                      "rope_parameters.rope_type must be one of default, linear, dynamic, yarn, longrope, llama3, "
                      "proportional, ntk (or mrope), got \"ntk-by-parts\"");
}

TEST(ConfigValidation, MissingRequiredKeys) {
  expect_config_error(R"({"head_dim": 64, "rope_scaling": {"type": "linear"}})",
                      "rope_scaling.factor is required for rope_type linear, but it is missing");
  expect_config_error(R"({"head_dim": 64, "rope_scaling": {"type": "dynamic", "factor": null}})",
                      "rope_scaling.factor is required for rope_type dynamic");
  expect_config_error(R"({"head_dim": 64, "max_position_embeddings": 8, "rope_scaling": {"type": "yarn"}})",
                      "rope_scaling.factor is required for rope_type yarn");
  expect_config_error(R"({"head_dim": 64, "rope_scaling": {"rope_type": "llama3", "factor": 8, "high_freq_factor": 4}})",
                      "rope_scaling.low_freq_factor is required for rope_type llama3");
  expect_config_error(
      R"({"head_dim": 4, "max_position_embeddings": 8, "rope_scaling": {"type": "longrope", "short_factor": [1, 1]}})",
      "rope_scaling.long_factor is required for rope_type longrope");
  expect_config_error(R"({"hidden_size": 4096})",
                      "head_dim is missing: give head_dim, or hidden_size and num_attention_heads");
  expect_config_error(R"({"text_config": {"hidden_size": 4096}})", "text_config.head_dim is missing");
}

TEST(ConfigValidation, SpecRulesApplyToConfigsWithSource) {
  Error e = config_error(R"({"head_dim": 64, "rope_scaling": {"type": "linear", "factor": 0.5}})");
  EXPECT_STREQ(e.what(), "[rotary_spec] scaling.factor must be >= 1, got 0.5 (in test.json)");
  expect_config_error(R"({"head_dim": 64, "rope_theta": -1})", "base must be > 0, got -1");
  expect_config_error(R"({"head_dim": 64, "partial_rotary_factor": 1.5})",
                      "partial_rotary_factor must be in (0, 1], got 1.5");
  // An odd width from the factor names the field it came from (rotary_dim is not in the file).
  expect_config_error(R"({"head_dim": 64, "partial_rotary_factor": 0.3})",
                      "[rotary_config] partial_rotary_factor must give an even rotary width (int(head_dim 64 * factor) = "
                      "19: rotary rotates whole pairs), got 0.3");
  expect_config_error(R"({"model_type": "glm4", "head_dim": 100, "rope_parameters": {"partial_rotary_factor": 0.25}})",
                      "rope_parameters.partial_rotary_factor must give an even rotary width (int(head_dim 100 * factor) = 25");
  expect_config_error(R"({"model_type": "gpt_neox", "hidden_size": 800, "num_attention_heads": 8, "rotary_pct": 0.25})",
                      "rotary_pct must give an even rotary width (int(head_dim 100 * factor) = 25");
  // GPT-NeoX reads rotary_pct, not a top-level partial_rotary_factor; without either, its class default 0.25.
  expect_config_error(R"({"model_type": "gpt_neox", "hidden_size": 800, "num_attention_heads": 8, "rotary_pct": 0.25,
                          "partial_rotary_factor": 0.5})",
                      "[rotary_config] rotary_pct must give an even rotary width");
  expect_config_error(R"({"model_type": "gpt_neox", "hidden_size": 800, "num_attention_heads": 8,
                          "partial_rotary_factor": 0.5})",
                      "[rotary_config] the model's default partial_rotary_factor must give an even rotary width");
  expect_config_error(R"({"head_dim": 128, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 16]}})",
                      "mrope.section must sum to rotary_dim/2 = 64, got 56");
  expect_config_error(R"({"head_dim": 128, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24.5, 24]}})",
                      "rope_scaling.mrope_section[1] must be an integer, got 24.5");
  expect_config_error(R"({"head_dim": 64, "rope_scaling": {"rope_type": "yarn", "factor": 4, "beta_fast": 1,
                          "beta_slow": 32, "original_max_position_embeddings": 4096}})",
                      "scaling.beta_fast must be > scaling.beta_slow");
}

TEST(ConfigValidation, MalformedJsonIsIoErrorNamingSource) {
  Error e = config_error(R"({"head_dim": 64,)");
  EXPECT_EQ(e.kind(), Error::Kind::kIo);
  EXPECT_EQ(std::string(e.what()).rfind("[rotary_config] test.json is not valid JSON", 0), 0u) << e.what();
  e = config_error("[1, 2]");
  EXPECT_EQ(e.kind(), Error::Kind::kIo);
  EXPECT_NE(std::string(e.what()).find("test.json must hold a JSON object"), std::string::npos);
}

TEST(ConfigValidation, MissingFileIsIoError) {
  Error e = error_of([] { rotary::spec_from_hf_config_file("/nonexistent/rotary/config.json"); });
  EXPECT_EQ(e.kind(), Error::Kind::kIo);
  EXPECT_NE(std::string(e.what()).find("/nonexistent/rotary/config.json"), std::string::npos);
}

}  // namespace
