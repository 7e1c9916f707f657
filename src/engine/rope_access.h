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
};

}  // namespace rotary::detail
