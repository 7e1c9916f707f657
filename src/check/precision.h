// Internal: error vs exact values as a function of position (the data as given; f32-formed angles).
#pragma once

#include <vector>

#include "check/canonical.h"

namespace rotary::parity {

/// The data's error vs exact cos/sin/angles of (theta, af); kFreqs: the angle error of pos * inv_freq over
/// positions [0, range) (and any attention-factor difference).
PrecisionSeries data_precision(const Canonical& data, const std::vector<double>& theta, double af, int64_t range);

/// The error of exact frequencies with angles formed in f32 as engines do, over positions [0, range).
/// ggml: `ggml_ladder` = {theta_scale, 1/freq_factor_0 * yarn_scale_0, ...}: theta_p = p, *= theta_scale per pair.
PrecisionSeries f32_angle_precision(const std::vector<double>& theta, double af, int64_t range, bool ggml,
                                    const std::vector<double>& ggml_ladder);

}  // namespace rotary::parity
