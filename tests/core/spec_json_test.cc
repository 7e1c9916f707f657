// rotary::spec_to_json: its text reads back through spec_from_hf_config_json to an equal Spec (presets, rope_types).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rotary/config.h"
#include "rotary/freqs.h"
#include "testing/shared.h"

namespace {

using json = nlohmann::json;
using rotary::Pairing;
using rotary::RopeType;
using rotary::Spec;

/// Every field of Spec, one by one (a field missing from spec_to_json shows up here as a difference).
void expect_same_spec(const Spec& a, const Spec& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.rotary_dim, b.rotary_dim);
  EXPECT_EQ(a.base, b.base);
  EXPECT_EQ(a.pairing, b.pairing);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.partial_rotary_factor, b.partial_rotary_factor);
  const rotary::Scaling &x = a.scaling, &y = b.scaling;
  EXPECT_EQ(x.type, y.type);
  EXPECT_EQ(x.factor, y.factor);
  EXPECT_EQ(x.original_max_position_embeddings, y.original_max_position_embeddings);
  EXPECT_EQ(x.beta_fast, y.beta_fast);
  EXPECT_EQ(x.beta_slow, y.beta_slow);
  EXPECT_EQ(x.mscale, y.mscale);
  EXPECT_EQ(x.mscale_all_dim, y.mscale_all_dim);
  EXPECT_EQ(x.truncate, y.truncate);
  EXPECT_EQ(x.attention_factor, y.attention_factor);
  EXPECT_EQ(x.short_factor, y.short_factor);
  EXPECT_EQ(x.long_factor, y.long_factor);
  EXPECT_EQ(x.low_freq_factor, y.low_freq_factor);
  EXPECT_EQ(x.high_freq_factor, y.high_freq_factor);
  EXPECT_EQ(a.mrope.section, b.mrope.section);
  EXPECT_EQ(a.mrope.interleaved, b.mrope.interleaved);
  // And what the fields are for: the same frequencies, below and beyond the original context.
  for (std::optional<int64_t> seq_len : {std::optional<int64_t>(), std::optional<int64_t>(1000),
                                         std::optional<int64_t>(1 << 20)}) {
    const auto fa = rotary::compute_frequencies(a, seq_len), fb = rotary::compute_frequencies(b, seq_len);
    EXPECT_EQ(fa.inv_freq, fb.inv_freq);
    EXPECT_EQ(fa.attention_factor, fb.attention_factor);
  }
}

void expect_round_trip(const Spec& spec) {
  const Spec s = spec.normalized();
  const std::string text = rotary::spec_to_json(s);
  SCOPED_TRACE(text);
  expect_same_spec(s, rotary::spec_from_hf_config_json(text, s.name));
  // Pretty-printed text is the same document.
  EXPECT_EQ(json::parse(rotary::spec_to_json(s, 2)), json::parse(text));
}

TEST(SpecJson, EveryPresetReadsBackEqual) {
  ASSERT_FALSE(rotary::preset_names().empty());
  for (const auto& name : rotary::preset_names()) {
    SCOPED_TRACE(name);
    expect_round_trip(rotary::preset(name));
  }
}

/// One spec per rope_type, with every field that type reads set away from its default.
std::vector<Spec> one_spec_per_rope_type() {
  std::vector<Spec> out;
  auto base = [](RopeType t) {
    Spec s;
    s.name = std::string("type-") + rotary::rope_type_name(t);
    s.head_dim = 64;
    s.rotary_dim = 48;
    s.base = 123456.75;
    s.pairing = Pairing::kInterleaved;
    s.max_position_embeddings = 65536;
    s.partial_rotary_factor = 0.75;
    s.scaling.type = t;
    return s;
  };
  {
    Spec s = base(RopeType::kDefault);
    s.rotary_dim = 0;  // = head_dim
    s.mrope.section = {8, 12, 12};
    s.mrope.interleaved = true;
    out.push_back(s);
  }
  {
    Spec s = base(RopeType::kLinear);
    s.scaling.factor = 3.5;
    out.push_back(s);
  }
  {
    Spec s = base(RopeType::kDynamic);
    s.scaling.factor = 2.25;
    out.push_back(s);
  }
  {
    Spec s = base(RopeType::kYarn);
    s.scaling.factor = 40.0;
    s.scaling.original_max_position_embeddings = 4096;
    s.scaling.beta_fast = 24.0;
    s.scaling.beta_slow = 2.0;
    s.scaling.mscale = 0.707;
    s.scaling.mscale_all_dim = 0.707;
    s.scaling.truncate = false;
    out.push_back(s);
    s.name = "yarn-factor-from-context";
    s.scaling.factor.reset();  // HF: max_position_embeddings / original
    s.scaling.mscale.reset();
    s.scaling.mscale_all_dim.reset();
    s.scaling.attention_factor = 1.25;
    s.pairing = Pairing::kHalfSplit;
    out.push_back(s);
  }
  {
    Spec s = base(RopeType::kLongRope);
    s.scaling.original_max_position_embeddings = 4096;
    for (int i = 0; i < 24; ++i) {
      s.scaling.short_factor.push_back(1.0 + 0.01 * i);
      s.scaling.long_factor.push_back(1.5 + 0.25 * i);
    }
    out.push_back(s);
    s.name = "longrope-explicit";
    s.scaling.factor = 16.0;
    s.scaling.attention_factor = 1.1;
    out.push_back(s);
  }
  {
    Spec s = base(RopeType::kLlama3);
    s.scaling.factor = 32.0;
    s.scaling.original_max_position_embeddings = 8192;
    s.scaling.low_freq_factor = 2.0;
    s.scaling.high_freq_factor = 8.0;
    out.push_back(s);
  }
  {
    Spec s = base(RopeType::kProportional);
    s.rotary_dim = 64;  // proportional rotates head_dim/2 angles, the partial factor zeroes the rest
    s.partial_rotary_factor = 0.25;
    s.scaling.factor = 8.0;
    out.push_back(s);
  }
  return out;
}

TEST(SpecJson, EveryRopeTypeReadsBackEqual) {
  const auto specs = one_spec_per_rope_type();
  std::vector<bool> seen(static_cast<size_t>(RopeType::kProportional) + 1, false);
  for (const Spec& s : specs) {
    SCOPED_TRACE(s.name);
    seen[static_cast<size_t>(s.scaling.type)] = true;
    expect_round_trip(s);
  }
  for (size_t t = 0; t < seen.size(); ++t)
    EXPECT_TRUE(seen[t]) << "no spec for rope_type " << rotary::rope_type_name(static_cast<RopeType>(t));
}

TEST(SpecJson, LayoutIsHuggingFaceV5) {
  Spec s = rotary::preset("llama-3.1-8b");
  const json j = json::parse(rotary::spec_to_json(s));
  EXPECT_EQ(j.at("name"), "llama-3.1-8b");
  EXPECT_EQ(j.at("head_dim"), 128);
  EXPECT_EQ(j.at("rotary_dim"), 128);
  EXPECT_EQ(j.at("max_position_embeddings"), 131072);
  EXPECT_EQ(j.at("rope_interleave"), false);
  const json& rp = j.at("rope_parameters");
  EXPECT_EQ(rp.at("rope_type"), "llama3");
  EXPECT_EQ(rp.at("rope_theta"), 500000.0);
  EXPECT_TRUE(rp.at("rope_theta").is_number_float());
  EXPECT_EQ(rp.at("factor"), 8.0);
  EXPECT_EQ(rp.at("original_max_position_embeddings"), 8192);
  EXPECT_TRUE(rp.at("mscale").is_null());  // unset optional
  EXPECT_EQ(rp.at("short_factor"), json::array());
  // The M-RoPE sections live in rope_parameters, as in Qwen2-VL's config.
  s = rotary::preset("qwen2-vl-7b");
  EXPECT_EQ(json::parse(rotary::spec_to_json(s)).at("rope_parameters").at("mrope_section"), json({16, 24, 24}));
}

TEST(SpecJson, ANameThatIsNotUtf8IsWrittenWithTheReplacementCharacter) {
  Spec s;
  s.head_dim = 8;
  s.name = "model\xff";  // e.g. a config path in Latin-1
  const std::string text = spec_to_json(s);
  EXPECT_NE(text.find("\"model\xef\xbf\xbd\""), std::string::npos) << text;
  EXPECT_EQ(rotary::spec_from_hf_config_json(text, "t.json").head_dim, 8);
}

TEST(SpecJson, DocsListEveryKey) {
  const std::string doc = rotary::testing::read_file(std::string(ROTARY_SOURCE_DIR) + "/docs/cli.md");
  const json j = json::parse(rotary::spec_to_json(rotary::preset("llama-3.1-8b")));
  for (const auto& [key, value] : j.items()) {
    EXPECT_NE(doc.find("`" + key + "`"), std::string::npos) << key << " is not described in docs/cli.md";
    if (key == "rope_parameters")
      for (const auto& [k, v] : value.items())
        EXPECT_NE(doc.find("`" + k + "`"), std::string::npos) << k << " is not described in docs/cli.md";
  }
}

}  // namespace
