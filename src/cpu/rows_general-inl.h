// Per-target row loops of the CPU kernels for any head width: rotation steps, tails, peeled and streamed rows.
//
// A Highway "-inl.h" piece, re-included per target by kernels.cc. These loops take any rotated width
// (tails use narrower capped tags of the same steps) and any alignment; rows whose halves are 1-16
// whole vectors take rows_in_registers-inl.h instead, built from the same HalfStep/InterleavedStep
// (RegisterVectors, at the end of this file, says when; norm_block_rows-inl.h asks it too).
#if defined(ROTARY_CPU_ROWS_GENERAL_INL_H_) == defined(HWY_TARGET_TOGGLE)  // per-target include guard
#ifdef ROTARY_CPU_ROWS_GENERAL_INL_H_
#undef ROTARY_CPU_ROWS_GENERAL_INL_H_
#else
#define ROTARY_CPU_ROWS_GENERAL_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/elements-inl.h"
#include "cpu/kernels.h"
#include "cpu/prefetch.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::detail::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// The per-channel rows that interleaved pairs multiply by, from a token's `h` cos and sin values:
/// cd = [c0 c0 c1 c1 ..], sd = [-s0 s0 -s1 s1 ..], or [s0 -s0 s1 -s1 ..] for the inverse rotation.
HWY_INLINE void InterleavedChannelRows(const float* c, const float* s, size_t h, bool inverse, float* cd, float* sd) {
  for (size_t i = 0; i < h; ++i) {
    cd[2 * i] = cd[2 * i + 1] = c[i];
    sd[2 * i] = inverse ? s[i] : -s[i];
    sd[2 * i + 1] = inverse ? -s[i] : s[i];
  }
}

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

/// The `n` rows of one token (pointers in[k], out[k]) with the token's prepared cos/sin rows
/// (TokenRows), pass-through channels copied when out of place: the general path of a small call.
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

/// Cache line size assumed by streaming and prefetching (x86 and most Arm cores).
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
        PrefetchStream(pf + i);
        PrefetchStream(pf + h + i);
        HalfStep<E, false>(d, in, out, hn::LoadU(d, c + i), hn::LoadU(d, s + i), i, h);
      }
    }
    for (; i + N <= end; i += N) {
      PrefetchStream(pf + i);
      PrefetchStream(pf + h + i);
      HalfStep<E, true>(d, in, out, hn::LoadU(d, c + i), hn::LoadU(d, s + i), i, h);
    }
  }
  for (; i + N <= h; i += N) {
    PrefetchStream(pf + i);
    PrefetchStream(pf + h + i);
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
        PrefetchStream(pf + j);
        InterleavedStep<E, false>(d, in, out, hn::LoadU(d, cd + j), hn::LoadU(d, sd + j), j);
      }
    }
    for (; j + N <= end; j += N) {
      PrefetchStream(pf + j);
      InterleavedStep<E, true>(d, in, out, hn::LoadU(d, cd + j), hn::LoadU(d, sd + j), j);
    }
  }
  for (; j + N <= rdim; j += N) {
    PrefetchStream(pf + j);
    InterleavedStep<E, false>(d, in, out, hn::LoadU(d, cd + j), hn::LoadU(d, sd + j), j);
  }
  if (j < rdim) Remainder<8, 2>(j, rdim, narrow);
#endif
}

/// Vectors per half (half-split) or per rotated row (interleaved) when the register paths apply
/// (RowsInRegisters, rows_in_registers-inl.h; the prologue's HalfBF16NormBlockRow): a multiple of the
/// vector length, at most 8 vectors (16 interleaved), else 0.
template <Pairing P>
HWY_INLINE size_t RegisterVectors(int64_t half, int64_t rotary_dim) {
#if HWY_TARGET == HWY_SCALAR
  (void)half;
  (void)rotary_dim;
  return 0;
#else
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  const size_t len = P == Pairing::kHalfSplit ? static_cast<size_t>(half) : static_cast<size_t>(rotary_dim);
  if (len % N != 0) return 0;
  const size_t k = len / N;
  // Interleaved rows of 16 vectors: head_dim 128 on 8-lane (AVX2) vectors.
  return (k == 1 || k == 2 || k == 4 || k == 8 || (P == Pairing::kInterleaved && k == 16)) ? k : 0;
#endif
}

template <Pairing P>
HWY_INLINE size_t RegisterVectors(const Plan& p) {
  return RegisterVectors<P>(p.half, p.rotary_dim);
}

}  // namespace rotary::detail::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ROTARY_CPU_ROWS_GENERAL_INL_H_
