// The seed's claims as properties, layout equivalence (bshd/bhsd/thd/fused QKV), GQA decode and packed batches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/test_tensors.h"
#include "rotary/rotary.h"
#include "testing/tolerances.h"

namespace rotary {
namespace {

using enginetest::TestTensor;

Frequencies default_freqs(int64_t R, long double base = 10000.0L) {
  return enginetest::to_frequencies(enginetest::truth_theta(base, R));
}

/// Rotates a single f64 head vector (B=S=H=1) at integer position `pos` (reference backend).
std::vector<double> rotate(const std::vector<double>& x, int64_t pos, const Frequencies& f,
                           Pairing pairing = Pairing::kHalfSplit, Direction dir = Direction::kForward) {
  std::vector<double> in = x, out(x.size());
  const int64_t D = static_cast<int64_t>(x.size());
  ApplyArgs a;
  a.q = TensorView::contiguous(in.data(), DType::kF64, {1, 1, 1, D});
  a.q_out = TensorView::contiguous(out.data(), DType::kF64, {1, 1, 1, D});
  a.positions = Positions::contiguous(pos);
  a.pairing = pairing;
  a.direction = dir;
  a.backend = Backend::kReference;
  apply_frequencies(f, a);
  return out;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  long double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<long double>(a[i]) * b[i];
  return static_cast<double>(s);
}

TEST(Properties, DotProductDependsOnlyOnRelativePosition) {
  const int64_t D = 128;
  const Frequencies f = default_freqs(D);
  const auto q = testing::randn_f64(D, 1), k = testing::randn_f64(D, 2);
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{{5, 3}, {1000, 400}, {70000, 69999}, {123456, 0}}) {
    const double lhs = dot(rotate(q, m, f), rotate(k, n, f));
    const double rhs = dot(rotate(q, m - n, f), k);
    // cos/sin are f32 (relative 2^-24 each): the dot of two N(0,1) 128-vectors moves by < 1e-5.
    EXPECT_NEAR(lhs, rhs, 1e-5) << "m=" << m << " n=" << n;
  }
  // And it does depend on the relative position (the property is not vacuous).
  EXPECT_GT(std::fabs(dot(rotate(q, 10, f), k) - dot(rotate(q, 11, f), k)), 1e-3);
}

TEST(Properties, NormsPreserved) {
  const int64_t D = 96;
  const Frequencies f = default_freqs(64);  // partial rotary: 32 channels pass through
  const auto x = testing::randn_f64(D, 3);
  for (int64_t pos : {0, 1, 17, 4096, 1000000}) {
    const auto y = rotate(x, pos, f, Pairing::kInterleaved);
    EXPECT_NEAR(std::sqrt(dot(y, y)), std::sqrt(dot(x, x)), 1e-6 * std::sqrt(dot(x, x))) << "pos " << pos;
  }
}

TEST(Properties, InverseUndoesForward) {
  const int64_t D = 128;
  const Frequencies f = default_freqs(D, 500000.0L);
  // f64: cos^2 + sin^2 of the f32 values differs from 1 by <= ~1.2e-7.
  const auto x = testing::randn_f64(D, 4);
  for (Pairing p : {Pairing::kHalfSplit, Pairing::kInterleaved}) {
    const auto back = rotate(rotate(x, 31337, f, p), 31337, f, p, Direction::kInverse);
    for (int64_t d = 0; d < D; ++d) EXPECT_NEAR(back[d], x[d], 4e-7 * (1 + std::fabs(x[d])));
  }
  // f32, both backends, in place: recovers x within a few f32 ulps.
  for (Backend be : {Backend::kReference, Backend::kAuto}) {
    TestTensor t(DType::kF32, Layout::kBSHD, 2, 7, 4, D);
    t.fill_randn(5);
    const TestTensor orig = t;
    ApplyArgs a;
    a.q = t.view();
    a.positions = Positions::contiguous(900);
    a.backend = be;
    apply_frequencies(f, a);
    EXPECT_NE(t.bytes(), orig.bytes());
    a.direction = Direction::kInverse;
    apply_frequencies(f, a);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t s = 0; s < 7; ++s)
        for (int64_t h = 0; h < 4; ++h)
          for (int64_t d = 0; d < D; ++d) ASSERT_NEAR(t.get(b, s, h, d), orig.get(b, s, h, d), 2e-6);
  }
}

TEST(Properties, InterleavedEqualsHalfSplitUnderChannelPermutation) {
  const int64_t D = 80, R = 64, h = R / 2;
  const Frequencies f = default_freqs(R);
  const auto xh = testing::randn_f64(D, 6);
  std::vector<double> xi = xh;  // interleaved order: x_i[2j] = x_h[j], x_i[2j+1] = x_h[j+h]
  for (int64_t j = 0; j < h; ++j) {
    xi[2 * j] = xh[j];
    xi[2 * j + 1] = xh[j + h];
  }
  const auto yh = rotate(xh, 777, f, Pairing::kHalfSplit);
  const auto yi = rotate(xi, 777, f, Pairing::kInterleaved);
  for (int64_t j = 0; j < h; ++j) {
    EXPECT_EQ(yi[2 * j], yh[j]);
    EXPECT_EQ(yi[2 * j + 1], yh[j + h]);
  }
  for (int64_t d = R; d < D; ++d) EXPECT_EQ(yi[d], yh[d]);
}

// ------------------------------------------------------------------ layouts

TEST(Layouts, BshdBhsdThdAndFusedQkvAgreeBitwise) {
  const int64_t S = 9, Hq = 4, Hk = 2, D = 64;
  const Frequencies f = default_freqs(D);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (Backend be : {Backend::kReference, Backend::kAuto}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (be == Backend::kReference ? " reference" : " auto"));
      TestTensor qs(dt, Layout::kBSHD, 1, S, Hq, D), ks(dt, Layout::kBSHD, 1, S, Hk, D);
      TestTensor qh(dt, Layout::kBHSD, 1, S, Hq, D), kh(dt, Layout::kBHSD, 1, S, Hk, D);
      TestTensor qt(dt, Layout::kTHD, 1, S, Hq, D), kt(dt, Layout::kTHD, 1, S, Hk, D);
      qs.fill_randn(7);
      ks.fill_randn(8);
      // Fused QKV buffer [1, S, (Hq + 2 Hk) * D] with q, k, v slices.
      const int64_t W = (Hq + 2 * Hk) * D;
      std::vector<unsigned char> fused(static_cast<std::size_t>(S * W) * dtype_size(dt));
      const std::size_t es = dtype_size(dt);
      auto fused_at = [&](int64_t s, int64_t col) { return fused.data() + static_cast<std::size_t>(s * W + col) * es; };
      for (int64_t s = 0; s < S; ++s) {
        for (int64_t h = 0; h < Hq; ++h)
          for (int64_t d = 0; d < D; ++d) {
            qh.set(0, s, h, d, qs.get(0, s, h, d));
            qt.set(0, s, h, d, qs.get(0, s, h, d));
            std::memcpy(fused_at(s, h * D + d), qs.bytes().data() + qs.index(0, s, h, d) * es, es);
          }
        for (int64_t h = 0; h < Hk; ++h)
          for (int64_t d = 0; d < D; ++d) {
            kh.set(0, s, h, d, ks.get(0, s, h, d));
            kt.set(0, s, h, d, ks.get(0, s, h, d));
            std::memcpy(fused_at(s, (Hq + h) * D + d), ks.bytes().data() + ks.index(0, s, h, d) * es, es);
            std::memset(fused_at(s, (Hq + Hk + h) * D + d), 0x3C, es);  // v
          }
      }
      const std::vector<unsigned char> fused_before = fused;
      auto run = [&](TestTensor& q, TestTensor& k, Layout layout) {
        ApplyArgs a;
        a.q = q.view();
        a.k = k.view();
        a.layout = layout;
        a.positions = Positions::contiguous(40);
        a.backend = be;
        apply_frequencies(f, a);
      };
      run(qs, ks, Layout::kBSHD);
      run(qh, kh, Layout::kBHSD);
      run(qt, kt, Layout::kTHD);
      ApplyArgs a;  // fused QKV, in place, q and k in one call
      a.q = TensorView::strided(fused_at(0, 0), dt, {1, S, Hq, D}, {S * W, W, D, 1});
      a.k = TensorView::strided(fused_at(0, Hq * D), dt, {1, S, Hk, D}, {S * W, W, D, 1});
      a.positions = Positions::contiguous(40);
      a.backend = be;
      apply_frequencies(f, a);
      for (int64_t s = 0; s < S; ++s) {
        for (int64_t h = 0; h < Hq; ++h)
          for (int64_t d = 0; d < D; ++d) {
            ASSERT_EQ(qh.raw(0, s, h, d), qs.raw(0, s, h, d));
            ASSERT_EQ(qt.raw(0, s, h, d), qs.raw(0, s, h, d));
            ASSERT_EQ(std::memcmp(fused_at(s, h * D + d), qs.bytes().data() + qs.index(0, s, h, d) * es, es), 0);
          }
        for (int64_t h = 0; h < Hk; ++h)
          for (int64_t d = 0; d < D; ++d) {
            ASSERT_EQ(kh.raw(0, s, h, d), ks.raw(0, s, h, d));
            ASSERT_EQ(kt.raw(0, s, h, d), ks.raw(0, s, h, d));
            ASSERT_EQ(std::memcmp(fused_at(s, (Hq + h) * D + d), ks.bytes().data() + ks.index(0, s, h, d) * es, es), 0);
            ASSERT_EQ(std::memcmp(fused_at(s, (Hq + Hk + h) * D + d), fused_before.data() +
                                  (fused_at(s, (Hq + Hk + h) * D + d) - fused.data()), es), 0) << "v was written";
          }
      }
    }
  }
}

TEST(Layouts, InPlaceEqualsOutOfPlace) {
  const Frequencies f = default_freqs(64);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    TestTensor a(dt, Layout::kBHSD, 2, 5, 3, 96, 0), b(dt, Layout::kBHSD, 2, 5, 3, 96, 0), o(dt, Layout::kBHSD, 2, 5, 3, 96, 5);
    a.fill_randn(9);
    b.fill_randn(9);
    ApplyArgs x;
    x.layout = Layout::kBHSD;
    x.q = a.view();
    x.positions = Positions::contiguous(3);
    apply_frequencies(f, x);
    x.q = b.view();
    x.q_out = o.view();
    apply_frequencies(f, x);
    for (int64_t bb = 0; bb < 2; ++bb)
      for (int64_t s = 0; s < 5; ++s)
        for (int64_t h = 0; h < 3; ++h)
          for (int64_t d = 0; d < 96; ++d) ASSERT_EQ(a.raw(bb, s, h, d), o.raw(bb, s, h, d)) << dtype_name(dt);
  }
}

// ------------------------------------------------------------------ real-model shapes

TEST(Scenarios, GqaDecodeStepLlama3_8B) {
  // llama-3-8B decode: q 32 heads, k 8 heads, head_dim 128, theta 500000, one token at position 12345.
  const int64_t D = 128;
  const auto theta = enginetest::truth_theta(500000.0L, D);
  const Frequencies f = enginetest::to_frequencies(theta);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int mode = 0; mode < 2; ++mode) {
      TestTensor q(dt, Layout::kBSHD, 1, 1, 32, D), k(dt, Layout::kBSHD, 1, 1, 8, D);
      q.fill_randn(21);
      k.fill_randn(22);
      const TestTensor q0 = q, k0 = k;
      ApplyArgs a;
      a.q = q.view();
      a.k = k.view();
      a.positions = Positions::contiguous(12345);
      CosSinTable table(f);
      if (mode == 0) apply_table(table, a);
      else apply_frequencies(f, a);
      if (mode == 0) EXPECT_GE(table.size(), 12346);
      for (const auto* pair : {&q0, &k0}) {
        const TestTensor& in = *pair;
        const TestTensor& out = pair == &q0 ? q : k;
        for (int64_t h = 0; h < in.H(); ++h) {
          const auto want = enginetest::truth_rotate(in.head(0, 0, h), D, Pairing::kHalfSplit, Direction::kForward, theta,
                                                     1.0L, [](int64_t) { return 12345.0L; });
          for (int64_t d = 0; d < D; ++d) {
            const double tol = dt == DType::kF32 ? testing::kAccuracyContractF32 : enginetest::ulp(dt, want[d]);
            ASSERT_NEAR(out.get(0, 0, h, d), want[d], tol) << dtype_name(dt) << " h" << h << " d" << d;
          }
        }
      }
    }
  }
}

TEST(Scenarios, PackedBatchOfThreeSequences) {
  // Three sequences of lengths 5, 1, 7 packed into T = 13 tokens, continuing at offsets 0, 100, 37.
  const int64_t D = 64, Hq = 4, Hk = 2, T = 13;
  const std::vector<int64_t> lens = {5, 1, 7}, offs = {0, 100, 37};
  std::vector<int32_t> cu = {0, 5, 6, 13};
  std::vector<int32_t> so = {0, 100, 37};
  const auto theta = enginetest::truth_theta(10000.0L, D);
  const Frequencies f = enginetest::to_frequencies(theta);
  TestTensor q(DType::kF32, Layout::kTHD, 1, T, Hq, D), k(DType::kF32, Layout::kTHD, 1, T, Hk, D);
  q.fill_randn(31);
  k.fill_randn(32);
  const TestTensor q0 = q, k0 = k;
  ApplyArgs a;
  a.layout = Layout::kTHD;
  a.q = q.view();
  a.k = k.view();
  a.positions = Positions::packed(TensorView::contiguous(cu.data(), DType::kI32, {4}),
                                  TensorView::contiguous(so.data(), DType::kI32, {3}));
  CosSinTable table(f);
  apply_table(table, a);

  // Independent path: each sequence alone, bshd [1, len, H, D], contiguous offset.
  int64_t t0 = 0;
  for (std::size_t n = 0; n < lens.size(); ++n) {
    TestTensor qs(DType::kF32, Layout::kBSHD, 1, lens[n], Hq, D), ks(DType::kF32, Layout::kBSHD, 1, lens[n], Hk, D);
    for (int64_t s = 0; s < lens[n]; ++s) {
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t d = 0; d < D; ++d) qs.set(0, s, h, d, q0.get(0, t0 + s, h, d));
      for (int64_t h = 0; h < Hk; ++h)
        for (int64_t d = 0; d < D; ++d) ks.set(0, s, h, d, k0.get(0, t0 + s, h, d));
    }
    ApplyArgs b;
    b.q = qs.view();
    b.k = ks.view();
    b.positions = Positions::contiguous(offs[n]);
    apply_frequencies(f, b);
    for (int64_t s = 0; s < lens[n]; ++s) {
      const long double p = offs[n] + s;
      for (int64_t h = 0; h < Hq; ++h) {
        const auto want = enginetest::truth_rotate(q0.head(0, t0 + s, h), D, Pairing::kHalfSplit, Direction::kForward,
                                                   theta, 1.0L, [&](int64_t) { return p; });
        for (int64_t d = 0; d < D; ++d) {
          ASSERT_EQ(q.get(0, t0 + s, h, d), qs.get(0, s, h, d)) << "seq " << n << " token " << s;
          ASSERT_NEAR(q.get(0, t0 + s, h, d), want[d], testing::output_abs_tol(DType::kF32) + 3e-7);
        }
      }
      for (int64_t h = 0; h < Hk; ++h)
        for (int64_t d = 0; d < D; ++d) ASSERT_EQ(k.get(0, t0 + s, h, d), ks.get(0, s, h, d));
    }
    t0 += lens[n];
  }
}

TEST(Scenarios, EmptyInputsAreNoOps) {
  const Frequencies f = default_freqs(8);
  TestTensor q(DType::kF32, Layout::kBSHD, 2, 0, 3, 8);
  ApplyArgs a;
  a.q = q.view();
  EXPECT_NO_THROW(apply_frequencies(f, a));
  std::vector<int64_t> cu = {0};
  TestTensor t(DType::kF32, Layout::kTHD, 1, 0, 2, 8);
  a.q = t.view();
  a.layout = Layout::kTHD;
  a.positions = Positions::packed(TensorView::contiguous(cu.data(), DType::kI64, {1}));
  EXPECT_NO_THROW(apply_frequencies(f, a));
}

TEST(Scenarios, CudaStubReportsUnsupported) {
  const Frequencies f = default_freqs(8);
  TestTensor q(DType::kF32, Layout::kBSHD, 1, 2, 1, 8);
  q.fill_randn(1);
  const auto before = q.bytes();
  ApplyArgs a;
  a.q = q.view();
  a.backend = Backend::kCuda;
  try {
    apply_frequencies(f, a);
    FAIL() << "expected Error(kUnsupported)";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
  EXPECT_EQ(q.bytes(), before);
}

}  // namespace
}  // namespace rotary
