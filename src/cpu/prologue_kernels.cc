// CPU SIMD kernels of the prologue family (Highway, compiled per ISA target): the token walk, the cache writes, re-rotation.
//
// foreach_target.h re-includes this file once per target, and with it cache_rows-inl.h (StoreRow, CacheRows: a
// row through norm and rotation into a cache's storage), prologue_rows-inl.h (load, norm, rotate, store of one
// head row), norm_block_rows-inl.h (bf16 rows with norm in block order) and quantize-inl.h (int8 / fp8 rows). The
// switch over the input dtype and pairing is RunPrologue; each row's output storage (q's dtype, a cache's dtype) is
// chosen by StoreRow.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/prologue_kernels.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/bf16_native-inl.h"
#include "cpu/cache_rows-inl.h"
#include "cpu/elements-inl.h"
#include "cpu/kernels.h"
#include "cpu/norm_block_rows-inl.h"
#include "cpu/prologue_kernels.h"
#include "cpu/prologue_rows-inl.h"
#include "cpu/quantize-inl.h"
#include "cpu/quantize_rows-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::detail::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Tokens per pass of RunTokensT (at most; fewer where their cos/sin rows would pass kChunkFloats).
constexpr int64_t kChunkTokens = 64;
constexpr int64_t kChunkFloats = 16384;

/// Tokens [g0, g1) in chunks of up to kChunkTokens: the chunk's cache rows prefetched where they are not streamed
/// (PrefetchSlotRows), each token's cos/sin once, then the chunk's q rows, its k rows (cache or k_out), then its v
/// rows, one pass per tensor. Token by token (q, k and v rows of one token, then
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
  // A chunk's rows for tokens_in_registers: each token's first input and output row, and cos/sin rows (k's skip
  // the tokens of slot -1).
  const void* chunk_in[kChunkTokens];
  void* chunk_out[kChunkTokens];
  const float* rows_c[kChunkTokens];
  const float* rows_s[kChunkTokens];
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
  const float* tok_c = nullptr;  // the current token's plain cos / sin rows (set by `token`)
  const float* tok_s = nullptr;
  // Tokens' rows in registers: token j's rows [in[j], in[j] + n*in_step) to out[j] (steps in elements), by its
  // cos/sin rows c[j], s[j]; the channels past R are copied when the rows move. False: not done. Whether the
  // path applies depends only on the call's dtype, pairing and dims and on the target, so the first refusal
  // holds for the whole call. Streamed cache rows (`to_cache` with job.stream_cache) take the path streaming
  // where their halves are whole lines; the first refusal of that holds for the call too (cache rows share
  // their alignment).
  bool registers_apply = p.rotate, registers_stream = stream;
  auto tokens_in_registers = [&](int64_t tokens, const void* const* in, void* const* out, const float* const* c,
                                 const float* const* sn, int64_t n, int64_t in_step, int64_t out_step, int64_t pf,
                                 bool to_cache) {
    if (!registers_apply || (to_cache && stream && !registers_stream)) return false;
    TokenRowJob r = fast;
    r.tokens = tokens;
    r.in = in;
    r.out = out;
    r.c = c;
    r.s = sn;
    r.n = n;
    r.in_step = in_step;
    r.out_step = out_step;
    r.prefetch = pf;
    r.stream = to_cache && stream;
    if (!rotate_token_rows(r)) {
      if (r.stream) return registers_stream = false;
      return registers_apply = false;
    }
    if (R < D)
      for (int64_t j = 0; j < tokens; ++j)
        if (in[j] != out[j])
          for (int64_t k = 0; k < n; ++k)
            std::memcpy(static_cast<T*>(out[j]) + k * out_step + R, static_cast<const T*>(in[j]) + k * in_step + R,
                        (D - R) * sizeof(T));
    return true;
  };
  // One token's rows (the current token's cos/sin).
  auto in_registers = [&](const T* in, T* out, int64_t n, int64_t in_step, int64_t out_step, int64_t pf,
                          bool to_cache = false) {
    const void* row_in = in;
    void* row_out = out;
    return tokens_in_registers(1, &row_in, &row_out, &tok_c, &tok_s, n, in_step, out_step, pf, to_cache);
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
        done = HalfNormRowsInRegistersK<EI, Elem::kBF16Native>(in, out, n, in_step, out_step, tok_c, tok_s, w, p.eps,
                                                               h, pf, streamed);
    }
#endif
    if (!native)
      done = HalfNormRowsInRegistersK<EI, EI>(in, out, n, in_step, out_step, tok_c, tok_s, w, p.eps, h, pf, streamed);
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
        InterleavedChannelRows(tok_c, tok_s, h, false, cd, sd);
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
      tok_c = c;
      tok_s = sn;
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
  // PrefetchSlotRows for caches of elements at least as wide as the input's (one dtype for both caches), whose rows
  // are not streamed (non-temporal stores read no line).
  const bool prefetch_slots =
      !stream && p.slots != nullptr && p.k_cache.present() && dtype_size(p.k_cache.dtype) >= sizeof(T);
  for (int64_t c0 = g0; c0 < g1; c0 += chunk) {
    const int64_t n = std::min(chunk, g1 - c0);
    // The chunk's cache rows, fetched while its cos/sin and q rows are computed.
    if (prefetch_slots)
      for (int64_t i = 0; i < n; ++i)
        if (p.slots[c0 + i] >= 0) {
          PrefetchSlotRows(p.k_cache, p.slots[c0 + i]);
          PrefetchSlotRows(p.v_cache, p.slots[c0 + i]);
        }
    if (p.rotate)
      for (int64_t i = 0; i < n; ++i)
        resolve_cos_sin(rp.pos, p.source_of(c0 + i), rp.half, (c0 + i) / rp.S, (c0 + i) % rp.S,
                        resolved + i * 2 * rp.half, &chunk_c[i], &chunk_s[i]);
    if (n == 1) {
      token(c0, 0, 7);
      continue;
    }
    // The chunk's q rows, and its k rows, without a norm into storage of the input's dtype: one call for all
    // the chunk's tokens where they take the register path (token by token below where they do not).
    bool q_done = false, k_done = false;
    if (p.rotate && p.q_index >= 0 && p.q_norm == nullptr) {
      const PlanTensor& t = rp.t[p.q_index];
      for (int64_t i = 0; i < n; ++i) {
        const int64_t b = (c0 + i) / rp.S, s = (c0 + i) % rp.S;
        chunk_in[i] = static_cast<const T*>(t.in) + b * t.in_sb + s * t.in_ss;
        chunk_out[i] = static_cast<T*>(t.out) + b * t.out_sb + s * t.out_ss;
      }
      q_done = tokens_in_registers(n, chunk_in, chunk_out, chunk_c, chunk_s, t.heads, t.in_sh, t.out_sh, pf_q, false);
    }
    if (p.rotate && p.k_index >= 0 && p.k_norm == nullptr && (k_cache_fast || !p.k_cache.present())) {
      const PlanTensor& t = rp.t[p.k_index];
      const PlanRows& kc = p.k_cache;
      int64_t m = 0;  // tokens with rows to write (a cache skips slot -1)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t b = (c0 + i) / rp.S, s = (c0 + i) % rp.S;
        const int64_t slot = p.slots != nullptr ? p.slots[c0 + i] : -1;
        if (kc.present() && slot < 0) continue;
        chunk_in[m] = static_cast<const T*>(t.in) + b * t.in_sb + s * t.in_ss;
        chunk_out[m] = kc.present() ? static_cast<T*>(kc.data) + kc.row_offset(slot, 0)
                                    : static_cast<T*>(t.out) + b * t.out_sb + s * t.out_ss;
        rows_c[m] = chunk_c[i];
        rows_s[m] = chunk_s[i];
        ++m;
      }
      k_done = m == 0 || tokens_in_registers(m, chunk_in, chunk_out, rows_c, rows_s, t.heads, t.in_sh,
                                             kc.present() ? kc.s_head : t.out_sh, pf_k, kc.present());
    }
    for (int parts : {1, 2, 4})
      if (!(parts == 1 && q_done) && !(parts == 2 && k_done))
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
