// The public apply entry points: validate, attach a cos/sin source (table, on the fly, caller), dispatch a backend.
#include "rotary/apply.h"

#include <string>

#include "engine/build_plan.h"
#include "engine/cos_sin_source.h"
#include "engine/fp8_output.h"
#include "engine/run_plan.h"
#include "plan/plan.h"

namespace rotary {

bool backend_available(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
    case Backend::kCpu:
    case Backend::kReference: return true;
    case Backend::kCuda: return detail::cuda_available();
  }
  return false;
}

void apply_table(CosSinTable& table, const ApplyArgs& args) {
  if (detail::has_fp8_output(args))
    return detail::apply_fp8_outputs(args, [&](const ApplyArgs& a) { apply_table(table, a); });
  detail::PlanRequest req;
  req.rotary_dim = 2 * table.half();
  detail::PositionRange range;
  detail::Plan plan = detail::build_plan(args, req, &range);
  detail::attach_table(plan, table, range, args.seq_len);  // grows the table (thread-safe); throws past max_positions
  detail::run_plan(plan, args.backend);
}

void apply_frequencies(const Frequencies& freqs, const ApplyArgs& args) {
  if (detail::has_fp8_output(args))
    return detail::apply_fp8_outputs(args, [&](const ApplyArgs& a) { apply_frequencies(freqs, a); });
  detail::check_frequencies(freqs, "freqs");
  detail::PlanRequest req;
  req.rotary_dim = 2 * static_cast<int64_t>(freqs.inv_freq.size());
  req.allow_fractional = true;
  detail::PositionRange range;
  detail::Plan plan = detail::build_plan(args, req, &range);
  detail::attach_on_the_fly(plan, freqs);
  detail::run_plan(plan, args.backend);
}

void apply_cos_sin(TensorView cos, TensorView sin, const ApplyArgs& args) {
  if (detail::has_fp8_output(args))
    return detail::apply_fp8_outputs(args, [&](const ApplyArgs& a) { apply_cos_sin(cos, sin, a); });
  if (cos.rank != 2 && cos.rank != 3)
    fail(Error::Kind::kInvalidArgument, detail::kApplyWhere,
         "cos must have rank 2 [max_pos, R/2] or rank 3 [B, S, R/2], got rank " + std::to_string(cos.rank));
  if (cos.shape[cos.rank - 1] <= 0)
    fail(Error::Kind::kInvalidArgument, detail::kApplyWhere,
         "cos last dim must be rotary_dim/2 > 0, got " + std::to_string(cos.shape[cos.rank - 1]));
  if (cos.shape[cos.rank - 1] > INT64_MAX / 2)
    fail(Error::Kind::kInvalidArgument, detail::kApplyWhere,
         "cos last dim must be rotary_dim/2 (at most head_dim/2), got " + std::to_string(cos.shape[cos.rank - 1]));
  detail::PlanRequest req;
  req.rotary_dim = 2 * cos.shape[cos.rank - 1];
  detail::PositionRange range;
  detail::Plan plan = detail::build_plan(args, req, &range);
  detail::attach_caller_cos_sin(plan, cos, sin, args, range);
  detail::run_plan(plan, args.backend);
}

}  // namespace rotary
