// RoPE keyed by label instead of layer type (DeepSeek V4's main / compress): config.json -> LayerTypeSpecs.
//
// transformers' DeepseekV4Config keeps two RoPE dicts, "main" (the sliding_attention layers) and "compress" (the
// compressed_sparse_attention and heavily_compressed_attention layers, and their compressors), each over
// head_dim x partial_rotary_factor channels (64 of 512) that its code rotates in interleaved pairs at the *end* of a
// head (x[..., -64:]). Each layer type's Spec is its label's, as wide as that rotated slice (head_dim = rotary_dim =
// 64): apply it to a view of the trailing channels, as DeepSeek V3's specs apply to the separate rope part.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/config_parse.h"
#include "core/messages.h"
#include "core/model_defaults.h"
#include "rotary/config.h"

namespace rotary::detail {
namespace {

using json = nlohmann::json;

[[noreturn]] void invalid(const std::string& message) { detail::invalid(kConfigWhere, message); }

constexpr const char* kSliding = "sliding_attention";
constexpr const char* kCsa = "compressed_sparse_attention";
constexpr const char* kHca = "heavily_compressed_attention";

/// The label whose RoPE a layer type reads (transformers' DeepseekV4Attention.rope_layer_type).
const char* label_of(const std::string& type) { return type == kSliding ? "main" : "compress"; }

const json* value_at(const json& obj, const char* key) {
  return has_value(obj, key) ? &obj.at(key) : nullptr;
}

/// Layer i's type, as the config class derives it: layer_types, else the legacy per-layer compress_ratios (0, 4, 128),
/// else layers 0 and 1 heavily compressed, then heavily compressed and compressed-sparse alternating (HCA, HCA, HCA,
/// CSA, HCA...); the first num_hidden_layers of them.
std::vector<std::string> label_layer_types(const ConfigRoot& r) {
  const json& root = *r.root;
  const int64_t layers = integer_or(r, "num_hidden_layers", 43);
  std::vector<std::string> out;
  if (const json* lt = value_at(root, "layer_types")) {
    if (!lt->is_array()) invalid(r.prefix + "layer_types must be a list of strings, got " + show_json(*lt));
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& t = (*lt)[i];
      const std::string field = r.prefix + "layer_types[" + std::to_string(i) + "]";
      if (!t.is_string() || (t != kSliding && t != kCsa && t != kHca))
        invalid(field + " must be one of \"" + kSliding + "\", \"" + kCsa + "\", \"" + kHca + "\" (model_type " +
                model_type_of(r) + "), got " + show_json(t));
      out.push_back(t.get<std::string>());
    }
  } else if (const json* ratios = value_at(root, "compress_ratios")) {
    if (!ratios->is_array())
      invalid(r.prefix + "compress_ratios must be a list of 0, 4 or 128, got " + show_json(*ratios));
    for (size_t i = 0; i < ratios->size(); ++i) {
      const json& v = (*ratios)[i];
      // Python's dict lookup takes 4.0 for 4, as the class's does.
      const double x = v.is_number() ? v.get<double>() : -1.0;
      const int64_t c = x == 0.0 || x == 4.0 || x == 128.0 ? static_cast<int64_t>(x) : -1;
      if (c != 0 && c != 4 && c != 128)
        invalid(r.prefix + "compress_ratios[" + std::to_string(i) + "] must be 0, 4 or 128, got " + show_json(v));
      out.push_back(c == 0 ? kSliding : c == 4 ? kCsa : kHca);
    }
  } else {
    if (layers > (int64_t(1) << 20))
      invalid(r.prefix + "num_hidden_layers must be at most 1048576, got " + std::to_string(layers));
    for (int64_t i = 0; i < layers; ++i) out.push_back(i < 2 || (i - 2) % 2 == 0 ? kHca : kCsa);
  }
  if (layers >= 0 && static_cast<int64_t>(out.size()) > layers) out.resize(static_cast<size_t>(layers));
  if (static_cast<int64_t>(out.size()) < layers)  // the class refuses it too
    invalid(r.prefix + (value_at(root, "layer_types") ? "layer_types" : "compress_ratios") +
            " must list num_hidden_layers (" + std::to_string(layers) + ") layers, got " + std::to_string(out.size()));
  return out;
}

/// The class's share of head_dim (its partial_rotary_factor after __post_init__): the top level's, else the legacy
/// qk_rope_head_dim / head_dim, else the class's 64 / 512 (model_defaults.cc).
double class_partial(const ConfigRoot& r, int64_t head_dim) {
  const double share = model_defaults(model_type_of(r)).partial_rotary_factor;
  if (value_at(*r.root, "partial_rotary_factor") != nullptr) return number_or(r, "partial_rotary_factor", share);
  if (value_at(*r.root, "qk_rope_head_dim") != nullptr) {
    const double q = number_or(r, "qk_rope_head_dim", 0.0);  // present: the fallback is not used
    if (!(q > 0 && q <= static_cast<double>(head_dim)))
      invalid(r.prefix + "qk_rope_head_dim must be in [1, head_dim " + std::to_string(head_dim) + "], got " +
              show_json(r.root->at("qk_rope_head_dim")));
    return q / static_cast<double>(head_dim);
  }
  return share;
}

/// The field class_partial reads (for messages).
std::string class_partial_field(const ConfigRoot& r) {
  const bool by_rope_head =
      value_at(*r.root, "partial_rotary_factor") == nullptr && value_at(*r.root, "qk_rope_head_dim") != nullptr;
  return r.prefix + (by_rope_head ? "qk_rope_head_dim" : "partial_rotary_factor");
}

}  // namespace

LayerTypeSpecs label_keyed_specs(const ConfigRoot& r, const RopeDict& d, const std::string& source_name) {
  const json& root = *r.root;
  LayerTypeSpecs out;
  out.nested = true;
  out.layer_types = label_layer_types(r);

  // head_dim: the file's, else the class's 512 (the class refuses a null one, as this reader does).
  if (root.contains("head_dim") && root.at("head_dim").is_null())
    invalid(r.prefix + "head_dim must be an integer (model_type " + model_type_of(r) + "), got null");
  const ModelDefaults& cls = model_defaults(model_type_of(r));
  const int64_t head_dim = integer_or(r, "head_dim", cls.head_dim);
  if (head_dim <= 0 || head_dim > (int64_t(1) << 16))
    invalid(r.prefix + "head_dim must be in [1, 65536], got " + std::to_string(head_dim));

  // The two labels' dicts: a nested {"main", "compress"} as it is; otherwise the class's conversion of a flat dict
  // (rope_scaling's YaRN goes to compress only, over compress_rope_theta, its attention factor 1 unless given; main
  // is default RoPE over rope_theta).
  const json& rp = *d.dict;
  json labels = json::object();
  std::string field_of[2];
  const bool nested = rp.contains("main") && rp.at("main").is_object() && rp.contains("compress") &&
                      rp.at("compress").is_object();
  if (nested) {
    labels["main"] = rp.at("main");
    labels["compress"] = rp.at("compress");
    field_of[0] = d.field + ".main";
    field_of[1] = d.field + ".compress";
  } else {
    const double prf = class_partial(r, head_dim);
    json compress = json::object();
    for (auto it = rp.begin(); it != rp.end(); ++it)
      if (it.key() != "main" && it.key() != "compress") compress[it.key()] = it.value();
    compress["rope_theta"] = number_or(r, "compress_rope_theta", 160000.0);
    compress["partial_rotary_factor"] = prf;
    if (!has_value(compress, "rope_type") && !has_value(compress, "type")) compress["rope_type"] = "default";
    if (rope_type_in(compress) == "yarn" && !compress.contains("attention_factor")) compress["attention_factor"] = 1.0;
    labels["main"] = {{"rope_type", "default"}, {"rope_theta", number_or(r, "rope_theta", cls.rope_theta)},
                      {"partial_rotary_factor", prf}};
    labels["compress"] = std::move(compress);
    field_of[0] = r.prefix + "rope_theta";
    field_of[1] = d.field;
  }

  // Each label's Spec over its rotated slice: head_dim x its partial_rotary_factor channels, all rotated.
  Spec specs[2];
  const char* names[2] = {"main", "compress"};
  for (int i = 0; i < 2; ++i) {
    json dict = labels.at(names[i]);
    std::string pf_field = nested ? field_of[i] + ".partial_rotary_factor" : class_partial_field(r);
    // A nested dict without a factor: the top level's (transformers sets it as the dict's default); else, where
    // the label's type is not default, the class's share (YaRN and the other types' functions standardize the dicts
    // with it first); else the whole head (the default-type function reads 1.0). transformers fills the dicts in
    // their order, main then compress (its config class orders them so), so a default-type compress after a
    // non-default main gets the class's share too.
    double prf = 1.0;
    if (const json* v = value_at(dict, "partial_rotary_factor")) {
      if (!v->is_number()) invalid(pf_field + " must be a number, got " + show_json(*v));
      prf = v->get<double>();
    } else if (value_at(root, "partial_rotary_factor") != nullptr || rope_type_in(dict) != "default" ||
               (i == 1 && rope_type_in(labels.at("main")) != "default")) {
      prf = class_partial(r, head_dim);
      pf_field = class_partial_field(r);
    }
    if (!std::isfinite(prf) || prf <= 0 || prf > 1)
      invalid(pf_field + " must be in (0, 1], got " + show_json(json(prf)));
    const auto width = static_cast<int64_t>(static_cast<double>(head_dim) * prf);
    if (width < 2 || width % 2 != 0)
      invalid(pf_field + " must give an even number of rotated channels, got head_dim " + std::to_string(head_dim) +
              " x " + show_json(json(prf)) + " = " + std::to_string(width));
    dict["partial_rotary_factor"] = 1.0;  // the Spec spans the rotated slice only
    json own = root;  // the slice's width as head_dim; nothing else may narrow it
    own["head_dim"] = width;
    if (!has_value(own, "max_position_embeddings")) own["max_position_embeddings"] = 1048576;  // the class's
    for (const char* key : {"qk_rope_head_dim", "partial_rotary_factor", "rotary_dim", "rope_interleave"})
      own.erase(key);
    ConfigRoot lr = r;
    lr.root = &own;
    const std::string name = source_name + "#" + names[i];
    specs[i] = normalized_in(parse_spec(lr, {&dict, field_of[i], true}, name), name);
  }
  for (const char* type : {kCsa, kHca, kSliding})
    out.by_type.push_back({type, specs[std::string(label_of(type)) == "main" ? 0 : 1]});
  return out;
}

}  // namespace rotary::detail
