// The attention prologue: q/k RMSNorm, RoPE and the KV-cache write in one pass; re-rotation of cached keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "rotary/api.h"
#include "rotary/apply.h"
#include "rotary/types.h"

namespace rotary {

/// How a KV cache's rows are addressed (docs/prologue.md draws them). D = the cache's last dim.
///   kNHD   paged       [num_blocks, block_size, Hkv, D]   a token's row: slot_mapping[t] = block * block_size + offset
///   kHND   paged       [num_blocks, Hkv, block_size, D]   (vLLM / FlashInfer NHD and HND)
///   kBSHD  contiguous  [B, S_max, Hkv, D]                 sequence n's i-th token: row (n, cache_positions[n] + i)
///   kBHSD  contiguous  [B, Hkv, S_max, D]                 (Hugging Face StaticCache)
enum class CacheLayout : int { kNHD = 0, kHND = 1, kBSHD = 2, kBHSD = 3 };
ROTARY_API const char* cache_layout_name(CacheLayout l);  ///< "nhd", "hnd", "bshd", "bhsd"
/// Parses nhd | hnd | bshd | bhsd; anything else throws Error(kInvalidArgument) naming `what` in the words of the
/// entry point `where` (`[rotary] cache_layout must be nhd, hnd, bshd or bhsd, got "x"` by default).
ROTARY_API CacheLayout parse_cache_layout(std::string_view name, const char* what = "cache_layout",
                                          const char* where = "rotary");
inline bool is_paged(CacheLayout l) { return l == CacheLayout::kNHD || l == CacheLayout::kHND; }

/// One frequency source: a Rope (spec and cos/sin tables, shared and thread-safe) and the length that
/// its length-dependent scaling (dynamic, longrope) sees.
struct FrequencySource {
  Rope* rope = nullptr;
  std::optional<int64_t> seq_len;  ///< nullopt: max(position) + 1 over the tokens (rows) using this source
};

/// Arguments of rotary::prologue. Tokens form the grid of `layout` (thd: T tokens; bshd/bhsd: B x S).
/// A sequence is a batch row (bshd/bhsd), a packed segment (thd with positions.kind packed), or the
/// whole call (thd otherwise).
struct PrologueArgs {
  /// q [T,Hq,D] / [B,S,Hq,D] / [B,Hq,S,D], k likewise with Hkv heads, v with Hkv heads and its own Dv;
  /// any strides (e.g. the three slices of a fused QKV buffer); f32, f16 or bf16, one dtype for all.
  /// q may be absent (k/v only); v is absent exactly when v_cache is.
  TensorView q, k, v;
  TensorView q_out;  ///< absent or q itself: in place; else q's shape and dtype, sharing no memory
  TensorView k_out;  ///< without k_cache only: where k goes (absent: k in place)
  Positions positions;
  Layout layout = Layout::kTHD;

  /// Frequency sources; empty = no rotation (a NoPE layer: norm and cache write only). All sources must
  /// share head_dim (= q's D), rotary_dim, pairing and M-RoPE-ness.
  std::vector<FrequencySource> sources;
  /// i32/i64 [N], N = the number of sequences: the source of each sequence. May be absent only with at
  /// most one source; with two or more it must be given (an error otherwise, before any write).
  TensorView source_index;

  /// The KV cache. Both absent: k is written to k_out (or in place) and v must be absent.
  CacheLayout cache_layout = CacheLayout::kNHD;
  TensorView k_cache, v_cache;  ///< rank 4, f32 / f16 / bf16 / i8 / f8e4m3 / f8e5m2, one dtype for both
  TensorView slot_mapping;      ///< paged: i32/i64 [T] ([B,S] for bshd/bhsd); -1 = skip the token
  TensorView cache_positions;   ///< contiguous: i32/i64 [N] start row of each sequence (absent: all 0)
  /// Scales of quantised caches (f32). i8: the cache's shape without its last axis, one scale per
  /// (row, head), WRITTEN by the call. f8e4m3 / f8e5m2: one element (the per-tensor scale), read.
  TensorView k_scale, v_scale;

  /// Per-head RMSNorm before the rotation (absent = off): weight [D] of any floating dtype;
  /// x_i * r * (w_i + norm_offset), r = 1/sqrt(mean(x^2) + norm_eps), computed in f32
  /// (norm_offset = 1 is Gemma's x * (1 + w)).
  TensorView q_norm_weight, k_norm_weight;
  double norm_eps = 1e-6;
  double norm_offset = 0.0;

  int threads = 0;                  ///< 0 = all cores; 1 = calling thread only
  Backend backend = Backend::kAuto;  ///< auto/cpu: SIMD kernels; reference: the literal scalar kernel
};

/// One pass per token over its q, k and v rows: optional RMSNorm of q and k heads, RoPE with the
/// token's sequence's frequency source, q written in place or to q_out, rotated k and v written into
/// the KV cache (converted and, for i8/fp8 caches, quantised from the f32 result). Validates every
/// argument before anything is written (errors "[rotary_prologue] ..."). Rows of tokens whose slot
/// is -1 are not written (their q still is). Thread-safe; concurrent calls must write disjoint rows.
ROTARY_API void prologue(const PrologueArgs& args);

/// Arguments of rotary::rerotate_cache.
struct RerotateArgs {
  TensorView k_cache;                         ///< as in PrologueArgs (any cache dtype), rotated in place
  CacheLayout cache_layout = CacheLayout::kNHD;
  TensorView k_scale;                         ///< as in PrologueArgs; i8: read, then rewritten (fresh scales)
  /// i32/i64 [N] rows to rotate: paged, slot = block * block_size + offset; contiguous, b * S_max + s.
  /// -1 = skip (the row's positions are not read). A row may appear once.
  TensorView slots;
  /// i32/i64 [N]: the position each row was rotated for / is rotated to. A length-dependent source without
  /// seq_len takes max(position) + 1 over the rows not skipped.
  TensorView from_positions, to_positions;
  FrequencySource from;                       ///< the spec (and length) the keys were rotated with
  FrequencySource to;                         ///< the new one; to.rope null = from.rope (with to.seq_len)
  int threads = 0;
  Backend backend = Backend::kAuto;
};

/// Rotates cached keys from (from, from_positions) to (to, to_positions) in one pass: each pair rotates by
/// the difference angle b*theta_B - a*theta_A formed in double (exactly (b - a)*theta when both sources
/// have the same frequencies), cos/sin scaled by attention_factor_B / attention_factor_A, so that
/// A -> B -> A returns the keys to f32 rounding. i8 rows are dequantised, rotated and requantised with
/// a fresh scale; fp8 rows keep the per-tensor scale. A row whose rotation is the identity (every pair's
/// angle 0 — the same position under the same frequencies, or position 0 under both — and equal attention
/// factors) is left untouched in every dtype: its bits (-0, NaN payloads, inf) and an i8 row's scale stay.
/// Errors "[rotary_rerotate_cache] ..." before any write.
ROTARY_API void rerotate_cache(const RerotateArgs& args);

}  // namespace rotary
