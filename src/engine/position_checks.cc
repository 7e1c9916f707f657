// Validation of an apply call's positions: offsets, ids on 1-4 axes (any of i32/i64/f32/f64), packed cu_seqlens.
#include "engine/position_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/messages.h"
#include "engine/tensor_checks.h"
#include "plan/dtype_scalar.h"
#include "rotary/multimodal.h"

namespace rotary::detail {
namespace {

[[noreturn]] void invalid(const std::string& msg) { detail::invalid(kApplyWhere, msg); }
[[noreturn]] void invalid_type(const std::string& msg) { detail::invalid_dtype(kApplyWhere, msg); }
[[noreturn]] void out_of_range(const std::string& msg) { detail::out_of_range(kApplyWhere, msg); }

void check_int_position(int64_t p, const std::string& where_text) {
  if (p < 0) invalid(where_text + " must be >= 0 (negative positions are invalid), got " + str(p));
  if (p > kMaxPosition) out_of_range(where_text + " must be < 2^31, got " + str(p));
}

/// `scan`: read position values (false for empty calls, whose token grid may be huge and unbacked).
void plan_offset(const Positions& pos, Plan& plan, PositionRange* range, bool scan, bool device) {
  if (pos.offset < 0) invalid("positions.offset must be >= 0, got " + str(pos.offset));
  if (pos.offset > kMaxPosition) out_of_range("positions.offset must be < 2^31, got " + str(pos.offset));
  plan.pos.kind = PlanPositions::Kind::kOffset;
  plan.pos.offset = pos.offset;
  int64_t max_bo = 0;
  if (!absent(pos.batch_offsets)) {
    check_int_vector(pos.batch_offsets, "positions.batch_offsets", plan.B, "B");
    range->unknown = device;
    for (int64_t b = 0; scan && !device && b < plan.B; ++b) {
      const int64_t v = load_int_index(pos.batch_offsets.data, pos.batch_offsets.dtype, b * pos.batch_offsets.strides[0]);
      check_int_position(v, "positions.batch_offsets[" + str(b) + "]");
      max_bo = std::max(max_bo, v);
    }
    plan.pos.batch_offsets = pos.batch_offsets.data;
    plan.pos.batch_offsets_dtype = pos.batch_offsets.dtype;
    plan.pos.batch_offsets_stride = pos.batch_offsets.strides[0];
  }
  if (scan && plan.B > 0 && plan.S > 0) {
    // offset, max_bo < 2^31 and S < 2^62 (a non-empty call's tokens are backed by bytes): no overflow.
    const int64_t last = pos.offset + max_bo + (plan.S - 1);
    if (last > kMaxPosition)
      out_of_range("positions: offset " + str(pos.offset) + " + batch offset " + str(max_bo) + " + seq index " +
                   str(plan.S - 1) + " = position " + str(last) + " must be < 2^31");
    note_position(range, last);
  }
}

/// True when ids for `n_axes` (> 1) axes hold one axis ([B,S], [1,S], [S]; thd [T], [1,T]): text-only positions. A
/// rank-2 [n,S] that is both [n_axes,S] and [B,S] (batch size n_axes) is ambiguous and refused.
bool single_axis_ids(const TensorView& ids, Layout layout, int n_axes, const Plan& plan) {
  if (ids.rank == 1) return true;
  if (ids.rank != 2) return false;
  if (layout == Layout::kTHD) return ids.shape[0] == 1;  // [1,T]; [n_axes,T] otherwise
  const bool as_grid = (ids.shape[0] == plan.B || ids.shape[0] == 1) && ids.shape[1] == plan.S;  // [1,S] broadcasts
  const bool as_axes = ids.shape[0] == n_axes && ids.shape[1] == plan.S;
  if (as_grid && as_axes)
    invalid("positions.ids shape " + shape_str(ids) + " is ambiguous with batch size " + str(plan.B) + " and " +
            str(n_axes) + " position axes: [" + str(n_axes) + ",S] (one row per axis, broadcast over batch) or [B,S] "
            "(text-only, the same position on every axis); pass ids of shape [" + str(n_axes) + ",B,S] = [" +
            str(n_axes) + "," + str(plan.B) + "," + str(plan.S) + "]");
  return as_grid;
}

void plan_ids(const Positions& pos, Layout layout, const PlanRequest& req, Plan& plan, PositionRange* range,
              bool scan, bool device) {
  const TensorView& ids = pos.ids;
  const char* name = "positions.ids";
  const bool thd = layout == Layout::kTHD;
  const char* grid = thd ? "T" : "B,S";
  const bool multi = req.n_axes > 1;
  if (ids.rank < 1 || ids.rank > 3) invalid(std::string(name) + " must have rank 1, 2 or 3, got rank " + str(ids.rank));
  check_view(ids, name, /*allow_broadcast_zero=*/true);
  const bool frac = ids.dtype == DType::kF32 || ids.dtype == DType::kF64;
  if (!is_integer(ids.dtype) && !frac) invalid_type(std::string(name) + " dtype must be i32, i64, f32 or f64, got " + dtype_name(ids.dtype));
  if (frac && !req.allow_fractional)
    invalid_type(std::string(name) + " dtype is " + dtype_name(ids.dtype) +
                 " (fractional positions) but this cos/sin source only supports integer positions; "
                 "use apply_frequencies or Rope (on-the-fly) for fractional positions");

  PlanPositions& pp = plan.pos;
  pp.kind = PlanPositions::Kind::kIds;
  pp.ids = ids.data;
  pp.ids_dtype = ids.dtype;
  // Several axes and ids of one ([B,S] / [S] / [T]): text-only positions, the same on every axis (ids_sa = 0).
  const bool single = multi && req.axes_accept_single && single_axis_ids(ids, layout, req.n_axes, plan);
  const int shape_axes = single ? 1 : req.n_axes;
  const std::string axes = shape_axes > 1 ? str(shape_axes) + "," : "";
  // Dims after the leading axis dim (several axes): [B,S] / [S] (bshd/bhsd), [T] / [1,T] (thd).
  int first = 0;
  if (multi && !single) {
    if (ids.rank < 2 || ids.shape[0] != req.n_axes)
      invalid(std::string(name) + " must have shape " + expected_ids_shape(layout, req.n_axes, plan) + " (" + req.axes_what +
              ")" + (req.axes_accept_single ? ", or " + expected_ids_shape(layout, 1, plan) +
                                                  " for text-only positions (the same on every axis)"
                                            : std::string()) +
              ", got " + shape_str(ids));
    pp.ids_sa = ids.strides[0];
    first = 1;
  } else {
    pp.ids_sa = 0;
    // apply_axes with one axis: the axes form [1,B,S] too (its [1,S] / [1,T] read as a batch of 1 below).
    if (req.axes_need_ids && !multi && ids.rank == 3 && ids.shape[0] == 1) first = 1;
  }
  const int rest = ids.rank - first;
  if (rest == 2) {
    // [1, S] (HF's position_ids for a batch sharing positions) broadcasts over the batch, like [S].
    if ((ids.shape[first] != plan.B && ids.shape[first] != 1) || ids.shape[first + 1] != plan.S)
      invalid(std::string(name) + " shape " + shape_str(ids) + " does not match the token grid [" + axes + str(plan.B) +
              "," + str(plan.S) + "] (" + grid + "; a batch of 1 broadcasts)");
    pp.ids_sb = ids.shape[first] == 1 ? 0 : ids.strides[first];
    pp.ids_ss = ids.strides[first + 1];
  } else if (rest == 1) {
    if (ids.shape[first] != plan.S)
      invalid(std::string(name) + " shape " + shape_str(ids) + " does not match " + (thd ? "T = " : "S = ") + str(plan.S) +
              " (expected " + expected_ids_shape(layout, shape_axes, plan) + (thd ? "" : " broadcast over batch") + ")");
    pp.ids_sb = 0;
    pp.ids_ss = ids.strides[first];
  } else {
    invalid(std::string(name) + " must have shape " + expected_ids_shape(layout, shape_axes, plan) + ", got " + shape_str(ids));
  }

  range->fractional = frac;
  if (device) {  // values live on the device: not read (docs/cuda.md)
    range->unknown = true;
    return;
  }
  if (!scan) return;
  const int64_t scan_b = pp.ids_sb == 0 ? std::min<int64_t>(plan.B, 1) : plan.B;  // broadcast rows: read once
  for (int a = 0; a < (single ? 1 : pp.n_axes); ++a)
    for (int64_t b = 0; b < scan_b; ++b)
      for (int64_t s = 0; s < plan.S; ++s) {
        const int64_t idx = a * pp.ids_sa + b * pp.ids_sb + s * pp.ids_ss;
        auto label = [&] {
          std::string l = std::string(name) + "[";
          if (multi && !single) l += str(a) + ",";
          if (!thd && rest == 2) l += str(b) + ",";
          return l + str(s) + "]";
        };
        if (frac) {
          const double v = load_index(ids.data, ids.dtype, idx);
          if (!std::isfinite(v)) invalid(label() + " must be a finite position, got " + num(v));
          if (v < 0 && !req.allow_negative)
            invalid(label() + " must be >= 0 (negative positions are invalid), got " + num(v));
          if (v >= 2147483648.0) out_of_range(label() + " must be < 2^31, got " + num(v));
          if (v <= -2147483648.0) out_of_range(label() + " must be > -2^31, got " + num(v));
          range->any = true;
          range->max_f = std::max(range->max_f, v);
          range->max_int = std::max(range->max_int, static_cast<int64_t>(std::floor(v)));
        } else {
          const int64_t v = load_int_index(ids.data, ids.dtype, idx);
          if (v < 0 && req.allow_negative) {
            if (v < -kMaxPosition) out_of_range(label() + " must be > -2^31, got " + str(v));
          } else if (v < 0 || v > kMaxPosition) {
            check_int_position(v, label());
          }
          note_position(range, v);
        }
      }
}

void plan_packed(const Positions& pos, Layout layout, Plan& plan, PositionRange* range, bool scan, bool device) {
  if (layout != Layout::kTHD)
    invalid(std::string("positions.kind packed (cu_seqlens) requires layout thd, got layout ") + layout_name(layout));
  const TensorView& cu = pos.cu_seqlens;
  if (absent(cu)) invalid("positions.cu_seqlens must be given for packed positions, got none");
  check_int_vector(cu, "positions.cu_seqlens", -1, "N+1");
  if (cu.shape[0] < 1) invalid("positions.cu_seqlens must have at least 1 entry [N+1], got shape " + shape_str(cu));
  const int64_t n_seq = cu.shape[0] - 1;
  const int64_t T = plan.S;
  if (device) {  // values live on the device: each token finds its sequence there (docs/cuda.md)
    if (!absent(pos.seq_offsets)) check_int_vector(pos.seq_offsets, "positions.seq_offsets", n_seq, "N");
    PlanPositions& pp = plan.pos;
    pp.kind = PlanPositions::Kind::kPacked;
    pp.cu_seqlens = cu.data;
    pp.cu_seqlens_dtype = cu.dtype;
    pp.cu_seqlens_stride = cu.strides[0];
    pp.n_seq = n_seq;
    pp.seq_offsets = pos.seq_offsets.data;
    pp.seq_offsets_dtype = pos.seq_offsets.dtype;
    pp.seq_offsets_stride = absent(pos.seq_offsets) ? 0 : pos.seq_offsets.strides[0];
    range->unknown = true;
    return;
  }
  auto cu_at = [&](int64_t i) { return load_int_index(cu.data, cu.dtype, i * cu.strides[0]); };
  if (cu_at(0) != 0) invalid("positions.cu_seqlens[0] must be 0, got " + str(cu_at(0)));
  for (int64_t i = 1; scan && i <= n_seq; ++i)
    if (cu_at(i) < cu_at(i - 1))
      invalid("positions.cu_seqlens must be non-decreasing, got cu_seqlens[" + str(i) + "] = " + str(cu_at(i)) +
              " < cu_seqlens[" + str(i - 1) + "] = " + str(cu_at(i - 1)));
  if (cu_at(n_seq) != T)
    invalid("positions.cu_seqlens[" + str(n_seq) + "] (the last entry) must equal the token count T = " + str(T) +
            ", got " + str(cu_at(n_seq)));
  const bool has_off = !absent(pos.seq_offsets);
  if (has_off) check_int_vector(pos.seq_offsets, "positions.seq_offsets", n_seq, "N");
  if (!scan) return;
  plan.pos.kind = PlanPositions::Kind::kPerToken;
  plan.pos.per_token.assign(static_cast<std::size_t>(T), 0);
  for (int64_t n = 0; n < n_seq; ++n) {
    int64_t off = 0;
    if (has_off) {
      off = load_int_index(pos.seq_offsets.data, pos.seq_offsets.dtype, n * pos.seq_offsets.strides[0]);
      check_int_position(off, "positions.seq_offsets[" + str(n) + "]");
    }
    const int64_t begin = cu_at(n), end = cu_at(n + 1);
    if (end > begin) {
      const int64_t last = off + (end - 1 - begin);
      if (last > kMaxPosition)
        out_of_range("positions: sequence " + str(n) + " reaches position " + str(last) + " (seq_offsets " + str(off) +
                     " + length " + str(end - begin) + " - 1), must be < 2^31");
      note_position(range, last);
    }
    for (int64_t t = begin; t < end; ++t) plan.pos.per_token[static_cast<std::size_t>(t)] = off + (t - begin);
  }
}

}  // namespace

void note_position(PositionRange* r, int64_t p) {
  r->any = true;
  r->max_int = std::max(r->max_int, p);
  r->max_f = std::max(r->max_f, static_cast<double>(p));
}

std::string first_id_at_least(const TensorView& ids, int64_t at_least, const char* name) {
  const bool frac = ids.dtype == DType::kF32 || ids.dtype == DType::kF64;
  int64_t count = 1;
  for (int d = 0; d < ids.rank; ++d) count *= ids.shape[d];
  for (int64_t flat = 0; flat < count; ++flat) {
    int64_t idx[4] = {0, 0, 0, 0}, offset = 0, left = flat;
    for (int d = ids.rank - 1; d >= 0; --d) {
      idx[d] = left % ids.shape[d];
      left /= ids.shape[d];
      offset += idx[d] * ids.strides[d];
    }
    const int64_t v = frac ? static_cast<int64_t>(std::floor(load_index(ids.data, ids.dtype, offset)))
                           : load_int_index(ids.data, ids.dtype, offset);
    if (v < at_least) continue;
    std::string at = std::string(name) + "[";
    for (int d = 0; d < ids.rank; ++d) at += (d ? "," : "") + str(idx[d]);
    return at + "] is " + str(v);
  }
  return "";
}

std::string expected_ids_shape(Layout layout, int n_axes, const Plan& plan) {
  const std::string axes = n_axes > 1 ? str(n_axes) + "," : "";
  if (layout == Layout::kTHD) return "[" + axes + "T] = [" + axes + str(plan.S) + "]";
  return "[" + axes + "B,S] = [" + axes + str(plan.B) + "," + str(plan.S) + "] or [" + axes + "S] = [" + axes +
         str(plan.S) + "]";
}

/// A field of another kind given (ids with kind offset, an offset with kind ids, ...) would be ignored and rotate
/// at positions the caller did not mean (an engine that forgot to set kind): refused, naming both.
static void refuse_fields_of_other_kinds(const Positions& pos) {
  static const char* const kKindNames[] = {"offset", "ids", "packed"};
  const int kind = static_cast<int>(pos.kind);
  auto refuse = [&](const char* field, int owner) {
    invalid(std::string("positions.") + field + " is given but positions.kind is " + kKindNames[kind] +
            "; it is read only for kind " + kKindNames[owner]);
  };
  if (kind != 0 && pos.offset != 0) refuse("offset", 0);
  if (kind != 0 && !absent(pos.batch_offsets)) refuse("batch_offsets", 0);
  if (kind != 1 && !absent(pos.ids)) refuse("ids", 1);
  if (kind != 2 && !absent(pos.cu_seqlens)) refuse("cu_seqlens", 2);
  if (kind != 2 && !absent(pos.seq_offsets)) refuse("seq_offsets", 2);
}

void plan_positions(const ApplyArgs& args, const PlanRequest& req, Plan& plan, PositionRange* range, bool scan) {
  const Positions& pos = args.positions;
  const int n_axes = req.n_axes;
  if (n_axes < 1 || n_axes > kMaxPositionAxes)
    invalid("the number of position axes must be in [1, " + str(kMaxPositionAxes) + "], got " + str(n_axes));
  if (req.axes_need_ids && n_axes > 1 && (pos.kind != Positions::Kind::kIds || absent(pos.ids)))
    invalid("positions must be ids of shape " + expected_ids_shape(args.layout, n_axes, plan) + " for " + str(n_axes) +
            " position axes, got positions of another kind");
  plan.pos.n_axes = n_axes;  // offset and packed positions: every axis reads the token's one position
  refuse_fields_of_other_kinds(pos);
  const bool device = plan.device;
  switch (pos.kind) {
    case Positions::Kind::kOffset: plan_offset(pos, plan, range, scan, device); break;
    case Positions::Kind::kIds:
      if (absent(pos.ids)) invalid("positions.ids must be given for positions of kind ids, got none");
      plan_ids(pos, args.layout, req, plan, range, scan, device);
      break;
    case Positions::Kind::kPacked: plan_packed(pos, args.layout, plan, range, scan, device); break;
  }
}

}  // namespace rotary::detail
