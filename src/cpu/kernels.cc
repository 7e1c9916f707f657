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

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::detail::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

enum class Elem { kF32, kF16, kBF16 };

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
    if constexpr (E == Elem::kBF16) {
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
    if constexpr (E == Elem::kBF16) {
      // Round to nearest even on the f32 bits: bits + 0x7FFF + (bit 16), the bf16 is the upper half.
      // NaN keeps its payload's upper half with the quiet bit set (the addition could carry into it).
      const auto bits = hn::BitCast(du, v);
      const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
      auto r = hn::Add(hn::Add(bits, hn::Set(du, 0x7FFFu)), lsb);
      r = hn::IfThenElse(hn::RebindMask(du, hn::Ne(v, v)), hn::Or(bits, hn::Set(du, 0x00400000u)), r);
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

/// One row of a large call: a few elements first so that the full-width stores are aligned (numpy
/// arrays start 16 bytes past a cache line: unaligned 64-byte stores would split every line), then
/// full vectors (streamed when asked and the row is whole cache lines), with the prefetch of a row
/// further ahead interleaved (`pf` may be any address: prefetches never fault).
template <Elem E, bool kStream>
HWY_INLINE void HalfRowPrefetch(const Storage<E>* in, Storage<E>* out, const float* c, const float* s, size_t h,
                                const Storage<E>* pf) {
  using T = Storage<E>;
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t vec_bytes = N * sizeof(T);
  auto narrow = [&](auto dc, size_t j) {
    HalfStep<E, false>(dc, in, out, hn::LoadU(dc, c + j), hn::LoadU(dc, s + j), j, h);
  };
  hwy::Prefetch(pf);
  size_t i = 0;
  const size_t peel = std::min(h, PeelToAlign(out, vec_bytes, false));
  if (peel != 0) Remainder<8, 1>(i, peel, narrow);
  // Stream only whole cache lines that no regular store of this or another row touches: the row
  // and both halves start on a line and the halves are whole lines (mixing streamed and cached
  // stores in one line costs far more than not streaming: measured 10x slower on f16 rows).
  const bool stream = kStream && peel == 0 && reinterpret_cast<uintptr_t>(out) % kLine == 0 &&
                      (h * sizeof(T)) % kLine == 0;
  if (stream) {
    for (; i + N <= h; i += N) {
      hwy::Prefetch(pf + i);
      hwy::Prefetch(pf + h + i);
      HalfStep<E, kStream>(d, in, out, hn::LoadU(d, c + i), hn::LoadU(d, s + i), i, h);
    }
  } else {
    for (; i + N <= h; i += N) {
      hwy::Prefetch(pf + i);
      hwy::Prefetch(pf + h + i);
      HalfStep<E, false>(d, in, out, hn::LoadU(d, c + i), hn::LoadU(d, s + i), i, h);
    }
  }
  if (i < h) Remainder<8, 1>(i, h, narrow);
}

template <Elem E, bool kStream>
HWY_INLINE void InterleavedRowPrefetch(const Storage<E>* in, Storage<E>* out, const float* cd, const float* sd,
                                       size_t rdim, const Storage<E>* pf) {
#if HWY_TARGET == HWY_SCALAR
  (void)pf;
  InterleavedRows<E, false>(&in, &out, 1, cd, sd, rdim);
#else
  using T = Storage<E>;
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t vec_bytes = N * sizeof(T);
  auto narrow = [&](auto dc, size_t k) {
    InterleavedStep<E, false>(dc, in, out, hn::LoadU(dc, cd + k), hn::LoadU(dc, sd + k), k);
  };
  hwy::Prefetch(pf);
  size_t j = 0;
  const size_t peel = std::min(rdim, PeelToAlign(out, vec_bytes, true));
  if (peel != 0) Remainder<8, 2>(j, peel, narrow);
  const bool stream = kStream && peel == 0 && reinterpret_cast<uintptr_t>(out) % kLine == 0 &&
                      (rdim * sizeof(T)) % kLine == 0;
  if (stream) {
    for (; j + N <= rdim; j += N) {
      hwy::Prefetch(pf + j);
      InterleavedStep<E, kStream>(d, in, out, hn::LoadU(d, cd + j), hn::LoadU(d, sd + j), j);
    }
  } else {
    for (; j + N <= rdim; j += N) {
      hwy::Prefetch(pf + j);
      InterleavedStep<E, false>(d, in, out, hn::LoadU(d, cd + j), hn::LoadU(d, sd + j), j);
    }
  }
  if (j < rdim) Remainder<8, 2>(j, rdim, narrow);
#endif
}

// ------------------------------------------------------------------ rows of a job

/// Per-thread buffers for cos/sin rows that must be gathered, computed, negated or duplicated.
inline float* Scratch(size_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

/// Walks rows in job order: token (b, s), then q heads, then k heads.
struct RowCursor {
  const Plan* p;
  int64_t rpt, hq;
  int64_t g = 0, w = 0, b = 0, s = 0;

  void seek(int64_t r) {
    g = r / rpt;
    w = r % rpt;
    b = g / p->S;
    s = g % p->S;
  }
  void next() {
    if (++w < rpt) return;
    w = 0;
    ++g;
    if (++s == p->S) {
      s = 0;
      ++b;
    }
  }
  template <typename T>
  const T* in() const {
    const PlanTensor& t = p->t[w < hq ? 0 : 1];
    const int64_t head = w < hq ? w : w - hq;
    return static_cast<const T*>(t.in) + b * t.in_sb + s * t.in_ss + head * t.in_sh;
  }
  template <typename T>
  T* out() const {
    const PlanTensor& t = p->t[w < hq ? 0 : 1];
    const int64_t head = w < hq ? w : w - hq;
    return static_cast<T*>(t.out) + b * t.out_sb + s * t.out_ss + head * t.out_sh;
  }
};

/// The rows a kernel multiplies by for one token: cos and sin as the pairing wants them
/// (half-split: c, s or -s; interleaved: duplicated per channel with the pair's signs).
template <Pairing P>
HWY_INLINE void TokenRows(const RowJob& job, int64_t b, int64_t s, float* resolved, float* prepared,
                          const float** c_use, const float** s_use) {
  const Plan& p = *job.plan;
  const size_t h = static_cast<size_t>(p.half);
  const float* crow;
  const float* srow;
  if (job.table_fast) {
    crow = p.cs.table + (p.pos.offset + s) * static_cast<int64_t>(2 * h);
    srow = crow + h;
  } else {
    resolve_cos_sin(p, b, s, resolved, &crow, &srow);
  }
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

template <Elem E, Pairing P, bool kStream>
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
  RowCursor cur{&p, job.rows_per_token, p.t[0].heads};
  cur.seek(r0);

  if (job.row_outer) {
    // Large calls: rows one after another (what prefetchers and write-combining want), with a
    // software prefetch a few KiB ahead; each token's cos/sin rows stay in L1 across its heads.
    const size_t row_bytes = static_cast<size_t>(p.head_dim) * sizeof(T);
    const int64_t ahead_rows = std::max<int64_t>(1, kPrefetchBytes / static_cast<int64_t>(row_bytes));
    RowCursor ahead = cur;
    ahead.seek(std::min(job.total_rows - 1, r0 + ahead_rows));
    int64_t token = -1;
    for (int64_t r = r0; r < r1; ++r) {
      if (cur.g != token) {
        TokenRows<P>(job, cur.b, cur.s, resolved, prepared, &c_use, &s_use);
        token = cur.g;
      }
      const T* pf = nullptr;
      if (r + ahead_rows < job.total_rows) {
        pf = ahead.in<T>();
        ahead.next();
      }
      const T* in = cur.in<T>();
      T* out = cur.out<T>();
      if (pf == nullptr) pf = in;  // nothing ahead: prefetch what is already in cache
      if constexpr (P == Pairing::kHalfSplit) {
        HalfRowPrefetch<E, kStream>(in, out, c_use, s_use, h, pf);
      } else {
        InterleavedRowPrefetch<E, kStream>(in, out, c_use, s_use, R, pf);
      }
      if (R < D && in != out) {
        for (size_t off = R; off < D; off += 64 / sizeof(T)) hwy::Prefetch(pf + off);
        std::memcpy(out + R, in + R, (D - R) * sizeof(T));
      }
      cur.next();
    }
  } else {
    // Small calls (a decode token): channel blocks outside, a token's rows inside, so each cos/sin
    // vector is loaded once per token and stays in a register.
    constexpr int64_t kBatch = 64;
    const T* ins[kBatch];
    T* outs[kBatch];
    int64_t r = r0;
    while (r < r1) {
      TokenRows<P>(job, cur.b, cur.s, resolved, prepared, &c_use, &s_use);
      // This token's rows [w, w_end): pointers by stepping each tensor's head stride.
      const int64_t w_end = std::min(cur.rpt, cur.w + (r1 - r));
      for (int64_t w0 = cur.w; w0 < w_end; w0 += kBatch) {
        const int64_t w1 = std::min(w_end, w0 + kBatch);
        int64_t n = 0;
        for (int i = 0; i < 2; ++i) {
          const int64_t first = i == 0 ? 0 : cur.hq;  // row index of this tensor's head 0
          const int64_t last = i == 0 ? cur.hq : cur.rpt;
          const int64_t lo = std::max(w0, first), hi = std::min(w1, last);
          if (lo >= hi) continue;
          const PlanTensor& t = p.t[i];
          const T* in = static_cast<const T*>(t.in) + cur.b * t.in_sb + cur.s * t.in_ss + (lo - first) * t.in_sh;
          T* out = static_cast<T*>(t.out) + cur.b * t.out_sb + cur.s * t.out_ss + (lo - first) * t.out_sh;
          for (int64_t k = lo; k < hi; ++k, ++n, in += t.in_sh, out += t.out_sh) {
            ins[n] = in;
            outs[n] = out;
          }
        }
        Rows<E, P, false>(ins, outs, n, c_use, s_use, p);  // never streamed: see RunRowsE
      }
      r += w_end - cur.w;
      cur.seek(r);
    }
  }
  if constexpr (kStream) hwy::FlushStream();
}

template <Elem E>
void RunRowsE(const RowJob& job, int64_t r0, int64_t r1) {
  const hn::ScalableTag<float> d;
  const size_t esize = sizeof(Storage<E>);
  const size_t store_bytes = hn::Lanes(d) * esize;
  // Non-temporal stores only with full native vectors (Highway streams at least 16 bytes), only in
  // the row-by-row order (write-combining needs each line written in one go), and only on aligned
  // rows (checked per row).
  const bool stream = job.stream && job.row_outer && HWY_TARGET != HWY_SCALAR && store_bytes >= 16;
  const bool half = job.plan->pairing == Pairing::kHalfSplit;
  if (half) {
    stream ? RunRowsT<E, Pairing::kHalfSplit, true>(job, r0, r1)
           : RunRowsT<E, Pairing::kHalfSplit, false>(job, r0, r1);
  } else {
    stream ? RunRowsT<E, Pairing::kInterleaved, true>(job, r0, r1)
           : RunRowsT<E, Pairing::kInterleaved, false>(job, r0, r1);
  }
}

void RunRows(const RowJob& job, int64_t r0, int64_t r1) {
  switch (job.plan->dtype) {
    case DType::kF16: return RunRowsE<Elem::kF16>(job, r0, r1);
    case DType::kBF16: return RunRowsE<Elem::kBF16>(job, r0, r1);
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

std::vector<int64_t> runnable_targets() { return hwy::SupportedAndGeneratedTargets(); }

}  // namespace rotary::detail::cpu
#endif  // HWY_ONCE
