// Internal interface of the CPU SIMD kernels: a prepared row job and the per-ISA dispatched row runner.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace rotary::detail::cpu {

/// One cpu_apply call, prepared once and shared read-only by every thread working on it.
/// Rows are enumerated token-major: row r belongs to token g = r / rows_per_token (g = b*S + s)
/// and is head (r % rows_per_token) of q, or of k once past q's heads.
struct RowJob {
  const Plan* plan = nullptr;
  int64_t rows_per_token = 0;  ///< q heads + k heads
  int64_t total_rows = 0;      ///< B * S * rows_per_token
  /// Ask for non-temporal stores (out of place, large output). The kernel uses them only for whole
  /// cache lines that no ordinary store of the call touches; values are identical either way.
  bool stream = false;
  /// kTable source with kOffset positions and no batch offsets: row = table + (offset + s) * 2h.
  bool table_fast = false;
  /// Large call: rows with a software prefetch ahead (and streaming when asked). Otherwise (one
  /// token) no prefetching, and where head widths are not whole vectors, channel block by block
  /// across the token's rows. Values are identical either way.
  bool row_outer = false;
};

/// Processes rows [r0, r1) of `job` with the best ISA target available (Highway dynamic dispatch,
/// resolved once per call). Results are bit-identical whatever the split of rows into ranges.
void run_rows(const RowJob& job, int64_t r0, int64_t r1);

/// Rows of one tensor for rotate_token_rows, for `tokens` tokens: token j's row k from in[j] + k * in_step to
/// out[j] + k * out_step (elements; input and output of one dtype, the same rows or apart), rotated by the
/// token's plain cos/sin rows c[j], s[j] (`half` values each, attention factor folded in). Channels past
/// rotary_dim are not touched. One call for a chunk of tokens saves a dispatch and a setup per token (a
/// prologue call of 64 bf16 Llama-3-8B-shaped tokens in cache 26 -> 24 us: docs/performance.md, "A chunk's q
/// and k rows in one call").
struct TokenRowJob {
  DType dtype = DType::kF32;  ///< f32, f16 or bf16
  Pairing pairing = Pairing::kHalfSplit;
  int64_t half = 0, rotary_dim = 0;
  int64_t tokens = 0;
  const void* const* in = nullptr;
  void* const* out = nullptr;
  const float* const* c = nullptr;
  const float* const* s = nullptr;
  int64_t n = 0, in_step = 0, out_step = 0;
  int64_t prefetch = 0;  ///< bytes past each input row to prefetch while it is read (0: none)
  /// Non-temporal stores (the caller flushes them: hwy::FlushStream). Taken only where every output row,
  /// and each half of a half-split row, is whole cache lines on line boundaries and the target stores
  /// whole vectors of at least 16 bytes; rotate_token_rows returns false otherwise.
  bool stream = false;
};

/// Rotates the job's rows with each token's cos/sin held in registers (the apply kernels' RowsInRegisters:
/// the same operations as every other row path, so the same results) and returns true; returns false,
/// touching nothing, when the rotated part is not a whole number of vectors that path takes on the
/// dispatched target (or, with `stream`, when the rows cannot be streamed). For callers with rows of their
/// own addressing (the prologue's cache rows).
bool rotate_token_rows(const TokenRowJob& rows);

/// Whether bf16 outputs on the AVX3 target use AVX512-BF16 narrowing (VCVTNE2PS2BF16 / VCVTNEPS2BF16;
/// default: when the CPU has it). Results are bit-identical either way; tests switch it off to cover
/// the portable path. Returns whether the native path is now on (false when the CPU lacks it).
bool set_native_bf16(bool on);

/// Name of the Highway target run_rows dispatches to right now (e.g. "AVX3", "AVX2").
const char* dispatched_target_name();

/// Highway targets compiled into the kernels AND supported by this CPU (best first).
std::vector<int64_t> runnable_targets();

/// Lets run_rows dispatch only to the Highway target named `name` (e.g. "AVX2", any case) or lower
/// ones, through Highway's supported-targets mask (hwy::DisableTargets); "" lifts the limit. Returns
/// false, changing nothing, for a name that is not a target compiled into the kernels. Applied once
/// at load time from the environment variable ROTARY_CPU_TARGET (docs/performance.md).
bool limit_target(const std::string& name);

}  // namespace rotary::detail::cpu
