// Internal: validation of one apply call into a Plan (the full checks, or the shortcut for the common call) (engine only).
#pragma once

#include "engine/plan_request.h"
#include "plan/plan.h"
#include "rotary/apply.h"

namespace rotary::detail {

/// Validates everything in `args` that does not depend on the cos/sin source (tensors, dtypes,
/// strides, aliasing, positions, enums, threads) and returns the Plan with `cs` left empty:
/// build_plan_fast when it accepts the call, else build_plan_full. Throws rotary::Error before
/// anything is written.
Plan build_plan(const ApplyArgs& args, const PlanRequest& request, PositionRange* range);

/// The general validation (every call, every error).
Plan build_plan_full(const ApplyArgs& args, const PlanRequest& request, PositionRange* range);

}  // namespace rotary::detail
