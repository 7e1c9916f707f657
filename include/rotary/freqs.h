// Frequency math: every scaling type reduces to (inv_freq[rotary_dim/2], attention_factor), in double precision.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "rotary/api.h"
#include "rotary/spec.h"

namespace rotary {

/// The only thing kernels ever see of a scaling type.
struct Frequencies {
  std::vector<double> inv_freq;   ///< theta_i, i in [0, rotary_dim/2)
  double attention_factor = 1.0;  ///< multiplies cos and sin (HF "attention_scaling")
};

/// Computes theta_i and the attention factor exactly as Hugging Face transformers'
/// ROPE_INIT_FUNCTIONS[rope_type] (and compute_default_rope_parameters) do, but in double.
///
/// `seq_len`: the sequence length seen by length-dependent types.
///   dynamic:  uses max(seq_len, max_position_embeddings) (nullopt -> max_position_embeddings)
///   longrope: long factors iff seq_len > original_max_position_embeddings
/// Other types ignore it. Validates the spec first (throws rotary::Error).
ROTARY_API Frequencies compute_frequencies(const Spec& spec, std::optional<int64_t> seq_len = std::nullopt);

/// theta_i = base^(-2i/rotary_dim), computed independently of any scaling (used by tests and reports).
ROTARY_API std::vector<double> default_inv_freq(double base, int64_t rotary_dim);

}  // namespace rotary
