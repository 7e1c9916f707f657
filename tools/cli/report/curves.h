// The report's curves against relative distance and position: decay bound, attention score, cos/sin error (CSV files).
#pragma once

#include <cstdint>
#include <filesystem>

#include "format.h"
#include "model.h"

namespace rotary::cli::report {

/// Writes decay.csv, score.csv (the model and the comparison variants) and phase_error.csv into `dir`, prints
/// their summary lines and adds report.json's "curves" and "phase_error".
void report_curves(const ModelView& mv, int64_t D, const std::filesystem::path& dir, Json& rep);

}  // namespace rotary::cli::report
