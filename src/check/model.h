// Internal: hypotheses about how an engine computed its table, and the tolerance test that decides which explain the data.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "check/canonical.h"
#include "rotary/spec.h"

namespace rotary::parity {

/// Tolerances (docs/parity.md, "Tolerances"). Engines form angles in f32: f32 inv_freq (HF's f32 pow; llama3's and
/// YaRN's f32 band blend: engine_blend_slack), an f32 product, ggml's incremental theta (j roundings for pair j).
inline constexpr double kAngleRel = 1e-5;   ///< allowed |angle error| per unit of angle
inline constexpr double kAngleAbs = 1e-6;   ///< plus this (f32 cos/sin evaluation, af product)
inline constexpr double kFreqRel = 4e-6;    ///< inv_freq data: allowed relative error beyond the dtype's rounding
/// inv_freq data: a frequency below this never turns by 1e-21 rad at a position < 2^31 (ggml's zero-frequency stand-in).
inline constexpr double kFreqAbs = 1e-30;
inline constexpr double kFactorRel = 1e-6;  ///< attention factor carried as a parameter (ggml)

/// One hypothesis: the frequencies and attention factor the engine used, optionally with angles formed in a
/// low-precision dtype (positions and inv_freq rounded to it, the product rounded to it).
struct Model {
  std::vector<double> inv_freq;
  double af = 1.0;
  std::optional<DType> low_precision_angles;
  std::vector<double> band_rel;  ///< per band, relative error allowed beyond kFreqRel / kAngleRel (empty: none)
};

/// Per band, the relative error of an engine's f32 llama3 or YaRN blend beyond kFreqRel (zeros for other types):
/// HF forms llama3's smooth = (L / (2π / θ) - low) / (high - low) and YaRN's weight 1 - (j - low) / (high - low)
/// in f32, and θ·((1 - w) / factor + w) magnifies the weight's rounding by up to factor - 1 where w is near 0.
std::vector<double> engine_blend_slack(const Spec& spec);

/// Which rows the tests read: all up to 4096, else the first 2048 and 2048 spread over the rest (last included).
std::vector<int64_t> sample_rows(int64_t rows);

/// max over the sampled data of |data - model| / tolerance (<= 1: the model explains the data); per band in
/// `per_band` (size max(half_data, half_model)) when given. A model with non-zero frequencies the data lacks
/// scores infinity.
double score(const Canonical& data, const Model& model, const std::vector<int64_t>& rows,
             std::vector<double>* per_band = nullptr);

}  // namespace rotary::parity
