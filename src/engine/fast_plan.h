// Internal: the shortcut planner for the common apply call (contiguous, disjoint tensors, offset positions) (engine only).
#pragma once

#include "engine/plan_request.h"
#include "plan/plan.h"
#include "rotary/apply.h"

namespace rotary::detail {

/// Plans the common call (contiguous tensors, q and k and any outputs in disjoint memory, offset
/// positions) without the general checks, which it passes by construction. Returns false, touching
/// nothing, for anything else (build_plan_full then validates and reports). For every call it
/// accepts, build_plan_full produces the same Plan and range.
bool build_plan_fast(const ApplyArgs& args, const PlanRequest& request, Plan* plan, PositionRange* range);

}  // namespace rotary::detail
