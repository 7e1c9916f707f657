// Where a Plan's cos/sin rows come from: the table (grown on demand), rows on the fly, or caller tensors.
#include "engine/cos_sin_source.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/frequency_checks.h"
#include "core/messages.h"
#include "engine/overlap.h"
#include "engine/position_checks.h"
#include "engine/tensor_checks.h"

namespace rotary::detail {
namespace {

[[noreturn]] void invalid(const std::string& msg) { detail::invalid(kApplyWhere, msg); }
[[noreturn]] void invalid_type(const std::string& msg) { detail::invalid_dtype(kApplyWhere, msg); }
[[noreturn]] void out_of_range(const std::string& msg) { detail::out_of_range(kApplyWhere, msg); }

}  // namespace

bool use_table(const CosSinTable* table, CosSinMode mode, const PositionRange& range, int64_t tokens) {
  if (table == nullptr || mode == CosSinMode::kOnTheFly || range.fractional) return false;
  if (mode == CosSinMode::kTable || !range.any || range.unknown) return true;  // kTable: grows, or throws past max_positions
  const int64_t rows = range.max_int + 1;  // <= 2^31
  if (rows > table->max_positions()) return false;
  const int64_t row_bytes = 2 * table->half() * static_cast<int64_t>(sizeof(float));
  int64_t bytes;
  if (__builtin_mul_overflow(rows, row_bytes, &bytes) || bytes > kAutoTableBytes) return false;
  const int64_t missing = rows - table->size();
  if (missing <= 0) return true;
  // E.g. one decode step at position 1e6 on a fresh table: computing its rows is far cheaper.
  int64_t paid = 0;
  if (__builtin_mul_overflow(std::min<int64_t>(tokens, int64_t(1) << 40), 16 * row_bytes, &paid)) paid = INT64_MAX;
  return missing * row_bytes <= std::max(kAutoGrowthBytes, paid);
}

bool use_device_table_as_is(const CosSinTable* table, CosSinMode mode, const PositionRange& range, int64_t half) {
  return table != nullptr && mode == CosSinMode::kAuto && !range.fractional && half > kDeviceOnTheFlyMaxPairs;
}

int64_t device_positions_rows(int64_t half, std::optional<int64_t> seq_len, bool auto_mode) {
  const int64_t rows = std::max<int64_t>(0, seq_len.value_or(0));
  if (!auto_mode || half <= 0) return rows;
  return std::min(rows, kAutoTableBytes / (2 * half * static_cast<int64_t>(sizeof(float))));
}

void attach_table(Plan& plan, CosSinTable& table, const PositionRange& range, std::optional<int64_t> seq_len,
                  bool auto_mode) {
  plan.cs.kind = PlanCosSin::Kind::kTable;
  if (range.unknown) {  // device positions: rows up to seq_len if given, the rest computed on the device
    attach_device_table(plan, table, device_positions_rows(table.half(), seq_len, auto_mode));
    return;
  }
  if (!range.any) return;
  plan.cs.table_pin = table.view_for(range.max_int + 1);  // thread-safe growth; throws before any write
  plan.cs.table = plan.cs.table_pin.data;
  plan.cs.table_size = plan.cs.table_pin.size;
  if (plan.device) attach_device_table(plan, table, range.max_int + 1);
}

void attach_device_table(Plan& plan, CosSinTable& table, int64_t rows) {
  plan.cs.kind = PlanCosSin::Kind::kTable;
  plan.cs.device_rows = rows > 0 ? std::min(rows, table.max_positions()) : 0;
  plan.cs.table_pin = rows > 0 ? table.view_for(plan.cs.device_rows) : table.view();
  plan.cs.table = plan.cs.table_pin.data;
  plan.cs.table_size = plan.cs.table_pin.size;
  plan.cs.table_owner = &table;
  plan.cs.inv_freq = table.frequencies().inv_freq.data();
  plan.cs.attention_factor = table.frequencies().attention_factor;
}

void attach_on_the_fly(Plan& plan, const Frequencies& freqs) {
  plan.cs.kind = PlanCosSin::Kind::kOnTheFly;
  plan.cs.inv_freq = freqs.inv_freq.data();
  plan.cs.attention_factor = freqs.attention_factor;
}

void attach_caller_cos_sin(Plan& plan, const TensorView& cos, const TensorView& sin, const ApplyArgs& args,
                           const PositionRange& range) {
  if (cos.rank != 2 && cos.rank != 3)
    invalid("cos must have rank 2 [max_pos, R/2] or rank 3 [B, S, R/2], got rank " + str(cos.rank) + " (shape " + shape_str(cos) + ")");
  check_view(cos, "cos", /*allow_broadcast_zero=*/true);
  check_view(sin, "sin", /*allow_broadcast_zero=*/true);
  if (!is_floating(cos.dtype)) invalid_type(std::string("cos dtype must be floating (f32, f16, bf16, f64), got ") + dtype_name(cos.dtype));
  if (sin.dtype != cos.dtype)
    invalid_type(std::string("sin dtype must equal cos dtype ") + dtype_name(cos.dtype) + ", got " + dtype_name(sin.dtype));
  if (sin.rank != cos.rank) invalid("sin shape must equal cos shape " + shape_str(cos) + ", got " + shape_str(sin));
  for (int i = 0; i < cos.rank; ++i)
    if (sin.shape[i] != cos.shape[i]) invalid("sin shape must equal cos shape " + shape_str(cos) + ", got " + shape_str(sin));
  const int64_t last = cos.shape[cos.rank - 1];
  if (last != plan.half)
    invalid("cos last dim must be rotary_dim/2 = " + str(plan.half) + ", got shape " + shape_str(cos));
  if (cos.rank == 2) {
    if (range.fractional) invalid("positions.ids must be integer with a caller cos/sin table, got fractional ids");
    // Device positions are not read here: the kernel writes NaN for a position outside [0, max_pos).
    if (range.any && !range.unknown && range.max_int >= cos.shape[0]) {
      // ids: the first one past the table, by its index (positions.ids[1,1] is 10); offsets and packed: the position.
      const std::string at = args.positions.kind == Positions::Kind::kIds
                                 ? first_id_at_least(args.positions.ids, cos.shape[0], "positions.ids")
                                 : std::string();
      out_of_range((at.empty() ? "position " + str(range.max_int) + " is" : at + ",") + " out of range for cos/sin with " +
                   str(cos.shape[0]) + " rows (shape " + shape_str(cos) + "); positions must be < max_pos");
    }
  } else {
    const Positions& p = args.positions;
    if (p.kind != Positions::Kind::kOffset || p.offset != 0 || !absent(p.batch_offsets))
      invalid("positions must be the default (offset 0, no ids) with an already gathered rank-3 cos [B,S,R/2], got "
              "positions of kind " + std::string(p.kind == Positions::Kind::kIds ? "ids" : p.kind == Positions::Kind::kPacked ? "packed" : "offset") +
              (p.kind == Positions::Kind::kOffset ? " " + str(p.offset) : ""));
    if ((cos.shape[0] != plan.B && cos.shape[0] != 1) || cos.shape[1] != plan.S)
      invalid("cos shape must be [B,S,R/2] = [" + str(plan.B) + "," + str(plan.S) + "," + str(plan.half) + "], got " + shape_str(cos));
  }
  check_outputs_spare_inputs(args, args.layout, /*positions=*/false, {{&cos, "cos"}, {&sin, "sin"}});
  plan.cs.kind = PlanCosSin::Kind::kCaller;
  plan.cs.cos = cos;
  plan.cs.sin = sin;
}

void check_frequencies(const Frequencies& freqs, const char* name) { check_frequencies(freqs, kApplyWhere, name); }

}  // namespace rotary::detail
