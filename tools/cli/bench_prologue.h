// Internal to the CLI: the `rotary bench --case prologue` runner (tools/cli/bench_prologue.cc).
#pragma once

#include <vector>

namespace rotary::cli {

/// Times the fused attention prologue against its limit and the unfused composition; prints JSON lines or a table.
int run_prologue_bench(bool json, bool quick, const std::vector<int>& thread_counts);

}  // namespace rotary::cli
