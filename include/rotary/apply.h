// Every apply entry point (table, frequencies, caller cos/sin, multi-axis, context-parallel shard) and Rope.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "rotary/api.h"
#include "rotary/context_parallel.h"
#include "rotary/freqs.h"
#include "rotary/multimodal.h"
#include "rotary/spec.h"
#include "rotary/table.h"
#include "rotary/types.h"

namespace rotary {

/// Where each token's position comes from. The token grid is (b, s) for bshd/bhsd and (0, t) for thd.
struct Positions {
  enum class Kind : int {
    kOffset = 0,  ///< pos(b, s) = offset + batch_offsets[b] (if present) + s
    kIds = 1,     ///< pos(b, s) = ids[b, s]  (ids: [B,S], [1,S] or [S] broadcast over batch, or [T] for thd)
                  ///<   i32/i64 = integer positions; f32/f64 = fractional (on-the-fly only)
                  ///<   M-RoPE specs: [3,B,S] / [3,1,S] / [3,S] (bshd/bhsd) or [3,T] (thd), axis 0 = (t, h, w);
                  ///<   or text-only [B,S] / [1,S] / [S] / [T]: the same position on every axis ([3,S] with
                  ///<   B = 3 is ambiguous: an error)
    kPacked = 2,  ///< thd only: pos(t) = t - cu_seqlens[n] + seq_offsets[n] for the sequence n holding t
  };
  /// Each field below is read for the kind named beside it; one given for another kind (ids with kind kOffset, a
  /// non-zero offset with kind kIds, ...) is refused (kInvalidArgument) rather than ignored.
  Kind kind = Kind::kOffset;
  int64_t offset = 0;
  TensorView batch_offsets;  ///< kOffset, optional, i32/i64 [B]
  TensorView ids;            ///< kIds
  TensorView cu_seqlens;     ///< kPacked, i32/i64 [N+1], cu[0] = 0, non-decreasing, cu[N] = T
  TensorView seq_offsets;    ///< kPacked, optional, i32/i64 [N]

  static Positions contiguous(int64_t offset = 0) { Positions p; p.offset = offset; return p; }
  static Positions from_ids(TensorView ids) { Positions p; p.kind = Kind::kIds; p.ids = ids; return p; }
  static Positions packed(TensorView cu_seqlens, TensorView seq_offsets = {}) {
    Positions p; p.kind = Kind::kPacked; p.cu_seqlens = cu_seqlens; p.seq_offsets = seq_offsets; return p;
  }
};

/// Arguments of one apply call. q and k may have different head counts (GQA) and
/// arbitrary strides (e.g. slices of a fused QKV buffer). Channel stride 1 takes the SIMD path.
struct ApplyArgs {
  TensorView q;      ///< [B,S,H,D] / [B,H,S,D] / [T,H,D] per `layout`
  TensorView q_out;  ///< absent, or identical to q => in place; else same shape & dtype (or fp8, see q_out_scale), no partial overlap
  TensorView k;      ///< optional second tensor, same B,S (or T) and D as q, its own head count
  TensorView k_out;
  Positions positions;
  Layout layout = Layout::kBSHD;
  std::optional<Pairing> pairing;   ///< nullopt: the spec's pairing (Rope) or half-split (low-level calls)
  Direction direction = Direction::kForward;
  std::optional<int64_t> seq_len;   ///< length seen by dynamic/longrope; nullopt = max(position)+1
  int threads = 0;                  ///< 0 = all usable cores, 1 = the calling thread; capped (docs/threading.md)
  Backend backend = Backend::kAuto;  ///< see rotary/types.h
  /// Backend kCuda: the cudaStream_t the call is enqueued on (nullptr = the default stream). The call
  /// does not synchronise the host, except when it grows the device copy of a table (once per growth per
  /// device: it waits for the copy on this stream, docs/cuda.md); other backends ignore it.
  void* stream = nullptr;
  /// fp8 outputs (q_out / k_out of dtype kF8E4M3 / kF8E5M2; CPU backends): the per-tensor scale of each.
  /// The stored code is f32_to_fp8(fl32(y / scale)) of the f32 result y: round to nearest even,
  /// saturating at the largest finite value (docs/prologue.md, "Quantised storage"); finite and > 0.
  float q_out_scale = 1.0f;
  float k_out_scale = 1.0f;
};

/// True if calls with `backend` can run in this build and process: kAuto/kCpu/kReference always; kCuda when rotary
/// was built with CUDA (-DROTARY_BUILD_CUDA=ON) and a device is present.
ROTARY_API bool backend_available(Backend backend);

/// Rotates with a growable table (grown to cover the largest position; thread-safe).
/// Channels >= 2*table.half() pass through unchanged (copied when out of place).
ROTARY_API void apply_table(CosSinTable& table, const ApplyArgs& args);

/// Rotates computing cos/sin on the fly per token (exact angles; fractional positions allowed).
ROTARY_API void apply_frequencies(const Frequencies& freqs, const ApplyArgs& args);

/// Rotates with caller-supplied cos/sin (ONNX RotaryEmbedding, flash-attn, vLLM caches), values used as given:
///   rank 2 [max_pos, R/2]: indexed by args.positions, any integer scheme: offset (+ batch_offsets [B], flash-attn's
///                          seqlen_offsets), ids, packed cu_seqlens + seq_offsets (flash-attn varlen); a position
///                          >= max_pos is an error, never identity;
///   rank 3 [B, S, R/2]:    already gathered per token (args.positions must be the default kOffset 0).
/// Everything else of ApplyArgs holds as for Rope: layouts and strides, q and k, pairing, direction (kInverse:
/// the backward pass), in or out of place. cos/sin dtype: f32, f16, bf16 or f64 (values used in f32).
ROTARY_API void apply_cos_sin(TensorView cos, TensorView sin, const ApplyArgs& args);

enum class CosSinMode : int {
  kAuto = 0,      ///< table up to TableOptions::max_positions, on the fly beyond (and for fractional positions)
  kTable = 1,     ///< table only: a position past max_positions is Error(kOutOfRange)
  kOnTheFly = 2,  ///< never store a table
};

struct RopeOptions {
  CosSinMode mode = CosSinMode::kAuto;
  TableOptions table;
};

namespace detail {
struct RopeAccess;  // internal (src/engine/rope_access.h): the prologue's view of a Rope's tables
}  // namespace detail

/// A RoPE module: a Spec plus lazily grown cos/sin tables, applying with the right frequencies
/// for the sequence length (dynamic NTK / LongRoPE switch like HF's forward).
/// Thread-safe: apply() may be called concurrently from many threads.
class ROTARY_API Rope {
 public:
  explicit Rope(Spec spec, RopeOptions options = {});
  ~Rope();
  Rope(const Rope&) = delete;
  Rope& operator=(const Rope&) = delete;

  const Spec& spec() const;
  /// Frequencies used for a given sequence length (see compute_frequencies).
  Frequencies frequencies(std::optional<int64_t> seq_len = std::nullopt) const;
  /// Applies to args (pairing defaults to spec().pairing; M-RoPE specs take [3,...] ids).
  void apply(const ApplyArgs& args);
  /// The exact f32 cos/sin rows (attention factor folded in) that apply() uses for 1-D positions [N]
  /// (i32/i64, or f32/f64 fractional positions), written to cos_out and sin_out, each [N, rotary_dim/2]
  /// row-major. The rows come from the table where apply() would use it and are computed otherwise (same
  /// values), so a few far positions never build a large table. seq_len as in ApplyArgs. Not for M-RoPE specs.
  void cos_sin(const TensorView& positions, std::optional<int64_t> seq_len, float* cos_out, float* sin_out);
  /// The table used for lengths within the original context.
  CosSinTable& table();

 private:
  friend struct detail::RopeAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ------------------------------------------------------------------ multi-axis and context-parallel calls

/// Rotates q (and k) computing cos/sin on the fly from multi-axis frequencies.
/// args.positions: kIds with ids [n_axes,B,S] / [n_axes,S] / [n_axes,T] (i32, i64, f32 or f64);
/// when n_axes == 1 the plain forms ([B,S], [S], [T]), kOffset and kPacked are accepted too.
/// args.pairing nullopt -> af.pairing. Channels >= af.rotary_dim() pass through.
/// Ids must be >= 0 unless af.signed_positions (ggml_frequencies, or set by the caller): then any sign, |id| < 2^31,
/// angle = id * inv_freq.
ROTARY_API void apply_axes(const AxisFrequencies& af, const ApplyArgs& args);

/// Rotates a shard: args.q/k hold this rank's tokens. Positions are derived from `cp`:
///   bshd/bhsd: args.positions must be kOffset (its offset is added; no batch_offsets);
///   thd:       args.positions must be kPacked with the GLOBAL cu_seqlens (seq_offsets not allowed).
/// args.seq_len unset -> the global length (bshd/bhsd: local S * size; thd: longest global sequence),
/// so length-dependent scaling sees what an unsharded call sees. Results equal the unsharded call's
/// rows bit-exactly (same cos/sin rows, same kernel). M-RoPE specs take per-axis ids: shard those with
/// cp_positions and call Rope::apply with [3, ...] ids instead (this function passes 1-axis ids).
ROTARY_API void apply_context_parallel(Rope& rope, const ContextParallel& cp, const ApplyArgs& args);
ROTARY_API void apply_context_parallel(const Frequencies& freqs, const ContextParallel& cp, const ApplyArgs& args);

}  // namespace rotary
