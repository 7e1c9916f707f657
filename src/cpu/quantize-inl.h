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

/// Rounds to the nearest integer, ties to even: on x86 from SSE4 by ROUNDPS (Highway's Round), elsewhere by
/// the FPU's own rounding of |v| + 2^23 (|v| < 2^22). Highway 1.0.3's software Round (EMU128, SCALAR) adds
/// 0.5 in f32, and 0.5 - 2^-25 + 0.5 is itself a tie in f32, so it is not relied on there.
template <class D>
HWY_INLINE hn::Vec<D> RoundHalfEven(D d, hn::Vec<D> v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSE4
  (void)d;
  return hn::Round(v);
#else
  const auto magic = hn::Set(d, 8388608.0f);
  return hn::CopySignToAbs(hn::Sub(hn::Add(hn::Abs(v), magic), magic), v);
#endif
}

/// Whole-number f32 lanes converted exactly to i32 where they are in its range; on x86 by the one conversion
/// instruction, without ConvertTo's saturation of lanes out of range (those give 0x80000000; callers
/// only pass such lanes when they discard them).
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> WholeToI32(D d, hn::Vec<D> v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if constexpr (hn::MaxLanes(D()) == 8) return hn::Vec<hn::RebindToSigned<D>>{_mm256_cvttps_epi32(v.raw)};
#if HWY_TARGET <= HWY_AVX3
  if constexpr (hn::MaxLanes(D()) == 16) return hn::Vec<hn::RebindToSigned<D>>{_mm512_cvttps_epi32(v.raw)};
#endif
#endif
  (void)d;
  return hn::ConvertTo(hn::RebindToSigned<D>(), v);
}

/// f32 lanes rounded to the nearest integer, ties to even, as i32 (lanes within i32's range): on AVX-512 full
/// vectors by one conversion with embedded rounding, elsewhere by RoundHalfEven and WholeToI32. On x86 from SSE4
/// the rounding is in the instruction, whatever mode the caller set; elsewhere it is the caller's mode's.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> NearestI32(D d, hn::Vec<D> v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (hn::MaxLanes(D()) == 16) {
    return hn::Vec<hn::RebindToSigned<D>>{
        _mm512_cvt_roundps_epi32(v.raw, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
  }
#endif
  return WholeToI32(d, RoundHalfEven(d, v));
}

// Quotients y / scale without a division where the target fuses multiply-adds (Highway's AVX2 and AVX-512
// targets, unless HWY_DISABLE_BMI2_FMA makes MulAdd a multiply and an add), used by the int8 / fp8 rows kept in
// registers (quantize_rows-inl.h); elsewhere, and in the scratch-row writers below, the encoders divide.
#undef ROTARY_CORRECTED_QUOTIENT
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_BMI2_FMA)
#define ROTARY_CORRECTED_QUOTIENT 1
#else
#define ROTARY_CORRECTED_QUOTIENT 0
#endif

/// fl32(y / scale) as Markstein's corrected product, with inv = fl32(1 / scale) (correctly rounded): t =
/// fl32(y * inv) is within an ulp of y / scale, the residual y - scale * t is exact in one fused multiply-add
/// when exponent(t) + exponent(scale) >= -103 (its last bit is then >= 2^-149), and fl32(t + residual * inv) is
/// then fl32(y / scale) itself (Markstein's theorem; checked against the division by brute force, docs/performance.md).
/// Callers admit scales for which every quotient that decides a stored value meets that bound (Int8ScaleAdmits,
/// Fp8ScaleAdmits). One division per vector is several core cycles for 512 bits (docs/performance.md). As
/// everywhere in rotary, the default rounding mode (to nearest) is assumed: under a directed mode set by the
/// caller, 1 / scale is not correctly rounded and the quotients may differ from a division's.
template <class V>
HWY_INLINE V CorrectedQuotient(V y, V scale, V inv) {
  const V t = hn::Mul(y, inv);
  return hn::MulAdd(hn::NegMulAdd(t, scale, y), inv, t);
}

/// int8 rows: |y| <= amax, so quotients reach 127.5 at most, and those below 2^-2 round to 0 whatever their
/// last bits; the residual of one >= 2^-2 is exact for scales >= 2^-101.
HWY_INLINE bool Int8ScaleAdmits(float scale) { return scale >= 0x1p-100f && scale <= 0x1p100f; }

/// fp8 rows: quotients below 2^-18 encode as a zero of y's sign in both formats (e5m2's smallest subnormal is
/// 2^-16, e4m3's 2^-9), and stay below 2^-17 when the residual is inexact (it is then off by 2^-149 at most,
/// times inv <= 2^80); the residual of one >= 2^-18 is exact for scales >= 2^-85. A quotient past f32's range
/// (|t| infinite) comes out NaN; EncodeFp8 saturates it (its sign and NaN test read y).
HWY_INLINE bool Fp8ScaleAdmits(float scale) { return scale >= 0x1p-80f && scale <= 0x1p100f; }

/// fp8 codes (0..255 in 32-bit lanes) of the quotients q = fl32(y / scale) (scale > 0), as f32_to_fp8:
/// saturating, nearest even, NaN kept. The sign and the NaN test read y (the quotient's sign is y's, and it
/// is NaN exactly when y is), so that a corrected product's NaN for an overflowed quotient saturates: on x86,
/// where that product is used, MINPS returns its second operand, the largest finite code, for a NaN lane.
template <bool kE4M3, class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> EncodeFp8(D d, hn::Vec<D> q, hn::Vec<D> y) {
  const hn::RebindToSigned<D> di;
  constexpr int kShift = kE4M3 ? 20 : 21;
  const auto a = hn::Min(hn::Abs(q), hn::Set(d, kE4M3 ? 448.0f : 57344.0f));  // a NaN y's lane is replaced below
  const auto ab = hn::BitCast(di, a);
  // Below the smallest normal: the number of subnormal steps (2^-9 / 2^-16) nearest a, ties to even (a / step
  // is exact), rounded by NearestI32 (an addition of step * 2^23 would round in the caller's rounding mode).
  const auto sub = NearestI32(d, hn::Mul(a, hn::Set(d, kE4M3 ? 512.0f : 65536.0f)));
  // Normal: round the mantissa to 3 / 2 bits (nearest even: + half - 1 + the kept last bit) and rebias the
  // exponent (by 120 / 112, a multiple of 2^kShift before the shift) in the same additions.
  const auto lsb = hn::And(hn::ShiftRight<kShift>(ab), hn::Set(di, 1));
  constexpr int32_t kRoundRebias = (1 << (kShift - 1)) - 1 - (kE4M3 ? (120 << 23) : (112 << 23));
  const auto normal = hn::ShiftRight<kShift>(hn::Add(hn::Add(ab, hn::Set(di, kRoundRebias)), lsb));
  auto code = hn::IfThenElse(hn::Lt(ab, hn::Set(di, kE4M3 ? 0x3C800000 : 0x38800000)), sub, normal);
  code = hn::IfThenElse(hn::RebindMask(di, hn::IsNaN(y)), hn::Set(di, kE4M3 ? 0x7F : 0x7E), code);
  return hn::OrAnd(code, hn::ShiftRight<24>(hn::BitCast(di, y)), hn::Set(di, 0x80));  // y's sign bit as 0x80
}

/// Stores whole numbers held in 32-bit lanes as bytes — int8 values in [-127, 127] (kSigned) or fp8 codes in
/// [0, 255] — from `lanes(j)`, the lanes of elements j .. j + N - 1, where a target narrows several vectors at
/// once: AVX2 four vectors by three packs (which cannot saturate these values) and one permute back into
/// order, AVX-512 one vector by VPMOVDB (its truncation keeps these values). Returns how many elements it
/// stored (0 elsewhere); the caller stores the rest.
template <bool kSigned, class F>
HWY_INLINE size_t StoreWholeBytes(size_t n, F lanes, uint8_t* HWY_RESTRICT out) {
  size_t j = 0;
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (; j + 32 <= n; j += 32) {
    const __m256i ab = _mm256_packs_epi32(lanes(j).raw, lanes(j + 8).raw);
    const __m256i ce = _mm256_packs_epi32(lanes(j + 16).raw, lanes(j + 24).raw);
    const __m256i packed = kSigned ? _mm256_packs_epi16(ab, ce) : _mm256_packus_epi16(ab, ce);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), _mm256_permutevar8x32_epi32(packed, order));
  }
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  for (; j + 16 <= n; j += 16) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), _mm512_cvtepi32_epi8(lanes(j).raw));
#else
  (void)n, (void)lanes, (void)out;
#endif
  return j;
}

/// Writes y[0, n) into an fp8 row: f32_to_fp8(fl32(y / scale)). The scratch-row writers (this and StoreRowI8)
/// divide: a build where they used the corrected product too made AVX2 f32 prefill with qk-norm into an f32
/// cache, which runs neither writer, 5-10 % slower, with the hot loops' instructions unchanged (docs/performance.md).
template <bool kE4M3>
HWY_INLINE void StoreRowFp8(const float* HWY_RESTRICT y, size_t n, uint8_t* HWY_RESTRICT out, float scale) {
  auto codes = [&](auto dc, size_t i) ROTARY_STEP_INLINE {
    const auto v = hn::LoadU(dc, y + i);
    return EncodeFp8<kE4M3>(dc, hn::Div(v, hn::Set(dc, scale)), v);
  };
  auto step = [&](auto dc, size_t i) ROTARY_STEP_INLINE {
    const hn::Rebind<uint8_t, decltype(dc)> d8;
    hn::StoreU(hn::DemoteTo(d8, codes(dc, i)), d8, out + i);
  };
  const hn::ScalableTag<float> d;
  size_t i = StoreWholeBytes<false>(n, [&](size_t k) HWY_ATTR { return codes(d, k); }, out);
  for (; i + hn::Lanes(d) <= n; i += hn::Lanes(d)) step(d, i);
  if (i < n) Remainder<8, 1>(i, n, step);
}

/// An int8 row's scale from its largest magnitude (quantize_int8_row's rule): NaN when the row holds one, else
/// fl32(amax / 127). Rows whose scale is not finite and > 0 (UsableInt8Scale) are stored as zeros.
HWY_INLINE float Int8RowScale(float amax, bool nan) { return nan ? std::nanf("") : amax / 127.0f; }
HWY_INLINE bool UsableInt8Scale(float scale) { return std::isfinite(scale) && scale > 0.0f; }

/// The int8 values of f32 lanes y with a usable scale: fl32(y / scale) clamped to [-127, 127] and rounded to an
/// integer, ties to even (in f32 lanes).
template <class D>
HWY_INLINE hn::Vec<D> QuantiseI8(D d, hn::Vec<D> y, hn::Vec<D> scale) {
  return RoundHalfEven(d, hn::Min(hn::Max(hn::Div(y, scale), hn::Set(d, -127.0f)), hn::Set(d, 127.0f)));
}

/// Writes y[0, n) into an int8 row with its own scale (quantize_int8_row's rule); returns the scale.
HWY_INLINE float StoreRowI8(const float* HWY_RESTRICT y, size_t n, int8_t* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  // |y|'s maximum in four independent chains; any NaN lane flags the row.
  auto m0 = hn::Zero(d), m1 = hn::Zero(d), m2 = hn::Zero(d), m3 = hn::Zero(d);
  auto nan_v = hn::Zero(d);
  auto flag_nan = [&](hn::Vec<decltype(d)> v) HWY_ATTR { nan_v = hn::Or(nan_v, hn::VecFromMask(d, hn::IsNaN(v))); };
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto v0 = hn::LoadU(d, y + i), v1 = hn::LoadU(d, y + i + N);
    const auto v2 = hn::LoadU(d, y + i + 2 * N), v3 = hn::LoadU(d, y + i + 3 * N);
    m0 = hn::Max(m0, hn::Abs(v0));
    m1 = hn::Max(m1, hn::Abs(v1));
    m2 = hn::Max(m2, hn::Abs(v2));
    m3 = hn::Max(m3, hn::Abs(v3));
    flag_nan(v0), flag_nan(v1), flag_nan(v2), flag_nan(v3);
  }
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, y + i);
    m0 = hn::Max(m0, hn::Abs(v));
    flag_nan(v);
  }
  float amax = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(m0, m1), hn::Max(m2, m3))));
  bool nan = !hn::AllFalse(d, hn::MaskFromVec(nan_v));
  for (; i < n; ++i) {
    nan = nan || std::isnan(y[i]);
    amax = std::fmax(amax, std::fabs(y[i]));
  }
  const float scale = Int8RowScale(amax, nan);
  const bool usable = UsableInt8Scale(scale);
  auto quantised = [&](auto dc, size_t j) ROTARY_STEP_INLINE {
    return usable ? QuantiseI8(dc, hn::LoadU(dc, y + j), hn::Set(dc, scale)) : hn::Zero(dc);
  };
  size_t j = StoreWholeBytes<true>(n, [&](size_t k) HWY_ATTR { return WholeToI32(d, quantised(d, k)); },
                                   reinterpret_cast<uint8_t*>(out));
  auto step = [&](auto dc, size_t k) ROTARY_STEP_INLINE {
    const hn::Rebind<int8_t, decltype(dc)> d8;
    hn::StoreU(hn::DemoteTo(d8, WholeToI32(dc, quantised(dc, k))), d8, out + k);
  };
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
