// The CLI on configs with rope parameters per layer type (`freqs --layer-type`, `report` per type, refusals) and on
// vLLM's rope types (ntk, dynamic + alpha) read from config.json.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/shared.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using rotary::testing::cli_path;
using rotary::testing::run_command;

const char* kGemma3 = R"({"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 2, "head_dim": 32,
  "num_hidden_layers": 4, "max_position_embeddings": 4096,
  "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
  "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})";

class Tmp {
 public:
  Tmp() {
    std::string t = (fs::temp_directory_path() / "rotary_layer_types_XXXXXX").string();
    if (mkdtemp(t.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    dir_ = t;
    std::ofstream(dir_ / "config.json") << kGemma3;
  }
  ~Tmp() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string config() const { return (dir_ / "config.json").string(); }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

std::string cli(const std::string& args, int* rc) {
  std::string out;
  *rc = run_command("'" + cli_path() + "' " + args, &out, /*merge_stderr=*/true);
  return out;
}

TEST(CliLayerTypes, FreqsPicksALayerTypesSpec) {
  if (cli_path().empty()) GTEST_SKIP() << "rotary CLI not built";
  Tmp t;
  for (auto [type, base, factor] : {std::tuple{"sliding_attention", 1e4, 1.0}, std::tuple{"full_attention", 1e6, 8.0}}) {
    int rc = -1;
    const std::string out = cli("freqs --config '" + t.config() + "' --layer-type " + type + " --json", &rc);
    ASSERT_EQ(rc, 0) << out;
    const json j = json::parse(out);
    EXPECT_EQ(j.at("rope_type"), factor == 1.0 ? "default" : "linear");
    const auto inv = j.at("inv_freq").get<std::vector<double>>();
    ASSERT_EQ(inv.size(), 16u);
    for (size_t i = 0; i < inv.size(); ++i) {
      const double want = std::pow(base, -2.0 * double(i) / 32.0) / factor;  // fp64 truth
      EXPECT_NEAR(inv[i], want, 1e-15 * want) << type << " " << i;
    }
  }
}

TEST(CliLayerTypes, RefusalsNameTheWayOut) {
  if (cli_path().empty()) GTEST_SKIP() << "rotary CLI not built";
  Tmp t;
  int rc = -1;
  std::string out = cli("freqs --config '" + t.config() + "'", &rc);
  EXPECT_EQ(rc, 1);  // a config error (docs/cli.md: exit 1), not a usage error
  EXPECT_NE(out.find("--layer-type"), std::string::npos) << out;
  out = cli("freqs --config '" + t.config() + "' --layer-type global", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("layer_type must be one of full_attention, sliding_attention, got \"global\""), std::string::npos) << out;
  // A config without layer_types answered every name (exit 0), although an unknown type is documented as an error.
  std::ofstream(t.dir() / "flat.json") << R"({"head_dim": 32, "max_position_embeddings": 4096, "rope_theta": 10000.0})";
  out = cli("freqs --config '" + (t.dir() / "flat.json").string() + "' --layer-type full_attenton", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("layer_type \"full_attenton\" is not in the config, which has no layer_types"), std::string::npos) << out;
  out = cli("freqs --preset llama-3.1-8b --layer-type full_attention", &rc);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("--layer-type needs --config"), std::string::npos) << out;
}

TEST(CliLayerTypes, ReportShowsEveryLayerType) {
  if (cli_path().empty()) GTEST_SKIP() << "rotary CLI not built";
  Tmp t;
  int rc = -1;
  const fs::path out_dir = t.dir() / "rep";
  const std::string out =
      cli("report --config '" + t.config() + "' --out '" + out_dir.string() + "' --no-plots --quick", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("=== layer type full_attention: 1 layer (2) ==="), std::string::npos) << out;
  EXPECT_NE(out.find("=== layer type sliding_attention: 3 layers (0, 1, 3) ==="), std::string::npos) << out;
  for (auto [type, theta, factor] : {std::tuple{"full_attention", 1e6, 8.0}, std::tuple{"sliding_attention", 1e4, 1.0}}) {
    std::ifstream f(out_dir / type / "report.json");
    ASSERT_TRUE(f.good()) << type;
    const json rep = json::parse(f);
    EXPECT_EQ(rep.at("layer_type"), type);
    EXPECT_EQ(rep.at("spec").at("rope_parameters").at("rope_theta"), theta);
    const auto& pairs = rep.at("bands").at("pairs");
    ASSERT_EQ(pairs.size(), 16u);
    for (size_t i = 0; i < 16; ++i) {
      const double want = std::pow(theta, -2.0 * double(i) / 32.0) / factor;
      EXPECT_NEAR(pairs[i].at("theta").get<double>(), want, 1e-12 * want) << type << " pair " << i;
    }
  }
  // One type only.
  const fs::path one = t.dir() / "one";
  ASSERT_EQ((cli("report --config '" + t.config() + "' --layer-type full_attention --out '" + one.string() +
                 "' --no-plots --quick", &rc), rc), 0);
  std::ifstream f(one / "report.json");
  ASSERT_TRUE(f.good());
  const json rep = json::parse(f);
  EXPECT_EQ(rep.at("layers"), json::array({2}));
}

// vLLM's extensions through `rotary freqs --config`: the fp64 formulas of docs/scaling.md (vLLM's classes).
TEST(CliVllmTypes, FreqsReadsNtkAndDynamicAlpha) {
  if (cli_path().empty()) GTEST_SKIP() << "rotary CLI not built";
  Tmp t;
  const double base = 10000.0, f = 4.0, b = 0.5, alpha = 1000.0, R = 32.0;
  struct Case {
    std::string scaling;
    std::function<double(int)> want;
  } cases[] = {
      {R"({"rope_type": "ntk", "factor": 4.0})",
       [&](int i) { return std::pow(base * f, -2.0 * i / R) / std::pow(f, 2.0 / R); }},
      {R"({"rope_type": "ntk", "factor": 4.0, "mixed_b": 0.5})",
       [&](int i) { return std::pow(base, -2.0 * i / R) / std::exp(std::log(f) / std::pow(R / 2, b) * std::pow(i + 1.0, b)); }},
      {R"({"type": "dynamic", "factor": 1.0, "alpha": 1000.0})",
       [&](int i) { return std::pow(base * std::pow(alpha, R / (R - 2)), -2.0 * i / R); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.scaling);
    const fs::path cfg = t.dir() / "vllm.json";
    std::ofstream(cfg) << R"({"hidden_size": 64, "num_attention_heads": 2, "head_dim": 32, "rope_theta": 10000.0,
      "max_position_embeddings": 4096, "rope_scaling": )" + c.scaling + "}";
    int rc = -1;
    const std::string out = cli("freqs --config '" + cfg.string() + "' --json", &rc);
    ASSERT_EQ(rc, 0) << out;
    const auto inv = json::parse(out).at("inv_freq").get<std::vector<double>>();
    ASSERT_EQ(inv.size(), 16u);
    for (int i = 0; i < 16; ++i) EXPECT_NEAR(inv[i], c.want(i), 1e-14 * c.want(i)) << i;
  }
}

}  // namespace
