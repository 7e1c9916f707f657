// Per-target rows of whole vectors with the token's cos/sin in registers, fully unrolled, and their bf16 paths.
//
// A Highway "-inl.h" piece, re-included per target by kernels.cc. RowsInRegisters serves rows whose
// rotated half (half-split) or row (interleaved) is K = 1, 2, 4, 8 (or 16 interleaved) whole vectors;
// RegisterVectors (rows_general-inl.h) says when it applies. bf16 takes paths of its own here: pairs
// kept in their 32-bit lanes (interleaved), even / odd values of each step in two vectors (half-split,
// x86 without AVX512-BF16: block order, elements-inl.h), and the AVX512-BF16 steps of bf16_native-inl.h.
#if defined(ROTARY_CPU_ROWS_IN_REGISTERS_INL_H_) == defined(HWY_TARGET_TOGGLE)  // per-target include guard
#ifdef ROTARY_CPU_ROWS_IN_REGISTERS_INL_H_
#undef ROTARY_CPU_ROWS_IN_REGISTERS_INL_H_
#else
#define ROTARY_CPU_ROWS_IN_REGISTERS_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cpu/bf16_native-inl.h"
#include "cpu/elements-inl.h"
#include "cpu/kernels.h"
#include "cpu/prefetch.h"
#include "cpu/rows_general-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::detail::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
/// InterleavedBF16Step for targets without AVX512-BF16: N pairs (2N words) with each pair in one
/// 32-bit lane, widened by one shift and one mask, rotated by the pairs' cos `vc` and signed sin `vs`
/// (no duplication per channel, no pair swaps), and the two results rounded and recombined into the
/// pairs' lanes in 16-bit lanes (NonNaNBF16PairWords; no pack or lane permute).
template <bool kStream, class D>
HWY_INLINE void InterleavedBF16LaneStep(D d, const uint16_t* in, uint16_t* out, hn::Vec<D> vc, hn::Vec<D> vs) {
  const hn::RebindToUnsigned<D> du;
  const auto x = hn::LoadU(du, reinterpret_cast<const uint32_t*>(in));
  const auto x0 = hn::BitCast(d, hn::ShiftLeft<16>(x));
  const auto x1 = hn::BitCast(d, hn::And(x, hn::Set(du, 0xFFFF0000u)));
  const auto even = hn::NegMulAdd(x1, vs, hn::Mul(x0, vc)), odd = hn::MulAdd(x0, vs, hn::Mul(x1, vc));
  const auto words = HWY_UNLIKELY(AnyNaN(d, even, odd))
                         ? BF16PairWords(d, even, odd)
                         : NonNaNBF16PairWords(d, even, odd);
  if constexpr (kStream) {
    hn::Stream(words, du, reinterpret_cast<uint32_t*>(out));
  } else {
    hn::StoreU(words, du, reinterpret_cast<uint32_t*>(out));
  }
}
#endif

#undef ROTARY_BF16_BLOCKS
#if ROTARY_BF16_BLOCK_ORDER
#define ROTARY_BF16_BLOCKS 1
/// Half-split bf16 rows for x86 targets without AVX512-BF16, 2N values per half and step, in block order
/// (LoadBF16Blocks / StoreBF16BlocksTwice, elements-inl.h); cos/sin are put in that order once per token.
template <size_t K, bool kStream, bool kPrefetch>
HWY_INLINE void HalfBF16BlockRows(const uint16_t* in, uint16_t* out, int64_t n, int64_t in_step,
                                  int64_t out_step, const float* c, const float* s, size_t h, bool inverse,
                                  int64_t pf_delta) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  using V = hn::Vec<decltype(d)>;
  V clo[K / 2], chi[K / 2], slo[K / 2], shi[K / 2];
  alignas(64) float tc[K * hn::MaxLanes(d)], ts[K * hn::MaxLanes(d)];
  ToBlockOrder<K>(c, tc);
  ToBlockOrder<K>(s, ts);
  for (size_t k = 0; k < K / 2; ++k) {
    clo[k] = hn::Load(d, tc + 2 * k * N);
    chi[k] = hn::Load(d, tc + 2 * k * N + N);
    slo[k] = inverse ? hn::Neg(hn::Load(d, ts + 2 * k * N)) : hn::Load(d, ts + 2 * k * N);
    shi[k] = inverse ? hn::Neg(hn::Load(d, ts + 2 * k * N + N)) : hn::Load(d, ts + 2 * k * N + N);
  }
  for (int64_t r = 0; r < n; ++r, in += in_step, out += out_step) {
    if constexpr (kPrefetch) {
      const auto pf = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(in) + pf_delta);
      for (size_t off = 0; off < 2 * K * N * sizeof(uint16_t); off += kLine) PrefetchStream(pf + off);
    }
    for (size_t k = 0; k < K / 2; ++k) {
      const size_t i = 2 * k * N;
      V a_lo, a_hi, b_lo, b_hi;
      LoadBF16Blocks(d, in + i, &a_lo, &a_hi);
      LoadBF16Blocks(d, in + h + i, &b_lo, &b_hi);
      StoreBF16BlocksTwice<kStream>(d, hn::NegMulAdd(b_lo, slo[k], hn::Mul(a_lo, clo[k])),
                                    hn::NegMulAdd(b_hi, shi[k], hn::Mul(a_hi, chi[k])), out + i,
                                    hn::MulAdd(a_lo, slo[k], hn::Mul(b_lo, clo[k])),
                                    hn::MulAdd(a_hi, shi[k], hn::Mul(b_hi, chi[k])), out + h + i);
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
        for (size_t off = 0; off < K * N * sizeof(T); off += kLine) PrefetchStream(pf + off);
      }
      for (size_t k = 0; k < K / 2; ++k) {
#if ROTARY_BF16_NATIVE
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
      for (size_t off = 0; off < bytes; off += kLine) PrefetchStream(pf + off);
    }
#if ROTARY_BF16_NATIVE
    if constexpr (E == Elem::kBF16Native && P == Pairing::kHalfSplit && K % 2 == 0 && hn::MaxLanes(d) == 16) {
      HalfBF16NativeRow<K, kStream>(d, in, out, vc, vs, h);
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

/// fn(std::integral_constant<size_t, K>{}) for the K of RegisterVectors, chosen at run time.
template <Pairing P, typename Fn>
HWY_INLINE void WithRegisterVectors(size_t K, Fn&& fn) {
  switch (K) {
    case 1: return fn(std::integral_constant<size_t, 1>{});
    case 2: return fn(std::integral_constant<size_t, 2>{});
    case 4: return fn(std::integral_constant<size_t, 4>{});
    case 8: return fn(std::integral_constant<size_t, 8>{});
    default:
      if constexpr (P == Pairing::kInterleaved) {
        return fn(std::integral_constant<size_t, 16>{});
      }
      HWY_ASSERT(false);  // RegisterVectors never returns another K
  }
}

/// RowsInRegisters with K chosen at run time.
template <Elem E, Pairing P, bool kStream, bool kPrefetch>
HWY_INLINE void RowsInRegistersK(size_t K, const Storage<E>* in, Storage<E>* out, int64_t n, int64_t in_step,
                                 int64_t out_step, const float* c, const float* s, size_t h, bool inverse,
                                 int64_t pf_delta) {
  WithRegisterVectors<P>(K, [&](auto k_tag) HWY_ATTR {
    RowsInRegisters<decltype(k_tag)::value, E, P, kStream, kPrefetch>(in, out, n, in_step, out_step, c, s, h, inverse,
                                                                      pf_delta);
  });
}

}  // namespace rotary::detail::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ROTARY_CPU_ROWS_IN_REGISTERS_INL_H_
