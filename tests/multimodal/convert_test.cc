// Checkpoint layout conversion: q/k weight permutation round trip, HF's permute, and attention-logit invariance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "multimodal/mm_testing.h"
#include "rotary/apply.h"
#include "rotary/convert_weights.h"
#include "rotary/freqs.h"

namespace rotary {
namespace {

/// HF convert_llama_weights_to_hf.py's permute, emulated index by index on a row-major [n*D, in] matrix:
///   w.view(n_heads, D/2, 2, in).transpose(1, 2).reshape(n*D, in)
/// result[h, c, i, :] = w[h, i, c, :]  ->  row h*D + c*(D/2) + i  <-  row h*D + 2i + c.
std::vector<double> hf_permute(const std::vector<double>& w, int64_t n_heads, int64_t D, int64_t in) {
  std::vector<double> out(w.size());
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t i = 0; i < D / 2; ++i)
        for (int64_t k = 0; k < in; ++k)
          out[((h * 2 + c) * (D / 2) + i) * in + k] = w[((h * (D / 2) + i) * 2 + c) * in + k];
  return out;
}

TEST(Convert, MatchesHfPermuteForFullRotary) {
  const int64_t n = 4, D = 8, in = 5;
  const std::vector<double> w = testing::randn_f64(static_cast<std::size_t>(n * D * in), 1);
  std::vector<double> out(w.size());
  QkPermutation p{n, D, 0, Pairing::kInterleaved, Pairing::kHalfSplit};
  permute_qk_weight(TensorView::contiguous(w.data(), DType::kF64, {n * D, in}),
                    TensorView::contiguous(out.data(), DType::kF64, {n * D, in}), p);
  EXPECT_EQ(out, hf_permute(w, n, D, in));
}

TEST(Convert, RoundTripIsIdentityForEveryDtypeAndShape) {
  struct Case { int64_t n, D, R, in; };
  for (const Case c : {Case{4, 8, 0, 6}, Case{2, 16, 8, 3}, Case{8, 64, 64, 1}, Case{3, 10, 4, 7}}) {
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
      for (bool bias : {false, true}) {
        const int64_t rows = c.n * c.D, cols = bias ? 1 : c.in;
        const std::size_t bytes = static_cast<std::size_t>(rows * cols) * dtype_size(dt);
        std::vector<unsigned char> src(bytes), mid(bytes), back(bytes);
        for (std::size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>((i * 131 + 7) % 251);
        auto view = [&](std::vector<unsigned char>& v) {
          return bias ? TensorView::contiguous(v.data(), dt, {rows}) : TensorView::contiguous(v.data(), dt, {rows, cols});
        };
        QkPermutation fwd{c.n, c.D, c.R, Pairing::kInterleaved, Pairing::kHalfSplit};
        QkPermutation inv{c.n, c.D, c.R, Pairing::kHalfSplit, Pairing::kInterleaved};
        permute_qk_weight(view(src), view(mid), fwd);
        permute_qk_weight(view(mid), view(back), inv);
        EXPECT_EQ(src, back) << dtype_name(dt) << " n=" << c.n << " D=" << c.D << " R=" << c.R;
        if (c.D > 2) EXPECT_NE(src, mid);
        // In place gives the same bytes as out of place.
        std::vector<unsigned char> inplace = src;
        permute_qk_weight(view(inplace), view(inplace), fwd);
        EXPECT_EQ(inplace, mid);
      }
    }
  }
}

TEST(Convert, PartialRotaryMovesOnlyTheRotaryRowsOfEachHead) {
  const int64_t n = 3, D = 10, R = 4;
  const auto perm = qk_row_permutation({n, D, R, Pairing::kInterleaved, Pairing::kHalfSplit});
  for (int64_t h = 0; h < n; ++h) {
    // rotary rows [x0 y0 x1 y1] -> [x0 x1 y0 y1]
    EXPECT_EQ(perm[h * D + 0], h * D + 0);
    EXPECT_EQ(perm[h * D + 1], h * D + 2);
    EXPECT_EQ(perm[h * D + 2], h * D + 1);
    EXPECT_EQ(perm[h * D + 3], h * D + 3);
    for (int64_t d = R; d < D; ++d) EXPECT_EQ(perm[h * D + d], h * D + d);
  }
}

/// q·k logits: x -> q = Wq x, k = Wk x (per head), rotated at positions m (q) and n (k).
/// Running the interleaved model, or the converted (half-split) model, must give the same logits.
TEST(Convert, AttentionLogitsInvariantUnderConversion) {
  struct Case { int64_t hq, hk, D, R; };
  for (const Case c : {Case{4, 4, 16, 0}, Case{8, 2, 16, 0}, Case{4, 2, 12, 8}}) {
    const int64_t R = c.R == 0 ? c.D : c.R;
    const int64_t in = 24, S = 6;
    SCOPED_TRACE("hq " + std::to_string(c.hq) + " hk " + std::to_string(c.hk) + " R " + std::to_string(R));
    const auto x = testing::randn(static_cast<std::size_t>(S * in), 11);
    const auto wq = testing::randn(static_cast<std::size_t>(c.hq * c.D * in), 12);
    const auto wk = testing::randn(static_cast<std::size_t>(c.hk * c.D * in), 13);
    const auto bq = testing::randn(static_cast<std::size_t>(c.hq * c.D), 14);
    const auto bk = testing::randn(static_cast<std::size_t>(c.hk * c.D), 15);

    auto project = [&](const std::vector<float>& w, const std::vector<float>& b, int64_t heads) {
      std::vector<float> y(static_cast<std::size_t>(S * heads * c.D));  // [S, heads, D] = bshd with B = 1
      for (int64_t s = 0; s < S; ++s)
        for (int64_t r = 0; r < heads * c.D; ++r) {
          double acc = b[r];
          for (int64_t k = 0; k < in; ++k) acc += double(w[r * in + k]) * x[s * in + k];
          y[s * heads * c.D + r] = static_cast<float>(acc);
        }
      return y;
    };
    auto permuted = [&](const std::vector<float>& w, int64_t heads, int64_t cols) {
      std::vector<float> out(w.size());
      QkPermutation p{heads, c.D, c.R, Pairing::kInterleaved, Pairing::kHalfSplit};
      if (cols == 1)
        permute_qk_weight(TensorView::contiguous(w.data(), DType::kF32, {heads * c.D}),
                          TensorView::contiguous(out.data(), DType::kF32, {heads * c.D}), p);
      else
        permute_qk_weight(TensorView::contiguous(w.data(), DType::kF32, {heads * c.D, cols}),
                          TensorView::contiguous(out.data(), DType::kF32, {heads * c.D, cols}), p);
      return out;
    };
    const Frequencies f = [&] {
      Frequencies fr;
      fr.inv_freq = default_inv_freq(10000.0, R);
      return fr;
    }();
    // Positions 0..S-1 plus a large offset so that high rotations are exercised.
    auto logits = [&](std::vector<float> q, std::vector<float> k, Pairing pairing) {
      ApplyArgs a;
      a.q = TensorView::contiguous(q.data(), DType::kF32, {1, S, c.hq, c.D});
      a.k = TensorView::contiguous(k.data(), DType::kF32, {1, S, c.hk, c.D});
      a.positions = Positions::contiguous(1000);
      a.pairing = pairing;
      a.backend = Backend::kReference;
      apply_frequencies(f, a);
      std::vector<double> out;
      const int64_t group = c.hq / c.hk;
      for (int64_t h = 0; h < c.hq; ++h)
        for (int64_t m = 0; m < S; ++m)
          for (int64_t n = 0; n < S; ++n) {
            double dot = 0;
            for (int64_t d = 0; d < c.D; ++d)
              dot += double(q[(m * c.hq + h) * c.D + d]) * double(k[(n * c.hk + h / group) * c.D + d]);
            out.push_back(dot);
          }
      return out;
    };
    const auto meta = logits(project(wq, bq, c.hq), project(wk, bk, c.hk), Pairing::kInterleaved);
    const auto hf = logits(project(permuted(wq, c.hq, in), permuted(bq, c.hq, 1), c.hq),
                           project(permuted(wk, c.hk, in), permuted(bk, c.hk, 1), c.hk), Pairing::kHalfSplit);
    ASSERT_EQ(meta.size(), hf.size());
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < meta.size(); ++i) {
      worst = std::max(worst, std::fabs(meta[i] - hf[i]));
      scale = std::max(scale, std::fabs(meta[i]));
    }
    // Same f32 values in permuted channel order: the only difference is the order of the dot
    // product's summation (D terms of |q||k| ~ in, f64 accumulation) -> f32-level agreement.
    EXPECT_LE(worst, 1e-9 * scale + 1e-9);
    // And without the conversion the logits really differ (the test can fail).
    const auto wrong = logits(project(wq, bq, c.hq), project(wk, bk, c.hk), Pairing::kHalfSplit);
    double diff = 0;
    for (std::size_t i = 0; i < meta.size(); ++i) diff = std::max(diff, std::fabs(meta[i] - wrong[i]));
    EXPECT_GT(diff, 1e-2 * scale);
  }
}

TEST(Convert, RejectsBadArguments) {
  std::vector<float> w(4 * 8 * 3), o(4 * 8 * 3);
  auto expect_error = [&](QkPermutation p, TensorView s, TensorView d, const std::string& needle) {
    try {
      permute_qk_weight(s, d, p);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const TensorView s = TensorView::contiguous(w.data(), DType::kF32, {32, 3});
  const TensorView d = TensorView::contiguous(o.data(), DType::kF32, {32, 3});
  expect_error({4, 8, 7}, s, d, "rotary_dim must be even");
  expect_error({4, 8, 10}, s, d, "rotary_dim must be <= head_dim 8");
  expect_error({3, 8, 0}, s, d, "src.shape[0] must be n_heads*head_dim = 3*8 = 24, got 32");
  expect_error({4, 8, 0}, s, TensorView::contiguous(o.data(), DType::kF16, {32, 3}), "dst must have the rank and dtype");
  expect_error({4, 8, 0}, s, TensorView::contiguous(w.data() + 1, DType::kF32, {32, 3}), "overlaps src");
  expect_error({0, 8, 0}, s, d, "n_heads must be > 0");
}

}  // namespace
}  // namespace rotary
