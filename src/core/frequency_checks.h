// Internal: the one validation of Frequencies handed in by a caller (tables, on-the-fly apply, axis frequencies).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "core/messages.h"
#include "rotary/freqs.h"

namespace rotary::detail {

/// inv_freq non-empty and finite; attention_factor > 0 and at most the f32 maximum (as Spec::validate requires of a
/// spec's: a larger one makes every cos/sin inf); messages "[where] name.inv_freq[3] must be finite, got nan".
inline void check_frequencies(const Frequencies& f, const char* where, const char* name) {
  if (f.inv_freq.empty()) invalid(where, std::string(name) + ".inv_freq must not be empty, got 0 entries");
  for (std::size_t i = 0; i < f.inv_freq.size(); ++i)
    if (!std::isfinite(f.inv_freq[i]))
      invalid(where, std::string(name) + ".inv_freq[" + str(static_cast<int64_t>(i)) + "] must be finite, got " +
                         num(f.inv_freq[i]));
  constexpr double kF32Max = 3.4028234663852886e+38;
  if (!(f.attention_factor > 0 && f.attention_factor <= kF32Max))
    invalid(where, std::string(name) + ".attention_factor must be finite, > 0 and at most 3.4028234663852886e+38 (the "
                                       "f32 maximum), got " + num(f.attention_factor));
}

}  // namespace rotary::detail
