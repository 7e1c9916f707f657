// Internal: hands a validated Plan to the backend the call asked for (engine only).
#pragma once

#include "plan/plan.h"
#include "rotary/apply.h"

namespace rotary::detail {

/// Dispatches a validated plan to a backend (no-op when there is nothing to rotate).
void run_plan(const Plan& plan, Backend backend);

}  // namespace rotary::detail
