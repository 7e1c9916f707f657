// Multimodal test support: contiguous test tensors, an independent long-double pair rotation, and max-diff helpers.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "rotary/rotary.h"
#include "testing/shared.h"

namespace rotary::mmtest {

/// Rotates one head vector x (length D) in long double: pair j = (i0, i1) by angle(j), cos/sin times af.
/// half-split pairs (j, j + half_offset), interleaved pairs (2j, 2j+1). Channels not in a pair are copied.
inline std::vector<double> rotate_head(const std::vector<double>& x, int64_t pairs, Pairing pairing,
                                       const std::function<long double(int64_t)>& angle, long double af = 1.0L,
                                       int64_t half_offset = -1) {
  std::vector<double> y = x;
  if (half_offset < 0) half_offset = pairs;
  for (int64_t j = 0; j < pairs; ++j) {
    const int64_t i0 = pairing == Pairing::kHalfSplit ? j : 2 * j;
    const int64_t i1 = pairing == Pairing::kHalfSplit ? j + half_offset : 2 * j + 1;
    const long double a = angle(j);
    const long double c = cosl(a) * af, s = sinl(a) * af;
    const long double x0 = x[static_cast<std::size_t>(i0)], x1 = x[static_cast<std::size_t>(i1)];
    y[static_cast<std::size_t>(i0)] = static_cast<double>(x0 * c - x1 * s);
    y[static_cast<std::size_t>(i1)] = static_cast<double>(x0 * s + x1 * c);
  }
  return y;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return a.size() == b.size() ? m : INFINITY;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

/// A [T, H, D] f32 tensor in a plain vector with a thd view (B = 1, S = T).
struct Thd {
  int64_t T, H, D;
  std::vector<float> data;
  Thd(int64_t t, int64_t h, int64_t d, uint64_t seed) : T(t), H(h), D(d), data(testing::randn(static_cast<std::size_t>(t * h * d), seed)) {}
  TensorView view() { return TensorView::contiguous(data.data(), DType::kF32, {T, H, D}); }
  std::vector<double> head(int64_t t, int64_t h) const {
    return std::vector<double>(data.begin() + (t * H + h) * D, data.begin() + (t * H + h + 1) * D);
  }
};

}  // namespace rotary::mmtest
