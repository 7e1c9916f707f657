// Internal: where a Plan's cos/sin rows come from (table, on the fly, caller tensors) and the one table-or-not decision (engine only).
#pragma once

#include <cstdint>
#include <optional>

#include "engine/plan_request.h"
#include "plan/plan.h"
#include "rotary/apply.h"
#include "rotary/table.h"

namespace rotary::detail {

/// Auto mode keeps a table at most this large (bytes); rows past it are computed on the fly.
inline constexpr int64_t kAutoTableBytes = int64_t(512) << 20;
/// Bytes of rows an auto-mode call may always add to a table, whatever its token count
/// (8192 rows at rotary_dim 128); beyond, growth must be paid for by the call's tokens (16 rows each).
inline constexpr int64_t kAutoGrowthBytes = int64_t(4) << 20;

/// The one cos/sin-source decision for a call that may use `table` (null: none exists for its
/// frequencies) in `mode`: the table for integer positions within its limits, on the fly otherwise.
/// kAuto also computes on the fly when the table would exceed kAutoTableBytes or max_positions, or
/// grow by more than max(kAutoGrowthBytes, 16 rows per token). Table and on-the-fly rows are the
/// same compute_cos_sin_row values: the decision changes cost, never results. Positions on the device
/// (range.unknown) take the table whenever one may be used (the device computes rows past it).
bool use_table(const CosSinTable* table, CosSinMode mode, const PositionRange& range, int64_t tokens);

/// The most frequency pairs a device backend computes rows on the fly for (backend cuda carries them in its
/// kernel parameters: cuda/job.h kMaxParamFreqs); table rows have no such limit.
inline constexpr int64_t kDeviceOnTheFlyMaxPairs = 256;

/// Device calls that use_table sent on the fly in kAuto, for heads of more than kDeviceOnTheFlyMaxPairs
/// pairs (rotary_dim > 512), which the device cannot compute on the fly: whether to read `table` as it is
/// instead (attach_device_table with no growth; the device computes the rows past it from the table's
/// frequencies), so that such a call runs at every integer position rather than only where the table is
/// chosen. Fractional positions and frequencies without a table stay on the fly.
bool use_device_table_as_is(const CosSinTable* table, CosSinMode mode, const PositionRange& range, int64_t half);

/// Rows a call with positions on the device grows a table of `half` pairs to: `seq_len` (none: 0, no growth),
/// in kAuto (`auto_mode`) at most kAutoTableBytes of rows, as for host positions; the device computes the
/// rows past them from the frequencies. kTable grows as asked.
int64_t device_positions_rows(int64_t half, std::optional<int64_t> seq_len, bool auto_mode);

/// Sets the plan's source to `table`'s rows, grown to cover the range (throws kOutOfRange past max_positions).
/// Device calls: also names the table as the owner of the backend's device copy (attach_device_table);
/// with positions on the device (range.unknown), rows up to device_positions_rows(seq_len, auto_mode).
void attach_table(Plan& plan, CosSinTable& table, const PositionRange& range, std::optional<int64_t> seq_len,
                  bool auto_mode = false);

/// Device calls with a table source: makes `plan` read `table` as it is, or grown to `rows` rows first
/// (capped at max_positions; 0 = no growth), names the table as the owner of the backend's device copy of
/// its rows, and sets its frequencies: the device computes rows for positions past those it has.
void attach_device_table(Plan& plan, CosSinTable& table, int64_t rows);

/// Sets the plan's source to rows computed per token from `freqs` (which must outlive the plan).
void attach_on_the_fly(Plan& plan, const Frequencies& freqs);

/// Validates caller cos/sin against a plan (shape, dtype, positions in range) and attaches them.
void attach_caller_cos_sin(Plan& plan, const TensorView& cos, const TensorView& sin, const ApplyArgs& args,
                           const PositionRange& range);

/// Validates Frequencies used on the fly (non-empty, finite).
void check_frequencies(const Frequencies& freqs, const char* name);

}  // namespace rotary::detail
