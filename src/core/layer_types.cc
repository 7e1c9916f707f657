// RoPE per layer type (v5 nested rope_parameters, Gemma 3's conversion, class dicts): config.json -> LayerTypeSpecs.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/config_parse.h"
#include "core/messages.h"
#include "core/model_defaults.h"
#include "rotary/config.h"

namespace rotary {
namespace {

using json = nlohmann::json;
using detail::has_value;
using detail::kConfigWhere;
using detail::integer_or;
using detail::number_or;

[[noreturn]] void invalid(const std::string& message) { detail::invalid(kConfigWhere, message); }

/// config.layer_types (empty if absent or null); must be a list of strings.
std::vector<std::string> read_layer_types(const detail::ConfigRoot& r) {
  std::vector<std::string> out;
  const json& root = *r.root;
  if (!has_value(root, "layer_types")) return out;
  const json& v = root.at("layer_types");
  const std::string field = r.prefix + "layer_types";
  if (!v.is_array()) invalid(field + " must be a list of strings, got " + detail::show_json(v));
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) invalid(field + "[" + std::to_string(i) + "] must be a string, got " + detail::show_json(v[i]));
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

/// The keys of `dict` that are layer types: those layer_types lists (HF nested_rope_parameter_keys), or,
/// without layer_types, those whose values are objects (a flat RoPE dict holds none). Sorted (json order).
std::vector<std::string> nested_keys(const json& dict, const std::vector<std::string>& layer_types) {
  std::vector<std::string> keys;
  for (auto it = dict.begin(); it != dict.end(); ++it) {
    const bool listed = std::find(layer_types.begin(), layer_types.end(), it.key()) != layer_types.end();
    if (layer_types.empty() ? it.value().is_object() : listed) keys.push_back(it.key());
  }
  return keys;
}

/// A rope dict that a class filling each layer type's entry (NeoMME's convert_rope_params_to_dict) reads as nested
/// although nested_keys finds no key among the layer types: empty, or keyed by one of the class's types that no layer
/// uses.
bool class_fills(const detail::ModelDefaults& cls, const std::string& type) {
  return cls.class_dict_fills_entries && cls.rope_dict != nullptr && cls.rope_dict->contains(type);
}

bool class_keyed(const detail::ModelDefaults& cls, const json& dict) {
  if (!cls.class_dict_fills_entries || cls.rope_dict == nullptr || !dict.is_object()) return false;
  if (dict.empty()) return true;
  for (auto it = dict.begin(); it != dict.end(); ++it)
    if (class_fills(cls, it.key())) return true;
  return false;
}

/// Adds `type` to `types` unless it is there.
void include(std::vector<std::string>& types, const std::string& type) {
  if (std::find(types.begin(), types.end(), type) == types.end()) types.push_back(type);
}

/// The config (its text part's model_type, or the whole document's) is of that model.
bool model_is(const detail::ConfigRoot& r, const char* text_type, const char* doc_type) {
  return detail::type_of(*r.root) == text_type || detail::type_of(*r.doc) == doc_type;
}

/// The config's model_type's class defaults (model_defaults.cc).
const detail::ModelDefaults& class_of(const detail::ConfigRoot& r) { return detail::model_defaults(detail::model_type_of(r)); }

/// A class converting its RoPE fields as Gemma3TextConfig does (Gemma 3 / 3n, T5Gemma 2, OLMo 3: model_defaults.h's
/// local_theta_key), nested or not; or, for another model, a flat rope dict beside a top-level rope_local_base_freq
/// (Gemma 3's legacy form, read with Gemma 3's defaults). Null: neither.
const detail::ModelDefaults* gemma3_style(const detail::ConfigRoot& r, const std::vector<std::string>& keys) {
  const detail::ModelDefaults& cls = class_of(r);
  if (cls.local_theta_key != nullptr) return &cls;
  if (keys.empty() && has_value(*r.root, "rope_local_base_freq")) return &detail::model_defaults("gemma3_text");
  return nullptr;
}

/// ModernBERT's config.json form (its Hub files): global_rope_theta / local_rope_theta for full and sliding layers,
/// every global_attn_every_n_layers-th layer full (transformers' ModernBertConfig converts it so).
bool legacy_modernbert(const detail::ConfigRoot& r, const std::vector<std::string>& keys) {
  return keys.empty() && model_is(r, "modernbert", "modernbert");
}

/// The class's conversion for a Gemma 3-style class `g` (Gemma3TextConfig.convert_rope_params_to_dict): a nested
/// rope_parameters kept, a flat one dropped; full_attention (null or absent: {"rope_type": "default"}) updated with
/// rope_scaling, its base defaulting to rope_theta, else the class's; sliding_attention's to g's local key, else the
/// class's local base.
json gemma3_conversion(const detail::ConfigRoot& r, const detail::ModelDefaults& g, const detail::RopeDict& d, bool nested) {
  const json& root = *r.root;
  json conv = nested ? *d.dict : json::object();
  json& full = conv["full_attention"];
  if (full.is_null()) full = {{"rope_type", "default"}};
  if (full.is_object() && has_value(root, "rope_scaling") && root.at("rope_scaling").is_object())
    for (auto it = root.at("rope_scaling").begin(); it != root.at("rope_scaling").end(); ++it) full[it.key()] = it.value();
  if (full.is_object() && !has_value(full, "rope_theta")) full["rope_theta"] = number_or(r, "rope_theta", g.rope_theta);
  json& sliding = conv["sliding_attention"];
  if (sliding.is_null()) sliding = {{"rope_type", "default"}};
  if (sliding.is_object() && !has_value(sliding, "rope_theta"))
    sliding["rope_theta"] = *g.local_theta_key ? number_or(r, g.local_theta_key, g.local_rope_theta) : g.local_rope_theta;
  return conv;
}

/// per_layer_config keys (transformers' heterogeneous configs) that change a layer's RoPE.
constexpr const char* kPerLayerRopeKeys[] = {"head_dim", "rope_parameters", "rope_scaling", "rope_theta",
                                             "partial_rotary_factor", "max_position_embeddings", "qk_rope_head_dim"};

/// A per_layer_config key as a layer index ("5", "05"), or -1.
int64_t layer_index(const std::string& key) {
  if (key.empty() || key.size() > 9) return -1;
  int64_t v = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

/// The head_dim each layer type's layers take instead of the top level's, for the classes whose RoPE reads a config
/// per layer type (Gemma 4's: transformers' per_layer_config[layer_type], which needs a type's layers to agree):
/// per_layer_config's (an entry equal to the top level's head_dim is none, as transformers drops it), else, without
/// the key, the class's full-attention one (a top-level global_head_dim, else 512). Other RoPE keys per layer, and any
/// for other classes (whose transformers config refuses a per-layer head_dim), are refused naming the entry; entries
/// without RoPE keys are not read.
std::vector<std::pair<std::string, int64_t>> head_dims_by_type(const detail::ConfigRoot& r,
                                                               const std::vector<std::string>& types,
                                                               const detail::ModelDefaults& cls) {
  std::vector<std::pair<std::string, int64_t>> out;
  const json& root = *r.root;
  const std::string field = r.prefix + "per_layer_config";
  if (!root.contains("per_layer_config")) {
    if (cls.full_head_dim > 0 && std::find(types.begin(), types.end(), "full_attention") != types.end()) {
      const int64_t g = integer_or(r, "global_head_dim", cls.full_head_dim);
      if (g <= 0) invalid(r.prefix + "global_head_dim must be > 0, got " + std::to_string(g));
      out.emplace_back("full_attention", g);
    }
    return out;
  }
  if (root.at("per_layer_config").is_null()) return out;  // given: the class builds no overrides
  const int64_t top = integer_or(r, "head_dim", cls.head_dim);
  const json& per_layer = root.at("per_layer_config");
  if (!per_layer.is_object()) invalid(field + " must be an object, got " + detail::show_json(per_layer));
  std::vector<int64_t> head(types.size(), 0);  // per layer: its head_dim override (0: none)
  for (auto it = per_layer.begin(); it != per_layer.end(); ++it) {
    const std::string entry = field + "." + detail::shown_name(it.key());
    if (!it.value().is_object() ||
        std::none_of(std::begin(kPerLayerRopeKeys), std::end(kPerLayerRopeKeys),
                     [&](const char* k) { return it.value().contains(k); }))
      continue;
    for (const char* key : kPerLayerRopeKeys)
      if ((std::string_view(key) != "head_dim" || cls.full_head_dim == 0) && it.value().contains(key))
        fail(Error::Kind::kUnsupported, kConfigWhere,
             entry + "." + key + " gives that layer its own RoPE input: rotary reads a layer's RoPE from its layer "
                 "type's entry of rope_parameters, and a head_dim per layer only for the classes whose RoPE reads "
                 "one per layer type (Gemma 4's; transformers refuses it for model_type " +
                 quote_value(detail::model_type_of(r)) + "), got " + detail::show_json(it.value().at(key)));
    const int64_t i = layer_index(it.key());
    if (i < 0 || i >= static_cast<int64_t>(types.size()))
      invalid(field + " keys must be layer indices below the " + std::to_string(types.size()) +
              " entries of layer_types, got " + quote_value(it.key()));
    const json& v = it.value().at("head_dim");
    if (!v.is_number_integer() || v.get<int64_t>() <= 0)
      invalid(entry + ".head_dim must be a positive integer, got " + detail::show_json(v));
    if (v.get<int64_t>() != top) head[static_cast<size_t>(i)] = v.get<int64_t>();
  }
  std::map<std::string, size_t> first_of;  // each type's first layer (a file may list many layers)
  for (size_t i = 0; i < types.size(); ++i) {
    const size_t first = first_of.emplace(types[i], i).first->second;
    auto shown = [&](size_t j) { return head[j] ? std::to_string(head[j]) : std::string("the top level's"); };
    if (head[i] != head[first])
      invalid(field + ": layers " + std::to_string(first) + " and " + std::to_string(i) + " are both " +
              quote_value(types[i]) + " but take head_dim " + shown(first) + " and " + shown(i) +
              ": rotary reads one RoPE per layer type, as transformers' per_layer_config[layer_type] does");
    if (first == i && head[i] != 0) out.emplace_back(types[i], head[i]);
  }
  return out;
}

}  // namespace

namespace detail {

double number_or(const ConfigRoot& r, const char* key, double fallback) {
  if (!has_value(*r.root, key)) return fallback;
  const json& v = r.root->at(key);
  if (!v.is_number()) invalid(kConfigWhere, r.prefix + key + " must be a number, got " + show_json(v));
  return v.get<double>();
}

int64_t integer_or(const ConfigRoot& r, const char* key, int64_t fallback) {
  if (!has_value(*r.root, key)) return fallback;
  const json& v = r.root->at(key);
  if (!v.is_number_integer()) invalid(kConfigWhere, r.prefix + key + " must be an integer, got " + show_json(v));
  return v.get<int64_t>();
}

std::string rope_type_in(const json& dict) {
  for (const char* key : {"rope_type", "type"})
    if (has_value(dict, key) && dict.at(key).is_string()) return dict.at(key).get<std::string>();
  return "default";
}

void reject_per_layer_overrides(const ConfigRoot& r) {
  const json& root = *r.root;
  if (!root.contains("per_layer_config") || !root.at("per_layer_config").is_object()) return;
  const json& per_layer = root.at("per_layer_config");
  for (auto layer = per_layer.begin(); layer != per_layer.end(); ++layer) {
    if (!layer.value().is_object()) continue;
    for (const char* key : kPerLayerRopeKeys)
      if (layer.value().contains(key))
        fail(Error::Kind::kUnsupported, kConfigWhere,
             r.prefix + "per_layer_config." + shown_name(layer.key()) + "." + key +
                 " gives that layer its own RoPE input (Gemma 4's full-attention head_dim): one Spec cannot describe "
                 "it; read it per layer type (C++ layer_type_specs_from_hf_config_json, C "
                 "rotary_layer_specs_from_config_json, Python rotary.LayerTypeSpecs.from_hf_config, CLI --layer-type), "
                 "got " + show_json(layer.value().at(key)));
  }
}

bool nested_per_layer_type(const ConfigRoot& r, const json& dict) {
  return !nested_keys(dict, read_layer_types(r)).empty();
}

void reject_per_layer_type(const ConfigRoot& r, const RopeDict& d) {
  const ModelDefaults& cls = class_of(r);
  if (cls.rope_labels)
    fail(Error::Kind::kUnsupported, kConfigWhere,
         "model_type " + model_type_of(r) + ": its RoPE is keyed by label (main: sliding_attention layers; compress: "
             "the compressed layers and their compressors, over compress_rope_theta): one Spec cannot describe it; "
             "read it per layer type (C++ layer_type_specs_from_hf_config_json, C rotary_layer_specs_from_config_json, "
             "Python rotary.LayerTypeSpecs.from_hf_config, CLI --layer-type)");
  std::vector<std::string> keys = nested_keys(*d.dict, read_layer_types(r));
  if (keys.empty() && class_keyed(cls, *d.dict))  // (NeoMME: its class gives each of its types an entry)
    for (auto it = cls.rope_dict->begin(); it != cls.rope_dict->end(); ++it) keys.push_back(it.key());
  if (!keys.empty()) {
    const std::string names = shown_names(keys, 2);  // the input's keys, and there may be many
    fail(Error::Kind::kUnsupported, kConfigWhere,
         d.field + " is nested per layer type (" + names +
             "): one Spec cannot describe it; read it per layer type (C++ layer_type_specs_from_hf_config_json, "
             "C rotary_layer_specs_from_config_json, Python rotary.LayerTypeSpecs.from_hf_config, CLI --layer-type)");
  }
  const ModelDefaults* g = gemma3_style(r, keys);
  if (g != nullptr && *g->local_theta_key == '\0')
    fail(Error::Kind::kUnsupported, kConfigWhere,
         "model_type " + model_type_of(r) + ": its config class gives full_attention and sliding_attention layers "
             "their own RoPE (a rope_scaling applies to full_attention only): one Spec cannot describe it; read it per "
             "layer type (C++ layer_type_specs_from_hf_config_json, C rotary_layer_specs_from_config_json, Python "
             "rotary.LayerTypeSpecs.from_hf_config, CLI --layer-type)");
  if (g != nullptr) {
    const bool given = has_value(*r.root, g->local_theta_key);
    fail(Error::Kind::kUnsupported, kConfigWhere,
         r.prefix + g->local_theta_key + " gives sliding-window layers their own base (Gemma 3): one Spec cannot "
             "describe it; read it per layer type (C++ layer_type_specs_from_hf_config_json, C "
             "rotary_layer_specs_from_config_json, Python rotary.LayerTypeSpecs.from_hf_config, CLI --layer-type), "
             "got " + g->local_theta_key + " " +
             (given ? show_json(r.root->at(g->local_theta_key)) : "absent (model_type " + model_type_of(r) + ": " +
                                                                       show_json(json(g->local_rope_theta)) + ")"));
  }
  if (keys.empty() && cls.flat_rope_type != nullptr)
    fail(Error::Kind::kUnsupported, kConfigWhere,
         "model_type " + model_type_of(r) + ": its config class makes a RoPE dict not nested per layer type (" +
             (r.root->contains("rope_parameters") || r.root->contains("rope_scaling") ? d.field : r.prefix + "rope_theta") +
             ") the " + cls.flat_rope_type + " layers' RoPE and gives " + cls.flat_no_rope_type +
             " layers none: one Spec cannot describe it; read "
             "it per layer type (C++ layer_type_specs_from_hf_config_json, C rotary_layer_specs_from_config_json, "
             "Python rotary.LayerTypeSpecs.from_hf_config, CLI --layer-type)");
  if (legacy_modernbert(r, keys))
    fail(Error::Kind::kUnsupported, kConfigWhere,
         r.prefix + "global_rope_theta / local_rope_theta give full and sliding-window layers their own base "
             "(ModernBERT): one Spec cannot describe it; read it per layer type (C++ "
             "layer_type_specs_from_hf_config_json, C rotary_layer_specs_from_config_json, Python "
             "rotary.LayerTypeSpecs.from_hf_config, CLI --layer-type)");
}

}  // namespace detail

const Spec& LayerTypeSpecs::spec_for(std::string_view layer_type) const {
  const LayerTypeSpec* hit = nullptr;
  for (const auto& e : by_type)
    if (e.layer_type == layer_type) hit = &e;
  if (hit == nullptr && !nested && by_type.size() == 1 && by_type[0].layer_type.empty()) hit = &by_type[0];
  if (hit == nullptr) invalid("layer_type must be one of " + type_names() + ", got " + quote_value(layer_type));
  if (!hit->spec)
    invalid("layer_type " + quote_value(layer_type) + " has no RoPE (its rope_parameters entry is null), got a "
            "request for its Spec");
  return *hit->spec;
}

const Spec& LayerTypeSpecs::spec_for_layer(int64_t layer) const {
  if (layer < 0) invalid("layer must be >= 0, got " + std::to_string(layer));
  if (!nested && layer_types.empty() && !by_type.empty()) return spec_for(by_type.front().layer_type);
  if (layer >= static_cast<int64_t>(layer_types.size()))
    invalid("layer must be < the number of layer_types " + std::to_string(layer_types.size()) + ", got " +
            std::to_string(layer));
  return spec_for(layer_types[static_cast<size_t>(layer)]);
}

std::string LayerTypeSpecs::type_names() const {
  std::vector<std::string> names;
  for (const auto& e : by_type) names.push_back(e.layer_type);
  return detail::shown_names(names, 4);  // an empty type shows as ""
}

LayerTypeSpecs layer_type_specs_from_hf_config_json(std::string_view json_text, const std::string& source_name) {
  const json doc = detail::parse_config_text(json_text, source_name);
  const detail::ConfigRoot r = detail::config_root(doc);
  const detail::RopeDict d = detail::rope_dict(r);
  LayerTypeSpecs out;
  out.layer_types = read_layer_types(r);
  const detail::ModelDefaults& cls = class_of(r);
  if (cls.rope_labels) return detail::label_keyed_specs(r, d, source_name);  // DeepSeek V4
  if (cls.forces_last_full && !out.layer_types.empty()) out.layer_types.back() = "full_attention";  // as Gemma 4's class
  const std::vector<std::string> keys = nested_keys(*d.dict, out.layer_types);
  // Each type's dict, read once layer_types are known (a type's own head_dim may come from per_layer_config).
  struct Entry {
    std::string type, field;
    json dict;
    bool layer_entry = true;  ///< an entry of a nested dict (a flat one read per type: false)
  };
  std::vector<Entry> entries;
  // The nested dict's "truncate" key beside its types, which transformers' YaRN reads for every entry
  // (RopeDict.nested_truncate; set before any entry is added).
  bool nested_truncate = true;
  auto truncate_beside = [](const json& nested) {
    return !nested.contains("truncate") || detail::truthy(nested.at("truncate"));
  };
  std::vector<std::pair<std::string, int64_t>> heads;  // head_dims_by_type, once layer_types are final
  bool heads_read = false;
  auto add = [&](const std::string& type, json dict, const std::string& field) {
    if (dict.is_null() && class_fills(cls, type))  // (transformers' strict rope_parameters field refuses a null entry)
      invalid(field + " must be an object (" + detail::model_type_of(r) + "'s class fills each layer type's entry), "
                      "got null");
    if (dict.is_null()) {
      out.by_type.push_back({type, std::nullopt});
      return;
    }
    if (!dict.is_object()) invalid(field + " must be an object or null, got " + detail::show_json(dict));
    if (class_fills(cls, type)) {  // (NeoMME: its convert_rope_params_to_dict fills each of its types' entry)
      // NeoMME's convert_rope_params_to_dict: setdefault rope_theta (the top level's, else the class's) and the rest.
      const bool own_theta = d.dict != cls.rope_dict && has_value(dict, "rope_theta");
      for (auto it = cls.rope_dict->at(type).begin(); it != cls.rope_dict->at(type).end(); ++it)
        if (!dict.contains(it.key())) dict[it.key()] = it.value();
      if (!own_theta && has_value(*r.root, "rope_theta")) dict["rope_theta"] = r.root->at("rope_theta");
    }
    out.by_type.push_back({type, std::nullopt});
    entries.push_back({type, field, std::move(dict), true});
  };
  if (const detail::ModelDefaults* g = gemma3_style(r, keys)) {
    // transformers v5 (Gemma3TextConfig.convert_rope_params_to_dict and its copies): gemma3_conversion.
    out.nested = true;
    const json conv = gemma3_conversion(r, *g, d, !keys.empty());
    nested_truncate = truncate_beside(conv);
    std::vector<std::string> types = nested_keys(conv, out.layer_types);
    for (const char* t : {"full_attention", "sliding_attention"}) include(types, t);
    std::sort(types.begin(), types.end());
    for (const auto& t : types) {
      const bool given = !keys.empty() && d.dict->contains(t);
      const std::string field = given                  ? d.field + "." + detail::shown_name(t)
                                : t == "full_attention" ? r.prefix + "rope_scaling"
                                                        : r.prefix + (*g->local_theta_key ? g->local_theta_key : "rope_theta");
      add(t, conv.at(t), field);
    }
    if (out.layer_types.empty()) out.layer_types = detail::default_layer_types(r, *g);
  } else if (!keys.empty() || class_keyed(cls, *d.dict)) {
    // (NeoMME: an empty dict too, or one keyed by its types none of the layers use; each type's entry filled below)
    out.nested = true;
    nested_truncate = cls.drops_keys_beside_types || truncate_beside(*d.dict);
    std::vector<std::string> types = keys;
    if (out.layer_types.empty() && (legacy_modernbert(r, {}) || cls.full_every > 0)) {
      out.layer_types = detail::default_layer_types(r, cls);  // what the config class derives (ModernBERT, Laguna...)
      // A null entry for a derived type (ERGO's "full_attention": null) is that type's "no RoPE", as when the file's
      // layer_types lists it (nested_keys keeps only objects without layer_types).
      types = nested_keys(*d.dict, out.layer_types);
      for (const auto& k : keys) include(types, k);
    }
    const bool modernbert = model_is(r, "modernbert", "modernbert");
    if (modernbert)  // (ModernBertConfig.convert_rope_params_to_dict: both types, below)
      for (const char* t : {"full_attention", "sliding_attention"}) include(types, t);
    for (const auto& t : out.layer_types)  // (NeoMMEConfig.convert_rope_params_to_dict: each of its layer types)
      if (class_fills(cls, t)) include(types, t);
    for (auto it = d.dict->begin(); it != d.dict->end(); ++it)  // (and keeps the entries of its other types)
      if (class_fills(cls, it.key())) include(types, it.key());
    std::sort(types.begin(), types.end());  // json order
    for (const auto& k : types) {
      json entry = d.dict->contains(k) ? d.dict->at(k) : class_fills(cls, k) ? json::object() : json();
      const std::string field = d.field + "." + detail::shown_name(k);
      if (modernbert && (k == "full_attention" || k == "sliding_attention")) {
        // transformers v5 (ModernBertConfig): a missing or null entry of the two types is {"rope_type": "default"},
        // and each one's rope_theta defaults to the file's global_rope_theta / local_rope_theta (160000 / 10000).
        if (entry.is_null()) entry = json{{"rope_type", "default"}};
        if (entry.is_object() && !has_value(entry, "rope_theta"))
          entry["rope_theta"] = k == "full_attention" ? number_or(r, "global_rope_theta", 160000.0)
                                                      : number_or(r, "local_rope_theta", 10000.0);
      }
      add(k, std::move(entry), field);
    }
  } else if (cls.flat_rope_type != nullptr) {
    // transformers v5 (ErgoConfig.convert_rope_params_to_dict): the flat dict (none: the top-level rope_theta, else
    // the class's base) is flat_rope_type's entry, and flat_no_rope_type's layers have no RoPE. It is read as a flat
    // dict (standardised before it is nested), but its own `truncate` is not: YaRN then reads the nested dict's.
    out.nested = true;
    const bool rope_first = std::string_view(cls.flat_rope_type) < cls.flat_no_rope_type;  // types in sorted order
    out.by_type.push_back({rope_first ? cls.flat_rope_type : cls.flat_no_rope_type, std::nullopt});
    out.by_type.push_back({rope_first ? cls.flat_no_rope_type : cls.flat_rope_type, std::nullopt});
    json flat = *d.dict;
    flat.erase("truncate");
    entries.push_back({cls.flat_rope_type, d.field, std::move(flat), d.layer_entry});
    if (out.layer_types.empty()) out.layer_types = detail::default_layer_types(r, cls);
  } else if (legacy_modernbert(r, keys)) {
    // transformers v5 (ModernBertConfig): a flat dict (rope_scaling) goes to both types, whose bases default to
    // global_rope_theta (160000) and local_rope_theta (10000).
    out.nested = true;
    json full = *d.dict, sliding = *d.dict;
    if (!has_value(full, "rope_theta")) full["rope_theta"] = number_or(r, "global_rope_theta", 160000.0);
    if (!has_value(sliding, "rope_theta")) sliding["rope_theta"] = number_or(r, "local_rope_theta", 10000.0);
    add("full_attention", full, d.field);
    add("sliding_attention", sliding, d.field);
    if (out.layer_types.empty()) out.layer_types = detail::default_layer_types(r, cls);
  } else {
    const Spec shared = detail::normalized_in(detail::parse_spec(r, d, source_name), source_name);
    heads = head_dims_by_type(r, out.layer_types, cls);  // layer_types are final here
    heads_read = true;
    const bool own_heads = !heads.empty();
    for (const auto& t : out.layer_types)
      if (std::none_of(out.by_type.begin(), out.by_type.end(), [&](const LayerTypeSpec& e) { return e.layer_type == t; })) {
        out.by_type.push_back({t, shared});
        if (own_heads) entries.push_back({t, d.field, *d.dict, d.layer_entry});  // the flat dict, read per type
      }
    if (out.by_type.empty()) out.by_type.push_back({"", shared});
  }
  if (!heads_read) heads = head_dims_by_type(r, out.layer_types, cls);
  if (cls.default_type_partial > 0 && has_value(*r.root, "partial_rotary_factor")) {
    // MiMo-V2-Flash: its class leaves a top-level factor out of the entries, but its RotaryEmbedding computes the
    // types in sorted order, and a non-default type's function first copies the factor into every entry
    // (standardize_rope_params): the entries from that type on see it.
    bool copied = false;
    for (Entry& e : entries) {  // sorted by type
      copied = copied || detail::rope_type_in(e.dict) != "default";
      if (copied && !e.dict.contains("partial_rotary_factor"))
        e.dict["partial_rotary_factor"] = r.root->at("partial_rotary_factor");
    }
  }
  for (const Entry& e : entries) {
    const std::string name = source_name + "#" + detail::shown_name(e.type);
    json own_root;  // the root with this type's head_dim, where it has its own
    detail::ConfigRoot tr = r;
    for (const auto& [type, head_dim] : heads)
      if (type == e.type) {
        own_root = *r.root;
        own_root["head_dim"] = head_dim;
        tr.root = &own_root;
      }
    // parse_spec reads the default type of a model whose default frequencies span the whole head (Gemma 3) so.
    for (LayerTypeSpec& t : out.by_type)
      if (t.layer_type == e.type)
        t.spec = detail::normalized_in(
            detail::parse_spec(tr, {&e.dict, e.field, e.layer_entry, nested_truncate}, name), name);
  }
  return out;
}

LayerTypeSpecs layer_type_specs_from_hf_config_file(const std::string& path) {
  return layer_type_specs_from_hf_config_json(detail::read_config_file(path), path);
}

}  // namespace rotary
