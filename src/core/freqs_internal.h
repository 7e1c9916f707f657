// Internal: frequencies of an already-checked Spec without re-validating it (Spec::validate and Rope's per-call path).
#pragma once

#include <cstdint>
#include <optional>

#include "rotary/freqs.h"

namespace rotary::detail {

/// Longest seq_len a length-dependent type is evaluated at: positions are < 2^31, so HF's
/// seq_len = max(position) + 1 is at most 2^31 (compute_frequencies and apply refuse more).
constexpr int64_t kMaxSeqLen = int64_t(1) << 31;

/// compute_frequencies for a spec that is already normalized and valid (Spec::normalized()), with
/// seq_len in [0, kMaxSeqLen] or nullopt. No checks: Spec::validate evaluates this at the extreme
/// lengths and refuses specs whose results are not finite, so for a valid spec the result is finite
/// and within the f32 range at every allowed seq_len. seq_len may be fractional: HF's max(position) + 1
/// for fractional position ids (dynamic NTK's base is continuous in it; LongRoPE compares it with the
/// original length).
Frequencies frequencies_unchecked(const Spec& normalized, std::optional<double> seq_len);

/// The dynamic-NTK base at seq_len: base * (factor * L / max_pos - (factor - 1))^(R / (R - 2)),
/// L = max(seq_len, max_position_embeddings); with scaling.alpha (NTK-alpha) the fixed base * alpha^(R / (R - 2)).
/// May overflow to inf (Spec::validate refuses such specs).
double dynamic_base(const Spec& normalized, std::optional<double> seq_len);

/// YaRN's blend as HF forms it: band j's interpolation weight is clamp((j - low) / (high - low), 0, 1), the
/// correction range [low, high] from beta_fast/beta_slow at original_max_position_embeddings (floor/ceil when
/// truncate, clamped to [0, rotary_dim - 1], widened by 0.001 when empty); factor as HF defaults it.
struct YarnRamp {
  double factor = 1.0, low = 0.0, high = 0.0;
};
YarnRamp yarn_ramp(const Spec& normalized);

}  // namespace rotary::detail
