// M-RoPE (Qwen2-VL sectioned, Qwen3-VL interleaved): strict validation, HF's formulas in fp64, config-driven CLI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>
#include <unistd.h>
#include <vector>

#include "multimodal/mm_testing.h"
#include "npy.h"
#include "rotary/rotary.h"
#include "rotary/rotary_c.h"
#include "testing/shared.h"
#include "testing/tolerances.h"

namespace rotary {
namespace {

using testing::error_of;

// ---------------------------------------------------------------- strict section validation

TEST(Mrope, SectionsAreValidatedStrictly) {
  struct Case { std::vector<int64_t> section; const char* needle; };
  const std::vector<Case> cases = {
      {{16, 24}, "exactly 3 entries (t, h, w), got 2"},
      {{16, 24, 24, 0}, "exactly 3 entries (t, h, w), got 4"},
      {{16, 24, 23}, "must sum to rotary_dim/2 = 64, got 63"},
      {{16, 24, 25}, "must sum to rotary_dim/2 = 64, got 65"},
      {{-8, 36, 36}, "mrope.section[0] must be >= 0, got -8"},
      {{32, 40, -8}, "mrope.section[2] must be >= 0, got -8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.needle);
    Spec s;
    s.head_dim = 128;
    s.mrope.section = c.section;
    EXPECT_NE(error_of([&] { s.validate(); }).find(c.needle), std::string::npos) << error_of([&] { s.validate(); });
    EXPECT_NE(error_of([&] { Rope r(s); }).find(c.needle), std::string::npos);
    EXPECT_NE(error_of([&] { (void)mrope_axis_map(s.mrope, 64); }).find(c.needle), std::string::npos)
        << error_of([&] { (void)mrope_axis_map(s.mrope, 64); });
    for (bool il : {false, true}) {
      MRope m = s.mrope;
      m.interleaved = il;
      EXPECT_THROW((void)mrope_axis_map(m, 64), Error);
    }
  }
  // Partial rotary: the sum is checked against rotary_dim/2, not head_dim/2.
  Spec p;
  p.head_dim = 128;
  p.rotary_dim = 64;
  p.mrope.section = {16, 24, 24};
  EXPECT_NE(error_of([&] { p.validate(); }).find("rotary_dim/2 = 32, got 64"), std::string::npos) << error_of([&] { p.validate(); });
  p.mrope.section = {8, 12, 12};
  EXPECT_NO_THROW(p.validate());
  // Zero-size sections are legal (all text: {64, 0, 0}).
  Spec z;
  z.head_dim = 128;
  z.mrope.section = {64, 0, 0};
  EXPECT_NO_THROW(z.validate());
  // From a config: a bad mrope_section is an error naming the field, not a warning.
  const std::string cfg = R"({"hidden_size": 512, "num_attention_heads": 4, "rope_theta": 1000000.0,
      "max_position_embeddings": 32768, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 20]}})";
  EXPECT_NE(error_of([&] { (void)spec_from_hf_config_json(cfg); }).find("mrope"), std::string::npos)
      << error_of([&] { (void)spec_from_hf_config_json(cfg); });
}

TEST(Mrope, AxisMapsAreTheDocumentedOnes) {
  // Sectioned [2,3,3]: [t t h h h w w w]; interleaved (Qwen3-VL): h if j%3==1 and j < 9, w if j%3==2 and j < 9.
  EXPECT_EQ(mrope_axis_map({{2, 3, 3}, false}, 8), (std::vector<uint8_t>{0, 0, 1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(mrope_axis_map({{2, 3, 3}, true}, 8), (std::vector<uint8_t>{0, 1, 2, 0, 1, 2, 0, 1}));
  // Qwen3-VL [24, 20, 20]: h for j%3==1 up to 3*20=60, w for j%3==2 up to 60; the tail j >= 60 is t.
  const auto q3 = mrope_axis_map({{24, 20, 20}, true}, 64);
  int count[3] = {0, 0, 0};
  for (std::size_t j = 0; j < q3.size(); ++j) {
    ++count[q3[j]];
    if (j >= 60) EXPECT_EQ(q3[j], 0) << j;
  }
  EXPECT_EQ(count[0], 24);
  EXPECT_EQ(count[1], 20);
  EXPECT_EQ(count[2], 20);
}

// ---------------------------------------------------------------- HF formulas, literally, in long double

/// HF Qwen2-VL apply_multimodal_rotary_pos_emb: per-axis cos/sin over the full rotary dim
/// (emb = cat(freqs, freqs)), split into chunks of mrope_section*2 and chunk i taken from axis i%3;
/// then q*cos + rotate_half(q)*sin. Qwen3-VL (apply_interleaved_mrope): freqs_t = freqs[0];
/// freqs_t[..., offset:3*section[a]:3] = freqs[a] for (a, offset) in ((1,1), (2,2)); emb = cat(freqs_t, freqs_t).
std::vector<double> hf_mrope_head(const std::vector<double>& x, int64_t R, const std::vector<int64_t>& section,
                                  bool interleaved, const long double pos[3], long double base) {
  const int64_t h = R / 2;
  std::vector<long double> freqs[3];  // [axis][h]
  for (int a = 0; a < 3; ++a)
    for (int64_t j = 0; j < h; ++j) freqs[a].push_back(pos[a] * powl(base, -2.0L * j / R));
  std::vector<long double> ang(static_cast<std::size_t>(R));
  if (!interleaved) {
    std::vector<long double> emb[3];
    for (int a = 0; a < 3; ++a) {
      emb[a] = freqs[a];
      emb[a].insert(emb[a].end(), freqs[a].begin(), freqs[a].end());
    }
    int64_t c = 0;
    for (int chunk = 0; chunk < 6; ++chunk) {
      const int64_t len = section[chunk % 3];
      for (int64_t k = 0; k < len; ++k, ++c) ang[c] = emb[chunk % 3][c];
    }
  } else {
    std::vector<long double> ft = freqs[0];
    for (int a = 1; a <= 2; ++a)
      for (int64_t j = a; j < 3 * section[a] && j < h; j += 3) ft[j] = freqs[a][j];
    for (int64_t j = 0; j < h; ++j) ang[j] = ang[j + h] = ft[j];
  }
  std::vector<double> y = x;
  for (int64_t d = 0; d < R; ++d) {
    const long double rot = d < h ? -static_cast<long double>(x[d + h]) : static_cast<long double>(x[d - h]);
    y[d] = static_cast<double>(x[d] * cosl(ang[d]) + rot * sinl(ang[d]));
  }
  return y;
}

TEST(Mrope, RopeMatchesHfFormulaForEveryLayoutAndIdsShape) {
  const int64_t B = 2, S = 6, H = 2, D = 40, R = 32;  // partial rotary: 8 channels pass through
  const std::vector<int64_t> section = {4, 6, 6};
  const long double base = 1000000.0L;
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int64_t> u(0, 5000);
  std::vector<int64_t> ids(static_cast<std::size_t>(3 * B * S));
  for (auto& v : ids) v = u(rng);
  ids[1] = 1 << 20;  // a large temporal id
  const auto x = testing::randn(static_cast<std::size_t>(B * S * H * D), 4);
  for (bool interleaved : {false, true}) {
    Spec spec;
    spec.head_dim = D;
    spec.rotary_dim = R;
    spec.base = static_cast<double>(base);
    spec.mrope = {section, interleaved};
    for (CosSinMode mode : {CosSinMode::kAuto, CosSinMode::kOnTheFly}) {
      RopeOptions o;
      o.mode = mode;
      Rope rope(spec, o);
      for (int shape = 0; shape < 4; ++shape) {  // 0 bshd [3,B,S], 1 bhsd [3,B,S], 2 bshd [3,S], 3 thd [3,T]
        SCOPED_TRACE(std::string(interleaved ? "interleaved" : "sectioned") + " shape " + std::to_string(shape));
        const bool bhsd = shape == 1, thd = shape == 3;
        const int64_t BB = thd ? 1 : B, SS = thd ? B * S : S;
        std::vector<float> q(x.size());
        auto idx = [&](int64_t b, int64_t s, int64_t h) {
          return bhsd ? ((b * H + h) * SS + s) * D : ((b * SS + s) * H + h) * D;
        };
        for (int64_t b = 0; b < BB; ++b)
          for (int64_t s = 0; s < SS; ++s)
            for (int64_t h = 0; h < H; ++h)
              std::memcpy(&q[idx(b, s, h)], &x[((b * SS + s) * H + h) * D], D * 4);
        ApplyArgs a;
        a.layout = thd ? Layout::kTHD : bhsd ? Layout::kBHSD : Layout::kBSHD;
        a.q = thd ? TensorView::contiguous(q.data(), DType::kF32, {SS, H, D})
                  : bhsd ? TensorView::contiguous(q.data(), DType::kF32, {BB, H, SS, D})
                         : TensorView::contiguous(q.data(), DType::kF32, {BB, SS, H, D});
        // [3,S] broadcast: ids of batch 0 for every batch; the tensor is a strided view of [3,B,S].
        a.positions = Positions::from_ids(
            shape == 2 ? TensorView::strided(ids.data(), DType::kI64, {3, S}, {B * S, 1})
                       : thd ? TensorView::contiguous(ids.data(), DType::kI64, {3, B * S})
                             : TensorView::contiguous(ids.data(), DType::kI64, {3, B, S}));
        rope.apply(a);
        double worst = 0;
        for (int64_t b = 0; b < BB; ++b)
          for (int64_t s = 0; s < SS; ++s) {
            const int64_t tok = shape == 2 ? s : b * SS + s;  // index into each axis row
            const long double pos[3] = {static_cast<long double>(ids[0 * B * S + tok]),
                                        static_cast<long double>(ids[1 * B * S + tok]),
                                        static_cast<long double>(ids[2 * B * S + tok])};
            for (int64_t h = 0; h < H; ++h) {
              std::vector<double> head(x.begin() + ((b * SS + s) * H + h) * D, x.begin() + ((b * SS + s) * H + h + 1) * D);
              const auto want = hf_mrope_head(head, R, section, interleaved, pos, base);
              for (int64_t d = 0; d < D; ++d) worst = std::max(worst, std::fabs(q[idx(b, s, h) + d] - want[d]));
            }
          }
        EXPECT_LE(worst, testing::kAccuracyContractF32);
      }
    }
  }
}

// ---------------------------------------------------------------- text-only positions for an M-RoPE spec

// transformers (Qwen2-VL's text model expands [B,S] ids to [3,B,S]) and vLLM (MRotaryEmbedding takes [T] as
// well as [3,T]) give text tokens one position on every axis: [B,S] / [S] / [T] ids mean exactly that.
TEST(Mrope, TextOnlyIdsAreTheSamePositionOnEveryAxis) {
  const int64_t B = 2, S = 5, H = 2, D = 32;
  const std::vector<int64_t> section = {4, 6, 6};
  std::vector<int64_t> ids = {7, 0, 3, 4000, 12, 1, 1, 9, 70000, 2};  // [B,S]
  const auto x = testing::randn(static_cast<std::size_t>(B * S * H * D), 8);
  for (bool interleaved : {false, true}) {
    Spec spec;
    spec.head_dim = D;
    spec.base = 1e6;
    spec.mrope = {section, interleaved};
    Rope rope(spec);
    // Expanded ids [3,B,S] (each row the same): the meaning transformers gives [B,S].
    std::vector<int64_t> ids3;
    for (int a = 0; a < 3; ++a) ids3.insert(ids3.end(), ids.begin(), ids.end());
    // 0 bshd [B,S], 1 bhsd [B,S], 2 bshd [S] (batch 0's ids), 3 thd [T], 4 bshd [1,S] (batch 0's ids, broadcast)
    for (int form = 0; form < 5; ++form) {
      SCOPED_TRACE(std::string(interleaved ? "interleaved " : "sectioned ") + std::to_string(form));
      const bool thd = form == 3, bhsd = form == 1;
      std::vector<float> q = x, want = x;
      ApplyArgs a, w;
      a.layout = w.layout = thd ? Layout::kTHD : bhsd ? Layout::kBHSD : Layout::kBSHD;
      auto view = [&](std::vector<float>& v) {
        return thd ? TensorView::contiguous(v.data(), DType::kF32, {B * S, H, D})
                   : bhsd ? TensorView::contiguous(v.data(), DType::kF32, {B, H, S, D})
                          : TensorView::contiguous(v.data(), DType::kF32, {B, S, H, D});
      };
      a.q = view(q);
      w.q = view(want);
      a.positions = Positions::from_ids(form == 2 ? TensorView::contiguous(ids.data(), DType::kI64, {S})
                                        : form == 4 ? TensorView::contiguous(ids.data(), DType::kI64, {1, S})
                                        : thd     ? TensorView::contiguous(ids.data(), DType::kI64, {B * S})
                                                  : TensorView::contiguous(ids.data(), DType::kI64, {B, S}));
      w.positions = Positions::from_ids(form == 2 || form == 4 ? TensorView::strided(ids3.data(), DType::kI64, {3, S}, {B * S, 1})
                                        : thd     ? TensorView::contiguous(ids3.data(), DType::kI64, {3, B * S})
                                                  : TensorView::contiguous(ids3.data(), DType::kI64, {3, B, S}));
      rope.apply(a);
      rope.apply(w);
      EXPECT_EQ(q, want);
      // And against HF's formula with t = h = w (fp64), for the bshd [B,S] form.
      if (form == 0)
        for (int64_t t = 0; t < B * S; ++t)
          for (int64_t h = 0; h < H; ++h) {
            const long double p = static_cast<long double>(ids[static_cast<std::size_t>(t)]);
            const long double pos[3] = {p, p, p};
            std::vector<double> head(x.begin() + (t * H + h) * D, x.begin() + (t * H + h + 1) * D);
            const auto tr = hf_mrope_head(head, D, section, interleaved, pos, 1e6L);
            for (int64_t d = 0; d < D; ++d) ASSERT_NEAR(q[(t * H + h) * D + d], tr[d], testing::kAccuracyContractF32);
          }
    }
  }
  // Batch 3 makes [3,S] both forms: refused, naming the unambiguous [3,B,S].
  Spec spec;
  spec.head_dim = D;
  spec.mrope = {section, false};
  Rope rope(spec);
  std::vector<float> q3 = testing::randn(static_cast<std::size_t>(3 * S * H * D), 1), q0 = q3;
  std::vector<int64_t> amb(3 * S, 1);
  ApplyArgs a;
  a.q = TensorView::contiguous(q3.data(), DType::kF32, {3, S, H, D});
  a.positions = Positions::from_ids(TensorView::contiguous(amb.data(), DType::kI64, {3, S}));
  const std::string msg = error_of([&] { rope.apply(a); });
  EXPECT_NE(msg.find("positions.ids shape [3,5] is ambiguous with batch size 3 and 3 position axes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3,B,S] = [3,3,5]"), std::string::npos) << msg;
  EXPECT_EQ(q3, q0);
  // A wrong shape names both accepted forms.
  std::vector<int64_t> bad(7, 0);
  a.q = TensorView::contiguous(q3.data(), DType::kF32, {1, S, H, D});
  a.positions = Positions::from_ids(TensorView::contiguous(bad.data(), DType::kI64, {1, 7}));
  const std::string m2 = error_of([&] { rope.apply(a); });
  EXPECT_NE(m2.find("or [B,S] = [1,5] or [S] = [5] for text-only positions (the same on every axis)"), std::string::npos) << m2;
  // apply_axes (several axes with their own meaning: vision rows/cols, ggml rows) keeps requiring [n_axes, ...].
  const AxisFrequencies af = mrope_frequencies(spec);
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {S}));
  EXPECT_NE(error_of([&] { apply_axes(af, a); }).find("positions.ids must have shape [3,B,S]"), std::string::npos);
}

// The C API's rope apply takes the same text-only ids.
TEST(Mrope, CApiTakesTextOnlyIds) {
  const int64_t S = 4, H = 1, D = 16;
  const int64_t section[3] = {2, 3, 3};
  rotary_spec_desc_t d;
  rotary_spec_desc_init(&d);
  d.head_dim = D;
  d.mrope_section = section;
  d.mrope_section_len = 3;
  rotary_spec_t* spec = nullptr;
  rotary_rope_t* rope = nullptr;
  ASSERT_EQ(rotary_spec_create(&d, &spec), ROTARY_OK) << rotary_last_error();
  ASSERT_EQ(rotary_rope_create(spec, nullptr, &rope), ROTARY_OK) << rotary_last_error();
  std::vector<float> q = testing::randn(static_cast<std::size_t>(S * H * D), 2), want = q;
  std::vector<int64_t> ids = {5, 0, 300, 2}, ids3;
  for (int k = 0; k < 3; ++k) ids3.insert(ids3.end(), ids.begin(), ids.end());
  for (auto [buf, pos, rank] : {std::tuple{&q, &ids, 1}, std::tuple{&want, &ids3, 2}}) {
    rotary_apply_args_t a;
    rotary_apply_args_init(&a);
    const int64_t xs[3] = {S, H, D}, ps1[1] = {S}, ps2[2] = {3, S};
    ASSERT_EQ(rotary_tensor_contiguous(&a.q, buf->data(), ROTARY_DTYPE_F32, 3, xs), ROTARY_OK);
    a.layout = ROTARY_LAYOUT_THD;
    a.positions.kind = ROTARY_POSITIONS_IDS;
    ASSERT_EQ(rotary_tensor_contiguous(&a.positions.ids, pos->data(), ROTARY_DTYPE_I64, rank, rank == 1 ? ps1 : ps2), ROTARY_OK);
    ASSERT_EQ(rotary_rope_apply(rope, &a), ROTARY_OK) << rotary_last_error();
  }
  EXPECT_EQ(q, want);
  rotary_rope_free(rope);
  rotary_spec_free(spec);
}

// ---------------------------------------------------------------- CLI reads mrope_section / mrope_interleaved from configs

TEST(Mrope, CliReadsSectionsFromQwenConfigs) {
  const std::string cli = testing::cli_path();
  if (cli.empty()) GTEST_SKIP() << "rotary CLI not built";
  const auto dir = std::filesystem::temp_directory_path() / ("rotary_mm_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const int64_t B = 2, S = 5, H = 2, D = 16;
  const std::vector<int64_t> section_q2 = {2, 3, 3}, section_q3 = {4, 2, 2};
  std::vector<int64_t> ids(3 * B * S);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 37) % 61);
  const auto x = testing::randn(static_cast<std::size_t>(B * S * H * D), 5);
  NpyArray xa;
  xa.dtype = DType::kF32;
  xa.shape = {B, S, H, D};
  xa.data.resize(x.size() * 4);
  std::memcpy(xa.data.data(), x.data(), xa.data.size());
  npy_save((dir / "x.npy").string(), xa);
  NpyArray pa;
  pa.dtype = DType::kI64;
  pa.shape = {3, B, S};
  pa.data.resize(ids.size() * 8);
  std::memcpy(pa.data.data(), ids.data(), pa.data.size());
  npy_save((dir / "p.npy").string(), pa);
  struct Cfg { const char* name; std::string json; std::vector<int64_t> section; bool interleaved; };
  const std::vector<Cfg> cfgs = {
      {"qwen2-vl rope_scaling type mrope", R"({"hidden_size": 32, "num_attention_heads": 2, "rope_theta": 1000000.0,
          "max_position_embeddings": 32768, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}})",
       section_q2, false},
      {"qwen3-vl rope_parameters interleaved", R"({"hidden_size": 32, "num_attention_heads": 2, "head_dim": 16,
          "max_position_embeddings": 32768, "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0,
          "mrope_section": [4, 2, 2], "mrope_interleaved": true}})",
       section_q3, true},
  };
  for (const Cfg& c : cfgs) {
    SCOPED_TRACE(c.name);
    std::ofstream((dir / "config.json").string()) << c.json;
    std::string out;
    const int rc = testing::run_command("'" + cli + "' apply --config '" + (dir / "config.json").string() + "' --input '" +
                                            (dir / "x.npy").string() + "' --positions '" + (dir / "p.npy").string() +
                                            "' --output '" + (dir / "y.npy").string() + "' --layout bshd",
                                        &out, true);
    ASSERT_EQ(rc, 0) << out;
    const NpyArray y = npy_load((dir / "y.npy").string());
    ASSERT_EQ(y.shape, (std::vector<int64_t>{B, S, H, D}));
    const long double base = c.interleaved ? 5000000.0L : 1000000.0L;
    double worst = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        const long double pos[3] = {static_cast<long double>(ids[b * S + s]), static_cast<long double>(ids[B * S + b * S + s]),
                                    static_cast<long double>(ids[2 * B * S + b * S + s])};
        for (int64_t h = 0; h < H; ++h) {
          const int64_t off = ((b * S + s) * H + h) * D;
          std::vector<double> head(x.begin() + off, x.begin() + off + D);
          const auto want = hf_mrope_head(head, D, c.section, c.interleaved, pos, base);
          for (int64_t d = 0; d < D; ++d) worst = std::max(worst, std::fabs(double(y.as<float>()[off + d]) - want[d]));
        }
      }
    EXPECT_LE(worst, testing::kAccuracyContractF32);
  }
  // Text-only ids [B,S] (the first axis' rows) are the same position on t, h and w (transformers' text-only path).
  const Cfg& last = cfgs.back();  // config.json holds it
  NpyArray p2 = pa;
  p2.shape = {B, S};
  p2.data.resize(static_cast<std::size_t>(B * S * 8));
  npy_save((dir / "p2.npy").string(), p2);
  std::string out;
  ASSERT_EQ(testing::run_command("'" + cli + "' apply --config '" + (dir / "config.json").string() + "' --input '" +
                                     (dir / "x.npy").string() + "' --positions '" + (dir / "p2.npy").string() +
                                     "' --output '" + (dir / "y.npy").string() + "' --layout bshd",
                                 &out, true),
            0)
      << out;
  {
    const NpyArray y = npy_load((dir / "y.npy").string());
    const long double base = last.interleaved ? 5000000.0L : 1000000.0L;
    double worst = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        const long double t = static_cast<long double>(ids[b * S + s]);
        const long double pos[3] = {t, t, t};
        for (int64_t h = 0; h < H; ++h) {
          const int64_t off = ((b * S + s) * H + h) * D;
          std::vector<double> head(x.begin() + off, x.begin() + off + D);
          const auto want = hf_mrope_head(head, D, last.section, last.interleaved, pos, base);
          for (int64_t d = 0; d < D; ++d) worst = std::max(worst, std::fabs(double(y.as<float>()[off + d]) - want[d]));
        }
      }
    EXPECT_LE(worst, testing::kAccuracyContractF32);
  }
  // Ids of two axes ([2,B,S]) are neither form: refused, naming the [3,B,S] shape.
  NpyArray p3 = pa;
  p3.shape = {2, B, S};
  p3.data.resize(static_cast<std::size_t>(2 * B * S * 8));
  npy_save((dir / "p3.npy").string(), p3);
  EXPECT_NE(testing::run_command("'" + cli + "' apply --config '" + (dir / "config.json").string() + "' --input '" +
                                     (dir / "x.npy").string() + "' --positions '" + (dir / "p3.npy").string() +
                                     "' --output '" + (dir / "y3.npy").string() + "' --layout bshd",
                                 &out, true),
            0);
  EXPECT_NE(out.find("[3,2,5]"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(dir / "y3.npy"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rotary
