// rotary check's diagnoses: each fires on a table reproducing its bug and is silent on correct tables, for every rope_type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "npy.h"
#include "rotary/config.h"
#include "rotary/freqs.h"
#include "rotary/parity.h"

namespace rotary {
namespace {

/// One spec per rope_type (real presets where one exists).
struct Case {
  const char* name;
  Spec spec;
};

Spec from_json(const char* json) { return spec_from_hf_config_json(json, "test").normalized(); }

std::vector<Case> every_rope_type() {
  return {
      {"default", preset("llama-2-7b").normalized()},
      {"default_partial", preset("gpt-neox-20b").normalized()},
      {"linear", from_json(R"({"head_dim": 64, "max_position_embeddings": 8192, "rope_theta": 10000,
                               "rope_scaling": {"type": "linear", "factor": 4}})")},
      {"dynamic", from_json(R"({"head_dim": 64, "max_position_embeddings": 2048, "rope_theta": 10000,
                                "rope_scaling": {"type": "dynamic", "factor": 2}})")},
      {"yarn", preset("qwen2.5-7b-yarn").normalized()},
      {"yarn_deepseek", preset("deepseek-v3").normalized()},
      {"yarn_no_truncate", preset("gpt-oss-20b").normalized()},
      {"longrope", preset("phi-3.5-mini").normalized()},
      {"llama3", preset("llama-3.1-8b").normalized()},
      {"proportional", from_json(R"({"head_dim": 64, "max_position_embeddings": 8192, "rope_theta": 10000,
                                     "rope_parameters": {"rope_type": "proportional", "rope_theta": 10000,
                                                         "partial_rotary_factor": 0.25}})")},
      // vLLM's extensions (docs/scaling.md): static NTK, mixed NTK, dynamic NTK-alpha (Hunyuan).
      {"ntk", from_json(R"({"head_dim": 64, "max_position_embeddings": 8192, "rope_theta": 10000,
                            "rope_scaling": {"rope_type": "ntk", "factor": 4}})")},
      {"ntk_mixed", from_json(R"({"head_dim": 64, "max_position_embeddings": 8192, "rope_theta": 10000,
                                  "rope_scaling": {"rope_type": "ntk", "factor": 4, "mixed_b": 0.625}})")},
      {"dynamic_alpha", from_json(R"({"head_dim": 64, "max_position_embeddings": 8192, "rope_theta": 10000,
                                      "rope_scaling": {"type": "dynamic", "alpha": 100, "factor": 1}})")},
  };
}

NpyArray array(DType dt, std::vector<int64_t> shape) {
  NpyArray a;
  a.dtype = dt;
  a.shape = std::move(shape);
  a.data.resize(static_cast<size_t>(a.numel()) * dtype_size(dt));
  return a;
}

void put(NpyArray& a, int64_t i, double v) {
  if (a.dtype == DType::kF32) {
    const float f = static_cast<float>(v);
    std::memcpy(a.data.data() + 4 * i, &f, 4);
  } else if (a.dtype == DType::kF64) {
    std::memcpy(a.data.data() + 8 * i, &v, 8);
  } else {  // bf16: round to nearest even from f32
    const float f = static_cast<float>(v);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint16_t b = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    std::memcpy(a.data.data() + 2 * i, &b, 2);
  }
}

float bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = ((u + 0x7fff + ((u >> 16) & 1)) >> 16) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// A raw-layout cos/sin table [rows, h] written here (not by rotary's exporter): angle = angle_fn(pos, i).
template <class AngleFn>
CheckInput raw_table(int64_t rows, const std::vector<double>& inv, double af, AngleFn angle_fn, DType dt = DType::kF32) {
  const int64_t h = static_cast<int64_t>(inv.size());
  NpyArray c = array(dt, {rows, h}), s = array(dt, {rows, h});
  for (int64_t p = 0; p < rows; ++p)
    for (int64_t i = 0; i < h; ++i) {
      const double a = angle_fn(p, inv[static_cast<size_t>(i)]);
      put(c, p * h + i, af * std::cos(a));
      put(s, p * h + i, af * std::sin(a));
    }
  CheckInput in;
  in.layout = EngineLayout::kRaw;
  in.tensors.tensors = {{"cos", c}, {"sin", s}};
  return in;
}
CheckInput raw_table(int64_t rows, const std::vector<double>& inv, double af) {
  // Angles as HF forms them: f32(position) * f32(inv_freq), rounded to f32.
  return raw_table(rows, inv, af, [](int64_t p, double t) {
    return static_cast<double>(static_cast<float>(p) * static_cast<float>(t));
  });
}

std::set<std::string> codes(const CheckResult& r) {
  std::set<std::string> out;
  for (const auto& d : r.diagnoses) out.insert(d.code);
  return out;
}

std::string dump(const CheckResult& r) { return check_result_text(r); }

void expect_only(const Spec& spec, const CheckInput& in, const std::string& code) {
  const CheckResult r = check_parity(spec, in);
  EXPECT_FALSE(r.agree) << dump(r);
  EXPECT_EQ(codes(r), std::set<std::string>{code}) << dump(r);
}

Frequencies freqs(const Spec& s, std::optional<int64_t> seq_len) { return compute_frequencies(s.normalized(), seq_len); }

TEST(CheckDiagnoses, CorrectTablesAgreeForEveryRopeTypeLayoutAndDtype) {
  for (const auto& c : every_rope_type()) {
    for (int64_t rows : {int64_t(1500), int64_t(5000)}) {  // both sides of longrope's and dynamic's switch
      SCOPED_TRACE(std::string(c.name) + " rows " + std::to_string(rows));
      const Frequencies f = freqs(c.spec, rows);
      const CheckResult r = check_parity(c.spec, raw_table(rows, f.inv_freq, f.attention_factor));
      EXPECT_TRUE(r.agree) << dump(r);
      EXPECT_TRUE(r.diagnoses.empty()) << dump(r);
      // bf16 cos/sin (vLLM's cache in the model dtype): reported in the precision figures, not a diagnosis.
      const CheckResult rb = check_parity(c.spec, raw_table(rows, f.inv_freq, f.attention_factor, [](int64_t p, double t) {
        return static_cast<double>(static_cast<float>(p) * static_cast<float>(t)); }, DType::kBF16));
      EXPECT_TRUE(rb.agree) << dump(rb);
      ASSERT_TRUE(rb.precision.first_pos_err_1e3.has_value()) << dump(rb);
    }
    for (EngineLayout l : {EngineLayout::kHf, EngineLayout::kVllm, EngineLayout::kFlashInfer, EngineLayout::kTe,
                           EngineLayout::kOnnx, EngineLayout::kRaw, EngineLayout::kGgml}) {
      for (TableKind k : {TableKind::kCosSin, TableKind::kInvFreq}) {
        if ((l == EngineLayout::kOnnx || l == EngineLayout::kFlashInfer) && k == TableKind::kInvFreq) continue;
        if (l == EngineLayout::kGgml && k == TableKind::kCosSin) continue;
        SCOPED_TRACE(std::string(c.name) + " " + engine_layout_name(l) + " " + table_kind_name(k));
        ExportOptions o;
        o.layout = l, o.what = k, o.positions = 1200;
        CheckInput in;
        in.layout = l, in.kind = k, in.tensors = export_tables(c.spec, o);
        const CheckResult r = check_parity(c.spec, in);
        EXPECT_TRUE(r.agree) << dump(r);
      }
    }
  }
}

TEST(CheckDiagnoses, AttentionFactorMissingAndTwice) {
  for (const char* name : {"qwen2.5-7b-yarn", "phi-3.5-mini"}) {
    SCOPED_TRACE(name);
    const Spec spec = preset(name).normalized();
    const int64_t rows = 5000;  // > phi-3.5's original 4096: long factors, attention factor 1.19
    const Frequencies f = freqs(spec, rows);
    ASSERT_GT(f.attention_factor, 1.05);
    expect_only(spec, raw_table(rows, f.inv_freq, 1.0), "attention_factor_missing");
    expect_only(spec, raw_table(rows, f.inv_freq, f.attention_factor * f.attention_factor), "attention_factor_twice");
  }
  // An explicit attention_factor that the engine ignored (vLLM's dropped attention_factor, mlx-lm #1507).
  const Spec spec = from_json(R"({"head_dim": 128, "max_position_embeddings": 131072, "rope_theta": 1000000,
      "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 32768, "attention_factor": 1.0}})");
  Spec formula = spec;
  formula.scaling.attention_factor.reset();
  const Frequencies f = freqs(formula, 2048);
  const CheckResult r = check_parity(spec, raw_table(2048, f.inv_freq, f.attention_factor));
  ASSERT_EQ(codes(r), std::set<std::string>{"attention_factor_missing"}) << dump(r);
  EXPECT_NE(r.diagnoses[0].message.find("explicit attention_factor 1"), std::string::npos) << dump(r);
}

TEST(CheckDiagnoses, MscaleIgnored) {
  // DeepSeek-V3 (mscale = mscale_all_dim = 1): cos/sin factor 1; engines that ignore both get 0.1 ln 40 + 1 = 1.37.
  // Ministral-3-like (factor 16): 1.277 instead of 1.0.
  for (const char* json : {R"({"head_dim": 64, "max_position_embeddings": 163840, "rope_theta": 10000,
        "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 1.0}})",
                           R"({"head_dim": 128, "max_position_embeddings": 262144, "rope_theta": 1000000,
        "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 16384, "mscale": 1.0, "mscale_all_dim": 1.0}})"}) {
    const Spec spec = from_json(json);
    const Frequencies f = freqs(spec, 2048);
    ASSERT_DOUBLE_EQ(f.attention_factor, 1.0);
    const double f16 = *spec.scaling.factor;
    expect_only(spec, raw_table(2048, f.inv_freq, 0.1 * std::log(f16) + 1.0), "mscale_ignored");
  }
}

TEST(CheckDiagnoses, YarnRangeFromMaxPosAndTruncate) {
  for (const char* name : {"gpt-oss-20b", "deepseek-v3"}) {
    SCOPED_TRACE(name);
    const Spec spec = preset(name).normalized();
    Spec wrong = spec;
    wrong.scaling.factor = *spec.scaling.factor;
    wrong.scaling.original_max_position_embeddings = spec.max_position_embeddings;
    const Frequencies t = freqs(spec, 4000), w = freqs(wrong, 4000);
    expect_only(spec, raw_table(4000, w.inv_freq, t.attention_factor), "yarn_range_from_max_pos");
    Spec flipped = spec;
    flipped.scaling.truncate = !spec.scaling.truncate;
    expect_only(spec, raw_table(4000, freqs(flipped, 4000).inv_freq, t.attention_factor), "truncate_mismatch");
  }
}

TEST(CheckDiagnoses, MlxLmYarnOriginalMaxDefaultAndLongRopeFactor) {
  // mlx-lm 0.32's YarnRoPE takes original_max_position_embeddings = 4096 when rope_scaling has none (transformers:
  // max_position_embeddings); its SuScaledRoPE derives the attention factor from max_pos / original_max, ignoring an
  // explicit factor. Frequencies 32 % off at 8192; attention factor 1.1547 where the config's factor 2 gives 1.0541.
  const Spec yarn = from_json(R"({"head_dim": 64, "max_position_embeddings": 8192, "rope_theta": 10000,
      "rope_scaling": {"type": "yarn", "factor": 4}})");
  ASSERT_EQ(yarn.scaling.original_max_position_embeddings, 8192);
  Spec mlx = yarn;
  mlx.scaling.original_max_position_embeddings = 4096;
  const Frequencies t = freqs(yarn, 3000), w = freqs(mlx, 3000);
  expect_only(yarn, raw_table(3000, w.inv_freq, t.attention_factor), "yarn_original_max_default");
  EXPECT_TRUE(check_parity(yarn, raw_table(3000, t.inv_freq, t.attention_factor)).agree);

  for (const char* extra : {"", R"(, "attention_factor": 1.02)"}) {
    SCOPED_TRACE(extra);
    const Spec lr = from_json((std::string(R"({"head_dim": 64, "max_position_embeddings": 32768, "rope_theta": 10000,
        "rope_scaling": {"type": "longrope", "factor": 2, "original_max_position_embeddings": 4096)") + extra +
        R"(, "short_factor": [)" + [] { std::string f; for (int i = 0; i < 32; ++i) f += (i ? ", " : "") + std::to_string(1.0 + i * 0.05); return f; }() +
        R"(], "long_factor": [)" + [] { std::string f; for (int i = 0; i < 32; ++i) f += (i ? ", " : "") + std::to_string(1.0 + i * 0.5); return f; }() +
        "]}}").c_str());
    const Frequencies f = freqs(lr, 5000);
    ASSERT_NEAR(f.attention_factor, *extra ? 1.02 : std::sqrt(1 + std::log(2.0) / std::log(4096.0)), 1e-12);
    const double mlx_af = std::sqrt(1 + std::log(8.0) / std::log(4096.0));
    const CheckResult r = check_parity(lr, raw_table(5000, f.inv_freq, mlx_af));
    ASSERT_EQ(codes(r), std::set<std::string>{"longrope_factor_ignored"}) << dump(r);
    EXPECT_NE(r.diagnoses[0].message.find("explicit factor 2"), std::string::npos) << dump(r);
    EXPECT_TRUE(check_parity(lr, raw_table(5000, f.inv_freq, f.attention_factor)).agree);
  }
}

TEST(CheckDiagnoses, ATableOfPositionZeroAloneIsRefusedNotAgreed) {
  // cos 1, sin 0 at position 0 whatever the frequencies: a 1-row export agreed with any config (exit 0).
  const Spec spec = preset("llama-2-7b").normalized();
  const Frequencies other = freqs(preset("llama-3.1-8b").normalized(), 1);
  try {
    (void)check_parity(spec, raw_table(1, other.inv_freq, 1.0));
    ADD_FAILURE() << "a 1-row table at position 0 was checked";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("every row of the table is at position 0"), std::string::npos) << e.what();
  }
  // Position 1 alone resolves every band below pi rad: measured, and the other config's frequencies disagree.
  ExportOptions o;
  o.layout = EngineLayout::kHf, o.what = TableKind::kCosSin, o.positions = 2;
  CheckInput in;
  in.layout = EngineLayout::kHf, in.kind = TableKind::kCosSin, in.tensors = export_tables(preset("llama-3.1-8b"), o);
  EXPECT_FALSE(check_parity(spec, in).agree);
}

TEST(CheckDiagnoses, LongRopeSwitch) {
  const Spec spec = preset("phi-3.5-mini").normalized();
  const int64_t orig = spec.scaling.original_max_position_embeddings;
  const Frequencies lng = freqs(spec, orig + 1), shrt = freqs(spec, orig);
  expect_only(spec, raw_table(3000, lng.inv_freq, lng.attention_factor), "longrope_switch");   // vLLM: long always
  expect_only(spec, raw_table(orig + 500, shrt.inv_freq, shrt.attention_factor), "longrope_switch");
}

TEST(CheckDiagnoses, DynamicBase) {
  const Spec spec = from_json(R"({"head_dim": 64, "max_position_embeddings": 2048, "rope_theta": 10000,
                                   "rope_scaling": {"type": "dynamic", "factor": 2}})");
  // HF rescales for 3000 tokens; an engine that did not rescale:
  const Frequencies plain = freqs(spec, std::nullopt);
  expect_only(spec, raw_table(3000, plain.inv_freq, 1.0), "dynamic_base");
  // vLLM's static dynamic NTK: the base for max_pos * factor, used for a 1000-token table.
  const Frequencies vllm = freqs(spec, 4096);
  expect_only(spec, raw_table(1000, vllm.inv_freq, 1.0), "dynamic_base");
}

TEST(CheckDiagnoses, BaseMismatchRotaryDimPairingAndPrecisionForEveryRopeType) {
  for (const auto& c : every_rope_type()) {
    SCOPED_TRACE(c.name);
    const Spec& spec = c.spec;
    const int64_t rows = 3000;
    const Frequencies t = freqs(spec, rows);
    // Wrong rope_theta (an engine defaulting to 10000, or 5e5 for a 1e4 model).
    Spec b = spec;
    b.base = spec.base == 10000.0 ? 500000.0 : 10000.0;
    if (c.spec.scaling.type != RopeType::kDynamic || c.spec.scaling.alpha)  // NTK-alpha: a fixed base, base_mismatch
      expect_only(spec, raw_table(rows, freqs(b, rows).inv_freq, t.attention_factor), "base_mismatch");
    if (c.spec.scaling.alpha) {  // an engine that ignores alpha (plain rope_theta frequencies)
      Spec no_alpha = spec;
      no_alpha.scaling = Scaling{};
      expect_only(spec, raw_table(rows, freqs(no_alpha, rows).inv_freq, 1.0), "base_mismatch");
    }
    // bf16 inv_freq (HF #29496, sglang-jax #1472): as data, and as the source of an f32 table.
    std::vector<double> inv16 = t.inv_freq;
    for (double& v : inv16) v = bf16(static_cast<float>(v));
    CheckInput fin;
    fin.kind = TableKind::kInvFreq;
    fin.layout = EngineLayout::kRaw;
    NpyArray a = array(DType::kBF16, {static_cast<int64_t>(inv16.size())});
    for (size_t i = 0; i < inv16.size(); ++i) put(a, static_cast<int64_t>(i), inv16[i]);
    fin.tensors.tensors = {{"inv_freq", a}};
    fin.max_pos = rows;
    expect_only(spec, fin, "low_precision_table");
    expect_only(spec, raw_table(rows, inv16, t.attention_factor), "low_precision_table");
    // Angles formed in bf16 (positions and inv_freq in bf16, as under autocast), stored as bf16 cos/sin.
    expect_only(spec, raw_table(rows, t.inv_freq, t.attention_factor, [](int64_t p, double th) {
      return static_cast<double>(bf16(bf16(static_cast<float>(p)) * bf16(static_cast<float>(th)))); }, DType::kBF16),
                "low_precision_table");
    // hf layout whose cos/sin repeat each value twice (rotate_every_two) for a half-split model.
    if (spec.pairing == Pairing::kHalfSplit) {
      ExportOptions o;
      o.positions = rows;
      CheckInput in;
      in.tensors = export_tables(spec, o);
      for (auto& [name, arr] : in.tensors.tensors) {  // cat(x, x) -> repeat_interleave(x, 2)
        const int64_t w = arr.shape[1], h = w / 2;
        std::vector<unsigned char> out(arr.data.size());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < h; ++j)
            for (int k = 0; k < 2; ++k) std::memcpy(&out[static_cast<size_t>((r * w + 2 * j + k) * 4)], &arr.data[static_cast<size_t>((r * w + j) * 4)], 4);
        arr.data = out;
      }
      expect_only(spec, in, "pairing_mismatch");
    }
    // Partial rotary ignored (the whole head rotated with base^(-2i/D)) and the head_dim denominator.
    if (spec.effective_rotary_dim() < spec.head_dim && spec.scaling.type == RopeType::kDefault) {
      const std::vector<double> full = default_inv_freq(spec.base, spec.head_dim);
      expect_only(spec, raw_table(rows, full, 1.0), "rotary_dim");
      std::vector<double> den(full.begin(), full.begin() + spec.effective_rotary_dim() / 2);
      expect_only(spec, raw_table(rows, den, 1.0), "rotary_dim");
    }
    if (spec.scaling.type == RopeType::kProportional) {  // treated as plain partial rotary
      expect_only(spec, raw_table(rows, default_inv_freq(spec.base, spec.head_dim / 4), 1.0), "rotary_dim");
    }
  }
}

TEST(CheckDiagnoses, RotatedQkRevealsPairing) {
  const Spec spec = preset("llama-3.1-8b").normalized();
  const int64_t T = 300, H = 4, D = spec.head_dim, h = D / 2;
  const Frequencies f = freqs(spec, T);
  NpyArray x = array(DType::kF32, {T, H, D}), y = array(DType::kF32, {T, H, D}), p = array(DType::kI64, {T});
  uint64_t state = 7;
  auto rnd = [&] { state = state * 6364136223846793005ULL + 1442695040888963407ULL; return static_cast<double>(state >> 11) / 9007199254740992.0 - 0.5; };
  for (int64_t t = 0; t < T; ++t) {
    const int64_t v = t;
    std::memcpy(p.data.data() + 8 * t, &v, 8);
  }
  for (Pairing pr : {Pairing::kHalfSplit, Pairing::kInterleaved}) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < H; ++k) {
        std::vector<double> xv(static_cast<size_t>(D));
        for (auto& v : xv) v = rnd();
        std::vector<double> yv = xv;
        for (int64_t j = 0; j < h; ++j) {
          const int64_t a = pr == Pairing::kHalfSplit ? j : 2 * j, b = pr == Pairing::kHalfSplit ? j + h : 2 * j + 1;
          const double ang = static_cast<double>(t) * f.inv_freq[static_cast<size_t>(j)];
          yv[static_cast<size_t>(a)] = xv[static_cast<size_t>(a)] * std::cos(ang) - xv[static_cast<size_t>(b)] * std::sin(ang);
          yv[static_cast<size_t>(b)] = xv[static_cast<size_t>(a)] * std::sin(ang) + xv[static_cast<size_t>(b)] * std::cos(ang);
        }
        for (int64_t d = 0; d < D; ++d) put(x, (t * H + k) * D + d, xv[static_cast<size_t>(d)]), put(y, (t * H + k) * D + d, yv[static_cast<size_t>(d)]);
      }
    CheckInput in;
    in.kind = TableKind::kRotated;
    in.layout = EngineLayout::kVllm;
    in.tensors.tensors = {{"input", x}, {"rotated", y}, {"positions", p}};
    const CheckResult r = check_parity(spec, in);
    if (pr == spec.pairing) {
      EXPECT_TRUE(r.agree) << dump(r);
    } else {
      EXPECT_EQ(codes(r), std::set<std::string>{"pairing_mismatch"}) << dump(r);
    }
    EXPECT_EQ(r.pairing_found, pairing_name(pr));
  }
}

TEST(CheckDiagnoses, AnOutputThatWasNotRotatedDisagrees) {
  // An engine that forgot RoPE returns its input: a disagreement (exit 1 in the CLI), not an input error,
  // unless every position is 0, where a correct engine returns its input too.
  const Spec spec = preset("llama-3.1-8b").normalized();
  const int64_t T = 40, H = 4, D = spec.head_dim;
  NpyArray x = array(DType::kF32, {T, H, D}), p = array(DType::kI64, {T});
  uint64_t state = 11;
  for (int64_t i = 0; i < T * H * D; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    put(x, i, static_cast<double>(state >> 11) / 9007199254740992.0 - 0.5);
  }
  for (int64_t t = 0; t < T; ++t) {
    const int64_t v = 100 * t;
    std::memcpy(p.data.data() + 8 * t, &v, 8);
  }
  CheckInput in;
  in.kind = TableKind::kRotated;
  in.layout = EngineLayout::kVllm;
  in.tensors.tensors = {{"input", x}, {"rotated", x}, {"positions", p}};
  const CheckResult r = check_parity(spec, in);
  EXPECT_FALSE(r.agree) << dump(r);
  EXPECT_EQ(r.pairing_found, "") << dump(r);
  bool noted = false;
  for (const auto& n : r.notes) noted = noted || n.find("nothing was rotated") != std::string::npos;
  EXPECT_TRUE(noted) << dump(r);

  std::memset(p.data.data(), 0, p.data.size());
  in.tensors.tensors = {{"input", x}, {"rotated", x}, {"positions", p}};
  try {
    check_parity(spec, in);
    ADD_FAILURE() << "all positions 0 were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("every position is 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rotary
