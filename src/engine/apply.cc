// The public apply entry points: validate, attach a cos/sin source (table, on the fly, caller), dispatch a backend.
#include "rotary/apply.h"

#include <algorithm>

#include "engine/build.h"

namespace rotary {

namespace detail {
void attach_device_table(Plan& plan, CosSinTable& table, int64_t rows) {
  const CosSinTable::View v = rows > 0 ? table.view_for(std::min(rows, table.max_positions())) : table.view();
  plan.cs.table = v.data;
  plan.cs.table_size = v.size;
  plan.cs.table_owner = &table;
  plan.cs.inv_freq = table.frequencies().inv_freq.data();
  plan.cs.attention_factor = table.frequencies().attention_factor;
}

void run_plan(const Plan& plan, Backend backend) {
  if (plan.ntensors == 0 || plan.B == 0 || plan.S == 0) return;  // nothing to rotate
  switch (backend) {
    case Backend::kAuto:
    case Backend::kCpu: cpu_apply(plan); return;
    case Backend::kReference: reference_apply(plan); return;
    case Backend::kCuda: cuda_apply(plan); return;
  }
  fail(Error::Kind::kInvalidArgument, kApplyWhere, "backend must be auto, cpu, reference or cuda, got " +
                                                       std::to_string(static_cast<int>(backend)));
}
}  // namespace detail

void apply_table(CosSinTable& table, const ApplyArgs& args) {
  detail::PlanRequest req;
  req.rotary_dim = 2 * table.half();
  detail::PositionRange range;
  detail::Plan plan = detail::build_plan(args, req, &range);
  plan.cs.kind = detail::PlanCosSin::Kind::kTable;
  if (range.unknown) {  // device positions: rows up to seq_len if given, the rest computed on the device
    detail::attach_device_table(plan, table, args.seq_len.value_or(0));
  } else if (range.any) {
    // Grows the table if needed (thread-safe); throws kOutOfRange past max_positions, before any write.
    const CosSinTable::View v = table.view_for(range.max_int + 1);
    plan.cs.table = v.data;
    plan.cs.table_size = v.size;
    if (plan.device) detail::attach_device_table(plan, table, 0);
  }
  detail::run_plan(plan, args.backend);
}

void apply_frequencies(const Frequencies& freqs, const ApplyArgs& args) {
  detail::check_frequencies(freqs, "freqs");
  detail::PlanRequest req;
  req.rotary_dim = 2 * static_cast<int64_t>(freqs.inv_freq.size());
  req.allow_fractional = true;
  detail::PositionRange range;
  detail::Plan plan = detail::build_plan(args, req, &range);
  plan.cs.kind = detail::PlanCosSin::Kind::kOnTheFly;
  plan.cs.inv_freq = freqs.inv_freq.data();
  plan.cs.attention_factor = freqs.attention_factor;
  detail::run_plan(plan, args.backend);
}

void apply_cos_sin(TensorView cos, TensorView sin, const ApplyArgs& args) {
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
