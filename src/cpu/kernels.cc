// CPU SIMD row kernels (Highway, compiled per ISA target): the walk over a job's rows, HWY_EXPORT and the dispatch.
//
// Written once with Highway and compiled per ISA target (AVX-512, AVX2, SSE4, ..., scalar).
// One kernel body serves every dtype (f32 / f16 / bf16 in memory, f32 math), pairing, direction and
// in-place / out-of-place variant; widths are never spelled out, so tails use narrower (capped) tags
// of the same body rather than a second scalar copy. foreach_target.h re-includes this file once per
// target, and with it the per-target pieces ("-inl.h", as Highway's own vqsort is split):
//   elements-inl.h          f32/f16/bf16 widening loads and rounding narrowing stores (LoadX/StoreX)
//   bf16_native-inl.h       the AVX512-BF16 narrowing, fenced in one place (x86 AVX3 target)
//   rows_general-inl.h      rotation steps and row loops for any width, peeled and streamed rows
//   rows_in_registers-inl.h rows of whole vectors with the token's cos/sin in registers
//   token_cos_sin-inl.h     a token's cos/sin rows, from the table or resolved, prepared per pairing
// This file walks a job's rows token by token, picks the strategy, and holds the one switch over
// dtype x pairing x streaming (RunRows, exported with HWY_EXPORT and called by run_rows).
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

#include "cpu/bf16_native-inl.h"
#include "cpu/elements-inl.h"
#include "cpu/kernels.h"
#include "cpu/prefetch.h"
#include "cpu/rows_general-inl.h"
#include "cpu/rows_in_registers-inl.h"
#include "cpu/token_cos_sin-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::detail::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

/// Rows [r0, r1) of the job, token by token: each token's cos/sin rows once, then each tensor's rows
/// of that token by the strategy of W (and RowsInRegisters where RegisterVectors allows it).
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
            for (size_t off = R; off < D; off += kLine / sizeof(T)) PrefetchStream(pf + off);
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
#if ROTARY_BF16_NATIVE
      if (NativeBF16()) return RunRowsE<Elem::kBF16Native>(job, r0, r1);
#endif
      return RunRowsE<Elem::kBF16>(job, r0, r1);
    default: return RunRowsE<Elem::kF32>(job, r0, r1);
  }
}

/// The job's tokens, each by RowsInRegisters<K> (K fixed for the call, so chosen once).
template <Elem E, Pairing P, bool kStream, bool kPrefetch>
void TokensInRegisters(size_t K, const TokenRowJob& r) {
  using T = Storage<E>;
  const auto h = static_cast<size_t>(r.half);
  const int64_t pf = kPrefetch ? r.prefetch : 0;
  WithRegisterVectors<P>(K, [&](auto k_tag) HWY_ATTR {
    constexpr size_t kK = decltype(k_tag)::value;
    for (int64_t j = 0; j < r.tokens; ++j)
      RowsInRegisters<kK, E, P, kStream, kPrefetch>(static_cast<const T*>(r.in[j]), static_cast<T*>(r.out[j]), r.n,
                                                    r.in_step, r.out_step, r.c[j], r.s[j], h, false, pf);
  });
}

/// rotate_token_rows on this target: RowsInRegisters when the rotated part is whole register vectors.
template <Elem E, Pairing P>
bool RotateTokenRowsT(const TokenRowJob& r) {
  const size_t K = RegisterVectors<P>(r.half, r.rotary_dim);
  if (K == 0) return false;
  using T = Storage<E>;
  if (r.stream) {
    const hn::ScalableTag<float> d;
    const auto line_unit = (P == Pairing::kHalfSplit ? static_cast<size_t>(r.half) : static_cast<size_t>(r.rotary_dim)) *
                           sizeof(T);
    const auto es = static_cast<int64_t>(sizeof(T));
    if (HWY_TARGET == HWY_SCALAR || hn::Lanes(d) * sizeof(T) < 16 || line_unit % kLine != 0 ||
        (r.out_step * es) % static_cast<int64_t>(kLine) != 0)
      return false;
    for (int64_t j = 0; j < r.tokens; ++j)
      if (reinterpret_cast<uintptr_t>(r.out[j]) % kLine != 0) return false;
    if (r.prefetch != 0) {
      TokensInRegisters<E, P, true, true>(K, r);
    } else {
      TokensInRegisters<E, P, true, false>(K, r);
    }
    return true;
  }
  if (r.prefetch != 0) {
    TokensInRegisters<E, P, false, true>(K, r);
  } else {
    TokensInRegisters<E, P, false, false>(K, r);
  }
  return true;
}

template <Elem E>
bool RotateTokenRowsE(const TokenRowJob& r) {
  if (r.pairing == Pairing::kHalfSplit) return RotateTokenRowsT<E, Pairing::kHalfSplit>(r);
  return RotateTokenRowsT<E, Pairing::kInterleaved>(r);
}

bool RotateTokenRows(const TokenRowJob& r) {
  switch (r.dtype) {
    case DType::kF16: return RotateTokenRowsE<Elem::kF16>(r);
    case DType::kBF16:
#if ROTARY_BF16_NATIVE
      if (NativeBF16()) return RotateTokenRowsE<Elem::kBF16Native>(r);
#endif
      return RotateTokenRowsE<Elem::kBF16>(r);
    default: return RotateTokenRowsE<Elem::kF32>(r);
  }
}

int64_t CurrentTarget() { return HWY_TARGET; }

}  // namespace rotary::detail::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rotary::detail::cpu {

HWY_EXPORT(RunRows);
HWY_EXPORT(CurrentTarget);
HWY_EXPORT(RotateTokenRows);

void run_rows(const RowJob& job, int64_t r0, int64_t r1) { HWY_DYNAMIC_DISPATCH(RunRows)(job, r0, r1); }

bool rotate_token_rows(const TokenRowJob& rows) { return HWY_DYNAMIC_DISPATCH(RotateTokenRows)(rows); }

const char* dispatched_target_name() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(CurrentTarget)()); }

bool set_native_bf16(bool on) {
  const bool usable = on && CpuHasAvx512Bf16();
  g_native_bf16.store(usable, std::memory_order_relaxed);
  return usable;
}

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
