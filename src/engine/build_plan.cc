// Validation of one apply call into a Plan: enums, q/k/outputs, rotary_dim, aliasing, positions; the shortcut first.
#include "engine/build_plan.h"

#include <string>

#include "core/messages.h"
#include "engine/fast_plan.h"
#include "engine/overlap.h"
#include "engine/position_checks.h"
#include "engine/tensor_checks.h"

namespace rotary::detail {
namespace {

using Kind = Error::Kind;

[[noreturn]] void invalid(const std::string& msg) { detail::invalid(kApplyWhere, msg); }
[[noreturn]] void invalid_type(const std::string& msg) { detail::invalid_dtype(kApplyWhere, msg); }

}  // namespace

Plan build_plan(const ApplyArgs& args, const PlanRequest& req, PositionRange* range) {
  Plan plan;
  if (build_plan_fast(args, req, &plan, range)) return plan;
  return build_plan_full(args, req, range);
}

Plan build_plan_full(const ApplyArgs& args, const PlanRequest& req, PositionRange* range) {
  *range = PositionRange{};
  // ---- enums (the C API may pass arbitrary integers)
  const int layout_i = static_cast<int>(args.layout);
  if (layout_i < 0 || layout_i > 2) invalid("layout must be bshd, bhsd or thd, got " + str(layout_i));
  const Layout layout = args.layout;
  const Pairing pairing = args.pairing.value_or(req.default_pairing);
  if (static_cast<int>(pairing) < 0 || static_cast<int>(pairing) > 1)
    invalid("pairing must be half or interleaved, got " + str(static_cast<int>(pairing)));
  if (static_cast<int>(args.direction) < 0 || static_cast<int>(args.direction) > 1)
    invalid("direction must be forward or inverse, got " + str(static_cast<int>(args.direction)));
  const int backend_i = static_cast<int>(args.backend);
  if (backend_i < 0 || backend_i > 3) invalid("backend must be auto, cpu, reference or cuda, got " + str(backend_i));
  if (args.backend == Backend::kCuda && !cuda_available())
    fail(Kind::kUnsupported, kApplyWhere,
         "backend cuda was requested, got no CUDA device to run on (a rotary built without CUDA, or no GPU)");
  if (args.threads < 0) invalid("threads must be >= 0 (0 = all usable cores), got " + str(args.threads));
  const int pos_kind = static_cast<int>(args.positions.kind);
  if (pos_kind < 0 || pos_kind > 2) invalid("positions.kind must be offset, ids or packed, got " + str(pos_kind));

  // ---- q, k, outputs
  check_activation(args.q, "q", layout);
  const Canon cq = canonical(args.q, layout);
  const bool has_k = !absent(args.k);
  Canon ck;
  if (has_k) {
    check_activation(args.k, "k", layout);
    ck = canonical(args.k, layout);
    if (args.k.dtype != args.q.dtype)
      invalid_type(std::string("k dtype must equal q dtype ") + dtype_name(args.q.dtype) + ", got " + dtype_name(args.k.dtype));
    if (ck.B != cq.B) invalid("k batch size must equal q's " + str(cq.B) + ", got " + str(ck.B) + " (k shape " + shape_str(args.k) + ")");
    if (ck.S != cq.S)
      invalid(std::string("k ") + (layout == Layout::kTHD ? "token count T" : "sequence length S") + " must equal q's " +
              str(cq.S) + ", got " + str(ck.S) + " (k shape " + shape_str(args.k) + ")");
    if (ck.D != cq.D) invalid("k head_dim must equal q's " + str(cq.D) + ", got " + str(ck.D) + " (k shape " + shape_str(args.k) + ")");
  }
  auto check_out = [&](const TensorView& out, const TensorView& in, const char* name, const char* in_name) {
    if (absent(out)) return;
    check_activation(out, name, layout);
    if (out.dtype != in.dtype)
      invalid_type(std::string(name) + " dtype must equal " + in_name + " dtype " + dtype_name(in.dtype) + ", got " + dtype_name(out.dtype));
    for (int i = 0; i < in.rank; ++i)
      if (out.shape[i] != in.shape[i])
        invalid(std::string(name) + " shape must equal " + in_name + " shape " + shape_str(in) + ", got " + shape_str(out));
  };
  check_out(args.q_out, args.q, "q_out", "q");
  if (!absent(args.k_out) && !has_k) invalid("k_out is given but k is absent, got k_out shape " + shape_str(args.k_out));
  if (has_k) check_out(args.k_out, args.k, "k_out", "k");

  // ---- rotary_dim
  const int64_t R = req.no_rotation ? 0 : req.rotary_dim;
  if (!req.no_rotation) {
    if (req.head_dim > 0 && cq.D != req.head_dim)
      invalid("q head_dim must equal the spec's head_dim " + str(req.head_dim) + ", got " + str(cq.D));
    if (R <= 0) invalid("rotary_dim must be > 0, got " + str(R));
    if (R % 2 != 0) invalid("rotary_dim must be even, got " + str(R));
    if (R > cq.D) invalid("rotary_dim must be <= head_dim " + str(cq.D) + ", got " + str(R));
  }

  // ---- aliasing
  if (!req.read_only) check_aliasing(args, layout, req.k_read_only);

  // ---- plan
  Plan plan;
  plan.dtype = args.q.dtype;
  plan.pairing = pairing;
  plan.direction = args.direction;
  plan.head_dim = cq.D;
  plan.rotary_dim = R;
  plan.half = R / 2;
  plan.B = cq.B;
  plan.S = cq.S;
  const TensorView& q_out = absent(args.q_out) ? args.q : args.q_out;
  const TensorView& k_out = absent(args.k_out) ? args.k : args.k_out;
  auto fill = [&](PlanTensor& t, const TensorView& in, const TensorView& out) {
    const Canon ci = canonical(in, layout), co = canonical(out, layout);
    t.in = in.data;
    t.out = out.data;
    t.heads = ci.H;
    t.in_sb = ci.sb; t.in_ss = ci.ss; t.in_sh = ci.sh; t.in_sd = ci.sd;
    t.out_sb = co.sb; t.out_ss = co.ss; t.out_sh = co.sh; t.out_sd = co.sd;
  };
  plan.ntensors = 0;
  if (cq.H > 0) fill(plan.t[plan.ntensors++], args.q, q_out);
  if (has_k && ck.H > 0) {
    fill(plan.t[plan.ntensors], args.k, k_out);
    plan.t[plan.ntensors++].is_k = true;
  }
  plan.threads = args.threads;
  plan.device = req.device || args.backend == Backend::kCuda;
  plan.stream = args.stream;

  // ---- positions (an empty call is checked for shape only: its token grid may be huge and unbacked)
  const bool scan = plan.ntensors > 0 && plan.B > 0 && plan.S > 0;
  plan_positions(args, req, plan, range, scan);
  if (!req.read_only) check_outputs_spare_inputs(args, layout, /*positions=*/true, {}, req.k_read_only);  // after the position arrays' views are checked
  if (args.seq_len && *args.seq_len <= 0) invalid("seq_len must be > 0 when given, got " + str(*args.seq_len));
  if (args.seq_len && *args.seq_len > kMaxPosition + 1)
    detail::out_of_range(kApplyWhere, "seq_len must be <= 2^31 (positions are < 2^31), got " + str(*args.seq_len));
  return plan;
}

}  // namespace rotary::detail
