// Fractional (float) positions on the on-the-fly path: vs an fp64 formula, and integer-valued floats == integers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "multimodal/mm_testing.h"
#include "rotary/rotary.h"
#include "testing/tolerances.h"

namespace rotary {
namespace {

constexpr int64_t B = 2, S = 9, H = 3, D = 24;

std::vector<double> fractional_positions(uint64_t seed, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, hi);
  std::vector<double> p(static_cast<std::size_t>(B * S));
  for (auto& x : p) x = u(rng);
  p[0] = 0.0;
  p[1] = 0.5;
  p[2] = 1e6 + 0.25;  // large fractional position: exact in f64, and in f32 as 1000000.25
  return p;
}

/// Truth: x rotated (half-split, full head) by angle pos * theta_j with theta_j = base^(-2j/D), in long double.
std::vector<double> truth(const std::vector<float>& x, const std::vector<long double>& pos_of_token, double base,
                          double attention = 1.0, double linear = 1.0) {
  std::vector<double> out(x.size());
  for (int64_t t = 0; t < B * S; ++t)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> head(x.begin() + (t * H + h) * D, x.begin() + (t * H + h + 1) * D);
      const auto y = mmtest::rotate_head(
          head, D / 2, Pairing::kHalfSplit,
          [&](int64_t j) { return pos_of_token[t] * powl(base, -2.0L * j / D) / linear; }, attention);
      std::copy(y.begin(), y.end(), out.begin() + (t * H + h) * D);
    }
  return out;
}

ApplyArgs args_for(std::vector<float>& q, TensorView ids) {
  ApplyArgs a;
  a.q = TensorView::contiguous(q.data(), DType::kF32, {B, S, H, D});
  a.positions = Positions::from_ids(ids);
  return a;
}

TEST(Fractional, ApplyFrequenciesWithF32AndF64IdsMatchesFp64Formula) {
  const auto x = testing::randn(static_cast<std::size_t>(B * S * H * D), 1);
  const auto pos = fractional_positions(2, 4096.0);
  Frequencies f;
  f.inv_freq = default_inv_freq(10000.0, D);
  for (DType idt : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(idt));
    std::vector<float> p32(pos.begin(), pos.end());
    std::vector<long double> stored(pos.size());  // the position value as the ids tensor holds it
    for (std::size_t i = 0; i < pos.size(); ++i) stored[i] = idt == DType::kF32 ? p32[i] : pos[i];
    for (Backend be : {Backend::kCpu, Backend::kReference}) {
      std::vector<float> q = x;
      ApplyArgs a = args_for(q, idt == DType::kF32 ? TensorView::contiguous(p32.data(), idt, {B, S})
                                                  : TensorView::contiguous(pos.data(), idt, {B, S}));
      a.backend = be;
      apply_frequencies(f, a);
      EXPECT_LE(mmtest::max_abs_diff(q, truth(x, stored, 10000.0)), testing::kAccuracyContractF32);
    }
  }
}

TEST(Fractional, RopeAutoUsesExactAnglesForFloatIdsAndTableModeRejectsThem) {
  const auto x = testing::randn(static_cast<std::size_t>(B * S * H * D), 3);
  const auto pos = fractional_positions(4, 100000.0);
  std::vector<long double> stored(pos.begin(), pos.end());
  Spec spec;
  spec.head_dim = D;
  spec.base = 500000.0;
  Rope rope(spec);
  std::vector<float> q = x;
  rope.apply(args_for(q, TensorView::contiguous(pos.data(), DType::kF64, {B, S})));
  EXPECT_LE(mmtest::max_abs_diff(q, truth(x, stored, 500000.0)), testing::kAccuracyContractF32);

  RopeOptions table_only;
  table_only.mode = CosSinMode::kTable;
  Rope rt(spec, table_only);
  std::vector<float> q2 = x;
  try {
    rt.apply(args_for(q2, TensorView::contiguous(pos.data(), DType::kF64, {B, S})));
    ADD_FAILURE() << "fractional ids accepted by a table-only rope";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fractional"), std::string::npos) << e.what();
  }
  EXPECT_EQ(0, std::memcmp(q2.data(), x.data(), x.size() * 4));  // nothing written on error
}

// Integer-valued float positions give exactly the rows of integer positions: same angle pos*theta
// in double, same libm call, same rounding (table rows are built by the same function).
TEST(Fractional, IntegerValuedFloatIdsEqualIntegerIdsBitExactly) {
  const auto x = testing::randn(static_cast<std::size_t>(B * S * H * D), 5);
  std::vector<int64_t> pi(static_cast<std::size_t>(B * S));
  for (std::size_t i = 0; i < pi.size(); ++i) pi[i] = static_cast<int64_t>((i * 7919) % 70000);
  pi[3] = (1 << 24) - 1;  // largest position exact in f32
  std::vector<float> pf(pi.begin(), pi.end());
  std::vector<double> pd(pi.begin(), pi.end());
  Spec spec;
  spec.head_dim = D;
  spec.rotary_dim = 16;
  spec.pairing = Pairing::kInterleaved;
  Rope rope(spec);
  Frequencies f = rope.frequencies();
  for (int via = 0; via < 2; ++via) {
    std::vector<float> qi = x, qf = x, qd = x;
    auto run = [&](std::vector<float>& q, TensorView ids) {
      ApplyArgs a = args_for(q, ids);
      if (via == 0) rope.apply(a);  // int ids -> table rows; float ids -> on the fly
      else {
        a.pairing = Pairing::kInterleaved;
        apply_frequencies(f, a);
      }
    };
    run(qi, TensorView::contiguous(pi.data(), DType::kI64, {B, S}));
    run(qf, TensorView::contiguous(pf.data(), DType::kF32, {B, S}));
    run(qd, TensorView::contiguous(pd.data(), DType::kF64, {B, S}));
    EXPECT_EQ(0, std::memcmp(qi.data(), qf.data(), x.size() * 4)) << (via == 0 ? "Rope" : "apply_frequencies");
    EXPECT_EQ(0, std::memcmp(qi.data(), qd.data(), x.size() * 4)) << (via == 0 ? "Rope" : "apply_frequencies");
    EXPECT_NE(0, std::memcmp(qi.data(), x.data(), x.size() * 4));
  }
}

// HF's linear scaling divides inv_freq by the factor; the same rotation is obtained by a default
// rope at fractional positions p / factor (what "position interpolation" means).
TEST(Fractional, LinearScalingEqualsInterpolatedPositions) {
  const auto x = testing::randn(static_cast<std::size_t>(B * S * H * D), 7);
  std::vector<int64_t> pi(static_cast<std::size_t>(B * S));
  std::vector<double> pf(pi.size());
  for (std::size_t i = 0; i < pi.size(); ++i) {
    pi[i] = static_cast<int64_t>(i * 997);
    pf[i] = static_cast<double>(pi[i]) / 4.0;
  }
  Spec lin;
  lin.head_dim = D;
  lin.scaling.type = RopeType::kLinear;
  lin.scaling.factor = 4.0;
  Spec def = lin;
  def.scaling = Scaling{};
  Rope rl(lin), rd(def);
  std::vector<float> a = x, b = x;
  rl.apply(args_for(a, TensorView::contiguous(pi.data(), DType::kI64, {B, S})));
  rd.apply(args_for(b, TensorView::contiguous(pf.data(), DType::kF64, {B, S})));
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  EXPECT_LE(worst, 2 * testing::kAccuracyContractF32);
}

// M-RoPE with fractional temporal ids (Qwen-Omni style), thd [3, T] f32 ids.
TEST(Fractional, MropeWithFractionalTemporalIds) {
  const int64_t T = 7, Hh = 2, Dd = 16;
  mmtest::Thd q(T, Hh, Dd, 8);
  const auto x = q.data;
  std::vector<float> ids = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 40000.25f,  // t (fractional)
                            0, 0, 1, 1, 2, 2, 3,                               // h
                            0, 1, 0, 1, 0, 1, 5};                              // w
  Spec spec;
  spec.head_dim = Dd;
  spec.mrope.section = {2, 3, 3};
  Rope rope(spec);
  ApplyArgs a;
  a.layout = Layout::kTHD;
  a.q = q.view();
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kF32, {3, T}));
  rope.apply(a);
  const std::vector<int> axis = {0, 0, 1, 1, 1, 2, 2, 2};
  std::vector<double> want(x.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hh; ++h) {
      std::vector<double> head(x.begin() + (t * Hh + h) * Dd, x.begin() + (t * Hh + h + 1) * Dd);
      const auto y = mmtest::rotate_head(head, Dd / 2, Pairing::kHalfSplit, [&](int64_t j) {
        return static_cast<long double>(ids[axis[j] * T + t]) * powl(10000.0L, -2.0L * j / Dd);
      });
      std::copy(y.begin(), y.end(), want.begin() + (t * Hh + h) * Dd);
    }
  EXPECT_LE(mmtest::max_abs_diff(q.data, want), testing::kAccuracyContractF32);
}

}  // namespace
}  // namespace rotary
