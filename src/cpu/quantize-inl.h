// Per-target quantised storage for the CPU kernels: fp8 e4m3/e5m2 and int8 row encoders, and the dequantising loads.
//
// A Highway "-inl.h" piece, re-included per target by prologue_kernels.cc. The rules are plan/quantize.h's
// (the scalar definition, tested bit for bit against these vectors): fp8 = saturate, then round to nearest
// even, of fl32(y / scale); int8 = one scale per row, fl32(amax / 127), and round-half-even of fl32(y / scale).
#if defined(ROTARY_CPU_QUANTIZE_INL_H_) == defined(HWY_TARGET_TOGGLE)  // per-target include guard
#ifdef ROTARY_CPU_QUANTIZE_INL_H_
#undef ROTARY_CPU_QUANTIZE_INL_H_
#else
#define ROTARY_CPU_QUANTIZE_INL_H_
#endif

#include <hwy/highway.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cpu/rows_general-inl.h"
#include "plan/quantize.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::detail::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Rounds to the nearest integer, ties to even, by the FPU's own rounding of |v| + 2^23 (|v| < 2^22).
template <class D>
HWY_INLINE hn::Vec<D> RoundHalfEven(D d, hn::Vec<D> v) {
  const auto magic = hn::Set(d, 8388608.0f);
  return hn::CopySignToAbs(hn::Sub(hn::Add(hn::Abs(v), magic), magic), v);
}

/// fp8 codes (0..255 in 32-bit lanes) of f32 lanes, as f32_to_fp8: saturating, nearest even, NaN kept.
template <bool kE4M3, class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> EncodeFp8(D d, hn::Vec<D> v) {
  const hn::RebindToSigned<D> di;
  constexpr int kShift = kE4M3 ? 20 : 21;
  const auto sign = hn::And(hn::ShiftRight<24>(hn::BitCast(di, v)), hn::Set(di, 0x80));
  const auto a = hn::Min(hn::Abs(v), hn::Set(d, kE4M3 ? 448.0f : 57344.0f));  // a NaN lane is replaced below
  const auto ab = hn::BitCast(di, a);
  // Below the smallest normal: a multiple of the subnormal step, rounded by the FPU.
  const auto sub = hn::ConvertTo(di, RoundHalfEven(d, hn::Mul(a, hn::Set(d, kE4M3 ? 512.0f : 65536.0f))));
  // Normal: round the mantissa to 3 / 2 bits (nearest even), rebias the exponent.
  const auto r = hn::Add(hn::Add(ab, hn::Set(di, (1 << (kShift - 1)) - 1)), hn::And(hn::ShiftRight<kShift>(ab), hn::Set(di, 1)));
  const auto normal = hn::Sub(hn::ShiftRight<kShift>(r), hn::Set(di, kE4M3 ? (120 << 3) : (112 << 2)));
  auto code = hn::IfThenElse(hn::Lt(ab, hn::Set(di, kE4M3 ? 0x3C800000 : 0x38800000)), sub, normal);
  code = hn::IfThenElse(hn::RebindMask(di, hn::IsNaN(v)), hn::Set(di, kE4M3 ? 0x7F : 0x7E), code);
  return hn::Or(code, sign);
}

/// Writes y[0, n) into an fp8 row: f32_to_fp8(fl32(y / scale)).
template <bool kE4M3>
HWY_INLINE void StoreRowFp8(const float* HWY_RESTRICT y, size_t n, uint8_t* HWY_RESTRICT out, float scale) {
  auto step = [&](auto dc, size_t i) ROTARY_STEP_INLINE {
    const hn::Rebind<uint8_t, decltype(dc)> d8;
    const auto v = hn::Div(hn::LoadU(dc, y + i), hn::Set(dc, scale));
    hn::StoreU(hn::DemoteTo(d8, EncodeFp8<kE4M3>(dc, v)), d8, out + i);
  };
  const hn::ScalableTag<float> d;
  size_t i = 0;
  for (; i + hn::Lanes(d) <= n; i += hn::Lanes(d)) step(d, i);
  if (i < n) Remainder<8, 1>(i, n, step);
}

/// Writes y[0, n) into an int8 row with its own scale (quantize_int8_row's rule); returns the scale.
HWY_INLINE float StoreRowI8(const float* HWY_RESTRICT y, size_t n, int8_t* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto amax_v = hn::Zero(d);
  auto nan_v = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, y + i);
    amax_v = hn::Max(amax_v, hn::Abs(v));
    nan_v = hn::Or(nan_v, hn::VecFromMask(d, hn::IsNaN(v)));
  }
  float amax = hn::GetLane(hn::MaxOfLanes(d, amax_v));
  bool nan = !hn::AllFalse(d, hn::MaskFromVec(nan_v));
  for (; i < n; ++i) {
    nan = nan || std::isnan(y[i]);
    amax = std::fmax(amax, std::fabs(y[i]));
  }
  const float scale = nan ? std::nanf("") : amax / 127.0f;
  const bool usable = std::isfinite(scale) && scale > 0.0f;
  auto step = [&](auto dc, size_t j) ROTARY_STEP_INLINE {
    const hn::Rebind<int8_t, decltype(dc)> d8;
    const hn::RebindToSigned<decltype(dc)> di;
    auto v = usable ? hn::Div(hn::LoadU(dc, y + j), hn::Set(dc, scale)) : hn::Zero(dc);
    v = hn::Min(hn::Max(v, hn::Set(dc, -127.0f)), hn::Set(dc, 127.0f));
    hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, RoundHalfEven(dc, v))), d8, out + j);
  };
  size_t j = 0;
  for (; j + N <= n; j += N) step(d, j);
  if (j < n) Remainder<8, 1>(j, n, step);
  return scale;
}

/// Dequantises an int8 row (q * scale) into f32.
HWY_INLINE void LoadRowI8(const int8_t* HWY_RESTRICT in, size_t n, float scale, float* HWY_RESTRICT out) {
  auto step = [&](auto dc, size_t i) ROTARY_STEP_INLINE {
    const hn::Rebind<int8_t, decltype(dc)> d8;
    const hn::RebindToSigned<decltype(dc)> di;
    hn::StoreU(hn::Mul(hn::ConvertTo(dc, hn::PromoteTo(di, hn::LoadU(d8, in + i))), hn::Set(dc, scale)), dc, out + i);
  };
  const hn::ScalableTag<float> d;
  size_t i = 0;
  for (; i + hn::Lanes(d) <= n; i += hn::Lanes(d)) step(d, i);
  if (i < n) Remainder<8, 1>(i, n, step);
}

/// Dequantises an fp8 row (value * scale) into f32, through a table of the 256 codes.
inline void LoadRowFp8(const uint8_t* HWY_RESTRICT in, size_t n, DType dt, float scale, float* HWY_RESTRICT out) {
  float lut[256];
  for (int c = 0; c < 256; ++c) lut[c] = fp8_to_f32(static_cast<uint8_t>(c), dt) * scale;
  for (size_t i = 0; i < n; ++i) out[i] = lut[in[i]];
}

}  // namespace rotary::detail::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ROTARY_CPU_QUANTIZE_INL_H_
