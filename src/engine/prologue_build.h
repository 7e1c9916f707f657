// Internal: the planners of rotary::prologue: the full validation and the shortcut for the common call (engine only).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/plan_request.h"
#include "engine/prologue_checks.h"
#include "plan/prologue_plan.h"
#include "rotary/prologue.h"

namespace rotary::detail {

// Shared by the full validation (prologue.cc) and the shortcut (prologue_plan_fast.cc).

/// Sequences of the token grid: a batch row (bshd/bhsd), a packed segment, or the whole call (thd).
struct Sequences {
  int64_t count = 1;
  std::vector<int64_t> of_token;  ///< sequence of token g = b * S + s (packed only; else b)
  std::vector<int64_t> first;     ///< packed: first token of each sequence
};

/// Cos/sin sources of a planned call: one per frequency source, each over the positions of its tokens.
void attach_sources(const PrologueArgs& a, const Sequences& seqs, const PositionRange& range, ProloguePlan& p);
/// The slot of every token in a contiguous cache of `major` rows, after checking cache_positions.
void contiguous_slots(const PrologueArgs& a, const Sequences& seqs, int64_t major, ProloguePlan& p);
/// The apply request of a call's rotation (q and k through the apply planner).
void rotation_request(const PrologueArgs& a, const SourceGeometry& geo, bool rotate, ApplyArgs* ap, PlanRequest* req);

/// Validates every argument of a prologue call into a plan (errors "[rotary_prologue] ..."): the
/// shortcut below when it accepts the call, the full validation otherwise.
ProloguePlan build_prologue_plan(const PrologueArgs& args);

/// The full validation: every layout, position scheme, cache kind and aliasing rule.
ProloguePlan build_prologue_plan_full(const PrologueArgs& args);

/// Plans the common call (a decode step's or a prefill's: q, k, v dense and in disjoint memory, offset
/// positions, one frequency source, and either a paged cache of dense tensors addressed by a dense i64
/// slot_mapping of thd tokens, or a contiguous bshd / bhsd cache (HF StaticCache) of dense tensors with
/// cache_positions absent or a dense i64 [N]) without the general checks, which it passes by construction.
/// Returns false, having written nothing to *plan, for anything else. The checks it still makes (norm
/// weights, cache rows, scales, slots or cache positions) are the full validation's own functions called
/// in its order (less the view and self-overlap checks of the caches and scales it found dense, which pass
/// by construction), so an error it raises
/// is the one build_prologue_plan_full raises; for every call it accepts, build_prologue_plan_full
/// produces the same plan.
bool build_prologue_plan_fast(const PrologueArgs& args, ProloguePlan* plan);

}  // namespace rotary::detail
