// Per-target element I/O of the CPU kernels: f32/f16/bf16 widening loads and round-to-nearest-even narrowing stores.
//
// A Highway "-inl.h" piece: re-included once per ISA target by kernels.cc (foreach_target.h), never
// compiled on its own. Defines Elem/Storage and LoadX/StoreX, which every row strategy uses; the
// AVX512-BF16 narrowing that StoreX hands kBF16Native vectors to is in bf16_native-inl.h.
#if defined(ROTARY_CPU_ELEMENTS_INL_H_) == defined(HWY_TARGET_TOGGLE)  // per-target include guard
#ifdef ROTARY_CPU_ELEMENTS_INL_H_
#undef ROTARY_CPU_ELEMENTS_INL_H_
#else
#define ROTARY_CPU_ELEMENTS_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>
#include <type_traits>

// ROTARY_SANITIZED: an AddressSanitizer or ThreadSanitizer build. Instrumenting force-inlined bodies of
// every instantiation takes GCC many minutes and gigabytes for prologue_kernels.cc, so these builds do not
// force the step lambdas inline (their speed does not matter).
#ifndef ROTARY_SANITIZED
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ROTARY_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ROTARY_SANITIZED 1
#endif
#endif
#ifndef ROTARY_SANITIZED
#define ROTARY_SANITIZED 0
#endif
// A row's step lambda (one vector of channels), written once for the full-width loop and the narrower
// remainder tags: forced inline, else GCC outlines it (two call sites) and pays a call per vector.
#if ROTARY_SANITIZED
#define ROTARY_STEP_INLINE
#else
#define ROTARY_STEP_INLINE __attribute__((always_inline))
#endif
#endif

HWY_BEFORE_NAMESPACE();
namespace rotary::detail::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Element type in memory. kBF16Native: bf16 narrowed by AVX512-BF16's VCVTNEPS2BF16 on CPUs that
/// have it (AVX3 target only; elsewhere it behaves exactly like kBF16).
enum class Elem { kF32, kF16, kBF16, kBF16Native };

constexpr bool IsBF16(Elem e) { return e == Elem::kBF16 || e == Elem::kBF16Native; }

template <Elem E>
using Storage = std::conditional_t<E == Elem::kF32, float, uint16_t>;

#undef ROTARY_AVX3_WORDS
// AVX-512 (BW): 16-bit word permutes for the bf16 full-vector load/store (raw intrinsics; Highway
// 1.0 has no odd-half truncation). Other widths and targets use the portable ops.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && HWY_TARGET != HWY_SCALAR
#define ROTARY_AVX3_WORDS 1
#else
#define ROTARY_AVX3_WORDS 0
#endif

#undef ROTARY_BF16_NATIVE
// AVX512-BF16 narrowing (bf16_native-inl.h, used when the CPU has it) exists on the AVX3 target only.
#define ROTARY_BF16_NATIVE ROTARY_AVX3_WORDS

// x86 targets from AVX2 up have F16C, whose conversions round to nearest even. Every other target
// uses the integer conversions below (Highway 1.0's portable f16 demotion truncates).
#undef ROTARY_HW_F16
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define ROTARY_HW_F16 1
#else
#define ROTARY_HW_F16 0
#endif

/// Loads Lanes(d) elements of type E and widens them to f32.
template <Elem E, class D>
HWY_INLINE hn::Vec<D> LoadX(D d, const Storage<E>* HWY_RESTRICT p) {
  if constexpr (E == Elem::kF32) {
    return hn::LoadU(d, p);
  } else {
    const hn::RebindToUnsigned<D> du;
    const hn::Rebind<uint16_t, D> d16;
    if constexpr (IsBF16(E)) {
#if ROTARY_AVX3_WORDS
      if constexpr (hn::MaxLanes(d) == 16) {
        // One lane-crossing word permute puts bf16 i into the upper half of f32 lane i and zeroes
        // the lower halves (instead of zero-extend + shift: one port-5 op instead of two ops).
        alignas(64) static constexpr uint16_t kUpper[32] = {0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7,
                                                            0, 8, 0, 9, 0, 10, 0, 11, 0, 12, 0, 13, 0, 14, 0, 15};
        const __m512i idx = _mm512_load_si512(kUpper);
        const __m512i raw = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        return hn::BitCast(d, hn::Vec512<uint32_t>{_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, idx, raw)});
      }
#endif
      return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
    } else {
#if ROTARY_HW_F16
      const hn::Rebind<hwy::float16_t, D> dh;
      return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
#else
      const hn::RebindToSigned<D> di;
      const auto bits = hn::PromoteTo(du, hn::LoadU(d16, p));
      const auto sign = hn::ShiftLeft<16>(hn::And(bits, hn::Set(du, 0x8000u)));
      const auto em = hn::And(bits, hn::Set(du, 0x7FFFu));
      // normal: rebias the exponent (15 -> 127); subnormal: m * 2^-24 exactly; inf/nan: all-ones exponent.
      const auto normal = hn::BitCast(d, hn::Add(hn::ShiftLeft<13>(em), hn::Set(du, 0x38000000u)));
      const auto subnormal = hn::Mul(hn::ConvertTo(d, hn::BitCast(di, em)), hn::Set(d, 5.9604644775390625e-8f));
      const auto infnan = hn::BitCast(d, hn::Or(hn::ShiftLeft<13>(em), hn::Set(du, 0x7F800000u)));
      const auto emi = hn::BitCast(di, em);
      auto mag = hn::IfThenElse(hn::RebindMask(d, hn::Lt(emi, hn::Set(di, 0x0400))), subnormal, normal);
      mag = hn::IfThenElse(hn::RebindMask(d, hn::Gt(emi, hn::Set(di, 0x7BFF))), infnan, mag);
      return hn::Or(mag, hn::BitCast(d, sign));
#endif
    }
  }
}

/// Round to nearest even on non-NaN f32 bits: bits + 0x7FFF + (bit 16); the bf16 is the upper half.
template <class DU>
HWY_INLINE hn::Vec<DU> RoundNonNaNToBF16Bits(DU du, hn::Vec<DU> bits) {
  return hn::Add(hn::Add(bits, hn::Set(du, 0x7FFFu)), hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u)));
}

/// f32 lanes rounded to bf16 (nearest even) in their upper 16 bits; the lower bits are garbage.
/// NaN keeps its payload's upper half with the quiet bit set (the addition could carry into it). NaN lanes
/// are found by IsNaN: Highway 1.0.3's Ne(v, v) compares ordered on AVX2 and AVX-512 (false for NaN).
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> RoundToBF16Bits(D d, hn::Vec<D> v) {
  const hn::RebindToUnsigned<D> du;
  const auto bits = hn::BitCast(du, v);
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Or(bits, hn::Set(du, 0x00400000u)),
                        RoundNonNaNToBF16Bits(du, bits));
}

/// Whether a lane of a or of b is NaN. For AVX2 and AVX-512 vectors: one unordered compare of a with b (true
/// where either is NaN) and one test, instead of a compare per vector and their union, two instructions fewer
/// per pair in the bf16 stores below, which run once per 2N values written.
template <class D>
HWY_INLINE bool AnyNaN(D d, hn::Vec<D> a, hn::Vec<D> b) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (hn::MaxLanes(D()) == 16) return _mm512_cmp_ps_mask(a.raw, b.raw, _CMP_UNORD_Q) != 0;
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if constexpr (hn::MaxLanes(D()) == 8) {
    const __m256 u = _mm256_cmp_ps(a.raw, b.raw, _CMP_UNORD_Q);
    return _mm256_testz_ps(u, u) == 0;
  }
#endif
  return !hn::AllFalse(d, hn::Or(hn::IsNaN(a), hn::IsNaN(b)));
}

/// Whether a lane of a, b, c or e is NaN: AnyNaN's unordered compares, one test for the four vectors.
template <class D>
HWY_INLINE bool AnyNaN4(D d, hn::Vec<D> a, hn::Vec<D> b, hn::Vec<D> c, hn::Vec<D> e) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (hn::MaxLanes(D()) == 16)
    return (_mm512_cmp_ps_mask(a.raw, b.raw, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(c.raw, e.raw, _CMP_UNORD_Q)) != 0;
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if constexpr (hn::MaxLanes(D()) == 8) {
    const __m256 u = _mm256_or_ps(_mm256_cmp_ps(a.raw, b.raw, _CMP_UNORD_Q), _mm256_cmp_ps(c.raw, e.raw, _CMP_UNORD_Q));
    return _mm256_testz_ps(u, u) == 0;
  }
#endif
  return !hn::AllFalse(d, hn::Or(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), hn::Or(hn::IsNaN(c), hn::IsNaN(e))));
}

/// Interleaved bf16 pairs of f32 lanes `even`, `odd`, any values (NaN included), each rounded by RoundToBF16Bits:
/// each 32-bit lane holds one pair, the even value in its lower word. NonNaNBF16PairWords is the common case's.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> BF16PairWords(D d, hn::Vec<D> even, hn::Vec<D> odd) {
  const hn::RebindToUnsigned<D> du;
  return hn::Or(hn::And(RoundToBF16Bits(d, odd), hn::Set(du, 0xFFFF0000u)),
                hn::ShiftRight<16>(RoundToBF16Bits(d, even)));
}

/// bf16 words from the upper halves (the truncated bf16) and lower halves of f32 values holding no NaN, in
/// 16-bit lanes: the upper half plus one where lower + (upper & 1) > 0x8000 — RoundNonNaNToBF16Bits's carry
/// on twice the lanes per operation, without shifts (a saturating add, so that 0xFFFF stays above; a signed
/// compare after flipping bit 15). Equal to it on every non-NaN f32 (checked exhaustively with a stand-alone
/// loop; Bf16Narrowing's tests check every lower half at every edge exponent on every target).
template <class D16>
HWY_INLINE hn::Vec<D16> RoundUpperHalves(D16 d16, hn::Vec<D16> upper, hn::Vec<D16> lower) {
  const hn::RebindToSigned<D16> di16;
  const auto m = hn::SaturatedAdd(lower, hn::And(upper, hn::Set(d16, uint16_t{1})));
  const auto carry = hn::Gt(hn::BitCast(di16, hn::Xor(m, hn::Set(d16, uint16_t{0x8000}))), hn::Zero(di16));
  return hn::Sub(upper, hn::BitCast(d16, hn::VecFromMask(di16, carry)));
}

/// BF16PairWords of f32 lanes `even`, `odd` holding no NaN, rounded in 16-bit lanes (RoundUpperHalves): a shift
/// and a 16-bit blend gather the pairs' upper halves, another two their lower halves (vs a rounding of each
/// vector's 32-bit lanes, then a mask, a shift and an or).
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> NonNaNBF16PairWords(D d, hn::Vec<D> even, hn::Vec<D> odd) {
  const hn::RebindToUnsigned<D> du;
  const hn::Repartition<uint16_t, D> d16;
  const auto e = hn::BitCast(du, even), o = hn::BitCast(du, odd);
  const auto upper = hn::OddEven(hn::BitCast(d16, o), hn::BitCast(d16, hn::ShiftRight<16>(e)));
  const auto lower = hn::OddEven(hn::BitCast(d16, hn::ShiftLeft<16>(o)), hn::BitCast(d16, e));
  return hn::BitCast(du, RoundUpperHalves(d16, upper, lower));
}


#undef ROTARY_BF16_BLOCK_ORDER
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSE4 && HWY_TARGET != HWY_SCALAR
#define ROTARY_BF16_BLOCK_ORDER 1
/// bf16 rows in block order (x86 targets): each block of 2N words (a row step) widens into a "low" f32
/// vector holding its even values and a "high" one holding its odd values, each pair's two words being
/// one 32-bit lane: a shift and a mask, no shuffle. They narrow back into their lanes the same way
/// (StoreBF16BlocksTwice: shifts and 16-bit blends). Per-channel factors (cos, sin, norm weights) are put
/// in the same order once (ToBlockOrder). It replaced an order of 128-bit blocks (values 0-3 and 4-7 of
/// each 8 apart: interleaves with zeros in, byte shuffles and 64-bit interleaves out): the same helpers as
/// the interleaved rows, no shuffle; on AVX2 (Zen 3) 7 % fewer cycles per row step in a stand-alone loop
/// in L1, whole calls unchanged within the noise (docs/performance.md).
template <class D>
HWY_INLINE void LoadBF16Blocks(D d, const uint16_t* HWY_RESTRICT p, hn::Vec<D>* lo, hn::Vec<D>* hi) {
  const hn::RebindToUnsigned<D> du;
  const auto x = hn::LoadU(du, reinterpret_cast<const uint32_t*>(p));
  *lo = hn::BitCast(d, hn::ShiftLeft<16>(x));
  *hi = hn::BitCast(d, hn::And(x, hn::Set(du, 0xFFFF0000u)));
}

template <bool kStream, class D16>
HWY_INLINE void StoreWords(D16 d16, hn::Vec<D16> words, uint16_t* HWY_RESTRICT p) {
  if constexpr (kStream) {
    hn::Stream(words, d16, p);
  } else {
    hn::StoreU(words, d16, p);
  }
}

/// Two pairs of f32 vectors in block order (a row step's two halves: even values, odd values) rounded to
/// nearest even and stored as 2N bf16 each, with one NaN test for the four vectors. A block's pairs are the
/// interleaved rows' pairs, so the words are theirs: NonNaNBF16PairWords, or with a NaN (rare) BF16PairWords.
template <bool kStream, class D>
HWY_INLINE void StoreBF16BlocksTwice(D d, hn::Vec<D> lo0, hn::Vec<D> hi0, uint16_t* HWY_RESTRICT p0, hn::Vec<D> lo1,
                                     hn::Vec<D> hi1, uint16_t* HWY_RESTRICT p1) {
  const hn::Repartition<uint16_t, D> d16;
  if (HWY_UNLIKELY(AnyNaN4(d, lo0, hi0, lo1, hi1))) {
    StoreWords<kStream>(d16, hn::BitCast(d16, BF16PairWords(d, lo0, hi0)), p0);
    StoreWords<kStream>(d16, hn::BitCast(d16, BF16PairWords(d, lo1, hi1)), p1);
    return;
  }
  StoreWords<kStream>(d16, hn::BitCast(d16, NonNaNBF16PairWords(d, lo0, hi0)), p0);
  StoreWords<kStream>(d16, hn::BitCast(d16, NonNaNBF16PairWords(d, lo1, hi1)), p1);
}

/// `v` [K * N] (K vectors of N f32 per half row, K even) in block order: block k's (values 2kN .. 2kN + 2N)
/// even values, then its odd ones, as LoadBF16Blocks leaves the channels.
/// Two loads, a ConcatEven and a ConcatOdd per block, not a loop over values: a decode step orders its cos
/// and sin for q and again for k (docs/performance.md: an apply bf16 decode step 0.97x the time on AVX2).
template <size_t K>
HWY_INLINE void ToBlockOrder(const float* v, float* out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  for (size_t k = 0; k < K / 2; ++k) {
    const auto first = hn::LoadU(d, v + 2 * k * N), second = hn::LoadU(d, v + 2 * k * N + N);
    hn::StoreU(hn::ConcatEven(d, second, first), d, out + 2 * k * N);
    hn::StoreU(hn::ConcatOdd(d, second, first), d, out + 2 * k * N + N);
  }
}
#else
#define ROTARY_BF16_BLOCK_ORDER 0
#endif

#if ROTARY_BF16_NATIVE
/// Narrows 16 f32 lanes to bf16 with AVX512-BF16 and stores them (bf16_native-inl.h); returns false,
/// storing nothing, when a lane is an f32 subnormal (the instruction would flush it to zero).
template <bool kStream, class D>
HWY_INLINE bool StoreBF16Native(D d, hn::Vec<D> v, uint16_t* HWY_RESTRICT p);
#endif

/// Narrows f32 lanes to E with round-to-nearest-even and stores them (non-temporal if kStream).
template <Elem E, bool kStream, class D>
HWY_INLINE void StoreX(D d, hn::Vec<D> v, Storage<E>* HWY_RESTRICT p) {
  if constexpr (E == Elem::kF32) {
    if constexpr (kStream) {
      hn::Stream(v, d, p);
    } else {
      hn::StoreU(v, d, p);
    }
  } else {
    const hn::RebindToUnsigned<D> du;
    const hn::RebindToSigned<D> di;
    const hn::Rebind<uint16_t, D> d16;
    hn::Vec<decltype(d16)> packed;
    if constexpr (IsBF16(E)) {
#if ROTARY_BF16_NATIVE
      if constexpr (E == Elem::kBF16Native && hn::MaxLanes(d) == 16) {
        if (StoreBF16Native<kStream>(d, v, p)) return;  // else a subnormal lane: the code below
      }
#endif
      // Round to nearest even on the f32 bits: bits + 0x7FFF + (bit 16), the bf16 is the upper half.
      const auto r = RoundToBF16Bits(d, v);
#if ROTARY_AVX3_WORDS
      if constexpr (hn::MaxLanes(d) == 16) {
        // Upper halves of the 16 lanes in one word permute (vs shift + pack + qword permute).
        alignas(64) static constexpr uint16_t kOdd[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                                          23, 25, 27, 29, 31, 1,  3,  5,  7,  9,  11,
                                                          13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
        const __m512i w = _mm512_permutexvar_epi16(_mm512_load_si512(kOdd), r.raw);
        packed = hn::Vec256<uint16_t>{_mm512_castsi512_si256(w)};
      } else
#endif
      {
        packed = hn::DemoteTo(d16, hn::BitCast(di, hn::ShiftRight<16>(r)));
      }
    } else {
#if ROTARY_HW_F16
#if ROTARY_AVX3_WORDS
      if constexpr (!kStream && hn::MaxLanes(d) == 16) {
        // Converting straight into memory takes one vector-port micro-op fewer than converting into
        // a register and storing it (measured on Sapphire Rapids: a half-split f16 step 5.8 -> 4.9
        // cycles). Compilers never fold the store, so it is written as inline asm.
        struct Line32 {
          uint16_t w[16];
        };
        asm("vcvtps2ph $8, %1, %0" : "=m"(*reinterpret_cast<Line32*>(p)) : "v"(v.raw));
        return;
      }
#endif
      const hn::Rebind<hwy::float16_t, D> dh;
      packed = hn::BitCast(d16, hn::DemoteTo(dh, v));
#else
      const auto bits = hn::BitCast(du, v);
      const auto sign = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 0x8000u));
      const auto u = hn::And(bits, hn::Set(du, 0x7FFFFFFFu));
      const auto ui = hn::BitCast(di, u);
      // normal: rebias (127 -> 15) and round the 13 dropped bits to nearest even
      const auto odd = hn::And(hn::ShiftRight<13>(u), hn::Set(du, 1u));
      const auto normal = hn::ShiftRight<13>(hn::Add(hn::Add(u, hn::Set(du, 0xC8000FFFu)), odd));
      // subnormal (|v| < 2^-14): the FPU rounds |v| + 0.5 to a multiple of 2^-24
      const auto sub = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(d, u), hn::Set(d, 0.5f))),
                               hn::Set(du, 0x3F000000u));
      auto r = hn::IfThenElse(hn::Lt(ui, hn::Set(di, 0x38800000)), hn::BitCast(di, sub), hn::BitCast(di, normal));
      r = hn::IfThenElse(hn::Gt(ui, hn::Set(di, 0x477FFFFF)), hn::Set(di, 0x7C00), r);
      r = hn::IfThenElse(hn::Gt(ui, hn::Set(di, 0x7F800000)), hn::Set(di, 0x7E00), r);
      packed = hn::DemoteTo(d16, hn::Or(r, hn::BitCast(di, sign)));
#endif
    }
    if constexpr (kStream) {
      hn::Stream(packed, d16, p);
    } else {
      hn::StoreU(packed, d16, p);
    }
  }
}

}  // namespace rotary::detail::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ROTARY_CPU_ELEMENTS_INL_H_
