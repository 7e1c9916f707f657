// `rotary apply` end to end: HF golden cases, ggml-style YaRN (normal/NeoX) and dynamic NTK vs fp64 formulas, f16, errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "npy.h"
#include "rotary/config.h"
#include "rotary/freqs.h"
#include "testing/shared.h"
#include "testing/tolerances.h"

namespace rotary {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------- helpers

class CliApply : public ::testing::Test {
 protected:
  void SetUp() override {
    cli_ = testing::cli_path();
    if (cli_.empty() || !fs::exists(cli_)) GTEST_SKIP() << "rotary CLI not built";
    dir_ = fs::temp_directory_path() /
           ("rotary_cli_apply_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// Runs `rotary apply ARGS`; returns the exit status, output (stdout+stderr) in *out.
  int apply(const std::string& args, std::string* out) const {
    return testing::run_command("'" + cli_ + "' apply " + args, out, true);
  }

  void write_text(const std::string& name, const std::string& text) const {
    std::ofstream f(path(name));
    f << text;
  }

  std::string cli_;
  fs::path dir_;
};

NpyArray make_f32(const std::vector<float>& v, std::vector<int64_t> shape) {
  NpyArray a;
  a.dtype = DType::kF32;
  a.shape = std::move(shape);
  a.data.resize(v.size() * 4);
  std::memcpy(a.data.data(), v.data(), a.data.size());
  return a;
}

template <class T>
NpyArray make_int(const std::vector<T>& v, std::vector<int64_t> shape) {
  NpyArray a;
  a.dtype = sizeof(T) == 4 ? DType::kI32 : DType::kI64;
  a.shape = std::move(shape);
  a.data.resize(v.size() * sizeof(T));
  std::memcpy(a.data.data(), v.data(), a.data.size());
  return a;
}

std::vector<double> to_f64(const NpyArray& a) {
  std::vector<double> out(static_cast<size_t>(a.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (a.dtype) {
      case DType::kF32: out[i] = a.as<float>()[i]; break;
      case DType::kF16: out[i] = testing::f16_bits_to_f32(a.as<uint16_t>()[i]); break;
      case DType::kF64: out[i] = a.as<double>()[i]; break;
      default: ADD_FAILURE() << "unexpected dtype"; break;
    }
  }
  return out;
}

/// Geometry of a rotation problem for the fp64 formula.
struct Problem {
  std::vector<int64_t> shape;       // X's shape
  std::string layout = "bshd";      // axes meaning
  std::vector<double> pos_of_token; // indexed by b*S + s (thd: s = t, B = 1)
  std::vector<double> theta;        // rotary_dim/2 frequencies
  double attention_factor = 1.0;
  bool interleaved = false;
  bool inverse = false;
};

/// y = R(pos * theta) x in double, channels >= 2*len(theta) copied.
std::vector<double> rotate_f64(const std::vector<double>& x, const Problem& p) {
  int64_t B, S, H, D = p.shape.back();
  if (p.layout == "thd") { B = 1; S = p.shape[0]; H = p.shape[1]; }
  else if (p.layout == "bshd") { B = p.shape[0]; S = p.shape[1]; H = p.shape[2]; }
  else { B = p.shape[0]; H = p.shape[1]; S = p.shape[2]; }
  const int64_t half = static_cast<int64_t>(p.theta.size());
  std::vector<double> y = x;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h) {
        int64_t base;
        if (p.layout == "thd") base = (s * H + h) * D;
        else if (p.layout == "bshd") base = ((b * S + s) * H + h) * D;
        else base = ((b * H + h) * S + s) * D;
        const double pos = p.pos_of_token[b * S + s];
        for (int64_t i = 0; i < half; ++i) {
          const double angle = pos * p.theta[i];
          const double c = std::cos(angle) * p.attention_factor;
          const double sn = std::sin(angle) * p.attention_factor * (p.inverse ? -1.0 : 1.0);
          const int64_t j1 = p.interleaved ? 2 * i : i, j2 = p.interleaved ? 2 * i + 1 : i + half;
          y[base + j1] = x[base + j1] * c - x[base + j2] * sn;
          y[base + j2] = x[base + j1] * sn + x[base + j2] * c;
        }
      }
  return y;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// ggml's YaRN (ggml_rope_yarn_corr_dims + rope_yarn), written out in fp64 as the independent truth:
// theta_i = mix * theta_extrap + (1 - mix) * freq_scale * theta_extrap, mscale = 1 + 0.1 ln(1/freq_scale).
struct YarnTruth {
  std::vector<double> theta;
  double mscale;
};
YarnTruth ggml_yarn(double base, int n_dims, double freq_scale, int n_ctx_orig, double beta_fast, double beta_slow) {
  auto corr_dim = [&](double n_rot) {
    return n_dims * std::log(n_ctx_orig / (n_rot * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  const double low = std::max(0.0, std::floor(corr_dim(beta_fast)));
  const double high = std::min(n_dims - 1.0, std::ceil(corr_dim(beta_slow)));
  YarnTruth t;
  for (int i0 = 0; i0 < n_dims; i0 += 2) {
    const double theta_extrap = std::pow(base, -static_cast<double>(i0) / n_dims);
    const double theta_interp = freq_scale * theta_extrap;
    const double y = (i0 / 2 - low) / std::max(0.001, high - low);
    const double mix = 1.0 - std::min(1.0, std::max(0.0, y));  // ext_factor = 1
    t.theta.push_back(theta_interp * (1 - mix) + theta_extrap * mix);
  }
  t.mscale = 1.0 + 0.1 * std::log(1.0 / freq_scale);
  return t;
}

// ---------------------------------------------------------------------------------------------- (a) HF golden

TEST_F(CliApply, HuggingFaceApplyCases) {
  ROTARY_TEST_DATA(data_dir);
  const fs::path ref = fs::path(data_dir) / "hf";
  ASSERT_TRUE(fs::exists(ref / "manifest.json")) << "no HF manifest at " << ref;
  auto manifest = nlohmann::json::parse(testing::read_file((ref / "manifest.json").string()));
  int cases = 0;
  for (const auto& c : manifest["apply_cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    nlohmann::json config;
    for (const auto& cfg : manifest["inv_freq_configs"])
      if (cfg["name"] == c["config_name"]) config = cfg["config_input"];
    ASSERT_FALSE(config.is_null());
    write_text(name + ".json", config.dump());
    const fs::path dir = ref / c["dir"].get<std::string>();

    // Truth: the spec's double-precision frequencies (themselves checked against HF in tests/core).
    const Frequencies f = compute_frequencies(spec_from_hf_config_file(path(name + ".json")));
    NpyArray pos = npy_load((dir / "position_ids.npy").string());
    Problem prob;
    for (int64_t i = 0; i < pos.numel(); ++i) prob.pos_of_token.push_back(static_cast<double>(pos.as<int64_t>()[i]));
    prob.theta = f.inv_freq;
    prob.attention_factor = f.attention_factor;
    prob.layout = "bhsd";

    for (const std::string t : {"q", "k"}) {
      std::string out;
      const std::string y_path = path(name + "_" + t + ".npy");
      ASSERT_EQ(apply("--config '" + path(name + ".json") + "' --input '" + (dir / (t + "_f32.npy")).string() +
                          "' --positions '" + (dir / "position_ids.npy").string() + "' --output '" + y_path +
                          "' --layout bhsd",
                      &out),
                0)
          << out;
      NpyArray x = npy_load((dir / (t + "_f32.npy")).string());
      NpyArray y = npy_load(y_path);
      NpyArray hf = npy_load((dir / (t + "_embed_f32.npy")).string());
      ASSERT_EQ(y.dtype, DType::kF32);
      ASSERT_EQ(y.shape, x.shape);
      prob.shape = x.shape;
      const auto yv = to_f64(y), hv = to_f64(hf);
      // fp64 truth at every position (up to 1e6): the accuracy contract.
      const double err_truth = max_abs_diff(yv, rotate_f64(to_f64(x), prob));
      EXPECT_LE(err_truth, testing::kAccuracyContractF32);
      // HF itself, where its float32 angles are accurate (positions < 100; beyond, HF's f32
      // pos * theta product is off by up to ~pos * 2^-24 rad).
      const int64_t B = x.shape[0], H = x.shape[1], S = x.shape[2], D = x.shape[3];
      double err_hf = 0;
      int64_t compared = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s) {
          if (pos.as<int64_t>()[b * S + s] >= 100) continue;
          for (int64_t h = 0; h < H; ++h)
            for (int64_t d = 0; d < D; ++d) {
              const int64_t i = ((b * H + h) * S + s) * D + d;
              err_hf = std::max(err_hf, std::fabs(yv[i] - hv[i]));
              ++compared;
            }
        }
      EXPECT_GT(compared, 0);
      EXPECT_LE(err_hf, testing::kHfApplyF32AbsTol);
      std::printf("  %-34s %s: max err vs fp64 %.2e, vs HF (pos < 100) %.2e\n", name.c_str(), t.c_str(), err_truth,
                  err_hf);
    }
    ++cases;
  }
  EXPECT_GE(cases, 4);
}

// ---------------------------------------------------------------------------------------------- (b) YaRN, ggml modes

constexpr const char* kYarnConfig = R"({
  "hidden_size": 2048, "num_attention_heads": 16, "max_position_embeddings": 16384, "rope_theta": 10000.0,
  "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
})";

TEST_F(CliApply, YarnNormalAndNeoxModesAtArbitraryPositions) {
  write_text("yarn.json", kYarnConfig);
  const YarnTruth truth = ggml_yarn(10000.0, 128, 1.0 / 4.0, 4096, 32.0, 1.0);
  // Arbitrary positions, including past the original and extended contexts and up to 2^24 - 1.
  const std::vector<int32_t> positions = {0, 1, 17, 4095, 4096, 12345, 65535, 1000003, 3999999, 16777215};
  const int64_t T = static_cast<int64_t>(positions.size()), H = 3, D = 128;

  struct Mode { const char* name; bool interleaved; std::string layout; };
  for (const Mode& m : {Mode{"normal (GPT-J pairs)", true, "thd"}, Mode{"neox (half-split)", false, "bshd"}}) {
    SCOPED_TRACE(m.name);
    std::vector<int64_t> shape = m.layout == "thd" ? std::vector<int64_t>{T, H, D} : std::vector<int64_t>{2, T, H, D};
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    auto x = testing::randn(static_cast<size_t>(n), 99);
    npy_save(path("x.npy"), make_f32(x, shape));
    // thd: positions [T]; bshd: [S], broadcast over the batch.
    npy_save(path("p.npy"), make_int(positions, {T}));
    std::string out;
    ASSERT_EQ(apply("--config '" + path("yarn.json") + "' --input '" + path("x.npy") + "' --positions '" +
                        path("p.npy") + "' --output '" + path("y.npy") + "' --layout " + m.layout + " --pairing " +
                        (m.interleaved ? "interleaved" : "half"),
                    &out),
              0)
        << out;
    Problem prob;
    prob.shape = shape;
    prob.layout = m.layout;
    prob.theta = truth.theta;
    prob.attention_factor = truth.mscale;
    prob.interleaved = m.interleaved;
    for (int64_t b = 0; b < (m.layout == "thd" ? 1 : 2); ++b)
      for (int32_t p : positions) prob.pos_of_token.push_back(p);
    std::vector<double> xd(x.begin(), x.end());
    const double err = max_abs_diff(to_f64(npy_load(path("y.npy"))), rotate_f64(xd, prob));
    // |x| ~ N(0,1) and the YaRN attention factor 1.139 scales the output.
    EXPECT_LE(err, testing::kAccuracyContractF32 * truth.mscale) << m.name;
    std::printf("  yarn %-22s max err vs fp64 (positions up to 2^24-1) %.2e\n", m.name, err);

    // --inverse undoes the rotation (up to the attention factor squared, which the inverse also applies).
    ASSERT_EQ(apply("--config '" + path("yarn.json") + "' --input '" + path("y.npy") + "' --positions '" +
                        path("p.npy") + "' --output '" + path("z.npy") + "' --layout " + m.layout + " --pairing " +
                        (m.interleaved ? "interleaved" : "half") + " --inverse",
                    &out),
              0)
        << out;
    const auto z = to_f64(npy_load(path("z.npy")));
    double err_inv = 0;
    for (size_t i = 0; i < z.size(); ++i)
      err_inv = std::max(err_inv, std::fabs(z[i] - truth.mscale * truth.mscale * x[i]));
    EXPECT_LE(err_inv, 2e-5);
  }
}

// Length-dependent scaling: without --seq-len, dynamic NTK sees max(P) + 1 (HF's forward); --seq-len overrides.
TEST_F(CliApply, DynamicNtkSeesMaxPositionPlusOneOrSeqLen) {
  write_text("dyn.json", R"({"hidden_size": 512, "num_attention_heads": 8, "max_position_embeddings": 2048,
    "rope_theta": 10000.0, "rope_scaling": {"type": "dynamic", "factor": 2.0}})");
  const int64_t S = 4, H = 2, D = 64;
  const std::vector<int64_t> positions = {0, 5, 3000, 9000};
  auto x = testing::randn(static_cast<size_t>(S * H * D), 5);
  npy_save(path("x.npy"), make_f32(x, {1, S, H, D}));
  npy_save(path("p.npy"), make_int(positions, {1, S}));
  std::vector<double> xd(x.begin(), x.end());
  // HF dynamic NTK: base' = base * ((f * L / max_pos) - (f - 1)) ^ (R / (R - 2)), L = max(seq_len, max_pos).
  auto theta_for = [&](double L) {
    const double f = 2.0, max_pos = 2048, R = 64;
    const double b = 10000.0 * std::pow(f * std::max(L, max_pos) / max_pos - (f - 1), R / (R - 2));
    std::vector<double> th;
    for (int i = 0; i < 32; ++i) th.push_back(std::pow(b, -2.0 * i / R));
    return th;
  };
  for (const auto& [flag, L] : std::vector<std::pair<std::string, double>>{{"", 9001}, {" --seq-len 20000", 20000}}) {
    SCOPED_TRACE(flag);
    std::string out;
    ASSERT_EQ(apply("--config '" + path("dyn.json") + "' --input '" + path("x.npy") + "' --positions '" +
                        path("p.npy") + "' --output '" + path("y.npy") + "'" + flag,
                    &out),
              0)
        << out;
    Problem prob;
    prob.shape = {1, S, H, D};
    prob.theta = theta_for(L);
    for (int64_t p : positions) prob.pos_of_token.push_back(static_cast<double>(p));
    EXPECT_LE(max_abs_diff(to_f64(npy_load(path("y.npy"))), rotate_f64(xd, prob)), testing::kAccuracyContractF32);
  }
}

// M-RoPE (Qwen2-VL sections, Qwen3-VL interleaved): positions [3, T]; frequency j follows axis t, h or w.
TEST_F(CliApply, MropeSectionsAndInterleaved) {
  write_text("cfg.json", R"({"hidden_size": 64, "num_attention_heads": 4, "rope_theta": 10000.0,
                             "max_position_embeddings": 4096})");
  const int64_t T = 5, H = 2, D = 16;
  const std::vector<int64_t> section = {2, 3, 3};  // sums to D/2
  const std::vector<int64_t> pos = {0, 1, 2, 3, 900,     // t
                                    0, 7, 7, 30, 31,      // h
                                    0, 5, 9, 11, 2000};   // w
  auto x = testing::randn(static_cast<size_t>(T * H * D), 3);
  npy_save(path("x.npy"), make_f32(x, {T, H, D}));
  npy_save(path("p.npy"), make_int(pos, {3, T}));
  std::vector<double> xd(x.begin(), x.end());
  const auto theta = default_inv_freq(10000.0, D);
  for (bool interleaved : {false, true}) {
    SCOPED_TRACE(interleaved ? "interleaved" : "sectioned");
    // Axis of frequency j. Sectioned: consecutive blocks of section[0], [1], [2].
    // Interleaved (Qwen3-VL): j % 3 == 1 and j < 3*section[1] -> h; j % 3 == 2 and j < 3*section[2] -> w; else t.
    std::vector<int> axis(D / 2);
    for (int64_t j = 0; j < D / 2; ++j) {
      if (!interleaved) axis[j] = j < section[0] ? 0 : j < section[0] + section[1] ? 1 : 2;
      else axis[j] = (j % 3 == 1 && j < 3 * section[1]) ? 1 : (j % 3 == 2 && j < 3 * section[2]) ? 2 : 0;
    }
    std::string out;
    ASSERT_EQ(apply("--config '" + path("cfg.json") + "' --input '" + path("x.npy") + "' --positions '" +
                        path("p.npy") + "' --output '" + path("y.npy") + "' --layout thd --mrope-section 2,3,3" +
                        (interleaved ? " --mrope-interleaved" : ""),
                    &out),
              0)
        << out;
    // Truth: rotate each token with per-frequency positions (half-split pairs).
    std::vector<double> ref = xd;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < D / 2; ++j) {
          const double a = static_cast<double>(pos[axis[j] * T + t]) * theta[j];
          const int64_t base = (t * H + h) * D;
          ref[base + j] = xd[base + j] * std::cos(a) - xd[base + j + D / 2] * std::sin(a);
          ref[base + j + D / 2] = xd[base + j] * std::sin(a) + xd[base + j + D / 2] * std::cos(a);
        }
    EXPECT_LE(max_abs_diff(to_f64(npy_load(path("y.npy"))), ref), testing::kAccuracyContractF32);
  }
}

// ---------------------------------------------------------------------------------------------- (c) f16

TEST_F(CliApply, Float16InputGivesFloat16Output) {
  const int64_t B = 2, H = 4, S = 7, D = 80;  // bhsd, partial-free head_dim 80
  auto xf = testing::randn(static_cast<size_t>(B * H * S * D), 11);
  NpyArray x;
  x.dtype = DType::kF16;
  x.shape = {B, H, S, D};
  x.data.resize(xf.size() * 2);
  std::vector<double> xd(xf.size());
  for (size_t i = 0; i < xf.size(); ++i) {
    uint16_t h = testing::f32_to_f16_bits(xf[i]);
    std::memcpy(x.data.data() + 2 * i, &h, 2);
    xd[i] = testing::f16_bits_to_f32(h);  // truth from the f16 values actually stored
  }
  npy_save(path("x.npy"), x);
  std::vector<int64_t> pos = {0, 1, 2, 100, 1000, 50000, 77777, 3, 4, 5, 6, 7, 8, 9};
  npy_save(path("p.npy"), make_int(pos, {B, S}));
  write_text("cfg.json", R"({"hidden_size": 640, "num_attention_heads": 8, "rope_theta": 500000.0,
                             "max_position_embeddings": 8192})");
  std::string out;
  ASSERT_EQ(apply("--config '" + path("cfg.json") + "' --input '" + path("x.npy") + "' --positions '" +
                      path("p.npy") + "' --output '" + path("y.npy") + "' --layout bhsd",
                  &out),
            0)
      << out;
  NpyArray y = npy_load(path("y.npy"));
  EXPECT_EQ(y.dtype, DType::kF16);
  EXPECT_EQ(y.shape, x.shape);
  Problem prob;
  prob.shape = x.shape;
  prob.layout = "bhsd";
  prob.theta = default_inv_freq(500000.0, 80);
  for (int64_t p : pos) prob.pos_of_token.push_back(static_cast<double>(p));
  EXPECT_LE(max_abs_diff(to_f64(y), rotate_f64(xd, prob)), testing::output_abs_tol(DType::kF16));
}

/// float64 in gives float64 out; a Fortran-order file (numpy's np.asfortranarray) is the same logical array.
TEST_F(CliApply, Float64AndFortranOrderInputs) {
  const int64_t B = 2, S = 3, H = 2, D = 8;
  const std::vector<double> xd = testing::randn_f64(static_cast<size_t>(B * S * H * D), 5);
  NpyArray c;
  c.dtype = DType::kF64;
  c.shape = {B, S, H, D};
  c.data.resize(xd.size() * 8);
  std::memcpy(c.data.data(), xd.data(), c.data.size());
  npy_save(path("x_c.npy"), c);
  // The same values in column-major order, with the header saying so ("False" -> "True " keeps its length).
  std::string bytes = npy_serialize(c);
  const size_t at = bytes.find("'fortran_order': False");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 22, "'fortran_order': True ");
  const size_t data_at = bytes.size() - c.data.size();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const size_t c_index = static_cast<size_t>(((b * S + s) * H + h) * D + d);
          const size_t f_index = static_cast<size_t>(b + B * (s + S * (h + H * d)));
          std::memcpy(&bytes[data_at + 8 * f_index], &xd[c_index], 8);
        }
  std::ofstream(path("x_f.npy"), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const std::vector<int64_t> pos = {0, 7, 300, 1, 2, 65535};
  npy_save(path("p.npy"), make_int(pos, {B, S}));
  write_text("cfg.json", R"({"hidden_size": 16, "num_attention_heads": 2, "max_position_embeddings": 64})");
  Problem prob;
  prob.shape = c.shape;
  prob.layout = "bshd";
  prob.theta = default_inv_freq(10000.0, D);
  for (int64_t p : pos) prob.pos_of_token.push_back(static_cast<double>(p));
  const std::vector<double> want = rotate_f64(xd, prob);
  for (const char* in : {"x_c.npy", "x_f.npy"}) {
    SCOPED_TRACE(in);
    std::string out;
    ASSERT_EQ(apply("--config '" + path("cfg.json") + "' --input '" + path(in) + "' --positions '" + path("p.npy") +
                        "' --output '" + path("y.npy") + "'",
                    &out),
              0)
        << out;
    NpyArray y = npy_load(path("y.npy"));
    EXPECT_EQ(y.dtype, DType::kF64);
    EXPECT_EQ(y.shape, c.shape);
    // docs/accuracy.md: f64 is rotated in double from f32 cos/sin, error ~6e-8 * (|x0| + |x1|).
    double bound = 0;
    for (double v : xd) bound = std::max(bound, std::fabs(v));
    EXPECT_LE(max_abs_diff(to_f64(y), want), 6e-8 * 2 * bound);
  }
}

// ---------------------------------------------------------------------------------------------- (d) errors

TEST_F(CliApply, ErrorsExitOneOrTwoWithAMessageNamingTheProblem) {
  auto x = testing::randn(2 * 3 * 2 * 8, 1);
  npy_save(path("x.npy"), make_f32(x, {2, 3, 2, 8}));
  npy_save(path("x3.npy"), make_f32(std::vector<float>(x.begin(), x.begin() + 48), {3, 2, 8}));
  npy_save(path("p.npy"), make_int(std::vector<int64_t>{0, 1, 2, 3, 4, 5}, {2, 3}));
  npy_save(path("p_bad.npy"), make_int(std::vector<int64_t>{0, 1, 2, 3}, {2, 2}));
  // Two rows of [B,S] ids: neither M-RoPE's [3,B,S] nor text-only [B,S] (which M-RoPE accepts).
  npy_save(path("p_2ax.npy"), make_int(std::vector<int64_t>(12, 1), {2, 2, 3}));
  npy_save(path("p_neg.npy"), make_int(std::vector<int64_t>{0, 1, -2, 3, 4, 5}, {2, 3}));
  npy_save(path("p_f32.npy"), make_f32({0, 1, 2, 3, 4, 5}, {2, 3}));
  npy_save(path("x_i32.npy"), make_int(std::vector<int32_t>(96, 1), {2, 3, 2, 8}));
  NpyArray xd = make_f32(x, {2, 3, 2, 8});
  {
    NpyArray d;
    d.dtype = DType::kF64;
    d.shape = xd.shape;
    d.data.resize(96 * 8);
    npy_save(path("x_f64.npy"), d);
  }
  {
    std::string bytes = npy_serialize(xd);
    std::ofstream(path("x_trunc.npy"), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 10));
    std::ofstream(path("garbage.npy"), std::ios::binary) << "this is not an npy file";
  }
  write_text("cfg.json", R"({"hidden_size": 16, "num_attention_heads": 2, "max_position_embeddings": 64})");
  write_text("bad.json", R"({"hidden_size": 16, "num_attention_heads": 2, "rope_scaling": {"type": "yarn", "factor": "x"}})");

  const std::string cfg = "--config '" + path("cfg.json") + "' ";
  const std::string io = "--input '" + path("x.npy") + "' --positions '" + path("p.npy") + "' --output '" +
                         path("y.npy") + "' ";
  struct Case { std::string args; std::string needle; };
  const std::vector<Case> cases = {
      {cfg + "--input '" + path("x_i32.npy") + "' --positions '" + path("p.npy") + "' --output '" + path("y.npy") + "'",
       "must be float32, float16 or float64, got int32"},
      {cfg + "--input '" + path("x.npy") + "' --positions '" + path("p_bad.npy") + "' --output '" + path("y.npy") + "'",
       "--positions " + path("p_bad.npy") + ": positions.ids shape [2,2] does not match"},
      {cfg + "--input '" + path("x.npy") + "' --positions '" + path("p_f32.npy") + "' --output '" + path("y.npy") + "'",
       "must be int32 or int64, got float32"},
      {cfg + "--input '" + path("x.npy") + "' --positions '" + path("p_neg.npy") + "' --output '" + path("y.npy") + "'",
       "-2"},
      {cfg + "--input '" + path("missing.npy") + "' --positions '" + path("p.npy") + "' --output '" + path("y.npy") + "'",
       "missing.npy: cannot open"},
      {cfg + "--input '" + path("x_trunc.npy") + "' --positions '" + path("p.npy") + "' --output '" + path("y.npy") + "'",
       "truncated data"},
      {cfg + "--input '" + path("garbage.npy") + "' --positions '" + path("p.npy") + "' --output '" + path("y.npy") + "'",
       "bad magic"},
      {cfg + "--input '" + path("x3.npy") + "' --positions '" + path("p.npy") + "' --output '" + path("y.npy") + "'",
       "--input " + path("x3.npy") + ": q must have rank 4"},
      {cfg + io + "--layout bsdh", "--layout must be bshd, bhsd or thd"},
      {cfg + io + "--pairing zigzag", "--pairing must be half or interleaved"},
      {cfg + io + "--seq-len abc", "--seq-len must be an integer"},
      {cfg + io + "--seq-len 0", "--seq-len must be in [1, 2^31]"},
      {cfg + io + "--mrope-section 4,x", "--mrope-section"},
      {cfg + "--input '" + path("x.npy") + "' --positions '" + path("p_2ax.npy") + "' --output '" + path("y.npy") +
           "' --mrope-section 2,1,1",
       "[3,2,3]"},
      {io, "--config FILE or --preset NAME"},
      {"--preset no-such-model " + io, "no-such-model"},
      {"--config '" + path("nothere.json") + "' " + io, "nothere.json"},
      {"--config '" + path("bad.json") + "' " + io, "factor"},
      {cfg + "--input '" + path("x.npy") + "' --positions '" + path("p.npy") + "'", "--output is required"},
      {cfg + io + "--frobnicate", "unknown option --frobnicate"},
      {cfg + "--input '" + path("x.npy") + "' --positions '" + path("p.npy") + "' --output '" + path("nodir/y.npy") +
           "'", "cannot create a temporary file in"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    std::error_code ec;
    fs::remove(path("y.npy"), ec);
    std::string out;
    // Usage errors ("rotary apply: ...": options) exit 2; runtime failures ("[rotary_...]": files, data) exit 1.
    const int rc = apply(c.args, &out);
    EXPECT_EQ(rc, out.rfind("rotary apply: ", 0) == 0 ? 2 : 1) << out;
    EXPECT_NE(out.find(c.needle), std::string::npos) << "output: " << out << "\nexpected to contain: " << c.needle;
    EXPECT_FALSE(fs::exists(path("y.npy"))) << "output written on error";
  }
}

}  // namespace
}  // namespace rotary
