// C API of the multimodal variants: vision/ggml/spec axis frequencies, apply_axes, CP positions, q/k permutation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "rotary/rotary.h"
#include "rotary/rotary_c.h"

namespace {

TEST(MultimodalCApi, AxisFrequenciesMatchTheCppApi) {
  rotary_axis_freqs_t* f = nullptr;
  ASSERT_EQ(rotary_vision_frequencies(ROTARY_VISION_PIXTRAL, 32, 10000.0, ROTARY_PAIRING_DEFAULT, &f), ROTARY_OK);
  int64_t pairs = 0;
  int32_t n_axes = 0;
  rotary_pairing_t pairing = -5;
  double af = 0;
  ASSERT_EQ(rotary_axis_freqs_describe(f, &pairs, &n_axes, &pairing, &af), ROTARY_OK);
  EXPECT_EQ(pairs, 16);
  EXPECT_EQ(n_axes, 2);
  EXPECT_EQ(pairing, ROTARY_PAIRING_HALF);
  EXPECT_EQ(af, 1.0);
  std::vector<double> inv(16);
  std::vector<uint8_t> axis(16);
  ASSERT_EQ(rotary_axis_freqs_get(f, inv.data(), axis.data(), 16), ROTARY_OK);
  const auto cpp = rotary::vision_frequencies({rotary::VisionConvention::kPixtral, 32, 10000.0, std::nullopt});
  EXPECT_EQ(inv, cpp.freqs.inv_freq);
  EXPECT_EQ(axis, cpp.axis_of_freq);
  rotary_axis_freqs_free(f);

  rotary_ggml_params_t p;
  rotary_ggml_params_init(&p);
  p.mode = ROTARY_GGML_IMROPE;
  p.n_dims = 64;
  p.sections[0] = 12;
  p.sections[1] = 10;
  p.sections[2] = 10;
  ASSERT_EQ(rotary_ggml_frequencies(&p, &f), ROTARY_OK) << rotary_last_error();
  ASSERT_EQ(rotary_axis_freqs_describe(f, &pairs, &n_axes, nullptr, nullptr), ROTARY_OK);
  EXPECT_EQ(pairs, 32);
  EXPECT_EQ(n_axes, 4);
  rotary_axis_freqs_free(f);
  p.mode = 7;
  EXPECT_EQ(rotary_ggml_frequencies(&p, &f), ROTARY_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(rotary_last_error()).find("mode must be"), std::string::npos);
  p.struct_size = 3;
  EXPECT_EQ(rotary_ggml_frequencies(&p, &f), ROTARY_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(rotary_last_error()).find("struct_size"), std::string::npos);
}

// ggml's own test suite calls ggml_rope_ext with YaRN on and n_ctx_orig 0 (corr dims [0, -inf]): the C adapter
// accepts it and gives ggml's formula (pair 0 mixed by ext_factor, the others interpolated; docs/multimodal.md);
// a negative n_ctx_orig (NaN in ggml) stays an error.
TEST(MultimodalCApi, GgmlDegenerateYarnWithoutContext) {
  rotary_ggml_params_t p;
  rotary_ggml_params_init(&p);
  p.mode = ROTARY_GGML_NEOX;
  p.n_dims = 64;
  p.n_ctx_orig = 0;
  p.freq_scale = 1.4245;
  p.ext_factor = 0.7465;
  p.attn_factor = 1.4245;
  p.beta_fast = 1;
  p.beta_slow = 1;
  rotary_axis_freqs_t* f = nullptr;
  ASSERT_EQ(rotary_ggml_frequencies(&p, &f), ROTARY_OK) << rotary_last_error();
  int64_t pairs = 0;
  double af = 0;
  ASSERT_EQ(rotary_axis_freqs_describe(f, &pairs, nullptr, nullptr, &af), ROTARY_OK);
  ASSERT_EQ(pairs, 32);
  std::vector<double> inv(32);
  ASSERT_EQ(rotary_axis_freqs_get(f, inv.data(), nullptr, 32), ROTARY_OK);
  rotary_axis_freqs_free(f);
  for (int j = 0; j < 32; ++j) {
    const double theta = std::pow(10000.0, -2.0 * j / 64.0);
    const double mix = j == 0 ? 0.7465 : 0.0;
    EXPECT_NEAR(inv[j], theta * (1.4245 * (1 - mix) + mix), 1e-15 * theta) << j;
  }
  EXPECT_NEAR(af, 1.4245 * (1 + 0.1 * std::log(1 / 1.4245)), 1e-15);
  p.n_ctx_orig = -1;
  EXPECT_EQ(rotary_ggml_frequencies(&p, &f), ROTARY_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(rotary_last_error()).find("n_ctx_orig must be >= 0"), std::string::npos) << rotary_last_error();
}

TEST(MultimodalCApi, ApplyAxesWithSpecMropeEqualsRopeApply) {
  rotary_spec_desc_t d;
  rotary_spec_desc_init(&d);
  d.head_dim = 16;
  const int64_t sec[3] = {2, 3, 3};
  d.mrope_section = sec;
  d.mrope_section_len = 3;
  rotary_spec_t* spec = nullptr;
  ASSERT_EQ(rotary_spec_create(&d, &spec), ROTARY_OK) << rotary_last_error();
  rotary_axis_freqs_t* f = nullptr;
  ASSERT_EQ(rotary_spec_axis_frequencies(spec, -1, &f), ROTARY_OK) << rotary_last_error();
  rotary_rope_options_t o;
  rotary_rope_options_init(&o);
  o.mode = ROTARY_COS_SIN_ON_THE_FLY;
  rotary_rope_t* rope = nullptr;
  ASSERT_EQ(rotary_rope_create(spec, &o, &rope), ROTARY_OK);
  const int64_t T = 5, H = 2, D = 16;
  std::vector<float> a(T * H * D), b;
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37f * static_cast<float>(i));
  b = a;
  std::vector<int64_t> ids = {0, 1, 2, 3, 4, 0, 0, 1, 1, 9, 0, 1, 0, 1, 70};
  rotary_apply_args_t args;
  rotary_apply_args_init(&args);
  args.layout = ROTARY_LAYOUT_THD;
  const int64_t qs[3] = {T, H, D}, ps[2] = {3, T};
  ASSERT_EQ(rotary_tensor_contiguous(&args.positions.ids, ids.data(), ROTARY_DTYPE_I64, 2, ps), ROTARY_OK);
  args.positions.kind = ROTARY_POSITIONS_IDS;
  ASSERT_EQ(rotary_tensor_contiguous(&args.q, a.data(), ROTARY_DTYPE_F32, 3, qs), ROTARY_OK);
  ASSERT_EQ(rotary_rope_apply(rope, &args), ROTARY_OK) << rotary_last_error();
  ASSERT_EQ(rotary_tensor_contiguous(&args.q, b.data(), ROTARY_DTYPE_F32, 3, qs), ROTARY_OK);
  ASSERT_EQ(rotary_apply_axes(f, &args), ROTARY_OK) << rotary_last_error();
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  EXPECT_EQ(rotary_apply_axes(nullptr, &args), ROTARY_ERROR_INVALID_ARGUMENT);
  rotary_rope_free(rope);
  rotary_axis_freqs_free(f);
  rotary_spec_free(spec);
}

TEST(MultimodalCApi, ContextParallelPositionsAndWeightPermutation) {
  int64_t pos[4];
  ASSERT_EQ(rotary_cp_positions(0, 2, 4, 0, pos), ROTARY_OK);
  EXPECT_EQ(std::vector<int64_t>(pos, pos + 4), (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(rotary_cp_positions(2, 2, 4, 0, pos), ROTARY_ERROR_INVALID_ARGUMENT);
  const int64_t cu[3] = {0, 8, 12};
  int64_t packed[8], count = 0;
  ASSERT_EQ(rotary_cp_positions_packed(1, 2, cu, 3, packed, 8, &count), ROTARY_OK) << rotary_last_error();
  EXPECT_EQ(count, 6);
  EXPECT_EQ(std::vector<int64_t>(packed, packed + 6), (std::vector<int64_t>{2, 3, 4, 5, 1, 2}));

  std::vector<float> w(2 * 4 * 3), w2(w.size()), back(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  rotary_tensor_t s, dd, bb;
  const int64_t shape[2] = {8, 3};
  rotary_tensor_contiguous(&s, w.data(), ROTARY_DTYPE_F32, 2, shape);
  rotary_tensor_contiguous(&dd, w2.data(), ROTARY_DTYPE_F32, 2, shape);
  rotary_tensor_contiguous(&bb, back.data(), ROTARY_DTYPE_F32, 2, shape);
  ASSERT_EQ(rotary_permute_qk_weight(&s, &dd, 2, 4, 0, ROTARY_PAIRING_INTERLEAVED, ROTARY_PAIRING_HALF), ROTARY_OK);
  // head 0 rows [r0 r1 r2 r3] -> [r0 r2 r1 r3]
  EXPECT_EQ(w2[3], w[6]);
  EXPECT_EQ(w2[6], w[3]);
  ASSERT_EQ(rotary_permute_qk_weight(&dd, &bb, 2, 4, 0, ROTARY_PAIRING_HALF, ROTARY_PAIRING_INTERLEAVED), ROTARY_OK);
  EXPECT_EQ(back, w);
  EXPECT_EQ(rotary_permute_qk_weight(&s, &dd, 3, 4, 0, ROTARY_PAIRING_INTERLEAVED, ROTARY_PAIRING_HALF),
            ROTARY_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(rotary_last_error()).find("n_heads*head_dim"), std::string::npos);
  EXPECT_EQ(rotary_permute_qk_weight(&s, &dd, 2, 4, 0, 5, ROTARY_PAIRING_HALF), ROTARY_ERROR_INVALID_ARGUMENT);
}

}  // namespace
