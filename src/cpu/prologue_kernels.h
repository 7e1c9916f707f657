// Internal interface of the prologue family's CPU SIMD kernels: token and row ranges, dispatched per ISA.
#pragma once

#include <cstdint>

#include "plan/prologue_plan.h"

namespace rotary::detail::cpu {

/// A prologue plan as the CPU kernels run it.
struct PrologueJob {
  const ProloguePlan* plan = nullptr;
  /// Cache rows (f32/f16/bf16, every row 64-byte aligned, D a multiple of the vector width) are written
  /// with non-temporal stores: a large cache write would otherwise read each line before writing it.
  bool stream_cache = false;
};

/// Tokens [g0, g1) (g = b * S + s) of a prologue plan whose channels are contiguous (stride 1) in every
/// tensor, with the best ISA target available. Results do not depend on how tokens are split.
void run_prologue_tokens(const PrologueJob& job, int64_t g0, int64_t g1);

/// Rows [i0, i1) of a re-rotation plan (entries of its slot list) with contiguous channels.
void run_rerotate_rows(const RerotatePlan& plan, int64_t i0, int64_t i1);

}  // namespace rotary::detail::cpu
