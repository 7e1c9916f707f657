// The per-row lookups of a re-rotation plan shared by every CPU-side backend: the difference angle's cos/sin.
#include <cmath>

#include "plan/prologue_plan.h"

namespace rotary::detail {

bool rerotate_cos_sin(const RerotatePlan& plan, int64_t i, float* cos_out, float* sin_out) {
  const auto a = static_cast<double>(plan.from_pos[static_cast<size_t>(i)]);
  const auto b = static_cast<double>(plan.to_pos[static_cast<size_t>(i)]);
  bool identity = true;
  for (int64_t j = 0; j < plan.half; ++j) {
    // Positions are < 2^31, so b - a is exact; each product carries a relative error of 2^-53 (the
    // same phase error bound as a table row), and fl(x) - fl(y) == -(fl(y) - fl(x)): going back
    // rotates by exactly the opposite angle.
    const double angle = plan.same_freqs ? (b - a) * plan.to_freq[j] : b * plan.to_freq[j] - a * plan.from_freq[j];
    cos_out[j] = static_cast<float>(std::cos(angle) * plan.factor_ratio);
    sin_out[j] = static_cast<float>(std::sin(angle) * plan.factor_ratio);
    identity = identity && cos_out[j] == 1.0f && sin_out[j] == 0.0f;
  }
  return identity;
}

}  // namespace rotary::detail
