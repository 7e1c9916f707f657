// The shortcut planner for the common apply call: a decode step spends most of its validation time here otherwise.
#include "engine/fast_plan.h"

#include <cstdint>

#include "engine/position_checks.h"
#include "engine/tensor_checks.h"
#include "rotary/multimodal.h"

namespace rotary::detail {
namespace {

/// A dense floating tensor of the layout's rank (dense_view: every check in build_plan_full passes by
/// construction); `bytes` = its exact byte extent.
bool simple_tensor(const TensorView& v, Layout layout, int64_t* bytes) {
  return is_floating(v.dtype) && dense_view(v, expected_rank(layout), bytes);
}

bool disjoint(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa + static_cast<uintptr_t>(a_bytes) <= pb || pb + static_cast<uintptr_t>(b_bytes) <= pa;
}

}  // namespace

/// The common call (contiguous tensors, q and k and any outputs in disjoint memory, offset
/// positions) planned without the general checks, which it passes by construction: a decode step
/// spends most of its validation time here otherwise. Returns false, touching nothing, for
/// anything else (build_plan_full then validates and reports).
bool build_plan_fast(const ApplyArgs& args, const PlanRequest& req, Plan* plan, PositionRange* range) {
  const int layout_i = static_cast<int>(args.layout);
  const Pairing pairing = args.pairing.value_or(req.default_pairing);
  const int pairing_i = static_cast<int>(pairing), direction_i = static_cast<int>(args.direction);
  const int backend_i = static_cast<int>(args.backend);
  if (layout_i < 0 || layout_i > 2 || pairing_i < 0 || pairing_i > 1 || direction_i < 0 || direction_i > 1 ||
      backend_i < 0 || backend_i > 3 || (backend_i == 3 && !cuda_available()) || args.threads < 0)
    return false;
  const Positions& pos = args.positions;
  if (args.seq_len && (*args.seq_len <= 0 || *args.seq_len > kMaxPosition + 1)) return false;
  if (req.n_axes < 1 || req.n_axes > kMaxPositionAxes || (req.axes_need_ids && req.n_axes > 1)) return false;
  const Layout layout = args.layout;
  int64_t q_bytes = 0, k_bytes = 0, qo_bytes = 0, ko_bytes = 0;
  if (!simple_tensor(args.q, layout, &q_bytes)) return false;
  const Canon cq = canonical(args.q, layout);
  const bool has_k = !absent(args.k);
  Canon ck;
  if (has_k) {
    if (!simple_tensor(args.k, layout, &k_bytes) || args.k.dtype != args.q.dtype) return false;
    ck = canonical(args.k, layout);
    if (ck.B != cq.B || ck.S != cq.S || ck.D != cq.D || !disjoint(args.q.data, q_bytes, args.k.data, k_bytes))
      return false;
  } else if (!absent(args.k_out)) {
    return false;
  }
  // An output that is the input's own view (same data, shape and strides) means in place.
  const bool q_same = !absent(args.q_out) && same_view(args.q_out, args.q);
  const bool k_same = has_k && !absent(args.k_out) && same_view(args.k_out, args.k);
  if ((q_same && (!simple_tensor(args.q_out, layout, &qo_bytes) || args.q_out.dtype != args.q.dtype)) ||
      (k_same && (!simple_tensor(args.k_out, layout, &ko_bytes) || args.k_out.dtype != args.k.dtype)))
    return false;
  const bool q_oop = !absent(args.q_out) && !q_same, k_oop = !absent(args.k_out) && !k_same;
  if (q_oop) {  // a separate output: same shape and dtype, touching no other tensor of the call
    if (!simple_tensor(args.q_out, layout, &qo_bytes) || args.q_out.dtype != args.q.dtype) return false;
    for (int i = 0; i < args.q.rank; ++i)
      if (args.q_out.shape[i] != args.q.shape[i]) return false;
    if (!disjoint(args.q_out.data, qo_bytes, args.q.data, q_bytes) ||
        (has_k && !disjoint(args.q_out.data, qo_bytes, args.k.data, k_bytes)))
      return false;
  }
  if (k_oop) {
    if (!simple_tensor(args.k_out, layout, &ko_bytes) || args.k_out.dtype != args.k.dtype) return false;
    for (int i = 0; i < args.k.rank; ++i)
      if (args.k_out.shape[i] != args.k.shape[i]) return false;
    if (!disjoint(args.k_out.data, ko_bytes, args.q.data, q_bytes) ||
        !disjoint(args.k_out.data, ko_bytes, args.k.data, k_bytes) ||
        (q_oop && !disjoint(args.k_out.data, ko_bytes, args.q_out.data, qo_bytes)))
      return false;
  }
  const int64_t R = req.rotary_dim;
  int64_t last = 0;
  if ((req.head_dim > 0 && cq.D != req.head_dim) || !offset_rotation_fits(pos, cq.S, R, cq.D, &last)) return false;

  OffsetRotation r;
  r.q = &args.q;
  r.q_out = absent(args.q_out) ? &args.q : &args.q_out;
  r.cq = &cq;
  if (has_k) {
    r.k = &args.k;
    r.k_out = absent(args.k_out) ? &args.k : &args.k_out;
    r.ck = &ck;
  }
  r.layout = layout;
  r.pairing = pairing;
  r.direction = args.direction;
  r.rotary_dim = R;
  r.offset = pos.offset;
  r.last = last;
  r.n_axes = req.n_axes;
  r.threads = args.threads;
  r.device = req.device || args.backend == Backend::kCuda;
  r.stream = args.stream;
  plan_offset_rotation(r, plan, range);
  return true;
}

bool offset_rotation_fits(const Positions& pos, int64_t S, int64_t rotary_dim, int64_t head_dim, int64_t* last) {
  if (pos.kind != Positions::Kind::kOffset || !absent(pos.batch_offsets) || pos.offset < 0 || pos.offset > kMaxPosition)
    return false;
  if (!absent(pos.ids) || !absent(pos.cu_seqlens) || !absent(pos.seq_offsets)) return false;  // refused by the full path
  if (rotary_dim <= 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim) return false;
  *last = pos.offset + (S - 1);  // offset < 2^31, S < 2^62 (backed by bytes): no overflow
  return *last <= kMaxPosition;
}

void plan_offset_rotation(const OffsetRotation& r, Plan* plan, PositionRange* range) {
  plan->dtype = r.q->dtype;
  plan->pairing = r.pairing;
  plan->direction = r.direction;
  plan->head_dim = r.cq->D;
  plan->rotary_dim = r.rotary_dim;
  plan->half = r.rotary_dim / 2;
  plan->B = r.cq->B;
  plan->S = r.cq->S;
  auto fill = [&](PlanTensor& t, const Canon& ci, const TensorView& in, const TensorView& out) {
    auto strides_out = [&t](const Canon& co) {
      t.out_sb = co.sb; t.out_ss = co.ss; t.out_sh = co.sh; t.out_sd = co.sd;
    };
    t.in = in.data;
    t.out = out.data;
    t.heads = ci.H;
    t.in_sb = ci.sb; t.in_ss = ci.ss; t.in_sh = ci.sh; t.in_sd = ci.sd;
    if (&out == &in) strides_out(ci);  // in place: the input's strides, not a copy of its Canon
    else strides_out(canonical(out, r.layout));
  };
  plan->ntensors = 0;
  fill(plan->t[plan->ntensors++], *r.cq, *r.q, *r.q_out);
  if (r.k != nullptr) {
    fill(plan->t[plan->ntensors], *r.ck, *r.k, *r.k_out);
    plan->t[plan->ntensors++].is_k = true;
  }
  plan->threads = r.threads;
  plan->device = r.device;
  plan->stream = r.stream;
  plan->pos.kind = PlanPositions::Kind::kOffset;
  plan->pos.offset = r.offset;
  plan->pos.n_axes = r.n_axes;
  *range = PositionRange{};
  note_position(range, r.last);
}

}  // namespace rotary::detail
