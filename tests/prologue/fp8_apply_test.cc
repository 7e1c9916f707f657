// fp8 e4m3/e5m2 outputs of rotary::apply (issue 20.6): the cache writer's rounding of the f32 result, checked against fp64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "prologue/prologue_testing.h"
#include "rotary/rotary_c.h"

namespace rotary {
namespace {

using testing::Buf;

constexpr int64_t T = 6, Hq = 4, Hk = 2, D = 64;

Spec spec_of(Pairing p) {
  Spec s;
  s.head_dim = D;
  s.rotary_dim = D;
  s.base = 10000.0;
  s.pairing = p;
  return s;
}

/// Every code of `out` against the fp64 rotation of `in` at positions 40 + t: within one fp8 rounding of
/// the truth / scale, and bit-exact to f32_to_fp8(fl32(y32 / scale)) of rotary's own f32 result y32.
void check_fp8(const Buf& in, const Buf& out, const Buf& f32_result, int64_t heads, Pairing p, float scale) {
  const Frequencies f = compute_frequencies(spec_of(p).normalized());
  std::vector<double> c, s;
  for (int64_t t = 0; t < T; ++t) {
    testing::truth_cos_sin(f, 40.0 + static_cast<double>(t), &c, &s);
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> x(D);
      for (int64_t d = 0; d < D; ++d) x[static_cast<size_t>(d)] = in.at((t * heads + h) * D + d);
      const auto y = testing::truth_row(x, {}, 0.0, p, c, s);
      for (int64_t d = 0; d < D; ++d) {
        const int64_t i = (t * heads + h) * D + d;
        const uint8_t got = out.bytes[static_cast<size_t>(i)];
        const double want = y[static_cast<size_t>(d)];
        ASSERT_NEAR(testing::cache_value(out, i, scale), want,
                    testing::stored_tol(out.dtype, std::fabs(want), 4.0, scale)) << "t" << t << " h" << h << " d" << d;
        ASSERT_EQ(got, detail::quantize_fp8(static_cast<float>(f32_result.at(i)), scale, out.dtype)) << i;
      }
    }
  }
}

TEST(Fp8Apply, QAndKOutputsAreTheRoundedF32ResultOnEveryEntryPointDtypeAndPairing) {
  int checked = 0;
  for (DType in_dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (DType out_dt : {DType::kF8E4M3, DType::kF8E5M2})
      for (Pairing p : {Pairing::kHalfSplit, Pairing::kInterleaved})
        for (int entry = 0; entry < 2; ++entry) {
          Buf q(in_dt, T * Hq * D, 1), k(in_dt, T * Hk * D, 2);
          Buf qo(out_dt, T * Hq * D), ko(out_dt, T * Hk * D);
          Buf q32(DType::kF32, T * Hq * D), k32(DType::kF32, T * Hk * D);  // rotary's own f32 result
          for (int64_t i = 0; i < q.size(); ++i) detail::store_from_double(q32.data(), DType::kF32, i, q.at(i));
          for (int64_t i = 0; i < k.size(); ++i) detail::store_from_double(k32.data(), DType::kF32, i, k.at(i));
          const Buf q_before = q, k_before = k;
          Rope rope(spec_of(p));
          CosSinTable table(compute_frequencies(spec_of(p).normalized()));
          auto run = [&](ApplyArgs& a) { entry == 0 ? rope.apply(a) : apply_table(table, a); };
          ApplyArgs a;
          a.layout = Layout::kTHD;
          a.positions = Positions::contiguous(40);
          a.pairing = p;
          a.q = q.view({T, Hq, D});
          a.k = k.view({T, Hk, D});
          a.q_out = qo.view({T, Hq, D});
          a.k_out = ko.view({T, Hk, D});
          a.q_out_scale = 0.01f;
          a.k_out_scale = 0.02f;
          run(a);
          ApplyArgs r = a;  // the f32 result by an ordinary in-place call
          r.q = q32.view({T, Hq, D});
          r.k = k32.view({T, Hk, D});
          r.q_out = r.k_out = TensorView{};
          run(r);
          EXPECT_EQ(q.bytes, q_before.bytes);  // inputs only read
          EXPECT_EQ(k.bytes, k_before.bytes);
          check_fp8(q_before, qo, q32, Hq, p, 0.01f);
          check_fp8(k_before, ko, k32, Hk, p, 0.02f);
          ++checked;
        }
  EXPECT_EQ(checked, 24);
}

TEST(Fp8Apply, SaturatesBeyondTheLargestFiniteValueAndAnFp8QWithAnF32K) {
  for (DType out_dt : {DType::kF8E4M3, DType::kF8E5M2}) {
    std::vector<float> q(T * Hq * D, 3.0e4f), k(T * Hk * D, 0.5f), k_ref(T * Hk * D, 0.5f);
    Buf qo(out_dt, T * Hq * D);
    ApplyArgs a;
    a.layout = Layout::kTHD;
    a.q = TensorView::contiguous(q.data(), DType::kF32, {T, Hq, D});
    a.k = TensorView::contiguous(k.data(), DType::kF32, {T, Hk, D});  // k in place, f32
    a.q_out = qo.view({T, Hq, D});
    a.q_out_scale = 0.5f;  // 3e4 * sqrt(2) / 0.5 is far beyond both formats' largest finite value
    a.positions = Positions::contiguous(3);
    Rope rope(spec_of(Pairing::kHalfSplit));
    rope.apply(a);
    const double mx = detail::fp8_max(out_dt);
    int64_t saturated = 0;
    for (int64_t i = 0; i < qo.size(); ++i) {
      const double v = detail::fp8_to_f32(qo.bytes[static_cast<size_t>(i)], out_dt);
      ASSERT_TRUE(std::isfinite(v)) << i;
      ASSERT_LE(std::fabs(v), mx);
      saturated += std::fabs(v) == mx;
    }
    EXPECT_GT(saturated, qo.size() / 2);
    ApplyArgs r;
    r.layout = Layout::kTHD;
    r.q = TensorView::contiguous(k_ref.data(), DType::kF32, {T, Hk, D});
    r.positions = Positions::contiguous(3);
    rope.apply(r);
    EXPECT_EQ(k, k_ref);  // the f32 k went through the ordinary path
  }
}

TEST(Fp8Apply, BadScalesShapesAndOverlapsFailNamingTheArgumentAndWriteNothing) {
  std::vector<float> q(T * Hq * D, 0.25f);
  Rope rope(spec_of(Pairing::kHalfSplit));
  struct Case {
    const char* what;
    std::function<void(ApplyArgs&, Buf&)> edit;
  };
  const std::vector<Case> cases = {
      {"q_out_scale must be finite and > 0", [](ApplyArgs& a, Buf&) { a.q_out_scale = 0.0f; }},
      {"q_out_scale must be finite and > 0", [](ApplyArgs& a, Buf&) { a.q_out_scale = NAN; }},
      {"q_out shape must equal q shape", [](ApplyArgs& a, Buf& o) { a.q_out = o.view({T, Hq - 1, D}); }},
      {"positions", [](ApplyArgs& a, Buf&) { a.positions = Positions::contiguous(-5); }},
  };
  for (const Case& c : cases) {
    Buf qo(DType::kF8E4M3, T * Hq * D);
    for (auto& b : qo.bytes) b = 0x5A;
    ApplyArgs a;
    a.layout = Layout::kTHD;
    a.q = TensorView::contiguous(q.data(), DType::kF32, {T, Hq, D});
    a.q_out = qo.view({T, Hq, D});
    a.q_out_scale = 1.0f;
    a.positions = Positions::contiguous(0);
    c.edit(a, qo);
    try {
      rope.apply(a);
      ADD_FAILURE() << "no error for " << c.what;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[rotary_apply] ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.what), std::string::npos) << e.what();
    }
    for (auto b : qo.bytes) ASSERT_EQ(b, 0x5A) << c.what;
  }
  // an fp8 output must not alias its input's memory
  std::vector<float> big(T * Hq * D, 0.5f);
  ApplyArgs a;
  a.layout = Layout::kTHD;
  a.q = TensorView::contiguous(big.data(), DType::kF32, {T, Hq, D});
  a.q_out = TensorView::contiguous(big.data(), DType::kF8E4M3, {T, Hq, D});
  try {
    rope.apply(a);
    ADD_FAILURE() << "aliasing fp8 output accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q_out (fp8) must not overlap q"), std::string::npos) << e.what();
  }
  EXPECT_EQ(big, std::vector<float>(T * Hq * D, 0.5f));
}

TEST(Fp8Apply, TheCApiTakesTheScalesAndAcceptsOlderStructSizes) {
  rotary_spec_t* spec = nullptr;
  rotary_rope_t* rope = nullptr;
  ASSERT_EQ(rotary_spec_from_preset("llama-3.1-8b", &spec), ROTARY_OK);
  ASSERT_EQ(rotary_rope_create(spec, nullptr, &rope), ROTARY_OK);
  rotary_apply_args_t a;
  rotary_apply_args_init(&a);
  EXPECT_EQ(a.q_out_scale, 1.0f);
  EXPECT_EQ(a.k_out_scale, 1.0f);
  int64_t shape[3] = {T, Hq, 128};
  std::vector<float> q128(T * Hq * 128, 0.25f);
  std::vector<uint8_t> qo128(T * Hq * 128, 0);
  rotary_tensor_contiguous(&a.q, q128.data(), ROTARY_DTYPE_F32, 3, shape);
  rotary_tensor_contiguous(&a.q_out, qo128.data(), ROTARY_DTYPE_F8E5M2, 3, shape);
  a.layout = ROTARY_LAYOUT_THD;
  a.q_out_scale = 0.125f;
  ASSERT_EQ(rotary_rope_apply(rope, &a), ROTARY_OK) << rotary_last_error();
  // position 0: cos 1, sin 0, so every value is 0.25 / 0.125 = 2 exactly (e5m2 code 0x40)
  for (int64_t i = 0; i < Hq * 128; ++i) ASSERT_EQ(qo128[static_cast<size_t>(i)], 0x40) << i;
  a.q_out_scale = -1.0f;
  EXPECT_EQ(rotary_rope_apply(rope, &a), ROTARY_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(rotary_last_error()).find("q_out_scale must be finite and > 0"), std::string::npos);
  a.struct_size = offsetof(rotary_apply_args_t, q_out_scale);  // a caller built before the scales: scale 1
  std::fill(qo128.begin(), qo128.end(), 0);
  ASSERT_EQ(rotary_rope_apply(rope, &a), ROTARY_OK) << rotary_last_error();
  EXPECT_EQ(qo128[0], detail::f32_to_fp8(0.25f, DType::kF8E5M2));
  rotary_rope_free(rope);
  rotary_spec_free(spec);
}

}  // namespace
}  // namespace rotary
