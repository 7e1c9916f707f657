// Per-target bf16 rows with RMSNorm in block order (the AVX2 prologue's 16-bit path): one half-split row per call.
//
// A Highway "-inl.h" piece, re-included per target by prologue_kernels.cc, which walks a token's rows with
// prologue_rows-inl.h's FactorsAhead (each row's factor) and these rows. ROTARY_PROLOGUE_BF16_BLOCKS says whether the
// target has the path (ROTARY_BF16_BLOCK_ORDER of elements-inl.h).
#if defined(ROTARY_CPU_NORM_BLOCK_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)  // per-target include guard
#ifdef ROTARY_CPU_NORM_BLOCK_ROWS_INL_H_
#undef ROTARY_CPU_NORM_BLOCK_ROWS_INL_H_
#else
#define ROTARY_CPU_NORM_BLOCK_ROWS_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cpu/elements-inl.h"
#include "cpu/rows_general-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::detail::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#undef ROTARY_PROLOGUE_BF16_BLOCKS
#if ROTARY_BF16_BLOCK_ORDER
#define ROTARY_PROLOGUE_BF16_BLOCKS 1
/// One half-split bf16 row with RMSNorm in block order (LoadBF16Blocks / StoreBF16BlocksTwice, elements-inl.h),
/// K whole vectors per half (K even; in place or apart), normalised by `factor` (its RmsFactor); `wb` the
/// weights of both halves and `cb`, `sb` the token's cos and sin in block order (ToBlockOrder: wb [2][h],
/// cb, sb [h]). Callers walk a token's rows with FactorsAhead (above), inlined: a call per
/// row out of line took 1.1x the time on AVX2 (Llama-3-8B shapes, T = 4096, bf16 into a bf16 cache).
/// Each value takes NormRotateRow's operations ((x * r) * w, then the rotation, then round to nearest
/// even), so the results are the same; two vectors are narrowed by one pack, no lane crosses a block.
/// kStream: non-temporal stores (every row and half on a 64-byte line).
template <size_t K, bool kStream>
HWY_INLINE void HalfBF16NormBlockRow(const uint16_t* in, uint16_t* out, const float* HWY_RESTRICT cb, const float* HWY_RESTRICT sb,
                                     const float* HWY_RESTRICT wb, float factor, size_t h) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  using V = hn::Vec<decltype(d)>;
  const V rv = hn::Set(d, factor);
  for (size_t k = 0; k < K / 2; ++k) {
    const size_t i = 2 * k * N;
    V a_lo, a_hi, b_lo, b_hi;
    LoadBF16Blocks(d, in + i, &a_lo, &a_hi);
    LoadBF16Blocks(d, in + h + i, &b_lo, &b_hi);
    a_lo = hn::Mul(hn::Mul(a_lo, rv), hn::LoadU(d, wb + i));
    a_hi = hn::Mul(hn::Mul(a_hi, rv), hn::LoadU(d, wb + i + N));
    b_lo = hn::Mul(hn::Mul(b_lo, rv), hn::LoadU(d, wb + h + i));
    b_hi = hn::Mul(hn::Mul(b_hi, rv), hn::LoadU(d, wb + h + i + N));
    const V c_lo = hn::LoadU(d, cb + i), c_hi = hn::LoadU(d, cb + i + N);
    const V s_lo = hn::LoadU(d, sb + i), s_hi = hn::LoadU(d, sb + i + N);
    StoreBF16BlocksTwice<kStream>(d, hn::NegMulAdd(b_lo, s_lo, hn::Mul(a_lo, c_lo)),
                                  hn::NegMulAdd(b_hi, s_hi, hn::Mul(a_hi, c_hi)), out + i,
                                  hn::MulAdd(a_lo, s_lo, hn::Mul(b_lo, c_lo)), hn::MulAdd(a_hi, s_hi, hn::Mul(b_hi, c_hi)),
                                  out + h + i);
  }
}

/// K of HalfBF16NormBlockRow for half `h`: the half-split register paths' K (RegisterVectors) when it is
/// even (vectors narrowed in pairs), else 0.
HWY_INLINE size_t NormBlockVectors(size_t h) {
  const size_t k = RegisterVectors<Pairing::kHalfSplit>(static_cast<int64_t>(h), 2 * static_cast<int64_t>(h));
  return k % 2 == 0 ? k : 0;
}

/// fn(k_tag, stream_tag) with K (NormBlockVectors) and kStream as compile-time constants
/// (std::integral_constant, std::bool_constant), for HalfBF16NormBlockRow.
template <class Fn>
HWY_INLINE void WithNormBlockK(size_t K, bool stream, Fn&& fn) {
  using S1 = std::true_type;
  using S0 = std::false_type;
  switch (K) {
    case 2: return stream ? fn(std::integral_constant<size_t, 2>(), S1()) : fn(std::integral_constant<size_t, 2>(), S0());
    case 4: return stream ? fn(std::integral_constant<size_t, 4>(), S1()) : fn(std::integral_constant<size_t, 4>(), S0());
    default: return stream ? fn(std::integral_constant<size_t, 8>(), S1()) : fn(std::integral_constant<size_t, 8>(), S0());
  }
}

/// `count` consecutive runs of `h` values (a half's cos, sin or weights) in block order, K vectors per half.
HWY_INLINE void RunsToBlockOrder(size_t K, const float* v, size_t h, size_t count, float* out) {
  for (size_t run = 0; run < count; ++run) {
    switch (K) {
      case 2: ToBlockOrder<2>(v + run * h, out + run * h); break;
      case 4: ToBlockOrder<4>(v + run * h, out + run * h); break;
      default: ToBlockOrder<8>(v + run * h, out + run * h); break;
    }
  }
}
#else
#define ROTARY_PROLOGUE_BF16_BLOCKS 0
#endif

}  // namespace rotary::detail::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ROTARY_CPU_NORM_BLOCK_ROWS_INL_H_
