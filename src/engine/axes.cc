// apply_axes: on-the-fly rotation whose pairs read one of n position axes (M-RoPE, 2-D vision, ggml multi-rope).
#include "engine/build_plan.h"
#include "engine/cos_sin_source.h"
#include "engine/run_plan.h"
#include "rotary/apply.h"

namespace rotary {

void apply_axes(const AxisFrequencies& af, const ApplyArgs& args) {
  af.validate();
  detail::check_frequencies(af.freqs, "freqs.freqs");
  detail::PlanRequest req;
  req.rotary_dim = af.rotary_dim();
  req.default_pairing = af.pairing;
  req.allow_fractional = true;
  req.n_axes = af.n_axes;  // several axes: ids [n_axes,B,S] / [n_axes,S] / [n_axes,T], one row per axis
  req.axes_need_ids = true;
  req.allow_negative = af.signed_positions;  // ggml's frequencies: angle = pos * theta for any sign of pos
  detail::PositionRange range;
  detail::Plan plan = detail::build_plan(args, req, &range);
  detail::attach_on_the_fly(plan, af.freqs);
  if (af.n_axes > 1) plan.cs.axis_of_freq = af.axis_of_freq;
  detail::run_plan(plan, args.backend);
}

}  // namespace rotary
