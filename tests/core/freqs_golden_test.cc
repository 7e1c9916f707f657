// Every inv_freq config of the Hugging Face golden data, through the C++ API and through `rotary freqs --json`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "rotary/config.h"
#include "rotary/freqs.h"
#include "testing/shared.h"
#include "testing/tolerances.h"

namespace {

using json = nlohmann::json;
using rotary::testing::kAttentionFactorRelTol;
using rotary::testing::kInvFreqRelTol;

std::string manifest_path(const std::string& data_dir) { return data_dir + "/hf/manifest.json"; }

/// The golden configs, loaded once (empty if tests/data is absent: the tests then fail).
const std::vector<json>& golden_configs() {
  static const std::vector<json> configs = [] {
    std::vector<json> out;
    const std::string data_dir = rotary::testing::test_data_dir();
    if (data_dir.empty()) return out;
    std::ifstream f(manifest_path(data_dir));
    if (!f) return out;
    json m = json::parse(f);
    for (const auto& c : m.at("inv_freq_configs")) out.push_back(c);
    return out;
  }();
  return configs;
}

std::vector<std::string> golden_names() {
  std::vector<std::string> names;
  for (const auto& c : golden_configs()) names.push_back(c.at("name").get<std::string>());
  if (names.empty()) names.push_back("reference_data_missing");
  return names;
}

const json* find_config(const std::string& name) {
  for (const auto& c : golden_configs())
    if (c.at("name") == name) return &c;
  return nullptr;
}

std::optional<int64_t> seq_len_of(const json& c) {
  const json& s = c.at("seq_len_passed");
  if (s.is_null()) return std::nullopt;
  return s.get<int64_t>();
}

/// inv_freq within kInvFreqRelTol of HF's float32 values (exact zeros stay zero), attention factor within its tolerance.
void expect_matches_hf(const json& c, const std::vector<double>& inv_freq, double attention_factor) {
  const auto expected = c.at("inv_freq_float64").get<std::vector<double>>();
  ASSERT_EQ(inv_freq.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(inv_freq[i], 0.0) << "i=" << i;
      continue;
    }
    const double rel = std::fabs(inv_freq[i] - expected[i]) / std::fabs(expected[i]);
    EXPECT_LE(rel, kInvFreqRelTol) << "i=" << i << " got " << inv_freq[i] << " HF " << expected[i];
  }
  const double af = c.at("attention_factor").get<double>();
  EXPECT_LE(std::fabs(attention_factor - af) / af, kAttentionFactorRelTol)
      << "attention_factor got " << attention_factor << " HF " << af;
}

class HfGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ROTARY_TEST_DATA(dir);
    config_ = find_config(GetParam());
    ASSERT_TRUE(config_) << "golden manifest not found under " << dir;
  }
  const json* config_ = nullptr;
};

TEST_P(HfGolden, CppApiMatchesHf) {
  const json& c = *config_;
  const rotary::Spec spec = rotary::spec_from_hf_config_json(c.at("config_input").dump(), GetParam());
  EXPECT_EQ(rotary::rope_type_name(spec.scaling.type), c.at("rope_type").get<std::string>());
  const rotary::Frequencies f = rotary::compute_frequencies(spec, seq_len_of(c));
  expect_matches_hf(c, f.inv_freq, f.attention_factor);
}

TEST_P(HfGolden, CliJsonMatchesHfAndApiExactly) {
  const std::string cli = rotary::testing::cli_path();
  if (cli.empty() || !std::filesystem::exists(cli)) GTEST_SKIP() << "rotary CLI not built";
  const json& c = *config_;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("rotary_golden_" + GetParam() + "_" + std::to_string(getpid()) + ".json"))
                               .string();
  {
    std::ofstream f(path);
    f << c.at("config_input").dump(2);
  }
  std::string cmd = "'" + cli + "' freqs --config '" + path + "' --json";
  if (auto n = seq_len_of(c)) cmd += " --seq-len " + std::to_string(*n);
  std::string out;
  const int rc = rotary::testing::run_command(cmd, &out);
  std::filesystem::remove(path);
  ASSERT_EQ(rc, 0) << cmd << "\n" << out;
  const json j = json::parse(out);
  EXPECT_EQ(j.at("rope_type"), c.at("rope_type"));
  EXPECT_EQ(j.at("head_dim").get<int64_t>(), c.at("head_dim").get<int64_t>());
  const auto inv_freq = j.at("inv_freq").get<std::vector<double>>();
  EXPECT_EQ(j.at("rotary_dim").get<int64_t>() / 2, static_cast<int64_t>(inv_freq.size()));
  expect_matches_hf(c, inv_freq, j.at("attention_factor").get<double>());

  // The printed doubles read back bit-exactly as the API's values.
  const rotary::Spec spec = rotary::spec_from_hf_config_json(c.at("config_input").dump(), GetParam());
  const rotary::Frequencies f = rotary::compute_frequencies(spec, seq_len_of(c));
  ASSERT_EQ(inv_freq.size(), f.inv_freq.size());
  for (size_t i = 0; i < inv_freq.size(); ++i) EXPECT_EQ(inv_freq[i], f.inv_freq[i]) << "i=" << i;
  EXPECT_EQ(j.at("attention_factor").get<double>(), f.attention_factor);
  EXPECT_EQ(j.at("base").get<double>(), spec.base);
}

INSTANTIATE_TEST_SUITE_P(Manifest, HfGolden, ::testing::ValuesIn(golden_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(HfGoldenManifest, HasAllPublicConfigs) {
  ROTARY_TEST_DATA(dir);
  ASSERT_FALSE(golden_configs().empty()) << "golden manifest not found under " << dir;
  EXPECT_EQ(golden_configs().size(), 27u);
}

}  // namespace
