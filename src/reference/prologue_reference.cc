// The literal scalar prologue and re-rotation kernels: the test oracle and the fallback for strided channels and f64.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "plan/dtype_scalar.h"
#include "plan/prologue_plan.h"
#include "plan/quantize.h"

namespace rotary::detail {
namespace {

// Every value below is computed in double from the stored inputs and rounded once when stored:
//   RMSNorm  r = 1 / sqrt(sum(x_i^2) / D + eps),  n_i = x_i * r * w_i   (w_i = weight_i + offset, as f32)
//   rotation y0 = n0*c - n1*s,  y1 = n0*s + n1*c  with the token's f32 cos/sin (attention factor folded in)
// Stores: f32/f16/bf16/f64 rounded once from the double (store_from_double); i8 and fp8 quantise the
// f32 rounding of it (plan/quantize.h: the documented rules).

/// Loads `n` channels (stride sd) of a row of any storage dtype as doubles; quantised rows are dequantised.
void load_row(const void* base, DType dt, int64_t off, int64_t sd, int64_t n, double scale, double* x) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t idx = off + i * sd;
    if (dt == DType::kI8) x[i] = static_cast<const int8_t*>(base)[idx] * scale;
    else if (is_fp8(dt)) x[i] = fp8_to_f32(static_cast<const uint8_t*>(base)[idx], dt) * scale;
    else x[i] = load_as_double(base, dt, idx);
  }
}

/// Stores `n` doubles into a row (stride sd) of any storage dtype; i8 returns the row's fresh scale.
float store_row(void* base, DType dt, int64_t off, int64_t sd, int64_t n, float tensor_scale, const double* y) {
  if (dt == DType::kI8 || is_fp8(dt)) {
    std::vector<float> f(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) f[static_cast<size_t>(i)] = static_cast<float>(y[i]);
    if (dt == DType::kI8) {
      std::vector<int8_t> q(static_cast<size_t>(n));
      const float scale = quantize_int8_row(f.data(), n, q.data());
      for (int64_t i = 0; i < n; ++i) static_cast<int8_t*>(base)[off + i * sd] = q[static_cast<size_t>(i)];
      return scale;
    }
    for (int64_t i = 0; i < n; ++i)
      static_cast<uint8_t*>(base)[off + i * sd] = quantize_fp8(f[static_cast<size_t>(i)], tensor_scale, dt);
    return tensor_scale;
  }
  for (int64_t i = 0; i < n; ++i) store_from_double(base, dt, off + i * sd, y[i]);
  return 1.0f;
}

void rms_norm(double* x, int64_t n, const float* w, float eps) {
  if (w == nullptr) return;
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + static_cast<double>(eps));
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * r * static_cast<double>(w[i]);
}

/// Rotates the first 2*half channels of x by the cos/sin rows (forward direction).
void rotate(double* x, Pairing pairing, int64_t half, const float* c, const float* s) {
  for (int64_t j = 0; j < half; ++j) {
    const int64_t i0 = pairing == Pairing::kHalfSplit ? j : 2 * j;
    const int64_t i1 = pairing == Pairing::kHalfSplit ? j + half : 2 * j + 1;
    const double x0 = x[i0], x1 = x[i1], cj = c[j], sj = s[j];
    x[i0] = x0 * cj - x1 * sj;
    x[i1] = x0 * sj + x1 * cj;
  }
}

void write_cache_row(const PlanRows& rows, int64_t slot, int64_t head, const double* y) {
  const float scale = store_row(rows.data, rows.dtype, rows.row_offset(slot, head), rows.s_d, rows.dim,
                                rows.tensor_scale, y);
  if (rows.dtype == DType::kI8) rows.scales[rows.scale_offset(slot, head)] = scale;
}

}  // namespace

void reference_prologue(const ProloguePlan& p) {
  const Plan& rp = p.rope;
  const int64_t D = rp.head_dim, h = rp.half;
  std::vector<double> x(static_cast<size_t>(std::max(D, p.v_dim)));
  std::vector<float> scratch(static_cast<size_t>(2 * h));
  for (int64_t b = 0; b < rp.B; ++b) {
    for (int64_t s = 0; s < rp.S; ++s) {
      const int64_t g = b * rp.S + s;
      const float* c = nullptr;
      const float* sn = nullptr;
      if (p.rotate) resolve_cos_sin(rp.pos, p.source_of(g), h, b, s, scratch.data(), &c, &sn);
      const int64_t slot = p.slots == nullptr ? -1 : p.slots[g];
      for (int which = 0; which < 2; ++which) {  // q rows, then k rows
        const int idx = which == 0 ? p.q_index : p.k_index;
        if (idx < 0) continue;
        const PlanTensor& t = rp.t[idx];
        const bool to_cache = which == 1 && p.k_cache.present();
        if (to_cache && slot < 0) continue;
        const float* w = which == 0 ? p.q_norm : p.k_norm;
        for (int64_t head = 0; head < t.heads; ++head) {
          const int64_t in0 = b * t.in_sb + s * t.in_ss + head * t.in_sh;
          load_row(t.in, rp.dtype, in0, t.in_sd, D, 1.0, x.data());
          rms_norm(x.data(), D, w, p.eps);
          if (p.rotate) rotate(x.data(), rp.pairing, h, c, sn);
          if (to_cache) {
            write_cache_row(p.k_cache, slot, head, x.data());
          } else {
            const int64_t out0 = b * t.out_sb + s * t.out_ss + head * t.out_sh;
            store_row(t.out, rp.dtype, out0, t.out_sd, D, 1.0f, x.data());
          }
        }
      }
      if (p.has_v && slot >= 0) {
        const PlanTensor& v = p.v;
        for (int64_t head = 0; head < v.heads; ++head) {
          load_row(v.in, rp.dtype, b * v.in_sb + s * v.in_ss + head * v.in_sh, v.in_sd, p.v_dim, 1.0, x.data());
          write_cache_row(p.v_cache, slot, head, x.data());
        }
      }
    }
  }
}

void reference_rerotate(const RerotatePlan& p) {
  const PlanRows& r = p.rows;
  std::vector<double> x(static_cast<size_t>(r.dim));
  std::vector<float> c(static_cast<size_t>(p.half)), s(static_cast<size_t>(p.half));
  for (size_t i = 0; i < p.slots.size(); ++i) {
    const int64_t slot = p.slots[i];
    if (slot < 0) continue;
    // The identity rotation (a zero angle): the row keeps its bits, -0, NaN / inf and an i8 row's scale included.
    if (rerotate_cos_sin(p, static_cast<int64_t>(i), c.data(), s.data())) continue;
    for (int64_t head = 0; head < r.heads; ++head) {
      const double scale = r.dtype == DType::kI8 ? r.scales[r.scale_offset(slot, head)] : r.tensor_scale;
      load_row(r.data, r.dtype, r.row_offset(slot, head), r.s_d, r.dim, scale, x.data());
      rotate(x.data(), p.pairing, p.half, c.data(), s.data());
      write_cache_row(r, slot, head, x.data());
    }
  }
}

}  // namespace rotary::detail
