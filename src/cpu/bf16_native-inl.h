// AVX512-BF16 narrowing of bf16 outputs (x86 AVX3 target): the one place that uses VCVTNEPS2BF16/VCVTNE2PS2BF16.
//
// A Highway "-inl.h" piece, re-included per target by kernels.cc. Highway 1.0.3 has no AVX512-BF16
// target, so the instructions are inline assembly inside the AVX3 target, chosen at run time from
// CPUID (NativeBF16, switched by set_native_bf16). They flush f32 subnormals to zero, so every user
// here detects them and takes the portable rounding (elements-inl.h): results are bit-identical.
#if defined(ROTARY_CPU_BF16_NATIVE_INL_H_) == defined(HWY_TARGET_TOGGLE)  // per-target include guard
#ifdef ROTARY_CPU_BF16_NATIVE_INL_H_
#undef ROTARY_CPU_BF16_NATIVE_INL_H_
#else
#define ROTARY_CPU_BF16_NATIVE_INL_H_
#endif

#include <hwy/highway.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "cpu/elements-inl.h"

// Not per target: whether the CPU has AVX512-BF16, and whether to use it.
#ifndef ROTARY_CPU_BF16_NATIVE_ONCE
#define ROTARY_CPU_BF16_NATIVE_ONCE
#if HWY_ARCH_X86
#include <cpuid.h>
#endif
namespace rotary::detail::cpu {
/// AVX512-BF16 (CPUID leaf 7 subleaf 1, EAX bit 5); the AVX-512 state itself is Highway's check.
inline bool CpuHasAvx512Bf16() {
#if HWY_ARCH_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) == 0) return false;
  return (a >> 5) & 1u;
#else
  return false;
#endif
}
/// Use AVX512-BF16 for bf16 outputs (default: when the CPU has it; set_native_bf16 switches it).
inline std::atomic<bool> g_native_bf16{CpuHasAvx512Bf16()};
inline bool NativeBF16() { return g_native_bf16.load(std::memory_order_relaxed); }
}  // namespace rotary::detail::cpu
#endif  // ROTARY_CPU_BF16_NATIVE_ONCE

HWY_BEFORE_NAMESPACE();
namespace rotary::detail::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if ROTARY_BF16_NATIVE
template <bool kStream, class D>
HWY_INLINE bool StoreBF16Native(D d, hn::Vec<D> v, uint16_t* HWY_RESTRICT p) {
  static_assert(hn::MaxLanes(D()) == 16, "AVX3 full vectors only");
  // VCVTNEPS2BF16 rounds to nearest even and quiets NaNs exactly like StoreX's portable code, but
  // flushes f32 subnormals to zero: vectors with a lane holding one (fpclass 0x20, rare) take that code.
  if (_mm512_fpclass_ps_mask(v.raw, 0x20) == 0) {
    const hn::Rebind<uint16_t, D> d16;
    __m256i narrowed;
    asm("vcvtneps2bf16 %1, %0" : "=v"(narrowed) : "v"(v.raw));
    const hn::Vec<decltype(d16)> packed{narrowed};
    if constexpr (kStream) {
      hn::Stream(packed, d16, p);
    } else {
      hn::StoreU(packed, d16, p);
    }
    return true;
  }
  return false;
}

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
    words = BF16PairWords(d, y0, y1).raw;
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

/// One half-split row of K vectors per half (K even) with the token's cos `vc` and signed sin `vs`
/// in registers (RowsInRegisters): pairs of vectors, one 64-byte narrowing and store per pair
/// (StoreBF16Pair).
template <size_t K, bool kStream, class D>
HWY_INLINE void HalfBF16NativeRow(D d, const uint16_t* HWY_RESTRICT in, uint16_t* HWY_RESTRICT out,
                                  const hn::Vec<D> (&vc)[K], const hn::Vec<D> (&vs)[K], size_t h) {
  static_assert(K % 2 == 0 && hn::MaxLanes(D()) == 16, "pairs of AVX3 full vectors only");
  const size_t N = hn::Lanes(d);
  for (size_t k = 0; k < K; k += 2) {
    const size_t i = k * N;
    const auto a0 = LoadX<Elem::kBF16Native>(d, in + i), a1 = LoadX<Elem::kBF16Native>(d, in + h + i);
    const auto b0 = LoadX<Elem::kBF16Native>(d, in + i + N), b1 = LoadX<Elem::kBF16Native>(d, in + h + i + N);
    StoreBF16Pair<kStream>(d, hn::NegMulAdd(a1, vs[k], hn::Mul(a0, vc[k])),
                           hn::NegMulAdd(b1, vs[k + 1], hn::Mul(b0, vc[k + 1])), out + i);
    StoreBF16Pair<kStream>(d, hn::MulAdd(a0, vs[k], hn::Mul(a1, vc[k])),
                           hn::MulAdd(b0, vs[k + 1], hn::Mul(b1, vc[k + 1])), out + h + i);
  }
}
#endif  // ROTARY_BF16_NATIVE

}  // namespace rotary::detail::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ROTARY_CPU_BF16_NATIVE_INL_H_
