// ggml compatibility: rotary's ggml_frequencies vs an independent transcription of ggml's float32 CPU rope.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "multimodal/mm_testing.h"
#include "rotary/ggml.h"
#include "rotary/multimodal.h"

namespace rotary {
namespace {

// ------------------------------------------------------------------ ggml's float32 CPU algorithm, transcribed
// (ggml-cpu ops.cpp: rope_yarn_ramp, rope_yarn, ggml_rope_cache_init, ggml_mrope_cache_init, rotate_pairs;
// ggml.c: ggml_rope_yarn_corr_dims). Every operation in float, as ggml does it.
struct GgmlCall {
  int mode = 0;
  int n_dims = 0;
  int ne0 = 0;  // channels per head
  float freq_base = 10000.0f, freq_scale = 1.0f, ext_factor = 0.0f, attn_factor = 1.0f;
  float beta_fast = 32.0f, beta_slow = 1.0f;
  int n_ctx_orig = 0;
  int sections[4] = {0, 0, 0, 0};
  std::vector<float> ff;  // freq factors (empty = none)
};

float g_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return n_dims * logf(n_ctx_orig / (n_rot * 2 * static_cast<float>(M_PI))) / (2 * logf(base));
}

void g_corr_dims(const GgmlCall& c, float dims[2]) {
  const float start = floorf(g_corr_dim(c.n_dims, c.n_ctx_orig, c.beta_fast, c.freq_base));
  const float end = ceilf(g_corr_dim(c.n_dims, c.n_ctx_orig, c.beta_slow, c.freq_base));
  dims[0] = std::max(0.0f, start);
  dims[1] = std::min(static_cast<float>(c.n_dims - 1), end);
}

float g_ramp(float low, float high, int i0) {
  const float y = (i0 / 2 - low) / std::max(0.001f, high - low);
  return 1 - std::min(1.0f, std::max(0.0f, y));
}

/// Returns the final float angle too (for angle-level comparisons).
void g_yarn(float theta_extrap, const GgmlCall& c, const float corr[2], int i0, float* cos_t, float* sin_t, float* angle) {
  const float theta_interp = c.freq_scale * theta_extrap;
  float theta = theta_interp;
  float mscale = c.attn_factor;
  if (c.ext_factor != 0.0f) {
    const float ramp_mix = g_ramp(corr[0], corr[1], i0) * c.ext_factor;
    theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
    mscale *= 1.0f + 0.1f * logf(1.0f / c.freq_scale);
  }
  *angle = theta;
  *cos_t = cosf(theta) * mscale;
  *sin_t = sinf(theta) * mscale;
}

/// The cache of one token: ne0/2 (cos, sin, angle). pos: 1 value (NORMAL/NEOX) or 4 (t, h, w, e).
struct GCache {
  std::vector<float> cos, sin, angle;
};

GCache g_cache(const GgmlCall& c, const int32_t* pos) {
  const float theta_scale = powf(c.freq_base, -2.0f / c.n_dims);
  float corr[2];
  g_corr_dims(c, corr);
  GCache out;
  const int n = c.ne0 / 2;
  out.cos.resize(n);
  out.sin.resize(n);
  out.angle.resize(n);
  const bool is_mrope = (c.mode & 8) != 0;
  const bool is_imrope = c.mode == 40;
  const bool is_vision = c.mode == 24;
  if (!is_mrope) {
    float theta = static_cast<float>(pos[0]);
    for (int i0 = 0; i0 < c.ne0; i0 += 2) {
      const float ff = c.ff.empty() ? 1.0f : c.ff[i0 / 2];
      g_yarn(theta / ff, c, corr, i0, &out.cos[i0 / 2], &out.sin[i0 / 2], &out.angle[i0 / 2]);
      theta *= theta_scale;
    }
    return out;
  }
  float theta_t = static_cast<float>(pos[0]), theta_h = static_cast<float>(pos[1]);
  float theta_w = static_cast<float>(pos[2]), theta_e = static_cast<float>(pos[3]);
  const int* s = c.sections;
  const int sect_dims = s[0] + s[1] + s[2] + s[3];
  const int sec_w = s[1] + s[0];
  const int sec_e = s[2] + sec_w;
  for (int i0 = 0; i0 < c.ne0; i0 += 2) {
    const float ff = c.ff.empty() ? 1.0f : c.ff[i0 / 2];
    const int sector = (i0 / 2) % sect_dims;
    if (is_vision) {
      if (sector == 0) theta_t = static_cast<float>(pos[0]);
      else if (sector == s[0]) theta_h = static_cast<float>(pos[1]);
      else if (sector == sec_w) theta_w = static_cast<float>(pos[2]);
      else if (sector == sec_e) theta_e = static_cast<float>(pos[3]);
    }
    float theta = theta_t;
    if (is_imrope) {
      if (sector % 3 == 1 && sector < 3 * s[1]) theta = theta_h;
      else if (sector % 3 == 2 && sector < 3 * s[2]) theta = theta_w;
      else if (sector % 3 == 0 && sector < 3 * s[0]) theta = theta_t;
      else theta = theta_e;
    } else {
      if (sector >= s[0] && sector < sec_w) theta = theta_h;
      else if (sector >= sec_w && sector < sec_w + s[2]) theta = theta_w;
      else if (sector >= sec_w + s[2]) theta = theta_e;
    }
    g_yarn(theta / ff, c, corr, i0, &out.cos[i0 / 2], &out.sin[i0 / 2], &out.angle[i0 / 2]);
    theta_t *= theta_scale;
    theta_w *= theta_scale;
    theta_h *= theta_scale;
    theta_e *= theta_scale;
  }
  return out;
}

/// ggml's rotation of one head (float): NORMAL pairs (i0, i0+1) over n_dims; NEOX/MROPE/IMROPE
/// (j, j + n_dims/2) over n_dims; VISION (j, j + n_dims) over ne0. Other channels copied.
std::vector<float> g_rotate(const GgmlCall& c, const GCache& cache, const std::vector<float>& x) {
  std::vector<float> y = x;
  auto pair = [&](int j, int a, int b) {
    const float x0 = x[a], x1 = x[b];
    y[a] = x0 * cache.cos[j] - x1 * cache.sin[j];
    y[b] = x0 * cache.sin[j] + x1 * cache.cos[j];
  };
  if (c.mode == 0) {
    for (int i0 = 0; i0 < c.n_dims; i0 += 2) pair(i0 / 2, i0, i0 + 1);
  } else if (c.mode == 24) {
    for (int i0 = 0; i0 < c.ne0; i0 += 2) pair(i0 / 2, i0 / 2, i0 / 2 + c.n_dims);
  } else {
    for (int i0 = 0; i0 < c.n_dims; i0 += 2) pair(i0 / 2, i0 / 2, i0 / 2 + c.n_dims / 2);
  }
  return y;
}

GgmlRopeParams to_params(const GgmlCall& c) {
  GgmlRopeParams p;
  p.mode = static_cast<GgmlRopeMode>(c.mode);
  p.n_dims = c.n_dims;
  p.n_ctx_orig = c.n_ctx_orig;
  p.freq_base = c.freq_base;
  p.freq_scale = c.freq_scale;
  p.ext_factor = c.ext_factor;
  p.attn_factor = c.attn_factor;
  p.beta_fast = c.beta_fast;
  p.beta_slow = c.beta_slow;
  if (c.mode & 8)
    for (int i = 0; i < 4; ++i) p.sections[static_cast<std::size_t>(i)] = c.sections[i];
  p.freq_factors.assign(c.ff.begin(), c.ff.end());
  return p;
}

/// Bound on ggml's float32 angle error for pair j, relative to the exact angle: float(p) is exact
/// (p < 2^24); theta_scale = powf(base, -2/n) carries (2 ln(base)/n + 2) ulps of relative error,
/// compounded k times, plus one rounding per multiplication (k), plus the /ff, *freq_scale and the
/// YaRN mix (4 roundings). Relative: (k (3 + 2 ln(base)/n) + 4) 2^-24.
double angle_tol(const GgmlCall& c, int64_t k, double exact_angle) {
  const double per_step = 3.0 + 2.0 * std::log(c.freq_base) / c.n_dims;
  return std::fabs(exact_angle) * (static_cast<double>(k) * per_step + 4.0) * std::ldexp(1.0, -24) + 1e-30;
}

/// Ladder index k of pair j: j, except VISION, where the theta ladder restarts at each section start.
int64_t ladder_index(const GgmlCall& c, int64_t j) {
  if (c.mode != 24) return j;
  const int sect_dims = c.sections[0] + c.sections[1] + c.sections[2] + c.sections[3];
  int64_t sector = j % sect_dims, start = 0;
  for (int i = 0; i < 4; ++i) {
    if (sector < start + c.sections[i]) return sector - start;
    start += c.sections[i];
  }
  return sector;
}

std::vector<GgmlCall> cases() {
  std::vector<GgmlCall> v;
  GgmlCall c;
  c.mode = 0; c.n_dims = 64; c.ne0 = 64; v.push_back(c);                        // Llama (Meta layout)
  c.mode = 2; c.n_dims = 32; c.ne0 = 64; c.freq_base = 1e6f; v.push_back(c);     // NEOX partial rotary
  c = GgmlCall{}; c.mode = 2; c.n_dims = 64; c.ne0 = 64; c.freq_scale = 0.25f;   // linear interpolation
  v.push_back(c);
  c = GgmlCall{}; c.mode = 2; c.n_dims = 64; c.ne0 = 64; c.freq_scale = 0.25f;   // YaRN
  c.ext_factor = 1.0f; c.attn_factor = 1.0f; c.beta_fast = 32; c.beta_slow = 1; c.n_ctx_orig = 4096;
  c.freq_base = 1e6f; v.push_back(c);
  c = GgmlCall{}; c.mode = 0; c.n_dims = 32; c.ne0 = 32;                        // freq factors (llama3 style)
  for (int i = 0; i < 16; ++i) c.ff.push_back(i < 8 ? 1.0f : 1.0f + 0.5f * static_cast<float>(i - 7));
  c.freq_base = 500000.0f; v.push_back(c);
  c = GgmlCall{}; c.mode = 8; c.n_dims = 64; c.ne0 = 64; c.freq_base = 1e6f;     // Qwen2-VL M-RoPE 16/24/24 scaled to 64
  c.sections[0] = 8; c.sections[1] = 12; c.sections[2] = 12; v.push_back(c);
  c = GgmlCall{}; c.mode = 40; c.n_dims = 64; c.ne0 = 64; c.freq_base = 5e6f;    // Qwen3-VL IMROPE 24/20/20 scaled
  c.sections[0] = 12; c.sections[1] = 10; c.sections[2] = 10; v.push_back(c);
  c = GgmlCall{}; c.mode = 8; c.n_dims = 40; c.ne0 = 48;                        // sections < n_dims/2: axis e, wrap
  c.sections[0] = 3; c.sections[1] = 4; c.sections[2] = 5; c.sections[3] = 2; v.push_back(c);
  c = GgmlCall{}; c.mode = 24; c.n_dims = 32; c.ne0 = 64;                       // VISION, clip sections d/4 x4
  for (int i = 0; i < 4; ++i) c.sections[i] = 16;
  v.push_back(c);
  c = GgmlCall{}; c.mode = 24; c.n_dims = 24; c.ne0 = 48;                       // VISION, uneven 2 sections, wrap
  c.sections[0] = 5; c.sections[1] = 4; v.push_back(c);  // (4 uneven ones: refused, ggml_sections_test.cc)
  c = GgmlCall{}; c.mode = 40; c.n_dims = 48; c.ne0 = 48; c.ext_factor = 0.5f;  // IMROPE + YaRN + freq factors
  c.freq_scale = 0.5f; c.n_ctx_orig = 8192; c.attn_factor = 0.75f;
  c.sections[0] = 8; c.sections[1] = 8; c.sections[2] = 8;
  for (int i = 0; i < 24; ++i) c.ff.push_back(1.0f + 0.125f * static_cast<float>(i % 5));
  v.push_back(c);
  // ggml's own test suite (tests/test-backend-ops.cpp, test_rope): n_ctx_orig 0 with YaRN on, beta_fast =
  // beta_slow = 1, freq_scale and attn_factor 1.4245, ext_factor 0.7465: corr dims [0, -inf].
  for (int mode : {0, 2, 8, 24, 40}) {
    c = GgmlCall{}; c.mode = mode; c.n_ctx_orig = 0; c.freq_scale = 1.4245f; c.ext_factor = 0.7465f;
    c.attn_factor = 1.4245f; c.beta_fast = 1.0f; c.beta_slow = 1.0f;
    c.n_dims = mode == 24 ? 32 : 60; c.ne0 = mode == 24 ? 64 : 60;
    if (mode == 24) { c.sections[0] = 16; c.sections[1] = 16; }       // n_dims/4 x2 of the test's head 64
    if (mode == 8 || mode == 40) c.sections[0] = c.sections[1] = c.sections[2] = 20;
    v.push_back(c);
  }
  c = GgmlCall{}; c.mode = 2; c.n_dims = 32; c.ne0 = 32; c.freq_base = 0.5f;   // base < 1: corr dims [inf, n_dims-1]
  c.n_ctx_orig = 0; c.ext_factor = 0.5f; c.freq_scale = 0.5f; v.push_back(c);
  return v;
}

std::vector<std::array<int32_t, 4>> positions(bool small, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> lo(0, 65535), hi(65536, (1 << 24) - 1);
  std::vector<std::array<int32_t, 4>> out = {{0, 0, 0, 0}, {1, 2, 3, 4}};
  if (small) out.push_back({65535, 65535, 65535, 65535});
  else out.push_back({(1 << 24) - 1, 65536, 1 << 20, 12345678});
  for (int i = 0; i < 40; ++i) {
    std::array<int32_t, 4> p;
    for (auto& x : p) x = small ? lo(rng) : hi(rng);
    out.push_back(p);
  }
  return out;
}

// Angles and cos/sin of ggml (float32) vs rotary's frequencies (double angles) for positions < 2^16:
// the difference must be within ggml's own float32 angle error for that pair.
TEST(Ggml, MatchesGgmlFloat32BelowTwoToThe16) {
  for (const GgmlCall& c : cases()) {
    SCOPED_TRACE("mode " + std::to_string(c.mode) + " n_dims " + std::to_string(c.n_dims));
    const AxisFrequencies af = ggml_frequencies(to_params(c));
    const int64_t pairs = c.mode == 24 ? c.n_dims : c.n_dims / 2;
    ASSERT_EQ(static_cast<int64_t>(af.freqs.inv_freq.size()), pairs);
    EXPECT_EQ(af.pairing, c.mode == 0 ? Pairing::kInterleaved : Pairing::kHalfSplit);
    EXPECT_EQ(af.n_axes, (c.mode & 8) ? 4 : 1);
    const double mscale = c.ext_factor != 0.0f ? c.attn_factor * (1.0 + 0.1 * std::log(1.0 / c.freq_scale)) : c.attn_factor;
    EXPECT_NEAR(af.freqs.attention_factor, mscale, 1e-15);
    double worst_ratio = 0;
    for (const auto& p : positions(true, 7)) {
      const GCache g = g_cache(c, p.data());
      const double pd[4] = {double(p[0]), double(p[1]), double(p[2]), double(p[3])};
      std::vector<float> rc(pairs), rs(pairs);
      compute_cos_sin_row_axes(af, pd, rc.data(), rs.data());
      for (int64_t j = 0; j < pairs; ++j) {
        const double ours = pd[af.axis_of_freq[j]] * af.freqs.inv_freq[j];
        const double tol = angle_tol(c, ladder_index(c, j), ours);
        const double d = std::fabs(static_cast<double>(g.angle[j]) - ours);
        ASSERT_LE(d, tol) << "pair " << j << " pos " << p[0] << "," << p[1] << "," << p[2] << "," << p[3];
        worst_ratio = std::max(worst_ratio, d / tol);
        // cos/sin: |d cos| <= |d angle| * mscale, + cosf/sinf (1 ulp) and the two f32 roundings.
        const double tol_cs = tol * std::fabs(mscale) + 4e-7 * std::fabs(mscale);
        ASSERT_LE(std::fabs(double(g.cos[j]) - double(rc[j])), tol_cs) << "cos pair " << j;
        ASSERT_LE(std::fabs(double(g.sin[j]) - double(rs[j])), tol_cs) << "sin pair " << j;
      }
    }
    EXPECT_LT(worst_ratio, 1.0);
  }
}

// Beyond 2^16 rotary stays exact: cos/sin vs an fp64 (long double) evaluation of ggml's formula,
// to one f32 rounding, while ggml's float32 angle drifts (shown for the highest positions).
TEST(Ggml, ExactBeyondTwoToThe16) {
  for (const GgmlCall& c : cases()) {
    SCOPED_TRACE("mode " + std::to_string(c.mode) + " n_dims " + std::to_string(c.n_dims));
    const AxisFrequencies af = ggml_frequencies(to_params(c));
    const int64_t pairs = static_cast<int64_t>(af.freqs.inv_freq.size());
    // Independent fp64 formula: theta_j = base^(-2k/n)/ff_j * (fs (1 - mix_j) + mix_j).
    float corr[2];
    g_corr_dims(c, corr);
    std::vector<long double> theta(pairs);
    for (int64_t j = 0; j < pairs; ++j) {
      long double t = powl(static_cast<long double>(c.freq_base),
                           -2.0L * static_cast<long double>(ladder_index(c, j)) / c.n_dims);
      if (!c.ff.empty()) t /= c.ff[j];
      long double mix = 0;
      if (c.ext_factor != 0.0f) {
        const long double y = (static_cast<long double>(j) - corr[0]) / std::max(0.001L, static_cast<long double>(corr[1]) - corr[0]);
        mix = (1.0L - std::min(1.0L, std::max(0.0L, y))) * c.ext_factor;
      }
      theta[j] = t * (c.freq_scale * (1.0L - mix) + mix);
    }
    const long double ms = c.ext_factor != 0.0f ? c.attn_factor * (1.0L + 0.1L * logl(1.0L / c.freq_scale)) : c.attn_factor;
    double ggml_worst = 0;
    for (const auto& p : positions(false, 11)) {
      const double pd[4] = {double(p[0]), double(p[1]), double(p[2]), double(p[3])};
      std::vector<float> rc(pairs), rs(pairs);
      compute_cos_sin_row_axes(af, pd, rc.data(), rs.data());
      const GCache g = g_cache(c, p.data());
      for (int64_t j = 0; j < pairs; ++j) {
        const long double a = static_cast<long double>(pd[af.axis_of_freq[j]]) * theta[j];
        const double tc = static_cast<double>(cosl(a) * ms), ts = static_cast<double>(sinl(a) * ms);
        // One f32 rounding (6e-8 relative) + the double angle error (pos < 2^24: ~2^-29 rad).
        const double tol = 1.2e-7 * std::fabs(double(ms)) + 2e-9;
        ASSERT_NEAR(rc[j], tc, tol) << "pair " << j << " pos " << pd[af.axis_of_freq[j]];
        ASSERT_NEAR(rs[j], ts, tol) << "pair " << j;
        ggml_worst = std::max(ggml_worst, std::fabs(double(g.cos[j]) - tc));
      }
    }
    // ggml's float32 phase is visibly off up there (documents why rotary forms the angle in double).
    EXPECT_GT(ggml_worst, 1e-4);
  }
}

// The per-pair axis choice equals ggml's, including the quirks: MROPE's 4th axis (e) for pairs past
// the three sections, the sector wrap, and IMROPE's t-or-e rule.
TEST(Ggml, AxisMapFollowsGgmlSections) {
  GgmlRopeParams p;
  p.mode = GgmlRopeMode::kMrope;
  p.n_dims = 40;
  p.sections = {3, 4, 5, 2};  // sect_dims 14, pairs 20: sectors 0..13 then 0..5
  const AxisFrequencies af = ggml_frequencies(p);
  const std::vector<int> want = {0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 0, 0, 0, 1, 1, 1};
  ASSERT_EQ(af.axis_of_freq.size(), want.size());
  for (std::size_t j = 0; j < want.size(); ++j) EXPECT_EQ(af.axis_of_freq[j], want[j]) << j;
  // MROPE keeps the global ladder index (no restart): theta_j = base^(-2j/n_dims).
  for (std::size_t j = 0; j < want.size(); ++j)
    EXPECT_DOUBLE_EQ(af.freqs.inv_freq[j], 1.0 / std::pow(10000.0, 2.0 * double(j) / 40.0));

  p.mode = GgmlRopeMode::kImrope;
  p.n_dims = 24;
  p.sections = {2, 4, 4, 0};  // t only for sector%3==0 && sector < 6, else e
  const AxisFrequencies ai = ggml_frequencies(p);
  const std::vector<int> wi = {0, 1, 2, 0, 1, 2, 3, 1, 2, 3, 0, 1};  // sect_dims 10: pair 10 wraps to sector 0
  ASSERT_EQ(ai.axis_of_freq.size(), wi.size());
  for (std::size_t j = 0; j < wi.size(); ++j) EXPECT_EQ(ai.axis_of_freq[j], wi[j]) << j;
}

// ggml VISION with clip's sections {D/4 x4} is the Qwen2-VL ViT convention (rotary::VisionConvention).
TEST(Ggml, VisionModeEqualsVisionConvention) {
  for (int64_t D : {16, 64, 80}) {
    GgmlRopeParams p;
    p.mode = GgmlRopeMode::kVision;
    p.n_dims = D / 2;
    p.sections = {D / 4, D / 4, D / 4, D / 4};
    const AxisFrequencies g = ggml_frequencies(p);
    VisionSpec vs;
    vs.convention = VisionConvention::kGgmlVision;
    vs.head_dim = D;
    const AxisFrequencies v = vision_frequencies(vs);
    ASSERT_EQ(g.freqs.inv_freq.size(), v.freqs.inv_freq.size());
    for (std::size_t j = 0; j < g.freqs.inv_freq.size(); ++j) {
      EXPECT_DOUBLE_EQ(g.freqs.inv_freq[j], v.freqs.inv_freq[j]) << j;
      EXPECT_EQ(g.axis_of_freq[j], v.axis_of_freq[j]) << j;
    }
    EXPECT_EQ(g.pairing, v.pairing);
  }
}

TEST(Ggml, YarnCorrDimsMatchGgml) {
  GgmlCall c;
  c.n_dims = 128; c.freq_base = 1e6f; c.n_ctx_orig = 32768; c.beta_fast = 32; c.beta_slow = 1;
  float g[2];
  g_corr_dims(c, g);
  const auto r = ggml_yarn_corr_dims(128, 32768, 1e6, 32, 1);
  EXPECT_EQ(r[0], g[0]);
  EXPECT_EQ(r[1], g[1]);
  EXPECT_GT(r[1], r[0]);
}

// n_ctx_orig 0 (ggml's own tests): corr dims [0, -inf], so ggml's ramp (i0/2 - 0) / max(0.001, -inf) is 0 for
// pair 0 (mixed by ext_factor) and >= 1000 for the rest (interpolated); the magnitude keeps 1 + 0.1 ln(1/fs).
TEST(Ggml, DegenerateYarnWithoutContextIsGgmlsFormula) {
  const auto dims = ggml_yarn_corr_dims(64, 0, 10000.0, 1.0, 1.0);
  EXPECT_EQ(dims[0], 0.0);
  EXPECT_TRUE(std::isinf(dims[1]) && dims[1] < 0);
  GgmlRopeParams p;
  p.mode = GgmlRopeMode::kNeox;
  p.n_dims = 64;
  p.n_ctx_orig = 0;
  p.freq_scale = 1.4245;
  p.ext_factor = 0.7465;
  p.attn_factor = 1.4245;
  p.beta_fast = 1;
  p.beta_slow = 1;
  const AxisFrequencies f = ggml_frequencies(p);
  ASSERT_EQ(f.freqs.inv_freq.size(), 32u);
  for (std::size_t j = 0; j < 32; ++j) {
    const double theta = std::pow(10000.0, -2.0 * static_cast<double>(j) / 64.0);
    const double mix = j == 0 ? 0.7465 : 0.0;
    EXPECT_NEAR(f.freqs.inv_freq[j], theta * (1.4245 * (1 - mix) + mix), 1e-15 * theta) << j;
  }
  EXPECT_NEAR(f.freqs.attention_factor, 1.4245 * (1 + 0.1 * std::log(1 / 1.4245)), 1e-15);
}

TEST(Ggml, RejectsBadParameters) {
  auto expect_error = [](GgmlRopeParams p, const std::string& needle) {
    try {
      (void)ggml_frequencies(p);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  GgmlRopeParams ok;
  ok.mode = GgmlRopeMode::kNeox;
  ok.n_dims = 64;
  GgmlRopeParams p = ok; p.n_dims = 63; expect_error(p, "n_dims must be even");
  p = ok; p.mode = static_cast<GgmlRopeMode>(3); expect_error(p, "mode must be");
  p = ok; p.freq_scale = 0; expect_error(p, "freq_scale");
  p = ok; p.ext_factor = 1; p.n_ctx_orig = -1; expect_error(p, "n_ctx_orig must be >= 0");
  p = ok; p.ext_factor = 1; p.beta_fast = 0; expect_error(p, "beta_fast must be finite and > 0");
  p = ok; p.sections = {1, 0, 0, 0}; expect_error(p, "sections are only used");
  p = ok; p.mode = GgmlRopeMode::kMrope; expect_error(p, "must not all be 0");
  p = ok; p.mode = GgmlRopeMode::kMrope; p.sections = {40000, 40000, 0, 0}; expect_error(p, "sum(sections) must be <= 65536");
  p = ok; p.mode = GgmlRopeMode::kMrope; p.sections = {-1, 8, 8, 0}; expect_error(p, "sections[0] must be >= 0");
  p = ok; p.freq_factors = {1.0, 2.0}; expect_error(p, "freq_factors must have at least 32");
  p = ok; p.freq_base = 0; expect_error(p, "freq_base must be finite and > 0");
  // base 1: every theta is 1, as ggml computes it; only YaRN's correction dims (ln(base)) cannot take it
  p = ok; p.freq_base = 1; p.ext_factor = 1; p.n_ctx_orig = 4096; expect_error(p, "freq_base must be != 1 when ext_factor != 0");
  p = ok; p.freq_base = 1;
  for (double theta : ggml_frequencies(p).freqs.inv_freq) EXPECT_EQ(theta, 1.0);
  EXPECT_EQ(parse_ggml_rope_mode("imrope"), GgmlRopeMode::kImrope);
  EXPECT_EQ(parse_ggml_rope_mode("24"), GgmlRopeMode::kVision);
  EXPECT_THROW(parse_ggml_rope_mode("yarn"), Error);
}

}  // namespace
}  // namespace rotary
