// Per-target rows of the prologue family: load (any float storage), RMSNorm, rotation and store in one pass over a head.
//
// A Highway "-inl.h" piece, re-included per target by prologue_kernels.cc. One row body for every input and
// output element type (LoadX/StoreX of elements-inl.h), both pairings, with or without the norm; the rotation
// steps are those of the apply kernels (same f32 operations, so the same results), fed by normalised inputs.
#if defined(ROTARY_CPU_PROLOGUE_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)  // per-target include guard
#ifdef ROTARY_CPU_PROLOGUE_ROWS_INL_H_
#undef ROTARY_CPU_PROLOGUE_ROWS_INL_H_
#else
#define ROTARY_CPU_PROLOGUE_ROWS_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/bf16_native-inl.h"
#include "cpu/elements-inl.h"
#include "cpu/prefetch.h"
#include "cpu/rows_general-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::detail::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// A token's rotation as a row needs it: half-split, cos c[h] and signed sin s[h]; interleaved, the
/// per-channel rows c = [c0 c0 c1 c1 ..] and s = [-s0 s0 -s1 s1 ..] of R values. R = 0: no rotation.
struct RowRotation {
  const float* c = nullptr;
  const float* s = nullptr;
  size_t R = 0, h = 0;
  /// Bytes past each input address to prefetch while a row is read (a later token's row; 0 = none).
  int64_t pf = 0;
};

/// Prefetches the line `pf` bytes past `p` (pf = 0: nothing). Prefetches never fault.
template <class T>
HWY_INLINE void PrefetchAhead(const T* p, int64_t pf) {
  if (pf != 0) PrefetchStream(reinterpret_cast<const T*>(reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(pf)));
}

#undef ROTARY_BLOCK_SQUARES
#if ROTARY_BF16_BLOCK_ORDER && HWY_TARGET == HWY_AVX2
#define ROTARY_BLOCK_SQUARES 1
#else
#define ROTARY_BLOCK_SQUARES 0
#endif

/// A row's squares summed over its whole vectors, as RmsFactor sums them before adding the lanes: four partial
/// sums (vector j into sum j % 4, those past the last whole group of four into the first), then (a0 + a1) + (a2 + a3).
/// On AVX2 (ROTARY_BLOCK_SQUARES) bf16 rows are read in block order: each 2N values widen into the vector of
/// their even values and the vector of their odd ones (LoadBF16Blocks: a 32-byte load, a shift and a mask, no
/// shuffle), vectors j = 2k and 2k + 1 of that order going to the sums as above. The contiguous order took two
/// 16-byte widening loads and two shifts per 2N values, on the two shuffle pipes of Zen 3.
/// Sets *done to the channels covered (the rest, under one vector, RmsFactor adds one by one).
template <Elem E>
HWY_INLINE hn::Vec<hn::ScalableTag<float>> RowSquares(const Storage<E>* HWY_RESTRICT in, size_t D, int64_t pf,
                                                     size_t* done) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= D; i += 4 * N) {
    // Every line of the four vectors (f32 vectors are a line each, so one prefetch per two would leave
    // half the lines to the hardware prefetcher).
    for (size_t off = 0; off < 4 * N * sizeof(Storage<E>); off += 64)
      PrefetchAhead(reinterpret_cast<const char*>(in + i) + off, pf);
    hn::Vec<decltype(d)> x0, x1, x2, x3;
#if ROTARY_BLOCK_SQUARES
    if constexpr (IsBF16(E)) {
      LoadBF16Blocks(d, in + i, &x0, &x1);
      LoadBF16Blocks(d, in + i + 2 * N, &x2, &x3);
    } else
#endif
    {
      x0 = LoadX<E>(d, in + i);
      x1 = LoadX<E>(d, in + i + N);
      x2 = LoadX<E>(d, in + i + 2 * N);
      x3 = LoadX<E>(d, in + i + 3 * N);
    }
    a0 = hn::MulAdd(x0, x0, a0);
    a1 = hn::MulAdd(x1, x1, a1);
    a2 = hn::MulAdd(x2, x2, a2);
    a3 = hn::MulAdd(x3, x3, a3);
  }
  for (; i + N <= D; i += N) {
    const auto x = LoadX<E>(d, in + i);
    a0 = hn::MulAdd(x, x, a0);
  }
  *done = i;
  return hn::Add(hn::Add(a0, a1), hn::Add(a2, a3));
}

/// RMSNorm factor of a row: 1 / sqrt(fl32(sum of squares / D) + eps), in f32 (RowSquares, then its lanes).
template <Elem E>
HWY_INLINE float RmsFactor(const Storage<E>* HWY_RESTRICT in, size_t D, float eps, int64_t pf) {
  const hn::ScalableTag<float> d;
  size_t i = 0;
  float ss = hn::GetLane(hn::SumOfLanes(d, RowSquares<E>(in, D, pf, &i)));
  const hn::CappedTag<float, 1> d1;
  for (; i < D; ++i) {
    const float x = hn::GetLane(LoadX<E>(d1, in + i));
    ss += x * x;
  }
  return 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
}

#undef ROTARY_FOUR_FACTORS
#if HWY_TARGET == HWY_AVX2
#define ROTARY_FOUR_FACTORS 1
/// RmsFactor of the four rows `in`, `in + sh`, .. (D a multiple of the 8 lanes) into f[0..3], with the same
/// results: the four rows' lane sums in one transposing tree (the additions of Highway's SumOfLanes on AVX2:
/// lane i + lane i+4, then + the lane two over, then + the next), then one vector division, square root and
/// division for the four, instead of four horizontal sums and twelve scalar operations of long latency (AVX2
/// on Zen 3: a bf16 decode step with norm 1.67 -> 1.62 us, f32 1.61 -> 1.54 us; bf16 prefill with norm in
/// cache, T = 64, 0.100 -> 0.096 ms; docs/performance.md).
template <Elem E>
HWY_INLINE void RmsFactors4(const Storage<E>* in, int64_t sh, size_t D, float eps, int64_t pf, float* f) {
  const hn::ScalableTag<float> d;
  size_t done;
  const __m256 a = RowSquares<E>(in, D, pf, &done).raw, b = RowSquares<E>(in + sh, D, pf, &done).raw;
  const __m256 c = RowSquares<E>(in + 2 * sh, D, pf, &done).raw, e = RowSquares<E>(in + 3 * sh, D, pf, &done).raw;
  // [a0+a4 .. a3+a7 | b0+b4 .. b3+b7] and the same of c, e.
  const __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  const __m256 ce = _mm256_add_ps(_mm256_permute2f128_ps(c, e, 0x20), _mm256_permute2f128_ps(c, e, 0x31));
  // Lanes 0 + 2 and 1 + 3 of each: [a', a'', c', c'' | b', b'', e', e''].
  const __m256 w = _mm256_add_ps(_mm256_shuffle_ps(ab, ce, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(ab, ce, _MM_SHUFFLE(3, 2, 3, 2)));
  // The two halves of each: [sa, sc, sa, sc | sb, se, sb, se].
  const __m256 t = _mm256_add_ps(_mm256_shuffle_ps(w, w, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(w, w, _MM_SHUFFLE(3, 1, 3, 1)));
  const auto ms = hn::Add(hn::Div(hn::Vec256<float>{t}, hn::Set(d, static_cast<float>(D))), hn::Set(d, eps));
  alignas(32) float r[8];
  hn::Store(hn::Div(hn::Set(d, 1.0f), hn::Sqrt(ms)), d, r);
  f[0] = r[0];
  f[1] = r[4];
  f[2] = r[1];
  f[3] = r[5];
}
#else
#define ROTARY_FOUR_FACTORS 0
#endif

/// The RmsFactor of each of the `n` rows `in`, `sh` apart, into f[0 .. n): four at a time where RmsFactors4
/// exists and D is whole vectors, the rest one by one.
template <Elem EI>
HWY_INLINE void RowFactors(const Storage<EI>* in, int64_t n, int64_t sh, size_t D, float eps, int64_t pf, float* f) {
  int64_t j = 0;
#if ROTARY_FOUR_FACTORS
  if (D % 8 == 0)
    for (; j + 4 <= n; j += 4) RmsFactors4<EI>(in + j * sh, sh, D, eps, pf, f + j);
#endif
  for (; j < n; ++j) f[j] = RmsFactor<EI>(in + j * sh, D, eps, pf);
}

/// FactorsAhead's rows read from memory; out of line, so that the decode steps' code around it stays as it was
/// (inlined, it made an AVX2 bf16 decode step with norm 4 % slower).
template <Elem EI, class RowFn>
HWY_NOINLINE void FactorsInGroups(const Storage<EI>* in, int64_t heads, int64_t sh, size_t D, float eps, int64_t pf,
                                  RowFn& row) {
  constexpr int64_t G = sizeof(Storage<EI>) == 2 ? 4 : 1;  // rows whose factors are computed together
  float next[G] = {}, r[G];
  auto factors = [&](int64_t first) HWY_ATTR {
    RowFactors<EI>(in + first * sh, std::min<int64_t>(G, heads - first), sh, D, eps, pf, next);
  };
  factors(0);
  for (int64_t head = 0; head < heads; head += G) {
    std::copy(next, next + G, r);
    if (head + G < heads) factors(head + G);
    for (int64_t j = 0; j < G && head + j < heads; ++j) row(head + j, r[j]);
  }
}

/// RowFactors of a lone token's `heads` rows into rms[0 .. heads). Out of line, as FactorsInGroups, so that the token walk's code for steps that do not
/// run it stays as small as it was (an AVX2 bf16 decode step without norm: 0.966-0.975 us with it inlined,
/// 0.965-0.968 us out of line, against 0.954-0.957 us before RmsFactors4; within the guest's noise).
template <Elem EI>
HWY_NOINLINE void AllFactors(const Storage<EI>* in, int64_t heads, int64_t sh, size_t D, float eps, int64_t pf,
                             float* rms) {
  RowFactors<EI>(in, heads, sh, D, eps, pf, rms);
}

/// Calls row(head, r) for the `heads` rows `in`, `sh` apart (D channels), r the row's RmsFactor (w null: 0).
/// Rows read from memory (`rms` null): each factor is computed ahead, so that the next rows' reductions (their
/// first read) run while these rows are rotated and stored: f32 rows one row ahead, 16-bit ones four (four
/// chains in flight, one wait for a square root and a division per four rows: AVX2 bf16 prefill with norm 10 %
/// faster; f32 rows so 1.1x slower, 1.2x with a token's factors all first). A lone token's rows (decode, `rms` a
/// scratch of `heads` floats), found in cache by repeated steps, get all their factors first (a one-row lead
/// made an AVX2 bf16 decode step with norm about 10 % slower). Where RmsFactors4 exists (AVX2), groups of four
/// rows get their factors from it, with the same results. docs/performance.md.
template <Elem EI, class RowFn>
HWY_INLINE void FactorsAhead(const Storage<EI>* in, int64_t heads, int64_t sh, size_t D, const float* w, float eps,
                             int64_t pf, float* rms, RowFn&& row) {
  if (w == nullptr || heads <= 0) {
    for (int64_t head = 0; head < heads; ++head) row(head, 0.0f);
    return;
  }
  if (rms != nullptr) {
    AllFactors<EI>(in, heads, sh, D, eps, pf, rms);
    for (int64_t head = 0; head < heads; ++head) row(head, rms[head]);
    return;
  }
  FactorsInGroups<EI>(in, heads, sh, D, eps, pf, row);
}

/// One head row: in (EI) -> optional RMSNorm (weight+offset `w`, kNorm) -> rotation of the first rot.R
/// channels -> out (EO). Channels past R are normalised and/or converted, or copied (out of place), or
/// left alone (in place, same type, no norm). `in` and `out` are the same row or do not overlap.
/// `rms` > 0: the row's RmsFactor, computed beforehand (by FactorsAhead: ahead, so that the next rows'
/// reductions overlap this row's stores, or for a lone token all first); 0: computed here.
template <Elem EI, Elem EO, Pairing P, bool kNorm>
HWY_INLINE void NormRotateRow(const Storage<EI>* in, Storage<EO>* out, size_t D, const RowRotation& rot,
                              const float* w, float eps, float rms) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  float r = 1.0f;
  if constexpr (kNorm) r = rms > 0.0f ? rms : RmsFactor<EI>(in, D, eps, rot.pf);
  auto load = [&](auto dc, size_t i) ROTARY_STEP_INLINE {
    auto x = LoadX<EI>(dc, in + i);
    if constexpr (kNorm) x = hn::Mul(hn::Mul(x, hn::Set(dc, r)), hn::LoadU(dc, w + i));
    return x;
  };
  const int64_t pf = kNorm ? 0 : rot.pf;  // with the norm, RmsFactor read the row first
  size_t done = 0;
  if (rot.R != 0) {
    if constexpr (P == Pairing::kHalfSplit) {
      const size_t h = rot.h;
      auto step = [&](auto dc, size_t i) ROTARY_STEP_INLINE {
        const auto x0 = load(dc, i), x1 = load(dc, h + i);
        const auto vc = hn::LoadU(dc, rot.c + i), vs = hn::LoadU(dc, rot.s + i);
        StoreX<EO, false>(dc, hn::NegMulAdd(x1, vs, hn::Mul(x0, vc)), out + i);
        StoreX<EO, false>(dc, hn::MulAdd(x0, vs, hn::Mul(x1, vc)), out + h + i);
      };
      size_t i = 0;
      for (; i + N <= h; i += N) {
        PrefetchAhead(in + i, pf);
        PrefetchAhead(in + h + i, pf);
        step(d, i);
      }
      if (i < h) Remainder<8, 1>(i, h, step);
    } else {
#if HWY_TARGET == HWY_SCALAR
      for (size_t j = 0; j < rot.R; j += 2) {  // one-lane vectors cannot hold a pair
        const auto x0 = load(d, j), x1 = load(d, j + 1);
        const auto c = hn::LoadU(d, rot.c + j);
        StoreX<EO, false>(d, hn::MulAdd(x1, hn::LoadU(d, rot.s + j), hn::Mul(x0, c)), out + j);
        StoreX<EO, false>(d, hn::MulAdd(x0, hn::LoadU(d, rot.s + j + 1), hn::Mul(x1, c)), out + j + 1);
      }
#else
      auto step = [&](auto dc, size_t j) ROTARY_STEP_INLINE {
        const auto x = load(dc, j);
        const auto y = hn::MulAdd(hn::Reverse2(dc, x), hn::LoadU(dc, rot.s + j), hn::Mul(x, hn::LoadU(dc, rot.c + j)));
        StoreX<EO, false>(dc, y, out + j);
      };
      size_t j = 0;
      for (; j + N <= rot.R; j += N) {
        PrefetchAhead(in + j, pf);
        step(d, j);
      }
      if (j < rot.R) Remainder<8, 2>(j, rot.R, step);
#endif
    }
    done = rot.R;
  }
  if (done == D) return;
  if constexpr (!kNorm && (EI == EO || (IsBF16(EI) && IsBF16(EO)))) {
    if (static_cast<const void*>(in) != static_cast<const void*>(out)) {
      if (pf != 0)
        for (size_t off = done; off < D; off += 64 / sizeof(Storage<EI>)) PrefetchAhead(in + off, pf);
      std::memcpy(out + done, in + done, (D - done) * sizeof(Storage<EI>));
    }
  } else {
    auto step = [&](auto dc, size_t i) ROTARY_STEP_INLINE { StoreX<EO, false>(dc, load(dc, i), out + i); };
    size_t i = done;
    for (; i + N <= D; i += N) {
      PrefetchAhead(in + i, pf);
      step(d, i);
    }
    if (i < D) Remainder<8, 1>(i, D, step);
  }
}

/// `n` half-split rows of one token with RMSNorm, fully rotated (D = 2h, h = K vectors), each row loaded
/// once into registers: its sum of squares in RmsFactor's order (vector j into partial sum j % 4, those
/// past the last whole group of four into the first; AVX2 bf16 rows, whose block order the registers do not
/// hold, take RmsFactor itself), its factor as RmsFactor computes it, then
/// NormRotateRow's operations; so the results are RmsFactor's and NormRotateRow's. Row r from
/// in + r * in_step to out + r * out_step (the same rows or apart); `c`, `s` the token's cos and signed sin.
/// kStream: non-temporal stores (every row and half on a 64-byte line, vectors of at least 16 bytes).
template <size_t K, Elem EI, Elem EO, bool kStream>
HWY_INLINE void HalfNormRowsInRegisters(const Storage<EI>* in, Storage<EO>* out, int64_t n, int64_t in_step,
                                        int64_t out_step, const float* HWY_RESTRICT c, const float* HWY_RESTRICT s,
                                        const float* HWY_RESTRICT w, float eps, size_t h, int64_t pf) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  using V = hn::Vec<decltype(d)>;
  constexpr size_t kV = 2 * K, kGrouped = kV / 4 * 4;
  const float Df = static_cast<float>(2 * h);
  // Row r + 1 is loaded and reduced before row r is scaled and stored, so that each row's factor (a
  // reduction, a square root and a division) is computed while the previous row is written; 16-bit rows on
  // AVX-512 (32 registers, so three rows of K <= 4 fit) two rows ahead, the factor's wait hidden behind two
  // rows' stores (in cache, AVX3 on Zen 4: bf16 rows with norm, 16 tokens, 16.1-16.9 -> 14.9-16.0 us a call;
  // a decode step 1.20-1.3 -> 1.12-1.3 us; f32 rows, which gained nothing, keep one row ahead; docs/performance.md).
  auto load = [&](const Storage<EI>* row, V* x) HWY_ATTR {
    if (pf != 0)
      for (size_t off = 0; off < 2 * h * sizeof(Storage<EI>); off += 64)
        PrefetchAhead(reinterpret_cast<const char*>(row) + off, pf);
    for (size_t j = 0; j < kV; ++j) x[j] = LoadX<EI>(d, row + j * N);
#if ROTARY_BLOCK_SQUARES
    // RowSquares reads bf16 rows in block order here: the same sums from the row again (in L1). Not reached
    // by the AVX2 calls of today (bf16 rows with D >= 32 take the block-order rows instead), kept so that
    // every path's factor stays RmsFactor's.
    if constexpr (IsBF16(EI)) return RmsFactor<EI>(row, 2 * h, eps, 0);
#endif
    V acc[4] = {hn::Zero(d), hn::Zero(d), hn::Zero(d), hn::Zero(d)};
    for (size_t j = 0; j < kV; ++j) {
      const size_t a = j < kGrouped ? j % 4 : 0;
      acc[a] = hn::MulAdd(x[j], x[j], acc[a]);
    }
    const float ss = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(acc[0], acc[1]), hn::Add(acc[2], acc[3]))));
    return 1.0f / std::sqrt(ss / Df + eps);
  };
  auto store = [&](const V* x, float r, Storage<EO>* row) HWY_ATTR {
    const V rv = hn::Set(d, r);
    // Vector k of the row's first (lo) and second (hi) half: normalised, weighted and rotated.
    auto rotated = [&](size_t k, V* lo, V* hi) HWY_ATTR {
      const V a = hn::Mul(hn::Mul(x[k], rv), hn::LoadU(d, w + k * N));
      const V b = hn::Mul(hn::Mul(x[K + k], rv), hn::LoadU(d, w + h + k * N));
      const V vc = hn::LoadU(d, c + k * N), vs = hn::LoadU(d, s + k * N);
      *lo = hn::NegMulAdd(b, vs, hn::Mul(a, vc));
      *hi = hn::MulAdd(a, vs, hn::Mul(b, vc));
    };
#if ROTARY_BF16_NATIVE
    // AVX512-BF16 narrowing of two vectors at once: one instruction and one test for subnormals per
    // 64 bytes (StoreBF16Pair) instead of one of each per vector (StoreX).
    if constexpr (EO == Elem::kBF16Native && K % 2 == 0 && hn::MaxLanes(d) == 16) {
      for (size_t k = 0; k < K; k += 2) {
        V lo0, hi0, lo1, hi1;
        rotated(k, &lo0, &hi0);
        rotated(k + 1, &lo1, &hi1);
        StoreBF16Pair<kStream>(d, lo0, lo1, row + k * N);
        StoreBF16Pair<kStream>(d, hi0, hi1, row + h + k * N);
      }
      return;
    }
#endif
    for (size_t k = 0; k < K; ++k) {
      V lo, hi;
      rotated(k, &lo, &hi);
      StoreX<EO, kStream>(d, lo, row + k * N);
      StoreX<EO, kStream>(d, hi, row + h + k * N);
    }
  };
  if (n <= 0) return;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (sizeof(Storage<EI>) == 2) {
    // Three rows in flight, in x0, x1, x2 by turns: at the top of each step rows r and r + 1 are loaded (r + 1
    // if it exists), and the step loads rows r + 2 .. r + 4 while it stores rows r .. r + 2.
    V x0[kV], x1[kV], x2[kV];
    float f0 = load(in, x0), f1 = 0.0f, f2 = 0.0f;
    if (n > 1) f1 = load(in + in_step, x1);
    int64_t r = 0;
    for (; r + 5 <= n; r += 3) {
      f2 = load(in + (r + 2) * in_step, x2);
      store(x0, f0, out + r * out_step);
      f0 = load(in + (r + 3) * in_step, x0);
      store(x1, f1, out + (r + 1) * out_step);
      f1 = load(in + (r + 4) * in_step, x1);
      store(x2, f2, out + (r + 2) * out_step);
    }
    const int64_t left = n - r;  // 1 to 4 rows, r (and r + 1) already loaded
    if (left >= 3) f2 = load(in + (r + 2) * in_step, x2);
    store(x0, f0, out + r * out_step);
    if (left == 4) f0 = load(in + (r + 3) * in_step, x0);
    if (left >= 2) store(x1, f1, out + (r + 1) * out_step);
    if (left >= 3) store(x2, f2, out + (r + 2) * out_step);
    if (left == 4) store(x0, f0, out + (r + 3) * out_step);
    return;
  }
#endif
  V xa[kV], xb[kV];
  float ra = load(in, xa);
  int64_t r = 1;
  for (; r + 1 < n; r += 2) {  // two rows per step: the rows swap between xa and xb without copies
    const float rb = load(in + r * in_step, xb);
    store(xa, ra, out + (r - 1) * out_step);
    ra = load(in + (r + 1) * in_step, xa);
    store(xb, rb, out + r * out_step);
  }
  if (r < n) {
    const float rb = load(in + r * in_step, xb);
    store(xa, ra, out + (r - 1) * out_step);
    store(xb, rb, out + r * out_step);
  } else {
    store(xa, ra, out + (n - 1) * out_step);
  }
}

/// HalfNormRowsInRegisters with K = h / N chosen at run time; false (nothing done) for a K it does not take,
/// or, with `stream`, for rows it cannot stream (a half not whole lines, vectors under 16 bytes).
template <Elem EI, Elem EO>
HWY_INLINE bool HalfNormRowsInRegistersK(const Storage<EI>* in, Storage<EO>* out, int64_t n, int64_t in_step,
                                         int64_t out_step, const float* c, const float* s, const float* w, float eps,
                                         size_t h, int64_t pf, bool stream) {
#if HWY_TARGET == HWY_SCALAR
  (void)in, (void)out, (void)n, (void)in_step, (void)out_step, (void)c, (void)s, (void)w, (void)eps, (void)h, (void)pf,
      (void)stream;
  return false;
#else
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  // Two rows live in registers (4K vectors; 16-bit rows on AVX-512 three, 6K): K up to 4 with 32 vector registers
  // (AVX-512; at K = 4 the three-row ring spills a few vectors a row, and is still faster), up to 2 with 16.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  constexpr size_t kMaxK = 4;
#else
  constexpr size_t kMaxK = 2;
#endif
  if (h % N != 0 || h / N > kMaxK) return false;
  if (stream && ((h * sizeof(Storage<EO>)) % 64 != 0 || N * sizeof(Storage<EO>) < 16)) return false;
  auto run = [&](auto k_tag, auto stream_tag) HWY_ATTR {
    HalfNormRowsInRegisters<decltype(k_tag)::value, EI, EO, decltype(stream_tag)::value>(in, out, n, in_step, out_step,
                                                                                          c, s, w, eps, h, pf);
    return true;
  };
  using S1 = std::true_type;
  using S0 = std::false_type;
  switch (h / N) {
    case 1: return stream ? run(std::integral_constant<size_t, 1>(), S1()) : run(std::integral_constant<size_t, 1>(), S0());
    case 2: return stream ? run(std::integral_constant<size_t, 2>(), S1()) : run(std::integral_constant<size_t, 2>(), S0());
    case 4: return stream ? run(std::integral_constant<size_t, 4>(), S1()) : run(std::integral_constant<size_t, 4>(), S0());
    default: return false;
  }
#endif
}

/// NormRotateRow with the norm chosen at run time (w null: none).
template <Elem EI, Elem EO, Pairing P>
HWY_INLINE void Row(const Storage<EI>* in, Storage<EO>* out, size_t D, const RowRotation& rot, const float* w, float eps,
                    float rms = 0.0f) {
  if (w != nullptr) return NormRotateRow<EI, EO, P, true>(in, out, D, rot, w, eps, rms);
  NormRotateRow<EI, EO, P, false>(in, out, D, rot, nullptr, eps, 0.0f);
}

}  // namespace rotary::detail::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ROTARY_CPU_PROLOGUE_ROWS_INL_H_
