// Internal: validation of an apply call's positions (offset, ids on 1-4 axes, packed) into the Plan (engine only).
#pragma once

#include <string>

#include "engine/plan_request.h"
#include "plan/plan.h"
#include "rotary/apply.h"

namespace rotary::detail {

/// Validates `args.positions` against the plan's token grid (plan.B, plan.S, plan.device already set)
/// and fills plan.pos and `range`. `scan`: read position values (false for empty calls, whose token grid
/// may be huge and unbacked: their positions are checked for shape only). Device plans never read them.
void plan_positions(const ApplyArgs& args, const PlanRequest& request, Plan& plan, PositionRange* range, bool scan);

/// Records position p in the range.
void note_position(PositionRange* range, int64_t p);

/// Where ids (`name`, e.g. "positions.ids") first hold a position >= `at_least`, for messages: "positions.ids[1,1] is
/// 10" (indexed as the ids array); empty if none does. Fractional ids count by their floor.
std::string first_id_at_least(const TensorView& ids, int64_t at_least, const char* name);

/// The ids shapes a call accepts, for messages: "[B,S] = [2,3] or [S] = [3]", "[3,T] = [3,5]".
std::string expected_ids_shape(Layout layout, int n_axes, const Plan& plan);

}  // namespace rotary::detail
