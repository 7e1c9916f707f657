// Per-target int8 / fp8 cache rows kept in registers: a head row loaded, normalised, rotated and quantised in one pass.
//
// A Highway "-inl.h" piece, re-included per target by prologue_kernels.cc. StoreRow's general path writes the
// f32 result to a scratch row, reads it back for the int8 maximum and again to quantise it; here the row stays
// in kV vectors. The operations are NormRotateRow's and StoreRowI8's / StoreRowFp8's (the same f32 values, the
// same maximum, the same quotients: on x86 from a corrected product, CorrectedQuotient, instead of a division), so
// the stored bytes and scales are theirs.
#if defined(ROTARY_CPU_QUANTIZE_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)  // per-target include guard
#ifdef ROTARY_CPU_QUANTIZE_ROWS_INL_H_
#undef ROTARY_CPU_QUANTIZE_ROWS_INL_H_
#else
#define ROTARY_CPU_QUANTIZE_ROWS_INL_H_
#endif

#include <hwy/highway.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cpu/elements-inl.h"
#include "cpu/prologue_rows-inl.h"
#include "cpu/quantize-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::detail::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Stores the kV whole-number vectors q (int8 values or fp8 codes in 32-bit lanes) as kV * N bytes: on the
/// targets WithQuantRowVectors admits, StoreWholeBytes stores them all (kV * N is a multiple of 32 on AVX2, of
/// 16 on AVX-512).
template <size_t kV, bool kSigned, class D>
HWY_INLINE void StoreWholeVectors(D d, const hn::Vec<hn::RebindToSigned<D>>* q, uint8_t* HWY_RESTRICT out) {
  const size_t N = hn::Lanes(d);
  const size_t stored = StoreWholeBytes<kSigned>(kV * N, [&](size_t k) HWY_ATTR { return q[k / N]; }, out);
  HWY_DASSERT(stored == kV * N);
  (void)stored;
}

#if ROTARY_CORRECTED_QUOTIENT
/// The int8 values of the row y (its scale fl32(amax / 127) = `scale`) into q by CorrectedQuotient instead of a
/// division; false (q untouched, the caller divides) unless Int8ScaleAdmits(scale). The quotient is within 127.5
/// (|y| <= amax), where QuantiseI8's clamp changes nothing, and it is rounded to nearest even (NearestI32).
template <size_t kV, class D>
HWY_INLINE bool Int8ByCorrectedProduct(D d, const hn::Vec<D>* y, float scale, hn::Vec<hn::RebindToSigned<D>>* q) {
  if (!Int8ScaleAdmits(scale)) return false;
  using V = hn::Vec<D>;
  const V vs = hn::Set(d, scale), inv = hn::Set(d, 1.0f / scale);
  for (size_t j = 0; j < kV; ++j) {
    q[j] = NearestI32(d, CorrectedQuotient(y[j], vs, inv));
  }
  return true;
}
#endif

/// One row of D = kV * N channels from `in` (EI) into a quantised cache row `out` of dtype `dt` (kI8: returns
/// its scale; fp8: `tensor_scale`): each value ((x * r) * w with a norm, r the row's RmsFactor) rotated by
/// `rot` (R = D; R = 0: not rotated), as NormRotateRow computes it, then quantised as StoreRowI8 / StoreRowFp8.
template <size_t kV, Elem EI, Pairing P>
HWY_INLINE float QuantRowInRegisters(const Storage<EI>* HWY_RESTRICT in, void* HWY_RESTRICT out, DType dt,
                                     float tensor_scale, const RowRotation& rot, const float* HWY_RESTRICT w,
                                     float r) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const size_t N = hn::Lanes(d);
  using V = hn::Vec<decltype(d)>;
  using VI = hn::Vec<decltype(di)>;
  V y[kV];
  for (size_t j = 0; j < kV; ++j) {
    y[j] = LoadX<EI>(d, in + j * N);
    if (w != nullptr) y[j] = hn::Mul(hn::Mul(y[j], hn::Set(d, r)), hn::LoadU(d, w + j * N));
  }
  if (rot.R != 0) {
    if constexpr (P == Pairing::kHalfSplit) {
      constexpr size_t K = kV / 2;
      for (size_t k = 0; k < K; ++k) {
        const V vc = hn::LoadU(d, rot.c + k * N), vs = hn::LoadU(d, rot.s + k * N);
        const V x0 = y[k], x1 = y[K + k];
        y[k] = hn::NegMulAdd(x1, vs, hn::Mul(x0, vc));
        y[K + k] = hn::MulAdd(x0, vs, hn::Mul(x1, vc));
      }
    } else {
      for (size_t j = 0; j < kV; ++j)
        y[j] = hn::MulAdd(hn::Reverse2(d, y[j]), hn::LoadU(d, rot.s + j * N), hn::Mul(y[j], hn::LoadU(d, rot.c + j * N)));
    }
  }
  VI q[kV];
  float scale = tensor_scale;
  if (dt == DType::kI8) {
    // max |y| on the magnitudes' bits (one integer max per vector): a NaN's bits exceed infinity's, so the
    // maximum is NaN exactly when a value is (StoreRowI8's rule: then the scale is NaN).
    VI m[4] = {hn::Zero(di), hn::Zero(di), hn::Zero(di), hn::Zero(di)};
    for (size_t j = 0; j < kV; ++j) m[j % 4] = hn::Max(m[j % 4], hn::And(hn::BitCast(di, y[j]), hn::Set(di, 0x7FFFFFFF)));
    const int32_t bits = hn::GetLane(hn::MaxOfLanes(di, hn::Max(hn::Max(m[0], m[1]), hn::Max(m[2], m[3]))));
    scale = Int8RowScale(bits_f32(static_cast<uint32_t>(bits)), bits > 0x7F800000);
#if ROTARY_CORRECTED_QUOTIENT
    if (Int8ByCorrectedProduct<kV>(d, y, scale, q)) {
      StoreWholeVectors<kV, true>(d, q, static_cast<uint8_t*>(out));
      return scale;
    }
#endif
    if (UsableInt8Scale(scale)) {
      const V vs = hn::Set(d, scale);
      for (size_t j = 0; j < kV; ++j) q[j] = WholeToI32(d, QuantiseI8(d, y[j], vs));
    } else {
      for (size_t j = 0; j < kV; ++j) q[j] = hn::Zero(di);
    }
    StoreWholeVectors<kV, true>(d, q, static_cast<uint8_t*>(out));
    return scale;
  }
  // fp8: each quotient a corrected product on x86 where the scale admits one (Fp8ScaleAdmits), else a division.
  const bool product = ROTARY_CORRECTED_QUOTIENT && Fp8ScaleAdmits(tensor_scale);
  const V vs = hn::Set(d, tensor_scale), inv = hn::Set(d, 1.0f / tensor_scale);
  auto quotient = [&](V yj) HWY_ATTR { return product ? CorrectedQuotient(yj, vs, inv) : hn::Div(yj, vs); };
  if (dt == DType::kF8E4M3) {
    for (size_t j = 0; j < kV; ++j) q[j] = EncodeFp8<true>(d, quotient(y[j]), y[j]);
  } else {
    for (size_t j = 0; j < kV; ++j) q[j] = EncodeFp8<false>(d, quotient(y[j]), y[j]);
  }
  StoreWholeVectors<kV, false>(d, q, static_cast<uint8_t*>(out));
  return scale;
}

/// fn(kv_tag) with kV = D / N as a compile-time constant (std::integral_constant) for QuantRowInRegisters;
/// false (fn not called) where D is not 4, 8 or 16 whole vectors, the rotation is partial, or the target is
/// not x86 AVX2 / AVX-512 (the others' vectors hold under 8 lanes or narrow one vector at a time, where
/// StoreRow's loops serve as well). A row of 16 vectors fills AVX2's registers and spills: worth it for 16-bit
/// inputs, whose scratch row is a conversion pass, not for f32 ones (hot rows, T = 32, Llama-3-8B shapes,
/// int8 / fp8 caches: bf16 inputs 0.85x the time, f32 inputs 1.15-1.2x), so those keep StoreRow there.
template <Elem EI, class Fn>
HWY_INLINE bool WithQuantRowVectors(size_t D, size_t R, Fn&& fn) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  if (D % N != 0 || (R != 0 && R != D)) return false;
  switch (D / N) {
    case 4: fn(std::integral_constant<size_t, 4>()); return true;
    case 8: fn(std::integral_constant<size_t, 8>()); return true;
    case 16:
      if (EI == Elem::kF32 && N == 8) return false;
      fn(std::integral_constant<size_t, 16>());
      return true;
    default: return false;
  }
#else
  (void)D, (void)R, (void)fn;
  return false;
#endif
}

}  // namespace rotary::detail::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ROTARY_CPU_QUANTIZE_ROWS_INL_H_
