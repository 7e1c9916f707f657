// Internal: what the prologue family reads of a Rope: its cos/sin source for a call, as Rope::apply chooses it (engine only).
#pragma once

#include <cstdint>
#include <list>
#include <optional>

#include "engine/plan_request.h"
#include "plan/plan.h"
#include "rotary/apply.h"

namespace rotary::detail {

struct RopeAccess {
  /// Sets plan.cs to the cos/sin source Rope::apply would use for `tokens` tokens over `range` with
  /// `seq_len` (table rows, grown as needed, or rows on the fly), M-RoPE axis map included. Frequencies
  /// computed for this call (length-dependent scaling) are kept in `storage`.
  static void attach(Rope& rope, const PositionRange& range, std::optional<int64_t> seq_len, int64_t tokens,
                     Plan& plan, std::list<Frequencies>& storage);
  /// The frequencies Rope::apply uses for `seq_len` (no table growth): the base set or a computed one in `storage`.
  static const Frequencies& frequencies(Rope& rope, std::optional<int64_t> seq_len, int64_t max_position,
                                        std::list<Frequencies>& storage);
  /// A rope in table mode whose call up to `max_position` would read a table (every type but dynamic NTK past
  /// its context): refuses a position past the table's max_positions with kOutOfRange, "[where] <name>: position
  /// P is beyond ...", as apply refuses it, for calls that do not grow a table (re-rotation) or that name their
  /// source (the prologue).
  /// `index` >= 0 names `name[index]`.
  static void check_table_limit(Rope& rope, std::optional<int64_t> seq_len, int64_t max_position, const char* where,
                                const char* name, int64_t index = -1);
};

}  // namespace rotary::detail
