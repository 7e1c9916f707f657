// The Plan's per-token lookups shared by every CPU-side backend: token positions and cos/sin rows.
#include <cmath>

#include "plan/dtype_scalar.h"
#include "plan/plan.h"
#include "rotary/multimodal.h"
#include "rotary/table.h"

namespace rotary::detail {

namespace {
int64_t batch_offset(const PlanPositions& p, int64_t b) {
  return p.batch_offsets ? load_int_index(p.batch_offsets, p.batch_offsets_dtype, b * p.batch_offsets_stride) : 0;
}

int64_t id_index(const PlanPositions& p, int64_t b, int64_t s, int axis) {
  return (p.n_axes > 1 ? axis : 0) * p.ids_sa + b * p.ids_sb + s * p.ids_ss;
}

/// Copies `half` values of a caller cos or sin row (any floating dtype, any stride) into f32.
void gather_caller(const TensorView& v, int64_t row_offset, int64_t half, float* out) {
  const int64_t sd = v.strides[v.rank - 1];
  for (int64_t j = 0; j < half; ++j) out[j] = static_cast<float>(load_as_double(v.data, v.dtype, row_offset + j * sd));
}
}  // namespace

int64_t token_position(const Plan& plan, int64_t b, int64_t s, int axis) { return token_position(plan.pos, b, s, axis); }

int64_t token_position(const PlanPositions& p, int64_t b, int64_t s, int axis) {
  switch (p.kind) {
    case PlanPositions::Kind::kOffset: return p.offset + batch_offset(p, b) + s;
    case PlanPositions::Kind::kIds: {
      const int64_t i = id_index(p, b, s, axis);
      if (is_integer(p.ids_dtype)) return load_int_index(p.ids, p.ids_dtype, i);
      return static_cast<int64_t>(std::floor(load_index(p.ids, p.ids_dtype, i)));
    }
    case PlanPositions::Kind::kPerToken: return p.per_token[static_cast<std::size_t>(s)];
    case PlanPositions::Kind::kPacked: {  // device plans read on the host (tests): the sequence holding s
      auto at = load_int_index;
      if (p.n_seq <= 0) return s;        // malformed (T > 0 tokens, no sequence): not checked on device calls
      int64_t lo = 0, hi = p.n_seq - 1;  // largest n in [0, n_seq) with cu[n] <= s
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (at(p.cu_seqlens, p.cu_seqlens_dtype, mid * p.cu_seqlens_stride) <= s) lo = mid;
        else hi = mid - 1;
      }
      const int64_t off = p.seq_offsets ? at(p.seq_offsets, p.seq_offsets_dtype, lo * p.seq_offsets_stride) : 0;
      return s - at(p.cu_seqlens, p.cu_seqlens_dtype, lo * p.cu_seqlens_stride) + off;
    }
  }
  return 0;
}

namespace {
double position_f(const PlanPositions& p, int64_t b, int64_t s, int axis) {
  if (p.kind == PlanPositions::Kind::kIds) return load_index(p.ids, p.ids_dtype, id_index(p, b, s, axis));
  return static_cast<double>(token_position(p, b, s, axis));
}
}  // namespace

double token_position_f(const Plan& plan, int64_t b, int64_t s, int axis) { return position_f(plan.pos, b, s, axis); }

void resolve_cos_sin(const Plan& plan, int64_t b, int64_t s, float* scratch, const float** cos_row,
                     const float** sin_row) {
  resolve_cos_sin(plan.pos, plan.cs, plan.half, b, s, scratch, cos_row, sin_row);
}

void resolve_cos_sin(const PlanPositions& pos, const PlanCosSin& cs, int64_t half, int64_t b, int64_t s,
                     float* scratch, const float** cos_row, const float** sin_row) {
  const int64_t h = half;
  const bool mrope = !cs.axis_of_freq.empty();
  *cos_row = scratch;
  *sin_row = scratch + h;
  switch (cs.kind) {
    case PlanCosSin::Kind::kTable: {
      if (!mrope) {
        const float* row = cs.table + token_position(pos, b, s) * 2 * h;
        *cos_row = row;
        *sin_row = row + h;
        return;
      }
      int64_t p[kMaxPositionAxes] = {0, 0, 0, 0};
      for (int a = 0; a < pos.n_axes; ++a) p[a] = token_position(pos, b, s, a);
      for (int64_t j = 0; j < h; ++j) {
        const float* row = cs.table + p[cs.axis_of_freq[static_cast<std::size_t>(j)]] * 2 * h;
        scratch[j] = row[j];
        scratch[h + j] = row[h + j];
      }
      return;
    }
    case PlanCosSin::Kind::kOnTheFly: {
      if (!mrope) {
        compute_cos_sin_row(cs.inv_freq, h, cs.attention_factor, position_f(pos, b, s, 0), scratch, scratch + h);
        return;
      }
      double p[kMaxPositionAxes] = {0, 0, 0, 0};
      for (int a = 0; a < pos.n_axes; ++a) p[a] = position_f(pos, b, s, a);
      for (int64_t j = 0; j < h; ++j)
        compute_cos_sin_row(cs.inv_freq + j, 1, cs.attention_factor, p[cs.axis_of_freq[static_cast<std::size_t>(j)]],
                            scratch + j, scratch + h + j);
      return;
    }
    case PlanCosSin::Kind::kCaller: {
      int64_t co, so;
      if (cs.cos.rank == 2) {
        const int64_t p0 = token_position(pos, b, s);
        co = p0 * cs.cos.strides[0];
        so = p0 * cs.sin.strides[0];
      } else {
        const int64_t bb = cs.cos.shape[0] == 1 ? 0 : b;
        co = bb * cs.cos.strides[0] + s * cs.cos.strides[1];
        so = bb * cs.sin.strides[0] + s * cs.sin.strides[1];
      }
      gather_caller(cs.cos, co, h, scratch);
      gather_caller(cs.sin, so, h, scratch + h);
      return;
    }
  }
}

}  // namespace rotary::detail
