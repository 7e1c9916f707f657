// apply_axes: on-the-fly rotation whose pairs read one of n position axes (M-RoPE, 2-D vision, ggml multi-rope).
#include <cmath>
#include <string>

#include "engine/build.h"
#include "rotary/multimodal.h"

namespace rotary {
namespace {

using Kind = Error::Kind;

[[noreturn]] void invalid(const std::string& msg) { fail(Kind::kInvalidArgument, detail::kApplyWhere, msg); }

std::string shape_str(const TensorView& v) {
  std::string s = "[";
  for (int i = 0; i < v.rank; ++i) s += (i ? "," : "") + std::to_string(v.shape[i]);
  return s + "]";
}

double read_value(const TensorView& v, int64_t idx) {
  switch (v.dtype) {
    case DType::kI32: return static_cast<const int32_t*>(v.data)[idx];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(v.data)[idx]);
    case DType::kF32: return static_cast<const float*>(v.data)[idx];
    case DType::kF64: return static_cast<const double*>(v.data)[idx];
    default: return 0.0;
  }
}

}  // namespace

void apply_axes(const AxisFrequencies& af, const ApplyArgs& args) {
  af.validate();
  detail::check_frequencies(af.freqs, "freqs.freqs");
  detail::PlanRequest req;
  req.rotary_dim = af.rotary_dim();
  req.default_pairing = af.pairing;
  req.allow_fractional = true;

  const bool multi = af.n_axes > 1;
  if (!multi) {  // one axis: every ordinary position scheme
    detail::PositionRange range;
    detail::Plan plan = detail::build_plan(args, req, &range);
    plan.cs.kind = detail::PlanCosSin::Kind::kOnTheFly;
    plan.cs.inv_freq = af.freqs.inv_freq.data();
    plan.cs.attention_factor = af.freqs.attention_factor;
    detail::run_plan(plan, args.backend);
    return;
  }

  // Several axes: ids [n_axes, B, S] / [n_axes, S] / [n_axes, T]. The engine validates tensors and the
  // axis-0 slice as ordinary ids; the other axes' values are checked here, then the plan reads all axes.
  const TensorView& ids = args.positions.ids;
  const bool thd = args.layout == Layout::kTHD;
  const std::string grid = thd ? "T" : "B,S";
  if (args.positions.kind != Positions::Kind::kIds || ids.data == nullptr)
    invalid("positions must be ids of shape [" + std::to_string(af.n_axes) + "," + grid + "] for " +
            std::to_string(af.n_axes) + " position axes, got positions of another kind");
  if (ids.rank < 2 || ids.rank > 3 || ids.shape[0] != af.n_axes)
    invalid("positions.ids must have shape [" + std::to_string(af.n_axes) + "," + grid + "]" +
            (thd ? "" : " or [" + std::to_string(af.n_axes) + ",S]") + " (one row per position axis), got " + shape_str(ids));
  if (ids.strides[0] < 0) invalid("positions.ids strides must be >= 0, got stride " + std::to_string(ids.strides[0]));
  ApplyArgs first = args;
  TensorView slice = ids;
  slice.rank = ids.rank - 1;
  for (int i = 0; i < slice.rank; ++i) {
    slice.shape[i] = ids.shape[i + 1];
    slice.strides[i] = ids.strides[i + 1];
  }
  slice.shape[slice.rank] = 0;
  slice.strides[slice.rank] = 0;
  first.positions = Positions::from_ids(slice);
  detail::PositionRange range;
  detail::Plan plan = detail::build_plan(first, req, &range);  // validates q/k/out, the slice's shape and values

  const int64_t n_b = slice.rank == 2 ? slice.shape[0] : 1;
  const int64_t n_s = slice.shape[slice.rank - 1];
  for (int a = 1; a < af.n_axes && !plan.device; ++a)  // device ids are not read on the host
    for (int64_t b = 0; b < n_b; ++b)
      for (int64_t s = 0; s < n_s; ++s) {
        const int64_t idx = a * ids.strides[0] + (slice.rank == 2 ? b * slice.strides[0] : 0) + s * slice.strides[slice.rank - 1];
        const double v = read_value(ids, idx);
        const std::string label = "positions.ids[" + std::to_string(a) + "," + (slice.rank == 2 ? std::to_string(b) + "," : "") +
                                  std::to_string(s) + "]";
        if (!std::isfinite(v)) invalid(label + " must be a finite position, got " + std::to_string(v));
        if (v < 0) invalid(label + " must be >= 0 (negative positions are invalid), got " + std::to_string(v));
        if (v >= 2147483648.0) fail(Kind::kOutOfRange, detail::kApplyWhere, label + " must be < 2^31, got " + std::to_string(v));
      }
  plan.pos.n_axes = af.n_axes;
  plan.pos.ids_sa = ids.strides[0];
  plan.cs.kind = detail::PlanCosSin::Kind::kOnTheFly;
  plan.cs.inv_freq = af.freqs.inv_freq.data();
  plan.cs.attention_factor = af.freqs.attention_factor;
  plan.cs.axis_of_freq = af.axis_of_freq;
  detail::run_plan(plan, args.backend);
}

}  // namespace rotary
