// CPU SIMD kernels of the prologue family (Highway, compiled per ISA target): the token walk, the cache writes, re-rotation.
//
// foreach_target.h re-includes this file once per target, and with it prologue_rows-inl.h (load, norm,
// rotate, store of one head row) and quantize-inl.h (int8 / fp8 rows). The switch over the input dtype and
// pairing is RunPrologue; each row's output storage (q's dtype, a cache's dtype) is chosen by StoreRow.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/prologue_kernels.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
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

/// Writes rows (slot, 0 .. heads-1) of a cache from the token's rows `rows`, `in_sh` apart (`w` non-null:
/// with RMSNorm, the factors from FactorsAhead, `rms` its scratch or null); `stream`: with non-temporal stores
/// (PrologueJob::stream_cache), copied when nothing changes the values (v into a cache of its dtype), else
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
  // Rows that nothing changes into a cache of their dtype (v, or k without rotation and norm), stored
  // normally, are copied: the token's heads in one copy when they are adjacent in the input and in the
  // cache (the common v of a decode step: one 2 KiB copy instead of 8 calls down to StoreRow's memcpy).
  if (!stream && unchanged && heads > 0) {
    char* first = static_cast<char*>(c.data) + c.row_offset(slot, 0) * static_cast<int64_t>(es);
    const size_t row_bytes = D * es;
    if (rot.pf != 0) {
      for (int64_t head = 0; head < heads; ++head)
        for (size_t off = 0; off < row_bytes; off += kLine)
          PrefetchAhead(reinterpret_cast<const char*>(rows + head * in_sh) + off, rot.pf);
    }
    if (in_sh == c.dim && c.s_head == c.dim) {
      std::memcpy(first, rows, static_cast<size_t>(heads) * row_bytes);
    } else {
      for (int64_t head = 0; head < heads; ++head)
        std::memcpy(first + head * c.s_head * static_cast<int64_t>(es), rows + head * in_sh, row_bytes);
    }
    return;
  }
  FactorsAhead<EI>(rows, heads, in_sh, D, w, eps, rot.pf, rms, [&](int64_t head, float r) HWY_ATTR {
    const Storage<EI>* in = rows + head * in_sh;
    void* out = static_cast<char*>(c.data) + c.row_offset(slot, head) * static_cast<int64_t>(es);
    if (stream) {
      if (unchanged) {
        StreamCopyRow(in, static_cast<Storage<EI>*>(out), D);
        return;
      }
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

/// Tokens per pass of RunTokensT (at most; fewer where their cos/sin rows would pass kChunkFloats).
constexpr int64_t kChunkTokens = 64;
constexpr int64_t kChunkFloats = 16384;

/// Tokens [g0, g1) in chunks of up to kChunkTokens: each token's cos/sin once, then the chunk's q rows, its k
/// rows (cache or k_out), then its v rows, one pass per tensor. Token by token (q, k and v rows of one token, then
/// the next: six short interleaved streams instead of two or three long ones) took 1.06-1.14x the time at the
/// median of the prologue bench's prefill configurations, up to 1.3-1.4x for f32 inputs (Llama-3-8B shapes,
/// T = 4096, one thread, Zen 4, AVX3 and AVX2; docs/performance.md). The results are the same: the rows a call
/// writes share no element with those it reads but their own in place (overlap.cc check_aliasing, prologue.cc
/// check_outputs), so their order does not matter. A lone token (decode) is one pass, as before.
template <Elem EI, Pairing P>
void RunTokensT(const PrologueJob& job, int64_t g0, int64_t g1) {
  using T = Storage<EI>;
  const ProloguePlan& p = *job.plan;
  const bool stream = job.stream_cache;
  const Plan& rp = p.rope;
  const size_t D = static_cast<size_t>(rp.head_dim), h = static_cast<size_t>(rp.half);
  const size_t R = static_cast<size_t>(rp.rotary_dim);
  const size_t row_floats = std::max<size_t>(D, static_cast<size_t>(p.v_dim));
  const int64_t qh = p.q_index >= 0 ? rp.t[p.q_index].heads : 0;
  const int64_t kh = p.k_index >= 0 ? rp.t[p.k_index].heads : 0;
  const int64_t chunk =
      g1 - g0 < 2 ? 1 : std::clamp<int64_t>(kChunkFloats / std::max<int64_t>(2, 2 * rp.half), 1, kChunkTokens);
  const size_t chunk_floats = static_cast<size_t>(chunk * 2 * rp.half);
  float* scratch = PrologueScratch(chunk_floats + 2 * R + row_floats + static_cast<size_t>(std::max(qh, kh)) + 6 * h + 96);
  float* resolved = scratch;  // the chunk's cos | sin rows computed here (2h per token; table rows are read in place)
  const float* chunk_c[kChunkTokens];
  const float* chunk_s[kChunkTokens];
  float* cd = scratch + chunk_floats + 16;
  float* sd = cd + R;
  float* tmp = sd + R + 16;
  // The RMS factors of one tensor's heads of the token, computed before its rows for a lone token (FactorsAhead).
  float* rms = g1 - g0 < 2 ? tmp + row_floats + 16 : nullptr;
  // The token's cos | sin in block order (2h).
  float* csb = tmp + row_floats + static_cast<size_t>(std::max(qh, kh)) + 32;
  float* wqb = csb + 2 * h + 16;  // q's and k's norm weights in block order (2h each)
  float* wkb = wqb + 2 * h;
  RowRotation rot;
  rot.R = p.rotate ? R : 0;
  rot.h = h;
  RowRotation none;
  const DType qdt = rp.dtype;
  // Prefetch distances (as the apply kernels): a page ahead in dense tensors, else the next token's row.
  // One token at a time (decode) prefetches nothing.
  auto ahead = [&](int64_t heads, int64_t sh, int64_t ss, int64_t dim) -> int64_t {
    if (g1 - g0 < 2) return 0;
    return sh == dim && ss == heads * dim ? int64_t{4096} : ss * static_cast<int64_t>(sizeof(T));
  };
  const int64_t pf_q = p.q_index >= 0 ? ahead(rp.t[p.q_index].heads, rp.t[p.q_index].in_sh, rp.t[p.q_index].in_ss, rp.head_dim) : 0;
  const int64_t pf_k = p.k_index >= 0 ? ahead(rp.t[p.k_index].heads, rp.t[p.k_index].in_sh, rp.t[p.k_index].in_ss, rp.head_dim) : 0;
  none.pf = p.has_v ? ahead(p.v.heads, p.v.in_sh, p.v.in_ss, p.v_dim) : 0;
  // Rows without a norm whose output has the input's dtype (q, k into a cache of that dtype or k_out)
  // rotate with the token's cos/sin in registers, through the apply kernels' row path (the same
  // operations, so the same results); the others, and every row on targets where that path does not
  // fit, go through StoreRow / CacheRows.
  TokenRowJob fast;
  fast.dtype = qdt;
  fast.pairing = P;
  fast.half = rp.half;
  fast.rotary_dim = rp.rotary_dim;
  // The rows [in, in + n*in_step) to out (steps in elements) in registers; the channels past R are
  // copied when the rows move. False: not done. Whether the path applies depends only on the call's
  // dtype, pairing and dims and on the target, so the first refusal holds for the whole call.
  // Streamed cache rows (`to_cache` with job.stream_cache) take the path streaming where their halves are
  // whole lines; the first refusal of that holds for the call too (cache rows share their alignment).
  bool registers_apply = p.rotate, registers_stream = stream;
  auto in_registers = [&](const T* in, T* out, int64_t n, int64_t in_step, int64_t out_step, int64_t pf,
                          bool to_cache = false) {
    if (!registers_apply || (to_cache && stream && !registers_stream)) return false;
    TokenRowJob r = fast;
    r.in = in;
    r.out = out;
    r.n = n;
    r.in_step = in_step;
    r.out_step = out_step;
    r.prefetch = pf;
    r.stream = to_cache && stream;
    if (!rotate_token_rows(r)) {
      if (r.stream) return registers_stream = false;
      return registers_apply = false;
    }
    if (R < D && static_cast<const void*>(in) != static_cast<const void*>(out))
      for (int64_t k = 0; k < n; ++k) std::memcpy(out + k * out_step + R, in + k * in_step + R, (D - R) * sizeof(T));
    return true;
  };
  const bool k_cache_fast = p.k_cache.present() && p.k_norm == nullptr && p.k_cache.dtype == qdt;
  const bool k_norm_fast = p.k_cache.present() && p.k_norm != nullptr && p.k_cache.dtype == qdt;
  // bf16 half-split rows with a norm, fully rotated, into bf16 (q; k into a bf16 cache): two vectors
  // narrowed per pack in block order (HalfBF16NormBlockRow), the weights put in that order once here
  // and each token's cos/sin once per pass that rotates it (q's and k's). Not where AVX512-BF16 narrows bf16
  // (StoreRow's own path).
  size_t nb_k = 0;
#if ROTARY_PROLOGUE_BF16_BLOCKS
  if constexpr (EI == Elem::kBF16 && P == Pairing::kHalfSplit) {
#if ROTARY_BF16_NATIVE
    const bool native = NativeBF16();
#else
    const bool native = false;
#endif
    if (p.rotate && R == D && !native && (p.q_norm != nullptr || p.k_norm != nullptr)) nb_k = NormBlockVectors(h);
    if (nb_k != 0 && p.q_norm != nullptr) RunsToBlockOrder(nb_k, p.q_norm, h, 2, wqb);
    if (nb_k != 0 && p.k_norm != nullptr) RunsToBlockOrder(nb_k, p.k_norm, h, 2, wkb);
  }
#endif
  const bool q_blocks = nb_k != 0 && p.q_norm != nullptr;
  // Streamed k rows take it where each half is whole lines (the rows are: stream_cache).
  const bool k_blocks = nb_k != 0 && p.k_norm != nullptr && p.k_cache.present() && p.k_cache.dtype == DType::kBF16 &&
                        (!stream || (h * sizeof(uint16_t)) % 64 == 0);
  // The block path's rows (bf16 storage; only reached when nb_k != 0, so only for bf16 inputs): a tensor's `n`
  // rows of the token, their factors from FactorsAhead (`w` the plain weights, `wb` the same in block order).
  auto NormBlockRows = [&](const T* in, T* out, int64_t n, int64_t in_step, int64_t out_step, const float* w,
                           const float* wb, int64_t pf, bool streamed) {
#if ROTARY_PROLOGUE_BF16_BLOCKS
    if constexpr (EI == Elem::kBF16) {
      WithNormBlockK(nb_k, streamed, [&](auto k_tag, auto stream_tag) HWY_ATTR {
        constexpr size_t kK = decltype(k_tag)::value;
        constexpr bool kStream = decltype(stream_tag)::value;
        const float *cb = csb, *sb = csb + h;
        FactorsAhead<EI>(in, n, in_step, D, w, p.eps, pf, rms,
                         [in, out, in_step, out_step, cb, sb, wb, h](int64_t r, float factor) HWY_ATTR {
                           HalfBF16NormBlockRow<kK, kStream>(in + r * in_step, out + r * out_step, cb, sb, wb, factor, h);
                         });
      });
    }
#else
    (void)in, (void)out, (void)n, (void)in_step, (void)out_step, (void)w, (void)wb, (void)pf, (void)streamed;
#endif
  };
  // Half-split rows with a norm, fully rotated, into storage of the input's dtype (q; k into a cache of that
  // dtype): each row loaded once into registers (HalfNormRowsInRegisters; `to_cache` rows streamed with
  // job.stream_cache). The first refusal of a kind holds for the call (it depends on dims and alignment).
  bool norm_registers = P == Pairing::kHalfSplit && p.rotate && R == D, norm_stream = stream;
  auto norm_in_registers = [&](const T* in, T* out, int64_t n, int64_t in_step, int64_t out_step, const float* w,
                               int64_t pf, bool to_cache) {
    const bool streamed = to_cache && stream;
    if (!norm_registers || (streamed && !norm_stream)) return false;
    bool done = false, native = false;
#if ROTARY_BF16_NATIVE
    if constexpr (EI == Elem::kBF16) {
      native = NativeBF16();
      if (native)
        done = HalfNormRowsInRegistersK<EI, Elem::kBF16Native>(in, out, n, in_step, out_step, fast.c, fast.s, w, p.eps,
                                                               h, pf, streamed);
    }
#endif
    if (!native)
      done = HalfNormRowsInRegistersK<EI, EI>(in, out, n, in_step, out_step, fast.c, fast.s, w, p.eps, h, pf, streamed);
    if (!done) (streamed ? norm_stream : norm_registers) = false;
    return done;
  };
  // The token's rotation for the row path (StoreRow, CacheRows): interleaved rows multiply by per-channel
  // cos/sin rows (RowRotation), built from the plain rows on the token's first such row of each pass (rows in
  // registers build their own).
  bool per_channel = false;
  auto rows = [&]() -> const RowRotation& {
    if constexpr (P == Pairing::kInterleaved) {
      if (p.rotate && !per_channel) {
        InterleavedChannelRows(fast.c, fast.s, h, false, cd, sd);
        rot.c = cd;
        rot.s = sd;
        per_channel = true;
      }
    }
    return rot;
  };
  // Token g (the chunk's i-th) with `parts` of it: 1 q, 2 k, 4 v.
  auto token = [&](int64_t g, int64_t i, int parts) {
    const int64_t b = g / rp.S, s = g % rp.S;
    if (p.rotate && (parts & 3) != 0) {
      const float* c = chunk_c[i];
      const float* sn = chunk_s[i];
      fast.c = c;
      fast.s = sn;
#if ROTARY_PROLOGUE_BF16_BLOCKS
      if (q_blocks || k_blocks) {
        RunsToBlockOrder(nb_k, c, h, 1, csb);
        RunsToBlockOrder(nb_k, sn, h, 1, csb + h);
      }
#endif
      rot.c = c;  // half-split rows use the plain rows; interleaved ones get theirs from rows() when needed
      rot.s = sn;
      per_channel = false;
    }
    const int64_t slot = p.slots != nullptr ? p.slots[g] : -1;
    if ((parts & 1) != 0 && p.q_index >= 0) {
      rot.pf = pf_q;
      const PlanTensor& t = rp.t[p.q_index];
      const T* in = static_cast<const T*>(t.in) + b * t.in_sb + s * t.in_ss;
      T* out = static_cast<T*>(t.out) + b * t.out_sb + s * t.out_ss;
      if (q_blocks) {
        NormBlockRows(in, out, t.heads, t.in_sh, t.out_sh, p.q_norm, wqb, pf_q, false);
      } else if (p.q_norm != nullptr ? !norm_in_registers(in, out, t.heads, t.in_sh, t.out_sh, p.q_norm, pf_q, false)
                                     : !in_registers(in, out, t.heads, t.in_sh, t.out_sh, pf_q)) {
        FactorsAhead<EI>(in, t.heads, t.in_sh, D, p.q_norm, p.eps, pf_q, rms, [&](int64_t head, float r) {
          StoreRow<EI, P>(in + head * t.in_sh, out + head * t.out_sh, qdt, 1.0f, D, rows(), p.q_norm, p.eps, tmp, r);
        });
      }
    }
    if ((parts & 2) != 0 && p.k_index >= 0) {
      rot.pf = pf_k;
      const PlanTensor& t = rp.t[p.k_index];
      const T* in = static_cast<const T*>(t.in) + b * t.in_sb + s * t.in_ss;
      if (p.k_cache.present()) {
        const PlanRows& kc = p.k_cache;
        // The token's first cache row, for the paths below that take a cache of the input's dtype.
        T* const krow = slot >= 0 && kc.dtype == qdt ? static_cast<T*>(kc.data) + kc.row_offset(slot, 0) : nullptr;
        if (slot >= 0 && k_blocks) {
          NormBlockRows(in, krow, t.heads, t.in_sh, kc.s_head, p.k_norm, wkb, pf_k, stream);
        } else if (slot >= 0 && !(k_cache_fast && in_registers(in, krow, t.heads, t.in_sh, kc.s_head, pf_k, true)) &&
                   !(k_norm_fast && norm_in_registers(in, krow, t.heads, t.in_sh, kc.s_head, p.k_norm, pf_k, true))) {
          CacheRows<EI, P>(in, t.in_sh, kc, slot, t.heads, rows(), p.k_norm, p.eps, tmp, stream, rms);
        }
      } else {
        T* out = static_cast<T*>(t.out) + b * t.out_sb + s * t.out_ss;
        if (p.k_norm != nullptr ? !norm_in_registers(in, out, t.heads, t.in_sh, t.out_sh, p.k_norm, pf_k, false)
                                : !in_registers(in, out, t.heads, t.in_sh, t.out_sh, pf_k)) {
          FactorsAhead<EI>(in, t.heads, t.in_sh, D, p.k_norm, p.eps, pf_k, rms, [&](int64_t head, float r) {
            StoreRow<EI, P>(in + head * t.in_sh, out + head * t.out_sh, qdt, 1.0f, D, rows(), p.k_norm, p.eps, tmp, r);
          });
        }
      }
    }
    if ((parts & 4) != 0 && p.has_v && slot >= 0) {
      const T* in = static_cast<const T*>(p.v.in) + b * p.v.in_sb + s * p.v.in_ss;
      CacheRows<EI, P>(in, p.v.in_sh, p.v_cache, slot, p.v.heads, none, nullptr, 0.0f, tmp, stream, nullptr);
    }
  };
  for (int64_t c0 = g0; c0 < g1; c0 += chunk) {
    const int64_t n = std::min(chunk, g1 - c0);
    if (p.rotate)
      for (int64_t i = 0; i < n; ++i)
        resolve_cos_sin(rp.pos, p.source_of(c0 + i), rp.half, (c0 + i) / rp.S, (c0 + i) % rp.S,
                        resolved + i * 2 * rp.half, &chunk_c[i], &chunk_s[i]);
    if (n == 1) {
      token(c0, 0, 7);
      continue;
    }
    for (int parts : {1, 2, 4})
      for (int64_t i = 0; i < n; ++i) token(c0 + i, i, parts);
  }
  if (stream) hwy::FlushStream();
}

template <Elem EI>
void RunPrologueE(const PrologueJob& job, int64_t g0, int64_t g1) {
  if (job.plan->rope.pairing == Pairing::kInterleaved && job.plan->rotate)
    return RunTokensT<EI, Pairing::kInterleaved>(job, g0, g1);
  RunTokensT<EI, Pairing::kHalfSplit>(job, g0, g1);
}

/// The one switch over the prologue's input dtype (loads of bf16 are the same with or without AVX512-BF16).
void RunPrologue(const PrologueJob& job, int64_t g0, int64_t g1) {
  switch (job.plan->rope.dtype) {
    case DType::kF16: return RunPrologueE<Elem::kF16>(job, g0, g1);
    case DType::kBF16: return RunPrologueE<Elem::kBF16>(job, g0, g1);
    default: return RunPrologueE<Elem::kF32>(job, g0, g1);
  }
}

/// Rows [i0, i1) of a re-rotation: each row's difference cos/sin, then each head dequantised, rotated
/// and stored back (i8 with a fresh scale); rows whose rotation is the identity are left as they are.
template <Pairing P>
void RunRerotateT(const RerotatePlan& p, int64_t i0, int64_t i1) {
  const PlanRows& r = p.rows;
  const size_t D = static_cast<size_t>(r.dim), h = static_cast<size_t>(p.half), R = static_cast<size_t>(p.rotary_dim);
  float* scratch = PrologueScratch(2 * h + 2 * R + 2 * D + 64);
  float* c = scratch;
  float* s = c + h + 8;
  float* cd = s + h + 8;
  float* sd = cd + R;
  float* tmp = sd + R + 16;
  RowRotation rot;
  rot.R = R;
  rot.h = h;
  const size_t es = dtype_size(r.dtype);
  int64_t last = -1;
  bool identity = false;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t slot = p.slots[static_cast<size_t>(i)];
    if (slot < 0) continue;
    // Consecutive rows with the same positions (a shift of a whole range by one amount is common) share cos/sin.
    if (last < 0 || p.from_pos[static_cast<size_t>(i)] != p.from_pos[static_cast<size_t>(last)] ||
        p.to_pos[static_cast<size_t>(i)] != p.to_pos[static_cast<size_t>(last)]) {
      identity = rerotate_cos_sin(p, i, c, s);
      if constexpr (P == Pairing::kHalfSplit) {
        rot.c = c;
        rot.s = s;
      } else {
        InterleavedChannelRows(c, s, h, false, cd, sd);
        rot.c = cd;
        rot.s = sd;
      }
    }
    last = i;
    if (identity) continue;  // a zero angle: the row keeps its bits (-0, NaN / inf, an i8 row's scale)
    for (int64_t head = 0; head < r.heads; ++head) {
      void* row = static_cast<char*>(r.data) + r.row_offset(slot, head) * static_cast<int64_t>(es);
      switch (r.dtype) {
        case DType::kF32: StoreRow<Elem::kF32, P>(static_cast<const float*>(row), row, r.dtype, 1.0f, D, rot, nullptr, 0.0f, tmp); break;
        case DType::kF16: StoreRow<Elem::kF16, P>(static_cast<const uint16_t*>(row), row, r.dtype, 1.0f, D, rot, nullptr, 0.0f, tmp); break;
        case DType::kBF16: StoreRow<Elem::kBF16, P>(static_cast<const uint16_t*>(row), row, r.dtype, 1.0f, D, rot, nullptr, 0.0f, tmp); break;
        default: {
          float* x = tmp + D + 16;
          if (r.dtype == DType::kI8) LoadRowI8(static_cast<const int8_t*>(row), D, r.scales[r.scale_offset(slot, head)], x);
          else LoadRowFp8(static_cast<const uint8_t*>(row), D, r.dtype, r.tensor_scale, x);
          const float scale = StoreRow<Elem::kF32, P>(x, row, r.dtype, r.tensor_scale, D, rot, nullptr, 0.0f, tmp);
          if (r.dtype == DType::kI8) r.scales[r.scale_offset(slot, head)] = scale;
        }
      }
    }
  }
}

void RunRerotate(const RerotatePlan& p, int64_t i0, int64_t i1) {
  if (p.pairing == Pairing::kInterleaved) return RunRerotateT<Pairing::kInterleaved>(p, i0, i1);
  RunRerotateT<Pairing::kHalfSplit>(p, i0, i1);
}

}  // namespace rotary::detail::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rotary::detail::cpu {

HWY_EXPORT(RunPrologue);
HWY_EXPORT(RunRerotate);

void run_prologue_tokens(const PrologueJob& job, int64_t g0, int64_t g1) {
  HWY_DYNAMIC_DISPATCH(RunPrologue)(job, g0, g1);
}

void run_rerotate_rows(const RerotatePlan& plan, int64_t i0, int64_t i1) {
  HWY_DYNAMIC_DISPATCH(RunRerotate)(plan, i0, i1);
}

}  // namespace rotary::detail::cpu
#endif  // HWY_ONCE
