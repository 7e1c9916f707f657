// Reading and writing Hugging Face config.json text (v4 rope_scaling, v5 rope_parameters) and built-in model presets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rotary/api.h"
#include "rotary/spec.h"

namespace rotary {

/// Parses the text of an HF config.json into a validated Spec.
/// v4: rope_theta + rope_scaling {type|rope_type, ...}, top-level partial_rotary_factor / rotary_pct,
///     Phi-3's top-level original_max_position_embeddings.
/// v5: rope_parameters {rope_type, rope_theta, ...}. With both, rope_scaling wins unless falsy ({}, [], false),
///     as in transformers.
/// head_dim from "head_dim" when present, else hidden_size / num_attention_heads.
/// Fields the file leaves out take the model_type's transformers config-class defaults (docs/scaling.md).
/// RoPE parameters that differ per layer type (see LayerTypeSpecs) are Error(kUnsupported): read them with
/// layer_type_specs_from_hf_config_json.
/// Errors: rotary::Error naming the field, e.g. "[rotary_config] rope_scaling.factor must be a number, got \"x\"".
ROTARY_API Spec spec_from_hf_config_json(std::string_view json_text, const std::string& source_name = "config.json");
/// Reads and parses a file (kIo error if unreadable).
ROTARY_API Spec spec_from_hf_config_file(const std::string& path);

/// One layer type's RoPE in a config (see LayerTypeSpecs).
struct LayerTypeSpec {
  std::string layer_type;    ///< the layer type's name (e.g. "sliding_attention"); "" = every layer (no layer types)
  std::optional<Spec> spec;  ///< nullopt: the type's rope_parameters entry is null (its layers use no RoPE)
};

/// A model's RoPE per layer type: transformers v5 configs may nest rope_parameters per layer type, e.g.
/// Gemma 3 `{"full_attention": {"rope_type": "linear", "factor": 8, "rope_theta": 1e6},
/// "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}`, with `layer_types` naming each
/// layer's type. Read with layer_type_specs_from_hf_config_json (Python: rotary.LayerTypeSpecs; CLI:
/// --layer-type). A config whose dict is not nested has one Spec shared by every layer.
struct ROTARY_API LayerTypeSpecs {
  /// true: rope parameters nested per layer type (or Gemma 3's legacy rope_local_base_freq form, ModernBERT's
  /// global_rope_theta / local_rope_theta).
  bool nested = false;
  /// Nested: one entry per nested key, sorted by name. Not nested: one entry per distinct name in
  /// layer_types (each holding the shared Spec), or a single entry named "" when the config has none.
  std::vector<LayerTypeSpec> by_type;
  /// config.layer_types: layer i's type (empty when the config has no layer_types; Gemma 3 / 3n and ModernBERT
  /// configs without it derive it as their transformers config classes do: docs/scaling.md).
  std::vector<std::string> layer_types;

  /// The Spec of a layer type. Throws Error(kInvalidArgument) naming the valid types for an unknown name,
  /// or saying that the type has no RoPE (a null entry). The single "" entry (no layer types) answers every name
  /// (the CLI's --layer-type refuses any name for such a config).
  const Spec& spec_for(std::string_view layer_type) const;
  /// The Spec of layer `layer` (0-based), through layer_types; without layer_types, a shared Spec answers
  /// every layer >= 0.
  const Spec& spec_for_layer(int64_t layer) const;
  /// The names of by_type, comma separated (for messages and listings).
  std::string type_names() const;
};

/// Parses config.json text into its RoPE per layer type (every Spec validated; errors name the field,
/// e.g. "[rotary_config] rope_parameters.full_attention.factor must be a number, got \"x\"").
/// Layer types are the keys of rope_parameters (else rope_scaling) that config.layer_types lists, or,
/// without layer_types, its keys whose values are objects. Each nested dict is read like a flat one, its
/// own rope_theta / partial_rotary_factor first, then the top level's (HF standardize_rope_params).
/// Gemma 3's legacy form (top-level rope_theta, rope_local_base_freq, rope_scaling) reads as transformers
/// v5 converts it: full_attention = rope_scaling with rope_theta (default 1e6), sliding_attention = default
/// with rope_local_base_freq.
ROTARY_API LayerTypeSpecs layer_type_specs_from_hf_config_json(std::string_view json_text,
                                                              const std::string& source_name = "config.json");
/// Reads and parses a file (kIo error if unreadable).
ROTARY_API LayerTypeSpecs layer_type_specs_from_hf_config_file(const std::string& path);

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
