// SIMD row kernels, written once with Highway and compiled per ISA target (AVX-512, AVX2, SSE4, ..., scalar).
//
// One kernel body serves every dtype (f32 / f16 / bf16 in memory, f32 math), pairing, direction and
// in-place / out-of-place variant; widths are never spelled out, so tails use narrower (capped) tags
// of the same body rather than a second scalar copy.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/kernels.h"

// Included once (foreach_target re-includes this file per target).
#ifndef ROTARY_CPU_KERNELS_ONCE
#define ROTARY_CPU_KERNELS_ONCE
#if HWY_ARCH_X86
#include <cpuid.h>
#endif
namespace rotary::detail::cpu {
namespace {
/// AVX512-BF16 (CPUID leaf 7 subleaf 1, EAX bit 5); the AVX-512 state itself is Highway's check.
bool CpuHasAvx512Bf16() {
#if HWY_ARCH_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) == 0) return false;
  return (a >> 5) & 1u;
#else
  return false;
#endif
}
std::atomic<bool> g_native_bf16{CpuHasAvx512Bf16()};
}  // namespace
inline bool NativeBF16() { return g_native_bf16.load(std::memory_order_relaxed); }
bool set_native_bf16(bool on) {
  const bool usable = on && CpuHasAvx512Bf16();
  g_native_bf16.store(usable, std::memory_order_relaxed);
  return usable;
}
}  // namespace rotary::detail::cpu
#endif  // ROTARY_CPU_KERNELS_ONCE

HWY_BEFORE_NAMESPACE();
namespace rotary::detail::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Element type in memory. kBF16Native: bf16 narrowed by AVX512-BF16's VCVTNEPS2BF16 on CPUs that
/// have it (AVX3 target only; elsewhere it behaves exactly like kBF16).
enum class Elem { kF32, kF16, kBF16, kBF16Native };

constexpr bool IsBF16(Elem e) { return e == Elem::kBF16 || e == Elem::kBF16Native; }

template <Elem E>
using Storage = std::conditional_t<E == Elem::kF32, float, uint16_t>;

// x86 targets from AVX2 up have F16C, whose conversions round to nearest even. Every other target
// uses the integer conversions below (Highway 1.0's portable f16 demotion truncates).
#undef ROTARY_AVX3_WORDS
// AVX-512 (BW): 16-bit word permutes for the bf16 full-vector load/store (raw intrinsics; Highway
// 1.0 has no odd-half truncation). Other widths and targets use the portable ops.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && HWY_TARGET != HWY_SCALAR
#define ROTARY_AVX3_WORDS 1
#else
#define ROTARY_AVX3_WORDS 0
#endif

#undef ROTARY_HW_F16
#undef ROTARY_BF16_BLOCKS
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
/// NaN keeps its payload's upper half with the quiet bit set (the addition could carry into it).
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> RoundToBF16Bits(D d, hn::Vec<D> v) {
  const hn::RebindToUnsigned<D> du;
  const auto bits = hn::BitCast(du, v);
  return hn::IfThenElse(hn::RebindMask(du, hn::Ne(v, v)), hn::Or(bits, hn::Set(du, 0x00400000u)),
                        RoundNonNaNToBF16Bits(du, bits));
}

/// RoundToBF16Bits of two vectors, with the NaN handling only where one of them holds a NaN (rare).
template <class D>
HWY_INLINE void RoundPairToBF16Bits(D d, hn::Vec<D> a, hn::Vec<D> b, hn::Vec<hn::RebindToUnsigned<D>>* ra,
                                    hn::Vec<hn::RebindToUnsigned<D>>* rb) {
  const hn::RebindToUnsigned<D> du;
  if (HWY_UNLIKELY(!hn::AllFalse(d, hn::Or(hn::IsNaN(a), hn::IsNaN(b))))) {
    *ra = RoundToBF16Bits(d, a);
    *rb = RoundToBF16Bits(d, b);
    return;
  }
  *ra = RoundNonNaNToBF16Bits(du, hn::BitCast(du, a));
  *rb = RoundNonNaNToBF16Bits(du, hn::BitCast(du, b));
}

/// Interleaved bf16 pairs from rounded bits (RoundToBF16Bits) of their even and odd values: each
/// 32-bit lane holds one pair, the even value in its lower word.
template <class DU>
HWY_INLINE hn::Vec<DU> BF16PairWords(DU du, hn::Vec<DU> even, hn::Vec<DU> odd) {
  return hn::Or(hn::And(odd, hn::Set(du, 0xFFFF0000u)), hn::ShiftRight<16>(even));
}

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
#if ROTARY_AVX3_WORDS
      if constexpr (E == Elem::kBF16Native && hn::MaxLanes(d) == 16) {
        // VCVTNEPS2BF16 rounds to nearest even and quiets NaNs exactly like the code below, but
        // flushes f32 subnormals to zero: lanes holding one (fpclass 0x20, rare) take the code below.
        // Written as inline asm: Highway 1.0's AVX3 target is compiled without AVX512-BF16.
        if (_mm512_fpclass_ps_mask(v.raw, 0x20) == 0) {
          __m256i narrowed;
          asm("vcvtneps2bf16 %1, %0" : "=v"(narrowed) : "v"(v.raw));
          packed = hn::Vec256<uint16_t>{narrowed};
          if constexpr (kStream) {
            hn::Stream(packed, d16, p);
          } else {
            hn::StoreU(packed, d16, p);
          }
          return;
        }
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

#if ROTARY_AVX3_WORDS
/// Two vectors of 16 f32 lanes narrowed to 32 contiguous bf16 (lo first) by one VCVTNE2PS2BF16.
/// The instruction flushes f32 subnormals to zero, so when any output word is a zero (a true zero or
/// a flushed subnormal; one test for all 32) the inputs are classified and, if a subnormal is among
/// them, both vectors take the portable rounding instead.
template <bool kStream, class D>
HWY_INLINE void StoreBF16Pair(D d, hn::Vec<D> lo, hn::Vec<D> hi, uint16_t* HWY_RESTRICT p) {
  static_assert(hn::MaxLanes(D()) == 16, "AVX3 full vectors only");
  __m512i packed;
  asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(packed) : "v"(hi.raw), "v"(lo.raw));  // words 0-15: lo
  if (HWY_UNLIKELY(_mm512_testn_epi16_mask(packed, _mm512_set1_epi16(0x7FFF)) != 0) &&
      (_mm512_fpclass_ps_mask(lo.raw, 0x20) | _mm512_fpclass_ps_mask(hi.raw, 0x20)) != 0) {
    StoreX<Elem::kBF16, kStream>(d, lo, p);
    StoreX<Elem::kBF16, kStream>(d, hi, p + 16);
    return;
  }
  if constexpr (kStream) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), packed);
  } else {
    _mm512_storeu_si512(p, packed);
  }
}

/// 16 interleaved bf16 pairs (32 words) rotated by their cos `vc` and signed sin `vs` (one lane per
/// pair). A pair shares a 32-bit lane, so the even words widen by one shift and the odd words by one
/// mask, with no lane permutes; the results are narrowed by one VCVTNE2PS2BF16 and re-interleaved by
/// one word permute. Subnormal results are detected and rounded as in StoreBF16Pair.
template <bool kStream, class D>
HWY_INLINE void InterleavedBF16Step(D d, const uint16_t* HWY_RESTRICT in, uint16_t* HWY_RESTRICT out,
                                    hn::Vec<D> vc, hn::Vec<D> vs) {
  static_assert(hn::MaxLanes(D()) == 16, "AVX3 full vectors only");
  const hn::RebindToUnsigned<D> du;
  const __m512i x = _mm512_loadu_si512(in);
  const hn::Vec<D> x0{_mm512_castsi512_ps(_mm512_slli_epi32(x, 16))};
  const hn::Vec<D> x1{_mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))))};
  const auto y0 = hn::NegMulAdd(x1, vs, hn::Mul(x0, vc));
  const auto y1 = hn::MulAdd(x0, vs, hn::Mul(x1, vc));
  __m512i packed;
  asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(packed) : "v"(y1.raw), "v"(y0.raw));  // words 0-15: y0, 16-31: y1
  __m512i words;
  if (HWY_UNLIKELY(_mm512_testn_epi16_mask(packed, _mm512_set1_epi16(0x7FFF)) != 0) &&
      (_mm512_fpclass_ps_mask(y0.raw, 0x20) | _mm512_fpclass_ps_mask(y1.raw, 0x20)) != 0) {
    words = BF16PairWords(du, RoundToBF16Bits(d, y0), RoundToBF16Bits(d, y1)).raw;
  } else {
    alignas(64) static constexpr uint16_t kZip[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    words = _mm512_permutexvar_epi16(_mm512_load_si512(kZip), packed);
  }
  if constexpr (kStream) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out), words);
  } else {
    _mm512_storeu_si512(out, words);
  }
}
#endif

// ------------------------------------------------------------------ rows of one token

/// Half-split pairs (x[i], x[i+h]):  y0 = x0*c - x1*s,  y1 = x1*c + x0*s  (s already signed by direction).
template <Elem E, bool kStream, class D>
HWY_INLINE void HalfStep(D d, const Storage<E>* in, Storage<E>* out, hn::Vec<D> vc, hn::Vec<D> vs, size_t i,
                         size_t h) {
  const auto x0 = LoadX<E>(d, in + i);
  const auto x1 = LoadX<E>(d, in + h + i);
  const auto y0 = hn::NegMulAdd(x1, vs, hn::Mul(x0, vc));
  const auto y1 = hn::MulAdd(x0, vs, hn::Mul(x1, vc));
  StoreX<E, kStream>(d, y0, out + i);
  StoreX<E, kStream>(d, y1, out + h + i);
}

/// Interleaved pairs (x[2i], x[2i+1]) with per-channel rows cd = [c0 c0 c1 c1 ..] and
/// sd = [-s0 s0 -s1 s1 ..] (signed by direction):  y = x*cd + swap_pairs(x)*sd.
template <Elem E, bool kStream, class D>
HWY_INLINE void InterleavedStep(D d, const Storage<E>* in, Storage<E>* out, hn::Vec<D> vc, hn::Vec<D> vs,
                                size_t j) {
  const auto x = LoadX<E>(d, in + j);
  StoreX<E, kStream>(d, hn::MulAdd(hn::Reverse2(d, x), vs, hn::Mul(x, vc)), out + j);
}

/// Narrower tags for the remainder of a row: each handles what the wider ones left over.
template <size_t kCap, size_t kMinCap, class Fn>
HWY_INLINE void Remainder(size_t& i, size_t n, const Fn& fn) {
  const hn::CappedTag<float, kCap> dc;
  for (; i + hn::Lanes(dc) <= n; i += hn::Lanes(dc)) fn(dc, i);
  if constexpr (kCap / 2 >= kMinCap) Remainder<kCap / 2, kMinCap>(i, n, fn);
}

/// Rotates `n` rows of one token. Channel blocks are the outer loop so that each cos/sin vector
/// is loaded once and stays in a register for all of the token's heads.
template <Elem E, bool kStream>
HWY_INLINE void HalfRows(const Storage<E>* const* in, Storage<E>* const* out, int64_t n, const float* c,
                         const float* s, size_t h, size_t start = 0) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = start;
  for (; i + N <= h; i += N) {
    const auto vc = hn::LoadU(d, c + i);
    const auto vs = hn::LoadU(d, s + i);
    for (int64_t r = 0; r < n; ++r) HalfStep<E, kStream>(d, in[r], out[r], vc, vs, i, h);
  }
  if (i < h) {
    Remainder<8, 1>(i, h, [&](auto dc, size_t j) {
      const auto vc = hn::LoadU(dc, c + j);
      const auto vs = hn::LoadU(dc, s + j);
      for (int64_t r = 0; r < n; ++r) HalfStep<E, false>(dc, in[r], out[r], vc, vs, j, h);
    });
  }
}

template <Elem E, bool kStream>
HWY_INLINE void InterleavedRows(const Storage<E>* const* in, Storage<E>* const* out, int64_t n, const float* cd,
                                const float* sd, size_t rdim, size_t start = 0) {
  const hn::ScalableTag<float> d;
#if HWY_TARGET == HWY_SCALAR
  // One-lane vectors cannot hold a pair: rotate pair by pair with the same formula.
  for (int64_t r = 0; r < n; ++r) {
    for (size_t j = start; j < rdim; j += 2) {
      const auto x0 = LoadX<E>(d, in[r] + j);
      const auto x1 = LoadX<E>(d, in[r] + j + 1);
      const auto c = hn::LoadU(d, cd + j);
      StoreX<E, false>(d, hn::MulAdd(x1, hn::LoadU(d, sd + j), hn::Mul(x0, c)), out[r] + j);
      StoreX<E, false>(d, hn::MulAdd(x0, hn::LoadU(d, sd + j + 1), hn::Mul(x1, c)), out[r] + j + 1);
    }
  }
#else
  const size_t N = hn::Lanes(d);
  size_t j = start;
  for (; j + N <= rdim; j += N) {
    const auto vc = hn::LoadU(d, cd + j);
    const auto vs = hn::LoadU(d, sd + j);
    for (int64_t r = 0; r < n; ++r) InterleavedStep<E, kStream>(d, in[r], out[r], vc, vs, j);
  }
  if (j < rdim) {
    Remainder<8, 2>(j, rdim, [&](auto dc, size_t k) {
      const auto vc = hn::LoadU(dc, cd + k);
      const auto vs = hn::LoadU(dc, sd + k);
      for (int64_t r = 0; r < n; ++r) InterleavedStep<E, false>(dc, in[r], out[r], vc, vs, k);
    });
  }
#endif
}

/// Cache line size assumed by the streaming decision (x86 and most Arm cores).
constexpr size_t kLine = 64;

/// Elements to process before `out` reaches a multiple of `bytes` (0 if it cannot: misaligned by
/// a fraction of an element, or, with `pair`, by an odd number of elements).
template <typename T>
HWY_INLINE size_t PeelToAlign(const T* out, size_t bytes, bool pair) {
  const size_t mis = reinterpret_cast<uintptr_t>(out) % bytes;
  if (mis == 0 || mis % (pair ? 2 * sizeof(T) : sizeof(T)) != 0) return 0;
  return (bytes - mis) / sizeof(T);
}

/// The whole cache lines [first, end) (in elements) of a segment of `len` elements at `out`: false
/// (and an empty span) when `out` is not a whole number of elements (pairs) past a line.
template <typename T>
HWY_INLINE bool StreamSpan(const T* out, size_t len, bool pair, size_t* first, size_t* end) {
  const size_t mis = reinterpret_cast<uintptr_t>(out) % kLine;
  *first = *end = 0;
  if (mis % (pair ? 2 * sizeof(T) : sizeof(T)) != 0) return false;
  const size_t line_elems = kLine / sizeof(T);
  const size_t lead = mis == 0 ? 0 : (kLine - mis) / sizeof(T);
  if (lead >= len) return false;
  *first = lead;
  *end = lead + (len - lead) / line_elems * line_elems;
  return true;
}

/// One row of a large call whose output rows are not all cache-line aligned: a few elements first
/// so that the full-width stores are aligned (numpy arrays start 16 bytes past a cache line:
/// unaligned 64-byte stores would split every line), then full vectors, with the prefetch of a row
/// further ahead interleaved (`pf` may be any address: prefetches never fault). With kStream, the
/// whole cache lines of the row's interior are written with non-temporal stores; the partial lines
/// at its ends, which neighbouring rows share, with ordinary stores (never both kinds in one line).
template <Elem E, bool kStream>
HWY_INLINE void HalfRowPeeled(const Storage<E>* in, Storage<E>* out, const float* c, const float* s, size_t h,
                              const Storage<E>* pf) {
  using T = Storage<E>;
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto narrow = [&](auto dc, size_t j) {
    HalfStep<E, false>(dc, in, out, hn::LoadU(dc, c + j), hn::LoadU(dc, s + j), j, h);
  };
  size_t i = 0;
  const size_t peel = std::min(h, PeelToAlign(out, N * sizeof(T), false));
  if (peel != 0) Remainder<8, 1>(i, peel, narrow);
  if constexpr (kStream) {
    // Whole lines of each half (both halves share the alignment: h is whole lines) are streamed.
    size_t first = 0, end = 0;
    if (StreamSpan(out, h, false, &first, &end)) {
      for (; i + N <= first; i += N) {
        hwy::Prefetch(pf + i);
        hwy::Prefetch(pf + h + i);
        HalfStep<E, false>(d, in, out, hn::LoadU(d, c + i), hn::LoadU(d, s + i), i, h);
      }
    }
    for (; i + N <= end; i += N) {
      hwy::Prefetch(pf + i);
      hwy::Prefetch(pf + h + i);
      HalfStep<E, true>(d, in, out, hn::LoadU(d, c + i), hn::LoadU(d, s + i), i, h);
    }
  }
  for (; i + N <= h; i += N) {
    hwy::Prefetch(pf + i);
    hwy::Prefetch(pf + h + i);
    HalfStep<E, false>(d, in, out, hn::LoadU(d, c + i), hn::LoadU(d, s + i), i, h);
  }
  if (i < h) Remainder<8, 1>(i, h, narrow);
}

template <Elem E, bool kStream>
HWY_INLINE void InterleavedRowPeeled(const Storage<E>* in, Storage<E>* out, const float* cd, const float* sd,
                                     size_t rdim, const Storage<E>* pf) {
#if HWY_TARGET == HWY_SCALAR
  (void)pf;
  InterleavedRows<E, false>(&in, &out, 1, cd, sd, rdim);
#else
  using T = Storage<E>;
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto narrow = [&](auto dc, size_t k) {
    InterleavedStep<E, false>(dc, in, out, hn::LoadU(dc, cd + k), hn::LoadU(dc, sd + k), k);
  };
  size_t j = 0;
  const size_t peel = std::min(rdim, PeelToAlign(out, N * sizeof(T), true));
  if (peel != 0) Remainder<8, 2>(j, peel, narrow);
  if constexpr (kStream) {
    size_t first = 0, end = 0;
    if (StreamSpan(out, rdim, true, &first, &end)) {
      for (; j + N <= first; j += N) {
        hwy::Prefetch(pf + j);
        InterleavedStep<E, false>(d, in, out, hn::LoadU(d, cd + j), hn::LoadU(d, sd + j), j);
      }
    }
    for (; j + N <= end; j += N) {
      hwy::Prefetch(pf + j);
      InterleavedStep<E, true>(d, in, out, hn::LoadU(d, cd + j), hn::LoadU(d, sd + j), j);
    }
  }
  for (; j + N <= rdim; j += N) {
    hwy::Prefetch(pf + j);
    InterleavedStep<E, false>(d, in, out, hn::LoadU(d, cd + j), hn::LoadU(d, sd + j), j);
  }
  if (j < rdim) Remainder<8, 2>(j, rdim, narrow);
#endif
}

#if HWY_TARGET != HWY_SCALAR
/// InterleavedBF16Step for targets without AVX512-BF16: N pairs (2N words) with each pair in one
/// 32-bit lane, widened by one shift and one mask, rotated by the pairs' cos `vc` and signed sin `vs`
/// (no duplication per channel, no pair swaps), and the two rounded results recombined into the
/// pairs' lanes by a mask, a shift and an or (no pack or lane permute).
template <bool kStream, class D>
HWY_INLINE void InterleavedBF16LaneStep(D d, const uint16_t* in, uint16_t* out, hn::Vec<D> vc, hn::Vec<D> vs) {
  const hn::RebindToUnsigned<D> du;
  const auto x = hn::LoadU(du, reinterpret_cast<const uint32_t*>(in));
  const auto x0 = hn::BitCast(d, hn::ShiftLeft<16>(x));
  const auto x1 = hn::BitCast(d, hn::And(x, hn::Set(du, 0xFFFF0000u)));
  hn::Vec<decltype(du)> r0, r1;
  RoundPairToBF16Bits(d, hn::NegMulAdd(x1, vs, hn::Mul(x0, vc)), hn::MulAdd(x0, vs, hn::Mul(x1, vc)), &r0, &r1);
  const auto words = BF16PairWords(du, r0, r1);
  if constexpr (kStream) {
    hn::Stream(words, du, reinterpret_cast<uint32_t*>(out));
  } else {
    hn::StoreU(words, du, reinterpret_cast<uint32_t*>(out));
  }
}
#endif

// ------------------------------------------------------------------ rows of a job

/// Per-thread buffers for cos/sin rows that must be gathered, computed, negated or duplicated.
inline float* Scratch(size_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

/// The rows a kernel multiplies by for one token: cos and sin as the pairing wants them
/// (half-split: c, s or -s; interleaved: duplicated per channel with the pair's signs).
/// Token (b, s)'s cos and sin rows (`half` f32 each), straight from the table when possible.
HWY_INLINE void TokenCosSin(const RowJob& job, int64_t b, int64_t s, float* resolved, const float** crow,
                            const float** srow) {
  const Plan& p = *job.plan;
  if (job.table_fast) {
    *crow = p.cs.table + (p.pos.offset + s) * (2 * p.half);
    *srow = *crow + p.half;
  } else {
    resolve_cos_sin(p, b, s, resolved, crow, srow);
  }
}

template <Pairing P>
HWY_INLINE void TokenRows(const RowJob& job, int64_t b, int64_t s, float* resolved, float* prepared,
                          const float** c_use, const float** s_use) {
  const Plan& p = *job.plan;
  const size_t h = static_cast<size_t>(p.half);
  const float* crow;
  const float* srow;
  TokenCosSin(job, b, s, resolved, &crow, &srow);
  const bool inverse = p.direction == Direction::kInverse;
  *c_use = crow;
  *s_use = srow;
  if constexpr (P == Pairing::kHalfSplit) {
    if (inverse) {
      for (size_t i = 0; i < h; ++i) prepared[i] = -srow[i];
      *s_use = prepared;
    }
  } else {
    float* cd = prepared;
    float* sd = prepared + 2 * h;
    const float sign = inverse ? -1.0f : 1.0f;
    for (size_t i = 0; i < h; ++i) {
      cd[2 * i] = crow[i];
      cd[2 * i + 1] = crow[i];
      sd[2 * i] = -sign * srow[i];
      sd[2 * i + 1] = sign * srow[i];
    }
    *c_use = cd;
    *s_use = sd;
  }
}

template <Elem E, Pairing P, bool kStream>
HWY_INLINE void Rows(const Storage<E>* const* in, Storage<E>* const* out, int64_t n, const float* c,
                     const float* s, const Plan& p) {
  using T = Storage<E>;
  const size_t R = static_cast<size_t>(p.rotary_dim);
  const size_t D = static_cast<size_t>(p.head_dim);
  if constexpr (P == Pairing::kHalfSplit) {
    HalfRows<E, kStream>(in, out, n, c, s, static_cast<size_t>(p.half));
  } else {
    InterleavedRows<E, kStream>(in, out, n, c, s, R);
  }
  if (R < D) {  // out of place: pass-through channels are copied
    for (int64_t q = 0; q < n; ++q) {
      if (in[q] != out[q]) std::memcpy(out[q] + R, in[q] + R, (D - R) * sizeof(T));
    }
  }
}

/// Software prefetch distance for large calls. Hardware prefetchers alone leave a core short of
/// misses in flight once f16/bf16 conversions lengthen the loop (measured: f16 P1 in place about 1.5x faster).
constexpr int64_t kPrefetchBytes = 4096;

/// Byte distance from a row to the row to prefetch while working on it: kPrefetchBytes ahead when
/// the tensor's rows of consecutive tokens follow each other in memory (thd, bshd), else the same
/// head of the next token (bhsd, strided views).
inline int64_t PrefetchDelta(const PlanTensor& t, int64_t head_dim, size_t esize) {
  const bool dense = t.in_sh == head_dim && t.in_ss == t.heads * head_dim;
  return dense ? kPrefetchBytes : t.in_ss * static_cast<int64_t>(esize);
}

/// Every output row of the call starts on a cache line, and so does every half of a half-split row
/// (`half_bytes`), so full-width stores need no peeling and may stream.
inline bool RowsAligned(const Plan& p, size_t esize, size_t half_bytes) {
  if (half_bytes % kLine != 0) return false;
  for (int i = 0; i < p.ntensors; ++i) {
    const PlanTensor& t = p.t[i];
    const auto es = static_cast<int64_t>(esize);
    if (reinterpret_cast<uintptr_t>(t.out) % kLine != 0 || (t.out_sb * es) % kLine != 0 ||
        (t.out_ss * es) % kLine != 0 || (t.out_sh * es) % kLine != 0)
      return false;
  }
  return true;
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSE4
#define ROTARY_BF16_BLOCKS 1
/// Half-split bf16 rows for x86 targets without AVX512-BF16, 2N values per half and step: words widen
/// by interleaving with zeros inside 128-bit blocks (one vector gets values 0-3 of each 8-value block,
/// the other values 4-7) and narrow by the inverse, a signed pack inside blocks, so no lane crosses a
/// block; cos/sin are permuted the same way once per token. Replaces a zero-extension and a shift per
/// vector on the way in and a pack plus a block permute per vector on the way out.
template <size_t K, bool kStream, bool kPrefetch>
HWY_INLINE void HalfBF16BlockRows(const uint16_t* in, uint16_t* out, int64_t n, int64_t in_step,
                                  int64_t out_step, const float* c, const float* s, size_t h, bool inverse,
                                  int64_t pf_delta) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Repartition<uint16_t, decltype(d)> d16;
  const hn::Repartition<int16_t, decltype(d)> di16;
  const size_t N = hn::Lanes(d);
  using V = hn::Vec<decltype(d)>;
  V clo[K / 2], chi[K / 2], slo[K / 2], shi[K / 2];
  alignas(64) float tc[2 * hn::MaxLanes(d)], ts[2 * hn::MaxLanes(d)];
  const float sign = inverse ? -1.0f : 1.0f;
  for (size_t k = 0; k < K / 2; ++k) {
    for (size_t j = 0; j < N; ++j) {
      const size_t lo = 2 * k * N + (j / 4) * 8 + j % 4;  // value j of the "low" vector
      tc[j] = c[lo];
      tc[N + j] = c[lo + 4];
      ts[j] = sign * s[lo];
      ts[N + j] = sign * s[lo + 4];
    }
    clo[k] = hn::Load(d, tc);
    chi[k] = hn::Load(d, tc + N);
    slo[k] = hn::Load(d, ts);
    shi[k] = hn::Load(d, ts + N);
  }
  const auto zero = hn::Zero(d16);
  auto store = [&](V lo, V hi, uint16_t* p) {
    hn::Vec<hn::RebindToUnsigned<decltype(d)>> rl, rh;
    RoundPairToBF16Bits(d, lo, hi, &rl, &rh);
    // The bf16 is each lane's upper half: an arithmetic shift keeps it exact through the signed pack.
    const auto words = hn::BitCast(d16, hn::ReorderDemote2To(di16, hn::ShiftRight<16>(hn::BitCast(di, rl)),
                                                              hn::ShiftRight<16>(hn::BitCast(di, rh))));
    if constexpr (kStream) {
      hn::Stream(words, d16, p);
    } else {
      hn::StoreU(words, d16, p);
    }
  };
  for (int64_t r = 0; r < n; ++r, in += in_step, out += out_step) {
    if constexpr (kPrefetch) {
      const auto pf = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(in) + pf_delta);
      for (size_t off = 0; off < 2 * K * N * sizeof(uint16_t); off += kLine) hwy::Prefetch(pf + off);
    }
    for (size_t k = 0; k < K / 2; ++k) {
      const size_t i = 2 * k * N;
      const auto x0 = hn::LoadU(d16, in + i), x1 = hn::LoadU(d16, in + h + i);
      const V a_lo = hn::BitCast(d, hn::InterleaveLower(d16, zero, x0));
      const V a_hi = hn::BitCast(d, hn::InterleaveUpper(d16, zero, x0));
      const V b_lo = hn::BitCast(d, hn::InterleaveLower(d16, zero, x1));
      const V b_hi = hn::BitCast(d, hn::InterleaveUpper(d16, zero, x1));
      store(hn::NegMulAdd(b_lo, slo[k], hn::Mul(a_lo, clo[k])), hn::NegMulAdd(b_hi, shi[k], hn::Mul(a_hi, chi[k])),
            out + i);
      store(hn::MulAdd(a_lo, slo[k], hn::Mul(b_lo, clo[k])), hn::MulAdd(a_hi, shi[k], hn::Mul(b_hi, chi[k])),
            out + h + i);
    }
  }
}
#else
#define ROTARY_BF16_BLOCKS 0
#endif

/// `n` rows of one tensor and one token (row k at in + k*in_step, out + k*out_step) whose rotated
/// part is exactly K full vectors per half (half-split) or K vectors (interleaved): the token's cos
/// and sin vectors (from its plain rows c, s of `h` values) are built once in registers, signed for
/// the direction and, for interleaved pairs, duplicated per channel, and every row is fully
/// unrolled, so a row costs only its loads, multiplies and stores. With kPrefetch, each row
/// prefetches the row `pf_delta` bytes further on.
template <size_t K, Elem E, Pairing P, bool kStream, bool kPrefetch>
HWY_INLINE void RowsInRegisters(const Storage<E>* in, Storage<E>* out, int64_t n, int64_t in_step,
                                int64_t out_step, const float* c, const float* s, size_t h, bool inverse,
                                int64_t pf_delta) {
  using T = Storage<E>;
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  using V = hn::Vec<decltype(d)>;
#if HWY_TARGET != HWY_SCALAR
  if constexpr (IsBF16(E) && P == Pairing::kInterleaved && K % 2 == 0) {
    // Pairs in lanes (InterleavedBF16Step, InterleavedBF16LaneStep): the plain cos/sin rows, K/2
    // vectors of N pairs each.
    V pc[K / 2], ps[K / 2];
    for (size_t k = 0; k < K / 2; ++k) {
      pc[k] = hn::LoadU(d, c + k * N);
      ps[k] = inverse ? hn::Neg(hn::LoadU(d, s + k * N)) : hn::LoadU(d, s + k * N);
    }
    for (int64_t r = 0; r < n; ++r, in += in_step, out += out_step) {
      if constexpr (kPrefetch) {
        const auto pf = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(in) + pf_delta);
        for (size_t off = 0; off < K * N * sizeof(T); off += kLine) hwy::Prefetch(pf + off);
      }
      for (size_t k = 0; k < K / 2; ++k) {
#if ROTARY_AVX3_WORDS
        if constexpr (E == Elem::kBF16Native) {
          InterleavedBF16Step<kStream>(d, in + 2 * k * N, out + 2 * k * N, pc[k], ps[k]);
          continue;
        }
#endif
        InterleavedBF16LaneStep<kStream>(d, in + 2 * k * N, out + 2 * k * N, pc[k], ps[k]);
      }
    }
    return;
  }
#endif
#if ROTARY_BF16_BLOCKS
  if constexpr (E == Elem::kBF16 && P == Pairing::kHalfSplit && K % 2 == 0) {
    return HalfBF16BlockRows<K, kStream, kPrefetch>(in, out, n, in_step, out_step, c, s, h, inverse, pf_delta);
  }
#endif
  V vc[K], vs[K];
  if constexpr (P == Pairing::kHalfSplit) {
    for (size_t k = 0; k < K; ++k) {
      vc[k] = hn::LoadU(d, c + k * N);
      vs[k] = inverse ? hn::Neg(hn::LoadU(d, s + k * N)) : hn::LoadU(d, s + k * N);
    }
  } else {
#if HWY_TARGET == HWY_SCALAR
    HWY_ASSERT(false);  // one-lane vectors never take this path (RegisterVectors is 0)
#else
    // Vector k covers pairs [k*N/2, (k+1)*N/2): lanes [c0 c0 c1 c1 ..] and [-s0 s0 -s1 s1 ..] (forward).
    const hn::Half<decltype(d)> dh;
    alignas(64) int32_t dup[hn::MaxLanes(d)];
    for (size_t i = 0; i < N; ++i) dup[i] = static_cast<int32_t>(i / 2);
    const auto idx = hn::SetTableIndices(d, dup);
    const float sign = inverse ? -1.0f : 1.0f;
    const V pair_sign = hn::OddEven(hn::Set(d, sign), hn::Set(d, -sign));
    for (size_t k = 0; k < K; ++k) {
      vc[k] = hn::TableLookupLanes(hn::ZeroExtendVector(d, hn::LoadU(dh, c + k * N / 2)), idx);
      vs[k] = hn::Mul(hn::TableLookupLanes(hn::ZeroExtendVector(d, hn::LoadU(dh, s + k * N / 2)), idx), pair_sign);
    }
#endif
  }
  for (int64_t r = 0; r < n; ++r, in += in_step, out += out_step) {
    if constexpr (kPrefetch) {
      const auto pf = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(in) + pf_delta);
      const size_t bytes = (P == Pairing::kHalfSplit ? 2 : 1) * K * N * sizeof(T);
      for (size_t off = 0; off < bytes; off += kLine) hwy::Prefetch(pf + off);
    }
#if ROTARY_AVX3_WORDS
    if constexpr (E == Elem::kBF16Native && P == Pairing::kHalfSplit && K % 2 == 0 && hn::MaxLanes(d) == 16) {
      // Pairs of vectors: one 64-byte narrowing and store per pair (see StoreBF16Pair).
      for (size_t k = 0; k < K; k += 2) {
        const size_t i = k * N;
        const auto a0 = LoadX<E>(d, in + i), a1 = LoadX<E>(d, in + h + i);
        const auto b0 = LoadX<E>(d, in + i + N), b1 = LoadX<E>(d, in + h + i + N);
        StoreBF16Pair<kStream>(d, hn::NegMulAdd(a1, vs[k], hn::Mul(a0, vc[k])),
                               hn::NegMulAdd(b1, vs[k + 1], hn::Mul(b0, vc[k + 1])), out + i);
        StoreBF16Pair<kStream>(d, hn::MulAdd(a0, vs[k], hn::Mul(a1, vc[k])),
                               hn::MulAdd(b0, vs[k + 1], hn::Mul(b1, vc[k + 1])), out + h + i);
      }
      continue;
    }
#endif
    for (size_t k = 0; k < K; ++k) {
      if constexpr (P == Pairing::kHalfSplit) {
        HalfStep<E, kStream>(d, in, out, vc[k], vs[k], k * N, h);
      } else {
        InterleavedStep<E, kStream>(d, in, out, vc[k], vs[k], k * N);
      }
    }
  }
}

/// Vectors per half (half-split) or per rotated row (interleaved) when RowsInRegisters applies
/// (a multiple of the vector length, at most 8 vectors), else 0.
template <Pairing P>
HWY_INLINE size_t RegisterVectors(const Plan& p) {
#if HWY_TARGET == HWY_SCALAR
  (void)p;
  return 0;
#else
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  const size_t len = P == Pairing::kHalfSplit ? static_cast<size_t>(p.half) : static_cast<size_t>(p.rotary_dim);
  if (len % N != 0) return 0;
  const size_t k = len / N;
  // Interleaved rows of 16 vectors: head_dim 128 on 8-lane (AVX2) vectors.
  return (k == 1 || k == 2 || k == 4 || k == 8 || (P == Pairing::kInterleaved && k == 16)) ? k : 0;
#endif
}

/// RowsInRegisters with K chosen at run time.
template <Elem E, Pairing P, bool kStream, bool kPrefetch>
HWY_INLINE void RowsInRegistersK(size_t K, const Storage<E>* in, Storage<E>* out, int64_t n, int64_t in_step,
                                 int64_t out_step, const float* c, const float* s, size_t h, bool inverse,
                                 int64_t pf_delta) {
  switch (K) {
    case 1: return RowsInRegisters<1, E, P, kStream, kPrefetch>(in, out, n, in_step, out_step, c, s, h, inverse, pf_delta);
    case 2: return RowsInRegisters<2, E, P, kStream, kPrefetch>(in, out, n, in_step, out_step, c, s, h, inverse, pf_delta);
    case 4: return RowsInRegisters<4, E, P, kStream, kPrefetch>(in, out, n, in_step, out_step, c, s, h, inverse, pf_delta);
    case 8: return RowsInRegisters<8, E, P, kStream, kPrefetch>(in, out, n, in_step, out_step, c, s, h, inverse, pf_delta);
    default:
      if constexpr (P == Pairing::kInterleaved) {
        return RowsInRegisters<16, E, P, kStream, kPrefetch>(in, out, n, in_step, out_step, c, s, h, inverse, pf_delta);
      }
      HWY_ASSERT(false);  // RegisterVectors never returns another K
  }
}

/// How a job walks the rows of one token.
enum class Walk {
  kBlocks,       ///< a small call (one token): its rows share cos/sin in registers, no prefetching
  kRows,         ///< row after row with prefetch; rows not all aligned: each is peeled to aligned stores
  kAlignedRows,  ///< row after row with prefetch; every output row starts on a cache line
};

/// Tensor i's rows among the rows [w0, w1) of token (b, s) (row order: q heads, then k heads):
/// their count, and the input and output of the first one (the others follow by the head strides).
template <typename T>
HWY_INLINE int64_t TensorRowsOfToken(const Plan& p, int i, int64_t rpt, int64_t b, int64_t s, int64_t w0,
                                     int64_t w1, const T** in, T** out) {
  const int64_t first = i == 0 ? 0 : p.t[0].heads;  // row index of this tensor's head 0
  const int64_t last = i == 0 ? p.t[0].heads : rpt;
  const int64_t lo = std::max(w0, first), hi = std::min(w1, last);
  if (lo >= hi) return 0;
  const PlanTensor& t = p.t[i];
  *in = static_cast<const T*>(t.in) + b * t.in_sb + s * t.in_ss + (lo - first) * t.in_sh;
  *out = static_cast<T*>(t.out) + b * t.out_sb + s * t.out_ss + (lo - first) * t.out_sh;
  return hi - lo;
}

template <Elem E, Pairing P, bool kStream, Walk W>
void RunRowsT(const RowJob& job, int64_t r0, int64_t r1) {
  using T = Storage<E>;
  const Plan& p = *job.plan;
  const size_t h = static_cast<size_t>(p.half);
  const size_t R = static_cast<size_t>(p.rotary_dim);
  const size_t D = static_cast<size_t>(p.head_dim);
  // scratch: [resolved cos|sin (2h)] [signed / duplicated rows (4h)]
  float* scratch = Scratch(6 * h + 16);
  float* resolved = scratch;
  float* prepared = scratch + 2 * h + 8;
  const float* c_use = nullptr;
  const float* s_use = nullptr;
  const int64_t rpt = job.rows_per_token;
  int64_t pf_delta[2] = {0, 0};
  for (int i = 0; i < p.ntensors; ++i) pf_delta[i] = PrefetchDelta(p.t[i], p.head_dim, sizeof(T));
  const size_t K = W == Walk::kRows ? 0 : RegisterVectors<P>(p);
  const bool inverse = p.direction == Direction::kInverse;

  int64_t g = r0 / rpt;  // token index b * S + s
  int64_t w = r0 % rpt;  // first row of the token to do
  int64_t b = g / p.S, s = g % p.S;
  for (int64_t r = r0; r < r1;) {
    const int64_t w_end = std::min(rpt, w + (r1 - r));
    if (K != 0) {
      TokenCosSin(job, b, s, resolved, &c_use, &s_use);  // signed and duplicated in registers
      // Each tensor's rows of this token with cos/sin in registers (prefetching for large calls).
      for (int i = 0; i < p.ntensors; ++i) {
        const T* in;
        T* out;
        const int64_t n = TensorRowsOfToken(p, i, rpt, b, s, w, w_end, &in, &out);
        if (n == 0) continue;
        const PlanTensor& t = p.t[i];
        constexpr bool kPrefetch = W != Walk::kBlocks;
        RowsInRegistersK<E, P, kStream, kPrefetch>(K, in, out, n, t.in_sh, t.out_sh, c_use, s_use, h, inverse,
                                                   pf_delta[i]);
        if (R < D && t.in != t.out) {
          for (int64_t k = 0; k < n; ++k, in += t.in_sh, out += t.out_sh) {
            std::memcpy(out + R, in + R, (D - R) * sizeof(T));
          }
        }
      }
    } else if constexpr (W == Walk::kBlocks) {
      TokenRows<P>(job, b, s, resolved, prepared, &c_use, &s_use);
      // This token's rows [w, w_end): pointers by stepping each tensor's head stride, then each
      // cos/sin vector is loaded once for all of them.
      constexpr int64_t kBatch = 64;
      const T* ins[kBatch];
      T* outs[kBatch];
      for (int64_t w0 = w; w0 < w_end; w0 += kBatch) {
        const int64_t w1 = std::min(w_end, w0 + kBatch);
        int64_t n = 0;
        for (int i = 0; i < p.ntensors; ++i) {
          const T* in;
          T* out;
          const int64_t rows = TensorRowsOfToken(p, i, rpt, b, s, w0, w1, &in, &out);
          for (int64_t k = 0; k < rows; ++k, ++n, in += p.t[i].in_sh, out += p.t[i].out_sh) {
            ins[n] = in;
            outs[n] = out;
          }
        }
        Rows<E, P, false>(ins, outs, n, c_use, s_use, p);  // never streamed: see RunRowsE
      }
    } else {
      TokenRows<P>(job, b, s, resolved, prepared, &c_use, &s_use);
      for (int i = 0; i < p.ntensors; ++i) {
        const T* in;
        T* out;
        const int64_t n = TensorRowsOfToken(p, i, rpt, b, s, w, w_end, &in, &out);
        const PlanTensor& t = p.t[i];
        const bool copy_tail = R < D && t.in != t.out;
        for (int64_t k = 0; k < n; ++k, in += t.in_sh, out += t.out_sh) {
          // Prefetch addresses are computed as integers: they may lie past the tensor (never faults).
          const T* pf = reinterpret_cast<const T*>(reinterpret_cast<uintptr_t>(in) + pf_delta[i]);
          if constexpr (P == Pairing::kHalfSplit) {
            HalfRowPeeled<E, kStream>(in, out, c_use, s_use, h, pf);  // peels nothing on aligned rows
          } else {
            InterleavedRowPeeled<E, kStream>(in, out, c_use, s_use, R, pf);
          }
          if (copy_tail) {
            for (size_t off = R; off < D; off += kLine / sizeof(T)) hwy::Prefetch(pf + off);
            std::memcpy(out + R, in + R, (D - R) * sizeof(T));
          }
        }
      }
    }
    r += w_end - w;
    w = 0;
    if (++s == p.S) {
      s = 0;
      ++b;
    }
  }
  if constexpr (kStream) hwy::FlushStream();
}

template <Elem E, Pairing P>
void RunRowsP(const RowJob& job, int64_t r0, int64_t r1) {
  const Plan& p = *job.plan;
  if (!job.row_outer) return RunRowsT<E, P, false, Walk::kBlocks>(job, r0, r1);
  const hn::ScalableTag<float> d;
  const size_t esize = sizeof(Storage<E>);
  // Rows whose stores all start on a cache line take the loop without peeling; streamed only then
  // (write-combining needs whole lines written in one go; mixing streamed and cached stores in one
  // line costs far more than not streaming: measured 10x slower on f16 rows), only with full native
  // vectors (Highway streams at least 16 bytes) and only for whole-line rows.
  const size_t line_unit = P == Pairing::kHalfSplit ? static_cast<size_t>(p.half) : static_cast<size_t>(p.rotary_dim);
  const bool aligned = HWY_TARGET != HWY_SCALAR && RowsAligned(p, esize, line_unit * esize);
  const bool stream = job.stream && HWY_TARGET != HWY_SCALAR && hn::Lanes(d) * esize >= 16;
  if (!aligned) {
    // Misaligned rows (numpy buffers): each row's interior lines may still stream when the halves
    // of a half-split row start at the same offset within a line.
    const bool stream_rows = stream && (P == Pairing::kInterleaved || (line_unit * esize) % kLine == 0);
    return stream_rows ? RunRowsT<E, P, true, Walk::kRows>(job, r0, r1)
                       : RunRowsT<E, P, false, Walk::kRows>(job, r0, r1);
  }
  stream ? RunRowsT<E, P, true, Walk::kAlignedRows>(job, r0, r1)
         : RunRowsT<E, P, false, Walk::kAlignedRows>(job, r0, r1);
}

template <Elem E>
void RunRowsE(const RowJob& job, int64_t r0, int64_t r1) {
  if (job.plan->pairing == Pairing::kHalfSplit) return RunRowsP<E, Pairing::kHalfSplit>(job, r0, r1);
  RunRowsP<E, Pairing::kInterleaved>(job, r0, r1);
}

void RunRows(const RowJob& job, int64_t r0, int64_t r1) {
  switch (job.plan->dtype) {
    case DType::kF16: return RunRowsE<Elem::kF16>(job, r0, r1);
    case DType::kBF16:
#if ROTARY_AVX3_WORDS
      if (NativeBF16()) return RunRowsE<Elem::kBF16Native>(job, r0, r1);
#endif
      return RunRowsE<Elem::kBF16>(job, r0, r1);
    default: return RunRowsE<Elem::kF32>(job, r0, r1);
  }
}

int64_t CurrentTarget() { return HWY_TARGET; }

}  // namespace rotary::detail::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rotary::detail::cpu {

HWY_EXPORT(RunRows);
HWY_EXPORT(CurrentTarget);

void run_rows(const RowJob& job, int64_t r0, int64_t r1) { HWY_DYNAMIC_DISPATCH(RunRows)(job, r0, r1); }

const char* dispatched_target_name() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(CurrentTarget)()); }

namespace {
/// The targets limit_target disabled (Highway's mask bits: lower bits are better targets).
std::atomic<int64_t> g_disabled_targets{0};
}  // namespace

std::vector<int64_t> runnable_targets() {
  std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  // Highway 1.0.3's SupportedTargets() points dispatch back at the best detected target, ignoring
  // DisableTargets (it returns the masked set, though): re-apply the limit.
  hwy::DisableTargets(g_disabled_targets.load());
  return targets;
}

bool limit_target(const std::string& name) {
  int64_t disabled = 0;
  if (!name.empty()) {
    int64_t bits = HWY_TARGETS;
    while (bits != 0 && strcasecmp(name.c_str(), hwy::TargetName(bits & -bits)) != 0) bits &= bits - 1;
    if (bits == 0) return false;
    disabled = (bits & -bits) - 1;  // every better target (lower bit) than the named one
  }
  g_disabled_targets.store(disabled);
  hwy::DisableTargets(disabled);
  return true;
}

namespace {
/// ROTARY_CPU_TARGET=<target>: the limit, applied before any call (for benchmarks and tests of a
/// lower target on a better CPU). An unknown name is reported once on stderr and ignored.
[[maybe_unused]] const bool g_env_target_limit = [] {
  const char* name = std::getenv("ROTARY_CPU_TARGET");
  if (name == nullptr || *name == '\0') return false;
  if (limit_target(name)) return true;
  std::string known;
  for (int64_t bits = HWY_TARGETS; bits != 0; bits &= bits - 1) {
    known += std::string(" ") + hwy::TargetName(bits & -bits);
  }
  std::fprintf(stderr, "rotary: ignoring ROTARY_CPU_TARGET=%s (targets compiled in:%s)\n", name, known.c_str());
  return false;
}();
}  // namespace

}  // namespace rotary::detail::cpu
#endif  // HWY_ONCE
