// CosSinTable: exact rows, amortised growth, stable views, the max_positions limit, and concurrent growth.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "engine/test_tensors.h"
#include "rotary/rotary.h"

namespace rotary {
namespace {

TEST(CosSinRow, MatchesLongDoubleWithinOneF32Rounding) {
  const auto theta = enginetest::truth_theta(10000.0L, 128);
  const Frequencies f = enginetest::to_frequencies(theta, 1.25);
  std::vector<float> c(64), s(64);
  for (double pos : {0.0, 1.0, 2.5, 4095.0, 1e5, 1e6, 4e6, 16777215.0}) {
    compute_cos_sin_row(f, pos, c.data(), s.data());
    for (std::size_t j = 0; j < 64; ++j) {
      const long double a = static_cast<long double>(pos) * theta[j];
      // One f32 rounding (half an ulp of the value) plus the double phase error (<= 2^-29 * 1.25).
      const double wc = static_cast<double>(cosl(a) * 1.25L), ws = static_cast<double>(sinl(a) * 1.25L);
      EXPECT_NEAR(c[j], wc, 0.5 * enginetest::ulp(DType::kF32, wc) + 3e-9) << "pos " << pos << " j " << j;
      EXPECT_NEAR(s[j], ws, 0.5 * enginetest::ulp(DType::kF32, ws) + 3e-9) << "pos " << pos << " j " << j;
    }
  }
}

TEST(CosSinTable, RowsLayoutGrowthAndStableViews) {
  const auto theta = enginetest::truth_theta(10000.0L, 8);
  const Frequencies f = enginetest::to_frequencies(theta, 0.5);
  TableOptions o;
  o.initial_positions = 10;
  o.max_positions = 100000;
  CosSinTable t(f, o);
  EXPECT_EQ(t.half(), 4);
  EXPECT_GE(t.size(), 10);
  const CosSinTable::View v0 = t.view();
  std::vector<float> first(v0.data, v0.data + v0.size * 8);
  t.ensure(5000);
  const int64_t after = t.size();
  EXPECT_GE(after, 5000);
  EXPECT_LE(after, 100000);
  // Growth is amortised: asking one more position does not reallocate.
  t.ensure(after);
  EXPECT_EQ(t.size(), after);
  t.ensure(after + 1);
  EXPECT_GE(t.size(), std::min<int64_t>(2 * after, 100000));
  // The old view is still valid and unchanged.
  for (std::size_t i = 0; i < first.size(); ++i) ASSERT_EQ(v0.data[i], first[i]);
  const CosSinTable::View v = t.view_for(4321 + 1);
  for (int64_t p : {0, 1, 9, 10, 4321}) {
    std::vector<float> c(4), s(4);
    compute_cos_sin_row(f, static_cast<double>(p), c.data(), s.data());
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(v.cos(p)[j], c[j]);
      EXPECT_EQ(v.sin(p)[j], s[j]);
      EXPECT_NEAR(v.cos(p)[j], 0.5 * std::cos(static_cast<double>(p * theta[j])), 1e-7);
    }
  }
}

TEST(CosSinTable, GrowthPastMaxPositionsIsOutOfRange) {
  TableOptions o;
  o.max_positions = 1000;
  CosSinTable t(enginetest::to_frequencies(enginetest::truth_theta(10000.0L, 4)), o);
  t.ensure(1000);
  try {
    t.ensure(1001);
    FAIL() << "expected kOutOfRange";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kOutOfRange);
    const std::string m = e.what();
    EXPECT_NE(m.find("1000"), std::string::npos) << m;
    EXPECT_NE(m.find("max_positions"), std::string::npos) << m;
  }
  // Through apply_table: nothing is written when the table cannot cover the position.
  std::vector<float> q(8, 1.0f);
  const std::vector<float> before = q;
  ApplyArgs a;
  a.q = TensorView::contiguous(q.data(), DType::kF32, {1, 2, 1, 4});
  a.positions = Positions::contiguous(999);
  EXPECT_THROW(apply_table(t, a), Error);
  EXPECT_EQ(q, before);
}

TEST(CosSinTable, RejectsBadOptionsAndFrequencies) {
  const Frequencies f = enginetest::to_frequencies(enginetest::truth_theta(10000.0L, 4));
  TableOptions o;
  o.max_positions = -1;
  EXPECT_THROW(CosSinTable(f, o), Error);
  o.max_positions = 10;
  o.initial_positions = 11;
  EXPECT_THROW(CosSinTable(f, o), Error);
  Frequencies bad = f;
  bad.inv_freq[1] = std::nan("");
  EXPECT_THROW(CosSinTable(bad, TableOptions{}), Error);
  EXPECT_THROW(CosSinTable(Frequencies{}, TableOptions{}), Error);
}

// Many threads apply with one shared table while it grows; every result must equal the
// single-threaded result bit for bit (run under TSan by the tsan preset).
TEST(CosSinTable, ConcurrentApplyWhileGrowingMatchesSingleThreaded) {
  const int64_t D = 32;
  const Frequencies f = enginetest::to_frequencies(enginetest::truth_theta(10000.0L, D));
  constexpr int kThreads = 8, kIters = 12;
  auto input = [&](int th, int it) {
    return testing::randn(static_cast<std::size_t>(3 * 2 * D), static_cast<uint64_t>(th * 1000 + it));
  };
  auto position = [](int th, int it) { return static_cast<int64_t>(37 * it * it * (th + 1) + th); };
  auto run = [&](CosSinTable& table, int th, int it, Backend be) {
    std::vector<float> x = input(th, it);
    ApplyArgs a;
    a.q = TensorView::contiguous(x.data(), DType::kF32, {1, 3, 2, D});
    a.positions = Positions::contiguous(position(th, it));
    a.threads = 1;
    a.backend = be;
    apply_table(table, a);
    return x;
  };
  for (Backend be : {Backend::kReference, Backend::kAuto}) {
    std::vector<std::vector<float>> expected(kThreads * kIters);
    {
      CosSinTable single(f);
      for (int th = 0; th < kThreads; ++th)
        for (int it = 0; it < kIters; ++it) expected[th * kIters + it] = run(single, th, it, be);
    }
    CosSinTable shared(f);  // starts empty: grows many times, concurrently
    std::vector<std::vector<float>> got(kThreads * kIters);
    std::atomic<int> go{0};
    std::vector<std::thread> pool;
    for (int th = 0; th < kThreads; ++th)
      pool.emplace_back([&, th] {
        while (go.load() == 0) {
        }
        for (int it = 0; it < kIters; ++it) got[th * kIters + it] = run(shared, th, it, be);
      });
    go.store(1);
    for (auto& t : pool) t.join();
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], expected[i]) << "result " << i;
    EXPECT_GE(shared.size(), position(kThreads - 1, kIters - 1) + 3);
  }
}

}  // namespace
}  // namespace rotary
