// Internal: the shortcut planner for the common apply call (contiguous, disjoint tensors, offset positions) (engine only).
#pragma once

#include "engine/plan_request.h"
#include "engine/tensor_checks.h"
#include "plan/plan.h"
#include "rotary/apply.h"

namespace rotary::detail {

/// Plans the common call (contiguous tensors, q and k and any outputs in disjoint memory, offset
/// positions) without the general checks, which it passes by construction. Returns false, touching
/// nothing, for anything else (build_plan_full then validates and reports). For every call it
/// accepts, build_plan_full produces the same Plan and range.
bool build_plan_fast(const ApplyArgs& args, const PlanRequest& request, Plan* plan, PositionRange* range);

/// The common call once its checks have passed: q (and k) dense, each rotated into its output (the input
/// itself: in place), at positions offset .. last. What build_plan_fast plans; the prologue's shortcut
/// makes the same checks on its own tensors and plans its rotation with it too (without building an
/// ApplyArgs). The views must outlive the call only.
struct OffsetRotation {
  const TensorView* q = nullptr;
  const TensorView* q_out = nullptr;
  const TensorView* k = nullptr;  ///< null: q alone
  const TensorView* k_out = nullptr;
  /// canonical(q), canonical(k) (ck null: q alone), the caller's: pointers, so that filling one of these
  /// copies no 64-byte blocks (a decode step's planning is a few hundred cycles all told).
  const Canon* cq = nullptr;
  const Canon* ck = nullptr;
  Layout layout = Layout::kTHD;
  Pairing pairing = Pairing::kHalfSplit;
  Direction direction = Direction::kForward;
  int64_t rotary_dim = 0;
  int64_t offset = 0, last = 0;  ///< the first token's position and the last one's
  int n_axes = 1;
  int threads = 0;
  bool device = false;
  void* stream = nullptr;
};

/// The positions and width the common call must have: offset positions without batch offsets, the S tokens'
/// positions in range, an even rotary_dim within head_dim. `last` = the last token's position. Both shortcuts
/// (build_plan_fast and the prologue's) check these before plan_offset_rotation.
bool offset_rotation_fits(const Positions& pos, int64_t S, int64_t rotary_dim, int64_t head_dim, int64_t* last);

/// Fills `plan` and `range` for `r` (no checks).
void plan_offset_rotation(const OffsetRotation& r, Plan* plan, PositionRange* range);

}  // namespace rotary::detail
