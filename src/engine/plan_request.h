// Internal: what an apply entry point asks of the plan builder, and the position range it gets back (engine only).
#pragma once

#include <cstdint>

#include "rotary/types.h"

namespace rotary::detail {

inline constexpr const char* kApplyWhere = "rotary_apply";
/// Positions must be < 2^31 (exact angles are promised to 2^24; int32 ids must fit).
inline constexpr int64_t kMaxPosition = (int64_t(1) << 31) - 1;

/// What the caller's cos/sin source implies for validation.
struct PlanRequest {
  int64_t rotary_dim = 0;                         ///< R: must be even, > 0 and <= head_dim (unless no_rotation)
  /// The spec's head_dim, which q (and k) must have (0: any). Checked before rotary_dim, so that a spec wider than
  /// the tensors is reported as such rather than as a rotary_dim past q's head_dim.
  int64_t head_dim = 0;
  /// A call that rotates nothing (the prologue without a frequency source): the tensors are validated and laid
  /// out as for a rotation, rotary_dim is not checked (any head_dim, 1 included), the plan's rotary_dim and half are 0.
  bool no_rotation = false;
  Pairing default_pairing = Pairing::kHalfSplit;  ///< used when args.pairing is nullopt
  bool allow_fractional = false;                  ///< f32/f64 ids (on-the-fly sources only)
  /// Negative ids (|pos| < 2^31; on-the-fly sources only: a table has no row for them). apply_axes with
  /// ggml's frequencies (AxisFrequencies::signed_positions). Offsets and packed positions stay >= 0.
  bool allow_negative = false;
  /// Position axes (1..kMaxPositionAxes). Above 1, ids are [n_axes,B,S] / [n_axes,S] / [n_axes,T], one
  /// row per axis (M-RoPE: 3, 2-D vision: 2, ggml multi-rope: 4); offset and packed positions give every
  /// axis the same position unless `axes_need_ids`.
  int n_axes = 1;
  bool axes_need_ids = false;  ///< n_axes > 1: positions must be ids (apply_axes)
  /// n_axes > 1: ids of one axis ([B,S], [S], [T]: text-only positions, as transformers' and vLLM's M-RoPE take
  /// them) are accepted too, meaning the same position on every axis (Rope with an M-RoPE spec).
  bool axes_accept_single = false;
  const char* axes_what = "one row per position axis";  ///< how messages describe the axis rows
  /// Plan a device call even if args.backend is not kCuda (tests of the device planning without a GPU).
  /// Device calls (this, or backend kCuda) never read position values on the host.
  bool device = false;
  /// k is only read (the prologue with a cache: its rotated rows go to the cache, not to k or k_out), so the
  /// aliasing rules treat it as an input only: no self-overlap or output checks for it.
  bool k_read_only = false;
  /// Nothing the plan names is written (the prologue with a cache and no q: k, passed as the plan's q, is only
  /// read): no aliasing or output checks for it.
  bool read_only = false;
};

/// Range of the positions of a validated call (over every axis for multi-axis ids).
struct PositionRange {
  bool any = false;         ///< at least one token
  bool fractional = false;  ///< f32/f64 ids
  int64_t max_int = -1;     ///< largest integer position (floor of the largest for fractional ids)
  double max_f = -1.0;      ///< largest position as a double
  /// Device call whose positions live on the device (ids, batch offsets, packed): not read, so max_int
  /// and max_f are only lower bounds (from the offset and S).
  bool unknown = false;
};

}  // namespace rotary::detail
