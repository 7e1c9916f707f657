// Hands a validated Plan to the backend the call asked for: the only switch over backends.
#include "engine/run_plan.h"

#include <string>

#include "engine/plan_request.h"

namespace rotary::detail {

void run_plan(const Plan& plan, Backend backend) {
  if (plan.ntensors == 0 || plan.B == 0 || plan.S == 0) return;  // nothing to rotate
  switch (backend) {
    case Backend::kAuto:
    case Backend::kCpu: cpu_apply(plan); return;
    case Backend::kReference: reference_apply(plan); return;
    case Backend::kCuda: cuda_apply(plan); return;
  }
  fail(Error::Kind::kInvalidArgument, kApplyWhere,
       "backend must be auto, cpu, reference or cuda, got " + std::to_string(static_cast<int>(backend)));
}

}  // namespace rotary::detail
