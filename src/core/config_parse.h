// Internal: the pieces of config.json parsing shared by the one-Spec reader and the per-layer-type reader (core only).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "rotary/config.h"
#include "rotary/spec.h"

namespace rotary::detail {

inline constexpr const char* kConfigWhere = "rotary_config";

/// The document and the object holding the language model's settings: the document itself, or the object
/// transformers' get_text_config() returns for a composite (`text_config` of VL models, Qwen-Omni's
/// `thinker_config.text_config`, ...: config.cc). `prefix` names fields of `root` in messages ("",
/// "text_config.", "thinker_config.text_config.").
struct ConfigRoot {
  const nlohmann::json* doc = nullptr;
  const nlohmann::json* root = nullptr;
  std::string prefix;
  std::vector<const nlohmann::json*> parents;  ///< the objects from doc down to root's container (empty: root is doc)
};

/// A RoPE dict of the root and its name in messages (e.g. "rope_parameters", "rope_parameters.full_attention").
struct RopeDict {
  const nlohmann::json* dict = nullptr;
  std::string field;
  bool layer_entry = false;  ///< an entry of a dict nested per layer type (it alone gives original_max)
  /// A layer entry's YaRN truncation: not its own `truncate` but the nested dict's, beside its layer types (true
  /// when absent), which is where transformers 5.25's YaRN reads it.
  bool nested_truncate = true;
};

/// Refuses config text whose arrays/objects nest deeper than 64 levels (kIo, `where` prefix), before parsing:
/// every recursive walk of the parsed document then stays far from the stack's limit.
void check_config_depth(std::string_view text, const std::string& source, const char* where);
/// The text with Python's NaN / Infinity / -Infinity tokens (outside strings) made JSON strings (config_depth.cc):
/// of themselves, or, with `same_length`, strings of their length (so a parser's positions are the input's).
std::string python_json_tokens(std::string_view text, bool same_length = false);
/// Parses config.json text (kIo naming `source_name` for malformed JSON or a non-object document).
nlohmann::json parse_config_text(std::string_view json_text, const std::string& source_name);
/// Reads a file's text (kIo if unreadable).
std::string read_config_file(const std::string& path);
ConfigRoot config_root(const nlohmann::json& doc);
/// obj's model_type, or "" (absent or not a string).
std::string_view type_of(const nlohmann::json& obj);
/// A non-empty v4 rope_scaling (transformers' `rope_scaling or rope_parameters`; not over a rope_parameters
/// nested per layer type), else v5 rope_parameters, else the model's config-class dict (model_defaults.h),
/// else an empty object.
RopeDict rope_dict(const ConfigRoot& r);
/// The root's model_type, else its nearest container's that has one, else "".
std::string model_type_of(const ConfigRoot& r);
/// obj[key] is present and not null (HF treats `None` like a missing key for every optional field).
inline bool has_value(const nlohmann::json& obj, const std::string& key) {
  return obj.contains(key) && !obj.at(key).is_null();
}
/// Python's truth value of a JSON value (None, False, 0, "", [] and {} are false).
inline bool truthy(const nlohmann::json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string() || v.is_array() || v.is_object()) return !v.empty();
  return true;
}
/// A short rendering of a JSON value for messages.
std::string show_json(const nlohmann::json& v);

/// A Spec from the model-wide fields of `r` and one RoPE dict (not yet normalized). The dict's own
/// rope_theta / partial_rotary_factor win over the top level's, as in HF's standardize_rope_params.
Spec parse_spec(const ConfigRoot& r, const RopeDict& d, const std::string& source);
/// spec.normalized(), with " (in SOURCE)" appended to a validation message.
Spec normalized_in(const Spec& spec, const std::string& source_name);

/// Throws kUnsupported when per_layer_config gives a layer its own RoPE input (head_dim, rope_parameters...):
/// no reader describes RoPE per layer (src/core/layer_types.cc).
void reject_per_layer_overrides(const ConfigRoot& r);

/// `dict` (a RoPE dict of `r`) is nested per layer type: it has keys that config.layer_types lists, or,
/// without layer_types, keys whose values are objects (src/core/layer_types.cc).
bool nested_per_layer_type(const ConfigRoot& r, const nlohmann::json& dict);

/// Throws kUnsupported when the config's RoPE parameters differ per layer type (a dict nested per layer
/// type, or Gemma 3's legacy rope_local_base_freq): one Spec cannot describe it (src/core/layer_types.cc).
void reject_per_layer_type(const ConfigRoot& r, const RopeDict& d);

/// r.root[key] as a number / an integer, else `fallback` when absent or null (kInvalidArgument naming
/// r.prefix + key for another value; src/core/layer_types.cc).
double number_or(const ConfigRoot& r, const char* key, double fallback);
int64_t integer_or(const ConfigRoot& r, const char* key, int64_t fallback);
/// The layer types the config class `cls` derives without layer_types (every n-th layer full_attention, n read
/// from the file as transformers reads it; src/core/layer_pattern.cc); empty: none.
struct ModelDefaults;  // (core/model_defaults.h)
std::vector<std::string> default_layer_types(const ConfigRoot& r, const ModelDefaults& cls);
/// A RoPE dict's type: its rope_type, else its type (strings), else "default".
std::string rope_type_in(const nlohmann::json& dict);

/// DeepSeek V4's RoPE (model_defaults.h rope_labels): each layer type's Spec from its label's dict (main or
/// compress), as wide as the rotated slice at the end of a head (src/core/rope_labels.cc).
LayerTypeSpecs label_keyed_specs(const ConfigRoot& r, const RopeDict& d, const std::string& source_name);

}  // namespace rotary::detail
