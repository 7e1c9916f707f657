// The report's speed line: f32 prefill and decode through Rope::apply against the streaming limit (bench's harness).
#pragma once

#include <cstdint>

#include "format.h"
#include "model.h"

namespace rotary::cli::report {

/// Prefill q [T, 32, D] + k [T, 8, D] (T = 4096, 512 when `quick`) on all cores, and decode (one token at
/// position T) on one, f32 in place, each timed alternately with the in-place stream over the same bytes on
/// the same threads (../timing.h: the definition `rotary bench` uses). Prints the speed lines and adds
/// report.json's "speed".
void report_speed(const ModelView& mv, int64_t D, bool quick, Json& rep);

}  // namespace rotary::cli::report
