// rotary::rerotate_cache: equals rotating from scratch at the new positions / with the new spec, and A -> B -> A is the identity.
#include <gtest/gtest.h>

#include <vector>

#include "prologue/prologue_testing.h"

namespace rotary {
namespace {

using testing::Buf;

constexpr int64_t kT = 6, kH = 2, kD = 64, kNB = 3, kBS = 4;

/// Keys of kT tokens written by the prologue into a paged NHD cache at slots 0..kT-1 for positions `pos`
/// with `rope` (no norm), in `dtype` (i8: scales in `scales`, fp8: tensor scale 0.02).
struct Cache {
  DType dtype;
  Buf k{DType::kF32, kT * kH * kD, 31};
  Buf cache, scales{DType::kF32, kNB * kBS * kH};
  float tscale = 0.02f;
  std::vector<int64_t> slots = {0, 1, 2, 3, 4, 5};

  Cache(DType dt, Rope& rope, const std::vector<int64_t>& pos, Pairing = Pairing::kHalfSplit) : dtype(dt), cache(dt, kNB * kBS * kH * kD) {
    PrologueArgs a;
    a.k = k.view({kT, kH, kD});
    a.sources = {{&rope, std::nullopt}};
    a.positions = Positions::from_ids(TensorView::contiguous(pos.data(), DType::kI64, {kT}));
    a.k_cache = cache.view({kNB, kBS, kH, kD});
    a.slot_mapping = TensorView::contiguous(slots.data(), DType::kI64, {kT});
    a.k_scale = scale_view();
    // v is optional only without v_cache: write keys alone (v_cache absent needs v absent too).
    a.threads = 1;
    prologue(a);
  }
  TensorView scale_view() {
    if (dtype == DType::kI8) return scales.view({kNB, kBS, kH});
    if (is_fp8(dtype)) return TensorView::contiguous(&tscale, DType::kF32, {1});
    return {};
  }
  double value(int64_t i) const {
    const double s = dtype == DType::kI8 ? scales.at(i / kD) : tscale;
    return testing::cache_value(cache, i, s);
  }
};

Spec spec_of(Pairing pairing, double base = 10000.0, RopeType type = RopeType::kDefault, double factor = 1.0) {
  Spec s;
  s.head_dim = kD;
  s.base = base;
  s.pairing = pairing;
  s.max_position_embeddings = 256;
  s.scaling.type = type;
  if (type != RopeType::kDefault) s.scaling.factor = factor;
  return s;
}

void rerotate(Cache& c, Rope& from, Rope& to, const std::vector<int64_t>& a, const std::vector<int64_t>& b, Backend backend,
              std::optional<int64_t> from_len = std::nullopt, std::optional<int64_t> to_len = std::nullopt) {
  RerotateArgs r;
  r.k_cache = c.cache.view({kNB, kBS, kH, kD});
  r.k_scale = c.scale_view();
  r.slots = TensorView::contiguous(c.slots.data(), DType::kI64, {kT});
  r.from_positions = TensorView::contiguous(a.data(), DType::kI64, {kT});
  r.to_positions = TensorView::contiguous(b.data(), DType::kI64, {kT});
  r.from = {&from, from_len};
  r.to = {&to, to_len};
  r.backend = backend;
  rerotate_cache(r);
}

/// Max |a - b| over the written rows, and max |b|.
double max_diff(const Cache& a, const Cache& b, double* mag) {
  double m = 0;
  *mag = 0;
  for (int64_t i = 0; i < kT * kH * kD; ++i) {
    m = std::max(m, std::fabs(a.value(i) - b.value(i)));
    *mag = std::max(*mag, std::fabs(b.value(i)));
  }
  return m;
}

TEST(Rerotate, EqualsRotatingFromScratchAtTheNewPositionsAndWithANewSpec) {
  const std::vector<int64_t> a = {0, 1, 2, 3, 4, 5}, b = {0, 1, 1000, 1001, 70000, 5};
  for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved})
    for (Backend backend : {Backend::kReference, Backend::kCpu}) {
      Rope ra(spec_of(pairing)), rb(spec_of(pairing, 500000.0, RopeType::kLinear, 4.0));
      // Position shift with one spec (attention sinks), and a switch of spec (linear factor and base).
      for (Rope* to : {&ra, &rb}) {
        Cache c(DType::kF32, ra, a), want(DType::kF32, *to, b);
        rerotate(c, ra, *to, a, b, backend);
        double mag;
        EXPECT_LE(max_diff(c, want, &mag), 8e-6 * std::max(1.0, mag)) << pairing_name(pairing) << (to == &rb ? " new spec" : " shift");
      }
    }
}

TEST(Rerotate, DynamicNtkBaseSwitchAndYarnAttentionFactorMatchRotatingFromScratch) {
  for (RopeType type : {RopeType::kDynamic, RopeType::kYarn}) {
    Spec s = spec_of(Pairing::kHalfSplit, 10000.0, type, 4.0);
    Rope rope(s);
    const std::vector<int64_t> pos = {0, 100, 200, 250, 255, 3};
    // Keys written while the sequence was 256 long, re-rotated for a length of 5000 (dynamic: a new base).
    Cache c(DType::kF32, rope, pos);
    rerotate(c, rope, rope, pos, pos, Backend::kCpu, 256, 5000);
    PrologueArgs a;
    Cache want(DType::kF32, rope, pos);
    Buf k2 = want.k;
    a.k = k2.view({kT, kH, kD});
    a.sources = {{&rope, int64_t(5000)}};
    a.positions = Positions::from_ids(TensorView::contiguous(pos.data(), DType::kI64, {kT}));
    a.k_cache = want.cache.view({kNB, kBS, kH, kD});
    a.slot_mapping = TensorView::contiguous(want.slots.data(), DType::kI64, {kT});
    prologue(a);
    double mag;
    EXPECT_LE(max_diff(c, want, &mag), 8e-6 * std::max(1.0, mag)) << rope_type_name(type);
  }
}

TEST(Rerotate, AToBToAReturnsTheKeysToF32Rounding) {
  const std::vector<int64_t> a = {0, 1, 2, 3, 4, 5}, b = {9, 500, 123456, 7, 4, 1 << 24};
  for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved}) {
    Rope ra(spec_of(pairing)), rb(spec_of(pairing, 1e6, RopeType::kYarn, 8.0));
    Cache c(DType::kF32, ra, a);
    const Buf before = c.cache;
    rerotate(c, ra, rb, a, b, Backend::kCpu);
    rerotate(c, rb, ra, b, a, Backend::kCpu);
    double m = 0;
    for (int64_t i = 0; i < kT * kH * kD; ++i) {
      const double x = before.at(i), y = c.cache.at(i);
      m = std::max(m, std::fabs(x - y) / std::max(1.0, std::fabs(x)));
    }
    EXPECT_LE(m, 6e-7) << pairing_name(pairing);  // a few f32 roundings of |x| <= 4
  }
}

TEST(Rerotate, QuantisedCachesAreDequantisedRotatedAndRequantisedWithAFreshScale) {
  const std::vector<int64_t> a = {0, 1, 2, 3, 4, 5}, b = {50, 51, 52, 300, 301, 302};
  for (DType dt : {DType::kBF16, DType::kF16, DType::kI8, DType::kF8E4M3, DType::kF8E5M2})
    for (Backend backend : {Backend::kReference, Backend::kCpu}) {
      Rope rope(spec_of(Pairing::kInterleaved));
      Cache c(dt, rope, a), want(DType::kF32, rope, b);
      rerotate(c, rope, rope, a, b, backend);
      for (int64_t row = 0; row < kT * kH; ++row) {
        double mag = 0;
        for (int64_t d = 0; d < kD; ++d) mag = std::max(mag, std::fabs(want.value(row * kD + d)));
        if (dt == DType::kI8) EXPECT_NEAR(c.scales.at(row), mag / 127.0, mag * 0.02) << "fresh scale, row " << row;
        for (int64_t d = 0; d < kD; ++d) {
          const double w = want.value(row * kD + d);
          // Two quantisations: the final one of this value, and the first one of the pair it came from,
          // rotated along (up to sqrt(2) times a rounding at the row's magnitude).
          const double s = dt == DType::kI8 ? mag / 127.0 : c.tscale;
          const double tol = testing::stored_tol(dt, std::fabs(w), mag, s) + 1.5 * testing::stored_tol(dt, mag, mag, s);
          ASSERT_NEAR(c.value(row * kD + d), w, tol) << dtype_name(dt) << " row " << row << " d " << d;
        }
      }
    }
}

}  // namespace
}  // namespace rotary
