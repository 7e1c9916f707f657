// Internal to the CLI: the `rotary bench --case prologue` runner (tools/cli/bench_prologue.cc).
#pragma once

#include <vector>

namespace rotary::cli {

/// Times the fused attention prologue against its limit and the unfused composition; prints JSON lines or a table.
/// `huge_pages`: the tensors, caches and limit buffers are advised MADV_HUGEPAGE (Buffer).
int run_prologue_bench(bool json, bool quick, const std::vector<int>& thread_counts, bool huge_pages);

}  // namespace rotary::cli
