// The accuracy contract (docs/accuracy.md): rotated f32 output within 4e-6 of fp64 truth for |x|~1, any position < 2^24.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "engine/test_tensors.h"
#include "rotary/rotary.h"
#include "testing/tolerances.h"

namespace rotary {
namespace {

constexpr int64_t kContractPositions[] = {100000, 1000000, 4000000, (int64_t(1) << 24) - 1};

/// Max |y - truth| over a [1, n_pos, H, D] f32 tensor whose token s sits at positions[s].
double max_error(const std::vector<int64_t>& positions, int64_t D, long double base, Backend be,
                 const std::function<void(ApplyArgs&)>& apply) {
  const auto theta = enginetest::truth_theta(base, D);
  const int64_t S = static_cast<int64_t>(positions.size()), H = 4;
  enginetest::TestTensor q(DType::kF32, Layout::kBSHD, 1, S, H, D);
  q.fill_randn(99);
  const enginetest::TestTensor q0 = q;
  ApplyArgs a;
  a.q = q.view();
  a.positions = Positions::from_ids(TensorView::contiguous(positions.data(), DType::kI64, {S}));
  a.backend = be;
  apply(a);
  double worst = 0;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < H; ++h) {
      const long double p = positions[static_cast<std::size_t>(s)];
      const auto want = enginetest::truth_rotate(q0.head(0, s, h), D, Pairing::kHalfSplit, Direction::kForward, theta,
                                                 1.0L, [&](int64_t) { return p; });
      for (int64_t d = 0; d < D; ++d) worst = std::max(worst, std::fabs(q.get(0, s, h, d) - want[d]));
    }
  return worst;
}

std::vector<int64_t> around(int64_t p) { return {p, p - 1, p - 7, p - 1000}; }

TEST(AccuracyContract, OnTheFlyAtLongPositions) {
  for (Backend be : {Backend::kReference, Backend::kAuto})
    for (long double base : {10000.0L, 500000.0L})
      for (int64_t p : kContractPositions) {
        const auto theta = enginetest::truth_theta(base, 128);
        const Frequencies f = enginetest::to_frequencies(theta);
        const double err = max_error(around(p), 128, base, be, [&](ApplyArgs& a) { apply_frequencies(f, a); });
        std::printf("  on the fly %-9s base %-8g position %-9lld max error %.3g\n", be == Backend::kReference ? "reference" : "auto",
                    static_cast<double>(base), static_cast<long long>(p), err);
        EXPECT_LE(err, testing::kAccuracyContractF32) << "position " << p << " base " << static_cast<double>(base);
      }
}

TEST(AccuracyContract, TableModeAtLongPositions) {
  // A table covering 2^24 positions: rotary_dim 4 keeps it at 256 MiB (theta_0 = 1 is the
  // hardest frequency for phase accuracy). The rows are the same compute_cos_sin_row values.
  const auto theta = enginetest::truth_theta(10000.0L, 4);
  TableOptions o;
  o.max_positions = int64_t(1) << 24;
  CosSinTable table(enginetest::to_frequencies(theta), o);
  for (Backend be : {Backend::kReference, Backend::kAuto})
    for (int64_t p : kContractPositions) {
      const double err = max_error(around(p), 4, 10000.0L, be, [&](ApplyArgs& a) { apply_table(table, a); });
      std::printf("  table      %-9s position %-9lld max error %.3g\n", be == Backend::kReference ? "reference" : "auto",
                  static_cast<long long>(p), err);
      EXPECT_LE(err, testing::kAccuracyContractF32) << "position " << p;
    }
  EXPECT_EQ(table.size(), int64_t(1) << 24);
}

TEST(AccuracyContract, RopeAutoModeBeyondTheTableUsesExactOnTheFlyAngles) {
  Spec spec;
  spec.head_dim = 128;
  spec.base = 10000.0;
  spec.max_position_embeddings = 8192;
  RopeOptions ro;
  ro.table.max_positions = 4096;  // everything below goes through the table, beyond on the fly
  Rope rope(spec, ro);
  for (int64_t p : {int64_t(4000), kContractPositions[0], kContractPositions[3]}) {
    const double err = max_error(around(p), 128, 10000.0L, Backend::kAuto, [&](ApplyArgs& a) { rope.apply(a); });
    EXPECT_LE(err, testing::kAccuracyContractF32) << "position " << p;
  }
  EXPECT_LE(rope.table().size(), 4096);
}

// The contract is not vacuous: forming pos*theta in float32 (as many implementations do)
// breaks it at these positions.
TEST(AccuracyContract, Float32AnglesWouldViolateIt) {
  const auto theta = enginetest::truth_theta(10000.0L, 128);
  double worst = 0;
  for (int64_t p : {kContractPositions[1], kContractPositions[2]})
    for (std::size_t j = 0; j < theta.size(); ++j) {
      const float a32 = static_cast<float>(p) * static_cast<float>(theta[j]);
      worst = std::max(worst, std::fabs(static_cast<double>(cosf(a32)) - static_cast<double>(cosl(p * theta[j]))));
    }
  EXPECT_GT(worst, 100 * testing::kAccuracyContractF32);
}

}  // namespace
}  // namespace rotary
