// The report's numerical checks on this machine: relative-position identity, inverse∘forward, error vs fp64 truth.
#pragma once

#include <cstdint>

#include "format.h"
#include "model.h"

namespace rotary::cli::report {

/// Runs the checks on f32 data against fp64 truth, prints their lines and adds report.json's "verification":
/// the relative-position identity <R(m)q,R(n)k> = <R(m−n)q,R(0)k> on unit random q, k at ten (m, n) up to
/// 2^24-1; inverse(forward(x)) = af²·x from positions 0, L-16 and 2^24-32; the error of Rope::apply and
/// apply_frequencies at positions 10^3, 10^6 and 2^24-1 against the contract 4e-6·max(1, af).
void report_verification(const ModelView& mv, int64_t D, Json& rep);

}  // namespace rotary::cli::report
