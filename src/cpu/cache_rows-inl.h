// Per-target row writers of the prologue family: a head row through norm and rotation into a cache's storage (StoreRow, CacheRows).
//
// A Highway "-inl.h" piece, re-included per target by prologue_kernels.cc (the token walk and re-rotation). Rows of
// the input's dtype without a norm take the apply kernels' register path instead (cpu/kernels.h rotate_token_rows);
// int8 / fp8 rows of whole vectors stay in registers (quantize_rows-inl.h); the rest come here. PrefetchSlotRows
// fetches a token's cache lines before its rows are computed.
#if defined(ROTARY_CPU_CACHE_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)  // per-target include guard
#ifdef ROTARY_CPU_CACHE_ROWS_INL_H_
#undef ROTARY_CPU_CACHE_ROWS_INL_H_
#else
#define ROTARY_CPU_CACHE_ROWS_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/bf16_native-inl.h"
#include "cpu/elements-inl.h"
#include "cpu/kernels.h"
#include "cpu/prologue_kernels.h"
#include "cpu/prologue_rows-inl.h"
#include "cpu/quantize-inl.h"
#include "cpu/quantize_rows-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::detail::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Per-thread f32 scratch.
inline float* PrologueScratch(size_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

/// A row of `D` channels from `in` (EI) through norm and rotation into storage of dtype `dt` at `out`
/// (f32/f16/bf16 directly; i8 and fp8 through the f32 scratch `tmp`, then quantised — f32 rows that nothing
/// changes, v, straight from `in`). Returns the i8 scale.
/// Out of line: inlined at each of its call sites (with the cache writer) it made this file 4x slower to compile
/// (86 s instead of 21 s per target, GCC -O3). Called per row only on the general path (CacheRows' loop
/// over a token's heads is one call per token and tensor).
template <Elem EI, Pairing P>
HWY_NOINLINE float StoreRow(const Storage<EI>* in, void* out, DType dt, float tensor_scale, size_t D,
                            const RowRotation& rot, const float* w, float eps, float* tmp, float rms = 0.0f) {
  switch (dt) {
    case DType::kF32: Row<EI, Elem::kF32, P>(in, static_cast<float*>(out), D, rot, w, eps, rms); return 1.0f;
    case DType::kF16: Row<EI, Elem::kF16, P>(in, static_cast<uint16_t*>(out), D, rot, w, eps, rms); return 1.0f;
    case DType::kBF16:
#if ROTARY_BF16_NATIVE
      if (NativeBF16()) {
        Row<EI, Elem::kBF16Native, P>(in, static_cast<uint16_t*>(out), D, rot, w, eps, rms);
        return 1.0f;
      }
#endif
      Row<EI, Elem::kBF16, P>(in, static_cast<uint16_t*>(out), D, rot, w, eps, rms);
      return 1.0f;
    default: break;
  }
  // f32 rows that nothing changes (v) are quantised from where they are, else from their f32 result in `tmp`.
  const float* y = tmp;
  bool from_input = false;
  if constexpr (EI == Elem::kF32) {
    from_input = rot.R == 0 && w == nullptr;
    if (from_input) y = in;
  }
  if (!from_input) Row<EI, Elem::kF32, P>(in, tmp, D, rot, w, eps, rms);
  if (dt == DType::kI8) return StoreRowI8(y, D, static_cast<int8_t*>(out));
  if (dt == DType::kF8E4M3) StoreRowFp8<true>(y, D, static_cast<uint8_t*>(out), tensor_scale);
  else StoreRowFp8<false>(y, D, static_cast<uint8_t*>(out), tensor_scale);
  return tensor_scale;
}

/// The f32 row `y` (D a multiple of the vector width, `out` 64-byte aligned) narrowed to EO with
/// non-temporal stores; 16-bit rows of targets whose narrowed vector is under 16 bytes (SSE4, EMU128)
/// store normally (a non-temporal store needs a whole, aligned register).
template <Elem EO>
HWY_INLINE void StreamRow(const float* HWY_RESTRICT y, Storage<EO>* HWY_RESTRICT out, size_t D) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  constexpr bool kWhole = EO == Elem::kF32 || hn::MaxLanes(d) * sizeof(uint16_t) >= 16;
  for (size_t i = 0; i < D; i += N) StoreX<EO, kWhole>(d, hn::LoadU(d, y + i), out + i);
}

/// The row `in` copied to `out` (D values of T, whole 64-byte lines, `out` on a line) with non-temporal stores.
template <class T>
HWY_INLINE void StreamCopyRow(const T* HWY_RESTRICT in, T* HWY_RESTRICT out, size_t D) {
  const hn::ScalableTag<uint8_t> d8;
  const size_t N = hn::Lanes(d8);
  const auto* src = reinterpret_cast<const uint8_t*>(in);
  auto* dst = reinterpret_cast<uint8_t*>(out);
  for (size_t i = 0; i < D * sizeof(T); i += N) hn::Stream(hn::LoadU(d8, src + i), d8, dst + i);
}

/// Prefetches every line of the rows (slot, 0 .. heads-1) of cache `c` (absent: nothing), rows the call is about
/// to store. A decode step's slot is one its sequence has not written yet, so its lines are usually in no cache:
/// fetched before the chunk's q rows are computed, they arrive while q is rotated instead of stalling the k and v
/// stores (a lone token, or a batch of decode tokens of different sequences). The token walk (RunTokensT) calls
/// it only for caches whose elements are at least as wide as the input's: narrowed rows (f32 into bf16, anything
/// into int8 / fp8: fewer lines, longer to compute) gained nothing on AVX3 and lost on AVX2 forced (a cold slot
/// 0.05-0.2 us, f32 into int8 0.2-0.3 us). Inline: an out-of-line function made only of prefetches is pure to
/// GCC, which dropped the calls. Measured in docs/performance.md ("The decode step's cache lines fetched early").
HWY_INLINE void PrefetchSlotRows(const PlanRows& c, int64_t slot) {
  if (!c.present()) return;
  const size_t es = dtype_size(c.dtype);
  const size_t bytes = static_cast<size_t>(c.dim) * es;  // channels adjacent (the SIMD paths' caches: cpu_prologue.cc)
  if (bytes == 0) return;
  for (int64_t head = 0; head < c.heads; ++head) {
    // Every line holding a byte of the row: ceil((first % kLine + bytes) / kLine) lines.
    const auto first = reinterpret_cast<uintptr_t>(c.data) + static_cast<uintptr_t>(c.row_offset(slot, head)) * es;
    for (uintptr_t line = first & ~uintptr_t{kLine - 1}; line < first + bytes; line += kLine)
      hwy::Prefetch(reinterpret_cast<const char*>(line));
  }
}

/// Writes rows (slot, 0 .. heads-1) of a cache from the token's rows `rows`, `in_sh` apart (`w` non-null:
/// with RMSNorm, the factors from FactorsAhead, `rms` its scratch or null); `stream`: with non-temporal stores
/// (PrologueJob::stream_cache); copied when nothing changes the values (v into a cache of its dtype), else
/// through the f32 scratch `tmp`. Out of line, one call per token and tensor: a call per row cost the prologue
/// bench's prefill ratios 3.6 % on AVX2 (geometric mean of 32 configurations), and inlined at its two call
/// sites it cost compile time.
template <Elem EI, Pairing P>
HWY_NOINLINE void CacheRows(const Storage<EI>* rows, int64_t in_sh, const PlanRows& c, int64_t slot, int64_t heads,
                            const RowRotation& rot, const float* w, float eps, float* tmp, bool stream,
                            float* rms) {
  const size_t es = dtype_size(c.dtype);
  const auto D = static_cast<size_t>(c.dim);
  // int8 / fp8 rows of whole vectors, fully rotated or not rotated, stay in registers (quantize_rows-inl.h);
  // the others go through the scratch row (StoreRow). Quantised rows are never streamed (cpu_prologue.cc).
  if ((c.dtype == DType::kI8 || c.dtype == DType::kF8E4M3 || c.dtype == DType::kF8E5M2) &&
      WithQuantRowVectors<EI>(D, rot.R, [&](auto kv_tag) HWY_ATTR {
        FactorsAhead<EI>(rows, heads, in_sh, D, w, eps, rot.pf, rms, [&](int64_t head, float r) HWY_ATTR {
          void* out = static_cast<char*>(c.data) + c.row_offset(slot, head) * static_cast<int64_t>(es);
          const float scale = QuantRowInRegisters<decltype(kv_tag)::value, EI, P>(rows + head * in_sh, out, c.dtype,
                                                                                  c.tensor_scale, rot, w, r);
          if (c.dtype == DType::kI8) c.scales[c.scale_offset(slot, head)] = scale;
        });
      }))
    return;
  constexpr DType kInput = EI == Elem::kF32 ? DType::kF32 : EI == Elem::kF16 ? DType::kF16 : DType::kBF16;
  const bool unchanged = rot.R == 0 && w == nullptr && c.dtype == kInput;  // rows copied as they are
  // Rows that nothing changes into a cache of their dtype (v, or k without rotation and norm) are copied, with
  // non-temporal stores when `stream`: the token's heads in one copy when they are adjacent in the input and in
  // the cache (the common v of a decode step: one 2 KiB copy instead of 8 calls down to StoreRow's memcpy; of a
  // streamed prefill: one copy instead of one per head), the input prefetched `rot.pf` bytes ahead.
  if (unchanged && heads > 0) {
    char* first = static_cast<char*>(c.data) + c.row_offset(slot, 0) * static_cast<int64_t>(es);
    const size_t row_bytes = D * es;
    if (rot.pf != 0) {
      for (int64_t head = 0; head < heads; ++head)
        for (size_t off = 0; off < row_bytes; off += kLine)
          PrefetchAhead(reinterpret_cast<const char*>(rows + head * in_sh) + off, rot.pf);
    }
    auto copy = [stream](char* dst, const Storage<EI>* src, size_t bytes) HWY_ATTR {
      if (stream) StreamCopyRow(reinterpret_cast<const uint8_t*>(src), reinterpret_cast<uint8_t*>(dst), bytes);
      else std::memcpy(dst, src, bytes);
    };
    if (in_sh == c.dim && c.s_head == c.dim) {
      copy(first, rows, static_cast<size_t>(heads) * row_bytes);
    } else {
      for (int64_t head = 0; head < heads; ++head)
        copy(first + head * c.s_head * static_cast<int64_t>(es), rows + head * in_sh, row_bytes);
    }
    return;
  }
  FactorsAhead<EI>(rows, heads, in_sh, D, w, eps, rot.pf, rms, [&](int64_t head, float r) HWY_ATTR {
    const Storage<EI>* in = rows + head * in_sh;
    void* out = static_cast<char*>(c.data) + c.row_offset(slot, head) * static_cast<int64_t>(es);
    if (stream) {
      Row<EI, Elem::kF32, P>(in, tmp, D, rot, w, eps, r);
      if (c.dtype == DType::kF32) StreamRow<Elem::kF32>(tmp, static_cast<float*>(out), D);
      else if (c.dtype == DType::kF16) StreamRow<Elem::kF16>(tmp, static_cast<uint16_t*>(out), D);
#if ROTARY_BF16_NATIVE
      else if (NativeBF16()) StreamRow<Elem::kBF16Native>(tmp, static_cast<uint16_t*>(out), D);
#endif
      else StreamRow<Elem::kBF16>(tmp, static_cast<uint16_t*>(out), D);
      return;
    }
    const float scale = StoreRow<EI, P>(in, out, c.dtype, c.tensor_scale, D, rot, w, eps, tmp, r);
    if (c.dtype == DType::kI8) c.scales[c.scale_offset(slot, head)] = scale;
  });
}

}  // namespace rotary::detail::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ROTARY_CPU_CACHE_ROWS_INL_H_
