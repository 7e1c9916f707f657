// Internal: validation of ApplyArgs into a Plan, cos/sin source attachment and backend dispatch (engine only).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/plan.h"
#include "rotary/apply.h"
#include "rotary/spec.h"

namespace rotary::detail {

inline constexpr const char* kApplyWhere = "rotary_apply";

/// What the caller's cos/sin source implies for validation.
struct PlanRequest {
  int64_t rotary_dim = 0;                      ///< R: must be even, > 0 and <= head_dim
  Pairing default_pairing = Pairing::kHalfSplit;  ///< used when args.pairing is nullopt
  bool allow_fractional = false;               ///< f32/f64 ids (on-the-fly sources only)
  bool mrope = false;                          ///< ids must be [3,B,S] / [3,T] (kOffset/kPacked also accepted)
  /// Plan a device call even if args.backend is not kCuda (tests of the device planning without a GPU).
  /// Device calls (this, or backend kCuda) never read position values on the host.
  bool device = false;
};

/// Range of the positions of a validated call (over every axis for M-RoPE).
struct PositionRange {
  bool any = false;         ///< at least one token
  bool fractional = false;  ///< f32/f64 ids
  int64_t max_int = -1;     ///< largest integer position (floor of the largest for fractional ids)
  double max_f = -1.0;      ///< largest position as a double
  /// Device call whose positions live on the device (ids, batch offsets, packed): not read, so max_int
  /// and max_f are only lower bounds (from the offset and S).
  bool unknown = false;
};

/// Validates everything in `args` that does not depend on the cos/sin source (tensors, dtypes,
/// strides, aliasing, positions, enums, threads) and returns the Plan with `cs` left empty.
/// Throws rotary::Error before anything is written.
Plan build_plan(const ApplyArgs& args, const PlanRequest& request, PositionRange* range);

/// The two halves of build_plan, for tests: the general validation, and the shortcut for the
/// common call (contiguous, disjoint tensors, offset positions) that returns false for anything
/// else. For every call the shortcut accepts, both produce the same Plan and range.
Plan build_plan_full(const ApplyArgs& args, const PlanRequest& request, PositionRange* range);
bool build_plan_fast(const ApplyArgs& args, const PlanRequest& request, Plan* plan, PositionRange* range);

/// Validates caller cos/sin against a plan (shape, dtype, positions in range) and attaches them.
void attach_caller_cos_sin(Plan& plan, const TensorView& cos, const TensorView& sin, const ApplyArgs& args,
                           const PositionRange& range);

/// Validates Frequencies used on the fly (non-empty, finite).
void check_frequencies(const Frequencies& freqs, const char* name);

/// M-RoPE: frequency j -> position axis (0 t, 1 h, 2 w). Sectioned (Qwen2-VL) or interleaved (Qwen3-VL).
/// Throws if the sections do not sum to half.
std::vector<uint8_t> mrope_axis_of_freq(const MRope& mrope, int64_t half);

/// Device calls with a table source: makes `plan` read `table` as it is, or grown to `rows` rows first
/// (capped at max_positions; 0 = no growth), names the table as the owner of the backend's device copy of
/// its rows, and sets its frequencies: the device computes rows for positions past those it has.
void attach_device_table(Plan& plan, CosSinTable& table, int64_t rows);

/// Dispatches a validated plan to a backend (no-op when there is nothing to rotate).
void run_plan(const Plan& plan, Backend backend);

}  // namespace rotary::detail
