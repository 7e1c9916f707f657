// The literal scalar reference kernel: the test oracle and the fallback for every dtype, stride and pairing.
#include <cstring>
#include <vector>

#include "plan/dtype_scalar.h"
#include "plan/plan.h"

namespace rotary::detail {

// For each token (b, s), each tensor, each head and each pair (i0, i1) with frequency j:
//   forward:  y0 = x0*c - x1*s,  y1 = x0*s + x1*c        (inverse: s -> -s)
// with c, s the token's f32 cos/sin (attention factor folded in), evaluated in double and rounded
// once to the output dtype. Pairs: half-split (j, j + R/2), interleaved (2j, 2j + 1).
// Channels >= R are copied bit-exactly when out of place (left untouched in place).
void reference_apply(const Plan& plan) {
  const int64_t h = plan.half;
  const std::size_t es = dtype_size(plan.dtype);
  const double sign = plan.direction == Direction::kForward ? 1.0 : -1.0;
  std::vector<float> scratch(static_cast<std::size_t>(2 * h));
  for (int64_t b = 0; b < plan.B; ++b) {
    for (int64_t s = 0; s < plan.S; ++s) {
      const float* cos_row = nullptr;
      const float* sin_row = nullptr;
      resolve_cos_sin(plan, b, s, scratch.data(), &cos_row, &sin_row);
      for (int t = 0; t < plan.ntensors; ++t) {
        const PlanTensor& pt = plan.t[t];
        for (int64_t head = 0; head < pt.heads; ++head) {
          const int64_t in0 = b * pt.in_sb + s * pt.in_ss + head * pt.in_sh;
          const int64_t out0 = b * pt.out_sb + s * pt.out_ss + head * pt.out_sh;
          for (int64_t j = 0; j < h; ++j) {
            const int64_t i0 = plan.pairing == Pairing::kHalfSplit ? j : 2 * j;
            const int64_t i1 = plan.pairing == Pairing::kHalfSplit ? j + h : 2 * j + 1;
            const double x0 = load_as_double(pt.in, plan.dtype, in0 + i0 * pt.in_sd);
            const double x1 = load_as_double(pt.in, plan.dtype, in0 + i1 * pt.in_sd);
            const double c = cos_row[j];
            const double sn = sign * static_cast<double>(sin_row[j]);
            const double y0 = x0 * c - x1 * sn;
            const double y1 = x0 * sn + x1 * c;
            store_from_double(pt.out, plan.dtype, out0 + i0 * pt.out_sd, y0);
            store_from_double(pt.out, plan.dtype, out0 + i1 * pt.out_sd, y1);
          }
          if (!pt.inplace()) {
            for (int64_t d = plan.rotary_dim; d < plan.head_dim; ++d)
              std::memcpy(static_cast<char*>(pt.out) + (out0 + d * pt.out_sd) * static_cast<int64_t>(es),
                          static_cast<const char*>(pt.in) + (in0 + d * pt.in_sd) * static_cast<int64_t>(es), es);
          }
        }
      }
    }
  }
}

}  // namespace rotary::detail
