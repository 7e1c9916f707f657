// Reading and writing Hugging Face config.json text (v4 rope_scaling, v5 rope_parameters) and built-in model presets.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "rotary/api.h"
#include "rotary/spec.h"

namespace rotary {

/// Parses the text of an HF config.json into a validated Spec.
/// v4: rope_theta + rope_scaling {type|rope_type, ...}, top-level partial_rotary_factor / rotary_pct,
///     Phi-3's top-level original_max_position_embeddings.
/// v5: rope_parameters {rope_type, rope_theta, ...}.
/// head_dim from "head_dim" when present, else hidden_size / num_attention_heads.
/// Errors: rotary::Error naming the field, e.g. "[rotary_config] rope_scaling.factor must be a number, got \"x\"".
ROTARY_API Spec spec_from_hf_config_json(std::string_view json_text, const std::string& source_name = "config.json");
/// Reads and parses a file (kIo error if unreadable).
ROTARY_API Spec spec_from_hf_config_file(const std::string& path);

/// Writes every field of `spec` as config.json text in the Hugging Face v5 layout, which
/// spec_from_hf_config_json(text, spec.name) reads back to an equal Spec (normalized specs). Top level:
/// name, head_dim, rotary_dim, max_position_embeddings, rope_interleave (the pairing); rope_parameters:
/// rope_type, rope_theta (base), partial_rotary_factor and every scaling and M-RoPE field, an unset optional
/// as null. Fields the rope_type does not use are written with their values but not read back.
/// indent < 0: one line; otherwise pretty-printed with that many spaces. Field by field: docs/cli.md.
ROTARY_API std::string spec_to_json(const Spec& spec, int indent = -1);

/// Names of the built-in presets (real models, embedded config.json fragments).
ROTARY_API std::vector<std::string> preset_names();
/// A preset's Spec; throws Error listing the valid names if unknown.
ROTARY_API Spec preset(std::string_view name);
/// The embedded config.json text a preset is built from (for `rotary presets --show`).
ROTARY_API std::string preset_config_json(std::string_view name);
/// One-line description of a preset (model id and what is notable about its RoPE).
ROTARY_API std::string preset_description(std::string_view name);

}  // namespace rotary
