// Tests of `rotary report`: runs the built CLI and checks its JSON/CSV output against independent formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rotary/config.h"
#include "rotary/freqs.h"
#include "testing/shared.h"
#include "testing/tolerances.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using rotary::testing::cli_path;
using rotary::testing::run_command;

constexpr double kTwoPi = 2.0 * std::numbers::pi;

/// A fresh temporary directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "rotary_report_test_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string quote(const std::string& s) { return "'" + s + "'"; }

/// Runs `rotary report ARGS --out DIR --no-plots --quick`; returns the exit code, output in *out (stdout+stderr).
int run_report(const std::string& args, const fs::path& dir, std::string* out) {
  return run_command(quote(cli_path()) + " report " + args + " --out " + quote(dir.string()) + " --no-plots --quick",
                     out, /*merge_stderr=*/true);
}

/// Parses a CSV with a header into columns of strings.
struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  size_t col(const std::string& name) const {
    auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << "missing column " << name;
    return size_t(it - header.begin());
  }
  double num(size_t row, const std::string& name) const { return std::stod(rows.at(row).at(col(name))); }
};

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  return out;
}

Csv read_csv(const fs::path& path) {
  Csv c;
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  std::string line;
  if (std::getline(f, line)) c.header = split(line);
  while (std::getline(f, line))
    if (!line.empty()) c.rows.push_back(split(line));
  return c;
}

json read_json(const fs::path& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  return json::parse(f);
}

/// Checks that every band's class agrees with its own numbers, and returns the classes.
std::vector<std::string> check_band_consistency(const json& rep) {
  const json& bands = rep.at("bands");
  const double L = bands.at("L").get<double>();
  const double full = bands.at("full_factor").get<double>();
  std::vector<std::string> classes;
  for (const auto& b : bands.at("pairs")) {
    const double theta = b.at("theta"), theta_d = b.at("theta_default"), ratio = b.at("ratio");
    const std::string cls = b.at("class");
    classes.push_back(cls);
    SCOPED_TRACE("pair " + std::to_string(b.at("pair").get<int>()) + " class " + cls);
    EXPECT_NEAR(ratio, theta_d / theta, 1e-12 * ratio);
    EXPECT_NEAR(b.at("wavelength").get<double>(), kTwoPi / theta, 1e-9 * kTwoPi / theta);
    const double wl_d = b.at("wavelength_default");
    EXPECT_NEAR(wl_d, kTwoPi / theta_d, 1e-9 * kTwoPi / theta_d);
    if (cls == "full_rotations") {
      EXPECT_NEAR(ratio, 1.0, 1e-9);
      EXPECT_LT(wl_d, L);
    } else if (cls == "sub_rotation") {
      EXPECT_NEAR(ratio, 1.0, 1e-9);
      EXPECT_GE(wl_d, L);
    } else if (cls == "interpolated") {
      EXPECT_GE(ratio, full * (1 - 1e-6));
    } else if (cls == "blended") {
      EXPECT_GT(std::abs(ratio - 1.0), 1e-9);
      EXPECT_LT(ratio, full);
    } else {
      ADD_FAILURE() << "unknown class " << cls;
    }
  }
  return classes;
}

/// Checks the verification section against the accuracy contract.
void check_verification(const json& rep) {
  const json& v = rep.at("verification");
  const double af = rep.at("attention_factor");
  EXPECT_LT(v.at("identity").at("max_abs_diff").get<double>(), 1e-5);
  EXPECT_GE(v.at("identity").at("pairs").size(), 5u);
  EXPECT_LT(v.at("accuracy").at("max_abs_err").get<double>(), rotary::testing::kAccuracyContractF32);
  bool saw_max = false;
  for (const auto& p : v.at("accuracy").at("positions")) {
    EXPECT_LT(p.at("max_abs_err").get<double>(), rotary::testing::kAccuracyContractF32);
    if (p.at("position").get<int64_t>() == (int64_t(1) << 24) - 1) saw_max = true;
  }
  EXPECT_TRUE(saw_max) << "accuracy must be checked at position 2^24-1";
  // inverse(forward(x)) = af^2 x: two f32 rotations of |x| <= ~5.
  EXPECT_LT(v.at("inverse_forward").at("max_abs_err").get<double>(),
            2 * rotary::testing::output_abs_tol(rotary::DType::kF32) * std::max(1.0, af * af));
}

/// The decay bound at distance r from the band thetas, computed here independently.
double decay_bound(const json& rep, int64_t r) {
  double re = 0, im = 0, sum = 0;
  const json& pairs = rep.at("bands").at("pairs");
  for (const auto& b : pairs) {
    const double a = double(r) * b.at("theta").get<double>();
    re += std::cos(a);
    im += std::sin(a);
    sum += std::hypot(re, im);
  }
  return sum / double(pairs.size());
}

/// Every key of report.json (at any depth) is described in docs/cli.md, as `key`, `parent.key` or `key.child`.
void check_documented(const json& j, const std::string& doc) {
  if (j.is_array()) {
    for (const auto& e : j) check_documented(e, doc);
    return;
  }
  if (!j.is_object()) return;
  for (const auto& [key, value] : j.items()) {
    const bool found = doc.find("`" + key + "`") != std::string::npos || doc.find("." + key + "`") != std::string::npos ||
                       doc.find("`" + key + ".") != std::string::npos;
    EXPECT_TRUE(found) << "report.json key \"" << key << "\" is not described in docs/cli.md";
    check_documented(value, doc);
  }
}

/// Checks the CSV files against the JSON and against independent formulas.
void check_files(const json& rep, const fs::path& dir) {
  const size_t h = rep.at("bands").at("pairs").size();
  const Csv bands = read_csv(dir / "bands.csv");
  EXPECT_EQ(bands.rows.size(), h);
  const Csv decay = read_csv(dir / "decay.csv");
  ASSERT_GT(decay.rows.size(), 100u);
  // r = 0: S_j = j, so the bound is mean(1..h) = (h+1)/2 for every variant.
  for (const auto& v : rep.at("curves").at("variants")) {
    const std::string key = v.at("key");
    EXPECT_NEAR(decay.num(0, key), (double(h) + 1) / 2, 1e-9) << key;
  }
  for (size_t row : {size_t(1), size_t(5), decay.rows.size() / 2}) {
    const auto r = int64_t(decay.num(row, "distance"));
    EXPECT_NEAR(decay.num(row, "model"), decay_bound(rep, r), 1e-6) << "distance " << r;
    EXPECT_LE(decay.num(row, "model_min"), decay.num(row, "model_mean"));
    EXPECT_LE(decay.num(row, "model_mean"), decay.num(row, "model_max"));
  }
  const Csv score = read_csv(dir / "score.csv");
  ASSERT_EQ(score.rows.size(), decay.rows.size());
  // Unit q: <R(0)q, R(0)q> = af^2 |q|^2 (pass-through channels are not scaled by af).
  const double af = rep.at("attention_factor");
  const double rd = rep.at("spec").at("rotary_dim"), hd = rep.at("spec").at("head_dim");
  if (rd == hd) EXPECT_NEAR(score.num(0, "model_self"), af * af, 1e-5);
  for (size_t row = 0; row < score.rows.size(); row += 7)
    EXPECT_NEAR(score.num(row, "model_pair"), score.num(row, "model_pair_kernel"), 1e-5) << "row " << row;
  const Csv phase = read_csv(dir / "phase_error.csv");
  ASSERT_GT(phase.rows.size(), 100u);
  EXPECT_EQ(int64_t(phase.num(phase.rows.size() - 1, "position")), (int64_t(1) << 24) - 1);
  for (size_t row = 0; row < phase.rows.size(); ++row) {
    // one f32 rounding of af * cos/sin (|value| <= af): half an ulp, plus the double angle's ~1e-9 rad
    EXPECT_LE(phase.num(row, "rotary_cos_err"), 6e-8 * std::max(1.0, af)) << "row " << row;
    EXPECT_LE(phase.num(row, "rotary_sin_err"), 6e-8 * std::max(1.0, af)) << "row " << row;
  }
  // f32 angles at 2^24-1: the angle's rounding (ulp(1.6e7) = 2) makes the error large; rotary stays tiny.
  const size_t last = phase.rows.size() - 1;
  EXPECT_GT(phase.num(last, "f32_cos_err"), 1000 * phase.num(last, "rotary_cos_err"));
  const json& sp = rep.at("speed");
  EXPECT_GT(sp.at("prefill").at("seconds").get<double>(), 0.0);
  EXPECT_GT(sp.at("prefill").at("streaming_limit_seconds").get<double>(), 0.0);
  EXPECT_GT(sp.at("decode").at("seconds").get<double>(), 0.0);
}

TEST(Report, Llama31MatchesTheLlama3Rule) {
  if (cli_path().empty()) GTEST_SKIP() << "rotary CLI not built";
  TempDir tmp;
  std::string out;
  ASSERT_EQ(run_report("--preset llama-3.1-8b", tmp.path(), &out), 0) << out;
  const json rep = read_json(tmp.path() / "report.json");
  const json& sc = rep.at("spec").at("rope_parameters");
  EXPECT_EQ(rep.at("spec").at("head_dim"), 128);
  EXPECT_EQ(sc.at("rope_type"), "llama3");
  EXPECT_EQ(sc.at("factor"), 8.0);
  EXPECT_EQ(sc.at("original_max_position_embeddings"), 8192);
  EXPECT_EQ(rep.at("attention_factor"), 1.0);
  // The report's spec is config.json text: read back, it is the preset again.
  const rotary::Spec preset = rotary::preset("llama-3.1-8b");
  const rotary::Spec back = rotary::spec_from_hf_config_json(rep.at("spec").dump(), preset.name);
  EXPECT_EQ(rotary::spec_to_json(back), rotary::spec_to_json(preset));
  EXPECT_EQ(rotary::compute_frequencies(back).inv_freq, rotary::compute_frequencies(preset).inv_freq);
  const auto classes = check_band_consistency(rep);
  // Independent Llama 3.1 rule (Meta's apply_scaling): wavelength < L/high kept, > L/low divided by 8.
  const json& pairs = rep.at("bands").at("pairs");
  ASSERT_EQ(pairs.size(), 64u);
  for (size_t i = 0; i < 64; ++i) {
    const double theta_d = std::pow(500000.0, -2.0 * double(i) / 128.0);
    const double wl = kTwoPi / theta_d;
    EXPECT_NEAR(pairs[i].at("theta_default").get<double>(), theta_d, 1e-12 * theta_d);
    const char* want = wl < 8192.0 / 4 ? "full_rotations" : wl > 8192.0 ? "interpolated" : "blended";
    EXPECT_EQ(classes[i], want) << "pair " << i << " wavelength " << wl;
    if (wl > 8192.0) EXPECT_NEAR(pairs[i].at("ratio").get<double>(), 8.0, 1e-9);
  }
  check_verification(rep);
  check_files(rep, tmp.path());
  check_documented(rep, rotary::testing::read_file(std::string(ROTARY_SOURCE_DIR) + "/docs/cli.md"));
  // The printed report names the sections a reader looks for.
  for (const char* s : {"bands", "attention_factor", "identity", "2^24", "prefill", "decode"})
    EXPECT_NE(out.find(s), std::string::npos) << "output lacks \"" << s << "\"";
}

TEST(Report, YarnPresetBandsAndAttentionFactor) {
  if (cli_path().empty()) GTEST_SKIP() << "rotary CLI not built";
  std::string name;
  for (const auto& n : rotary::preset_names()) {
    const rotary::Spec s = rotary::preset(n);
    if (s.scaling.type == rotary::RopeType::kYarn && !s.scaling.mscale && !s.scaling.attention_factor &&
        s.scaling.truncate) {
      name = n;
      break;
    }
  }
  if (name.empty()) GTEST_SKIP() << "no plain yarn preset";
  const rotary::Spec spec = rotary::preset(name).normalized();
  TempDir tmp;
  std::string out;
  ASSERT_EQ(run_report("--preset " + name, tmp.path(), &out), 0) << out;
  const json rep = read_json(tmp.path() / "report.json");
  EXPECT_EQ(rep.at("spec").at("rope_parameters").at("rope_type"), "yarn");
  const double factor = rep.at("context").at("factor");
  // YaRN's attention factor without mscale: 0.1 ln(factor) + 1.
  EXPECT_NEAR(rep.at("attention_factor").get<double>(), 0.1 * std::log(factor) + 1.0, 1e-12);
  const auto classes = check_band_consistency(rep);
  // Along the pairs the classes go kept -> blended -> interpolated, never back.
  auto rank = [](const std::string& c) { return c == "full_rotations" ? 0 : c == "blended" ? 1 : 2; };
  for (size_t i = 1; i < classes.size(); ++i) EXPECT_LE(rank(classes[i - 1]), rank(classes[i])) << "pair " << i;
  // Well inside YaRN's regions: many turns within L -> kept; less than half a turn -> interpolated.
  const double L = double(spec.scaling.original_max_position_embeddings);
  const json& pairs = rep.at("bands").at("pairs");
  for (size_t i = 0; i < pairs.size(); ++i) {
    const double turns = L / pairs[i].at("wavelength_default").get<double>();
    if (turns > 2 * spec.scaling.beta_fast) EXPECT_EQ(classes[i], "full_rotations") << "pair " << i;
    if (turns < spec.scaling.beta_slow / 2) EXPECT_EQ(classes[i], "interpolated") << "pair " << i;
  }
  EXPECT_EQ(std::count(classes.begin(), classes.end(), "full_rotations") > 0, true);
  EXPECT_EQ(std::count(classes.begin(), classes.end(), "interpolated") > 0, true);
  check_verification(rep);
  check_files(rep, tmp.path());
}

TEST(Report, ConfigFileIsRead) {
  if (cli_path().empty()) GTEST_SKIP() << "rotary CLI not built";
  TempDir tmp;
  const fs::path cfg = tmp.path() / "config.json";
  std::ofstream(cfg) << R"({"hidden_size": 2048, "num_attention_heads": 32, "rope_theta": 25000.0,
                          "max_position_embeddings": 2048})";
  std::string out;
  ASSERT_EQ(run_report("--config " + quote(cfg.string()), tmp.path() / "out", &out), 0) << out;
  const json rep = read_json(tmp.path() / "out" / "report.json");
  EXPECT_EQ(rep.at("spec").at("head_dim"), 64);
  EXPECT_EQ(rep.at("spec").at("rope_parameters").at("rope_theta"), 25000.0);
  EXPECT_EQ(rep.at("spec").at("rope_parameters").at("rope_type"), "default");
  const auto classes = check_band_consistency(rep);
  // Unscaled: only "full rotations" and "less than one rotation", split at wavelength = max_position_embeddings.
  for (size_t i = 0; i < classes.size(); ++i) {
    const double wl = kTwoPi * std::pow(25000.0, 2.0 * double(i) / 64.0);
    EXPECT_EQ(classes[i], wl < 2048 ? "full_rotations" : "sub_rotation") << "pair " << i;
  }
}

TEST(Report, BadPresetExitsTwo) {
  if (cli_path().empty()) GTEST_SKIP() << "rotary CLI not built";
  TempDir tmp;
  std::string out;
  EXPECT_EQ(run_report("--preset no-such-model", tmp.path() / "out", &out), 2) << out;
  EXPECT_NE(out.find("no-such-model"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(tmp.path() / "out" / "report.json"));
  EXPECT_EQ(run_report("--preset llama-3.1-8b --bogus", tmp.path() / "out", &out), 2) << out;
  EXPECT_EQ(run_report("--preset llama-3.1-8b --config x.json", tmp.path() / "out", &out), 2) << out;
}

TEST(Report, PlotCommandNeedsAReport) {
  if (cli_path().empty()) GTEST_SKIP() << "rotary CLI not built";
  TempDir tmp;
  std::string out;
  EXPECT_NE(run_command(quote(cli_path()) + " plot " + quote(tmp.path().string()), &out, true), 0);
  EXPECT_NE(out.find("report.json"), std::string::npos) << out;
}

}  // namespace
