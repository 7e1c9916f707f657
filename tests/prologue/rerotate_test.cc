// rotary::rerotate_cache: equals rotating from scratch at the new positions / with the new spec, A -> B -> A is the identity, a zero angle keeps a row's bits, a skipped row's positions are not read.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
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

/// A cache of `dt` whose every byte is set: f32/f16/bf16 elements cycle through -0, +0, NaNs with payloads
/// (quiet and signalling, both signs), +-inf, a subnormal and ordinary values; i8 and fp8 rows take every byte
/// value (i8 rows stay under 127 in magnitude with scale 0.01, so a fresh scale would differ).
Buf special_cache(DType dt) {
  Buf c(dt, kNB * kBS * kH * kD);
  const uint32_t f32[] = {0x80000000u, 0x00000000u, 0x7FC00001u, 0xFF800001u, 0x7F800000u, 0xFF800000u, 0x00000001u, 0xC0100000u};
  const uint16_t f16[] = {0x8000, 0x0000, 0x7E01, 0xFC01, 0x7C00, 0xFC00, 0x0001, 0xC080};
  const uint16_t bf16[] = {0x8000, 0x0000, 0x7FC1, 0xFF81, 0x7F80, 0xFF80, 0x0001, 0xC010};
  for (int64_t i = 0; i < c.size(); ++i) {
    const size_t k = static_cast<size_t>((3 * i + i / kD) % 8);
    if (dt == DType::kF32) std::memcpy(c.bytes.data() + 4 * i, &f32[k], 4);
    else if (dt == DType::kF16) std::memcpy(c.bytes.data() + 2 * i, &f16[k], 2);
    else if (dt == DType::kBF16) std::memcpy(c.bytes.data() + 2 * i, &bf16[k], 2);
    else if (dt == DType::kI8) c.bytes[static_cast<size_t>(i)] = static_cast<unsigned char>(static_cast<int8_t>(i % 201 - 100));
    else c.bytes[static_cast<size_t>(i)] = static_cast<unsigned char>(i % 256);
  }
  return c;
}

TEST(Rerotate, ARowRotatedByAZeroAngleKeepsItsBitsInEveryCacheDtype) {
  // Same positions under one spec (one Rope, or two of the same spec: the same frequencies), and position 0
  // under two specs: every pair's angle is 0, cos 1 and sin 0. Rotating anyway turned -0 into +0, spread a
  // NaN or inf to its pair's other channel (x * 0), and requantised i8 rows with a fresh scale (100 * 0.01 /
  // 127 here instead of 0.01) and fp8 rows through f32; such rows are left exactly as they are.
  const std::vector<int64_t> pos = {0, 1, 2, 3, 4, 70000}, zeros(kT, 0);
  for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved}) {
    Rope ra(spec_of(pairing)), ra2(spec_of(pairing)), rb(spec_of(pairing, 500000.0, RopeType::kLinear, 4.0));
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8, DType::kF8E4M3, DType::kF8E5M2})
      for (Backend backend : {Backend::kReference, Backend::kCpu})
        for (int which = 0; which < 3; ++which) {
          Cache c(DType::kF32, ra, pos);
          c.dtype = dt;
          c.cache = special_cache(dt);
          for (int64_t i = 0; i < c.scales.size(); ++i) static_cast<float*>(c.scales.data())[i] = 0.01f;
          const Buf before = c.cache, scales_before = c.scales;
          const std::vector<int64_t>& p = which == 2 ? zeros : pos;
          rerotate(c, ra, which == 0 ? ra : which == 1 ? ra2 : rb, p, p, backend);
          const std::string what = std::string(dtype_name(dt)) + " " + pairing_name(pairing) + " " +
                                   (backend == Backend::kCpu ? "cpu" : "reference") + " case " + std::to_string(which);
          EXPECT_EQ(c.cache.bytes, before.bytes) << what;
          EXPECT_EQ(c.scales.bytes, scales_before.bytes) << what;
        }
  }
}

TEST(Rerotate, OnlyRowsWithAZeroAngleAreLeftAsTheyAre) {
  // Rows 1 and 4 move; the others keep their positions and bits (row 2 holds an inf, which rotating by
  // cos 1 / sin 0 made its partner NaN). The moved rows equal rotating from scratch.
  const std::vector<int64_t> a = {0, 1, 2, 3, 4, 5}, b = {0, 9, 2, 3, 40, 5};
  for (Backend backend : {Backend::kReference, Backend::kCpu}) {
    Rope rope(spec_of(Pairing::kHalfSplit));
    Cache c(DType::kF32, rope, a), want(DType::kF32, rope, b);
    static_cast<float*>(c.cache.data())[2 * kH * kD + kD / 2 + 5] = INFINITY;  // row 2, head 0: the partner of d 5
    const Buf before = c.cache;
    rerotate(c, rope, rope, a, b, backend);
    for (int64_t i = 0; i < kT * kH * kD; ++i) {
      const int64_t row = i / (kH * kD);
      if (row == 1 || row == 4) EXPECT_NEAR(c.cache.at(i), want.cache.at(i), 8e-6) << i;
      else ASSERT_EQ(std::memcmp(&c.cache.bytes[4 * i], &before.bytes[4 * i], 4), 0) << i;
    }
  }
}

TEST(Rerotate, ASkippedRowsPositionsAreNeitherUsedNorChecked) {
  // A dynamic-NTK spec takes its length from the rows' largest position when none is given. Row 5 is skipped
  // (slot -1): its positions must not choose the other rows' frequencies (at 100000 they switched the base,
  // moving the shifted keys by ~0.4) nor be refused (-1, e.g. padding's position).
  Rope rope(spec_of(Pairing::kHalfSplit, 10000.0, RopeType::kDynamic, 4.0));
  const std::vector<int64_t> a = {0, 1, 2, 3, 4, 5};
  auto run = [&](Cache& c, std::vector<int64_t> slots, std::vector<int64_t> from, std::vector<int64_t> to, Backend backend) {
    RerotateArgs r;
    const int64_t n = static_cast<int64_t>(slots.size());
    r.k_cache = c.cache.view({kNB, kBS, kH, kD});
    r.slots = TensorView::contiguous(slots.data(), DType::kI64, {n});
    r.from_positions = TensorView::contiguous(from.data(), DType::kI64, {n});
    r.to_positions = TensorView::contiguous(to.data(), DType::kI64, {n});
    r.from = {&rope, std::nullopt};
    r.to = {&rope, std::nullopt};
    r.backend = backend;
    rerotate_cache(r);
  };
  for (Backend backend : {Backend::kReference, Backend::kCpu})
    for (int64_t skipped_pos : {int64_t(100000), int64_t(-1)}) {
      Cache want(DType::kF32, rope, a), c(DType::kF32, rope, a);
      run(want, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, {200, 201, 202, 203, 204}, backend);
      ASSERT_NO_THROW(run(c, {0, 1, 2, 3, 4, -1}, {0, 1, 2, 3, 4, skipped_pos}, {200, 201, 202, 203, 204, skipped_pos}, backend))
          << skipped_pos;
      EXPECT_EQ(c.cache.bytes, want.cache.bytes) << (backend == Backend::kCpu ? "cpu " : "reference ") << skipped_pos;
    }
}

}  // namespace
}  // namespace rotary
