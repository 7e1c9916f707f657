// Hugging Face config.json text -> Spec: reads v4/v5 and legacy GPT-NeoX/GPT-J keys (spec_json.cc writes it).
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/config_parse.h"
#include "core/model_defaults.h"
#include "rotary/config.h"

namespace rotary {
namespace {

using json = nlohmann::json;
using detail::has_value;
using detail::truthy;
using detail::kConfigWhere;
constexpr const char* kWhere = kConfigWhere;

[[noreturn]] void invalid(const std::string& message) { fail(Error::Kind::kInvalidArgument, kWhere, message); }

// Characters of a bad value quoted in a message.
constexpr std::size_t kShowChars = 60;

/// A JSON string literal of `text`'s first `max_bytes` bytes, in ASCII (\uXXXX escapes): a cut through a
/// multi-byte UTF-8 character becomes U+FFFD instead of making the dump throw, and the result may be cut again
/// anywhere without leaving invalid UTF-8 in a message.
std::string ascii_literal(const std::string& text, std::size_t max_bytes) {
  return json(text.substr(0, max_bytes)).dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
}

/// Renders `v` as JSON into `out`, stopping once `out` holds more than `budget` characters: the cost is
/// bounded by the budget (and the depth, bounded by check_depth), not by the size of the value.
void render(const json& v, std::string& out, std::size_t budget) {
  if (out.size() > budget) return;
  if (v.is_array() || v.is_object()) {
    const bool obj = v.is_object();
    out += obj ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() <= budget; ++it) {
      if (!first) out += ',';
      first = false;
      if (obj) out += ascii_literal(it.key(), budget + 1) + ':';
      render(it.value(), out, budget);
    }
    out += obj ? '}' : ']';
    return;
  }
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    out += ascii_literal(str, budget + 1);  // a long string is cut below anyway
    return;
  }
  out += v.dump();  // numbers, booleans, null: short
}

/// Short JSON rendering of a bad value for messages (strings keep their quotes), at most ~kShowChars.
std::string show(const json& v) {
  std::string s;
  render(v, s, kShowChars);
  if (s.size() <= kShowChars) return s;
  // Cut between characters of the rendering: never inside an escape (\n, \", \uXXXX, nor between the two
  // halves of a surrogate pair \ud83d\ude00), which render() writes in lower-case hex.
  std::size_t cut = 0;
  while (cut < s.size()) {
    std::size_t n = 1;
    if (s[cut] == '\\' && cut + 1 < s.size()) {
      n = s[cut + 1] == 'u' ? 6 : 2;
      const bool high = n == 6 && cut + 12 <= s.size() && s[cut + 2] == 'd' && std::strchr("89ab", s[cut + 3]);
      if (high && s[cut + 6] == '\\' && s[cut + 7] == 'u') n = 12;
    }
    if (cut + n > kShowChars - 3) break;
    cut += n;
  }
  return s.substr(0, cut) + "...";
}

/// Typed access to one JSON object; every error names `prefix + key`. A null value counts as absent
/// (HF treats `None` like a missing key for every optional RoPE field).
class Fields {
 public:
  Fields(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  std::string field(const std::string& key) const { return prefix_ + key; }
  bool has(const std::string& key) const { return has_value(obj_, key); }
  bool has_key(const std::string& key) const { return obj_.contains(key); }

  std::optional<double> number(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    const json& v = obj_.at(key);
    if (!v.is_number()) invalid(field(key) + " must be a number, got " + show(v));
    return v.get<double>();
  }

  std::optional<int64_t> integer(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    const json& v = obj_.at(key);
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
    }
    invalid(field(key) + " must be an integer, got " + show(v));
  }

  std::optional<bool> boolean(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    const json& v = obj_.at(key);
    if (!v.is_boolean()) invalid(field(key) + " must be true or false, got " + show(v));
    return v.get<bool>();
  }

  std::optional<std::string> string(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    const json& v = obj_.at(key);
    if (!v.is_string()) invalid(field(key) + " must be a string, got " + show(v));
    return v.get<std::string>();
  }

  std::optional<std::vector<double>> numbers(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    const json& v = obj_.at(key);
    if (!v.is_array()) invalid(field(key) + " must be a list of numbers, got " + show(v));
    std::vector<double> out;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number())
        invalid(field(key) + "[" + std::to_string(i) + "] must be a number, got " + show(v[i]));
      out.push_back(v[i].get<double>());
    }
    return out;
  }

  std::optional<std::vector<int64_t>> integers(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    const json& v = obj_.at(key);
    if (!v.is_array()) invalid(field(key) + " must be a list of integers, got " + show(v));
    std::vector<int64_t> out;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer())
        invalid(field(key) + "[" + std::to_string(i) + "] must be an integer, got " + show(v[i]));
      out.push_back(v[i].get<int64_t>());
    }
    return out;
  }

  /// A required value: error naming the field and the rope_type that needs it.
  template <typename T>
  T require(const std::optional<T>& v, const std::string& key, const std::string& rope_type) const {
    if (!v) invalid(field(key) + " is required for rope_type " + rope_type + ", but it is missing");
    return *v;
  }

 private:
  const json& obj_;
  std::string prefix_;
};

RopeType rope_type_from(const std::string& name, const std::string& field) {
  for (int i = 0; i <= static_cast<int>(RopeType::kNtk); ++i) {
    auto t = static_cast<RopeType>(i);
    if (name == rope_type_name(t)) return t;
  }
  invalid(field + " must be one of default, linear, dynamic, yarn, longrope, llama3, proportional, ntk (or mrope), got " +
          quote_value(name));
}

}  // namespace

namespace detail {

// The dict of a config without rope_parameters / rope_scaling. At namespace scope, not a function-local static:
// the latter's init guard is a lock that fork() could hold.
const json kEmptyRopeDict = json::object();

RopeDict rope_dict(const ConfigRoot& r) {
  const Fields top(*r.root, r.prefix);
  auto dict = [&](const char* key) {
    const json& v = r.root->at(key);
    if (!v.is_object()) invalid(top.field(key) + " must be an object, got " + show(v));
    return RopeDict{&v, top.field(key)};
  };
  // transformers' convert_rope_params_to_dict takes `rope_scaling or rope_parameters`: a file with both (a v4
  // dict left beside a v5 one) uses rope_scaling unless it is falsy ({}, [], false...). A rope_parameters
  // nested per layer type is kept, and rope_scaling then ignored (models with layer types merge the two each
  // their own way; layer_types.cc follows Gemma 3's). An empty rope_parameters is not absent: default RoPE.
  const bool scaling = r.root->contains("rope_scaling") && truthy(r.root->at("rope_scaling"));
  if (scaling && !(top.has("rope_parameters") && nested_per_layer_type(r, r.root->at("rope_parameters"))))
    return dict("rope_scaling");
  if (top.has("rope_parameters")) return dict("rope_parameters");
  // Neither: the config class's own dict (gpt-oss's yarn, Apertus's llama3), else the default type's.
  const json* class_dict = model_defaults(model_type_of(r)).rope_dict;
  return RopeDict{class_dict ? class_dict : &kEmptyRopeDict, top.field(class_dict ? "rope_parameters" : "rope_scaling")};
}

std::string model_type_of(const ConfigRoot& r) {
  if (auto t = Fields(*r.root, r.prefix).string("model_type")) return *t;
  // A nested object without one takes its nearest container's (the class defaults of a composite's text part
  // are listed under the composite's model_type too: model_defaults.cc).
  for (auto it = r.parents.rbegin(); it != r.parents.rend(); ++it)
    if (auto t = Fields(**it, "").string("model_type")) return *t;
  return "";
}

std::string show_json(const json& v) { return show(v); }

Spec normalized_in(const Spec& spec, const std::string& source_name) {
  try {
    return spec.normalized();
  } catch (const Error& e) {
    throw Error(e.kind(), std::string(e.what()) + " (in " + source_name + ")");
  }
}

Spec parse_spec(const ConfigRoot& r, const RopeDict& d, const std::string& source) {
  const Fields top(*r.root, r.prefix);

  Spec spec;
  spec.name = source;
  const std::string model_type = model_type_of(r);
  // What the model's transformers config class assumes for the fields the file leaves out.
  const ModelDefaults& cls = model_defaults(model_type);

  // A refused composite (SAM 3, CLIP) is refused as itself, outermost first, not as the text part it holds.
  for (const json* parent : r.parents)
    if (auto t = Fields(*parent, "").string("model_type"))
      if (const char* why = model_defaults(*t).unsupported) invalid("model_type " + *t + ": " + why);
  if (cls.unsupported != nullptr) invalid("model_type " + model_type + ": " + cls.unsupported);
  if (!cls.refused_if_key.empty()) {
    const std::string key(cls.refused_if_key);
    if (r.root->contains(key) && truthy(r.root->at(key)))
      invalid(top.field(key) + " is true: model_type " + model_type + " " + cls.refused_if_why);
  }
  if (cls.flat_refused != nullptr && !d.layer_entry)
    invalid(top.field("rope_parameters") + " must be nested per layer type for model_type " +
            model_type + " (" + cls.flat_refused + "), got " + show(*d.dict));
  // --- head_dim: DeepSeek's rope part, explicit (Gemma, Qwen3), the class's, or hidden / heads.
  const std::string head_key = cls.head_dim_key.empty() ? "head_dim" : std::string(cls.head_dim_key);
  const bool qk_rope = top.integer("qk_rope_head_dim") || (cls.qk_rope_head_dim != 0 && !top.has_key("qk_rope_head_dim"));
  if (auto d = top.integer("qk_rope_head_dim")) {
    spec.head_dim = *d;
  } else if (qk_rope) {
    spec.head_dim = cls.qk_rope_head_dim;
  } else if (auto d2 = top.has(head_key) ? top.integer(head_key) : top.integer("head_dim")) {  // attribute_map'd
    spec.head_dim = *d2;
  } else if (cls.head_dim != 0 && !top.has_key(head_key)) {  // an explicit null is not omitted
    spec.head_dim = cls.head_dim;
  } else {
    auto hidden = top.integer("hidden_size");
    if (!hidden) hidden = top.integer("n_embd");
    if (!hidden && !cls.hidden_key.empty()) hidden = top.integer(std::string(cls.hidden_key));
    auto heads = top.integer("num_attention_heads");
    if (!heads) heads = top.integer("n_head");
    if (!heads && !cls.heads_key.empty()) heads = top.integer(std::string(cls.heads_key));
    if (!hidden || !heads)
      invalid(top.field("head_dim") + " is missing: give head_dim, or hidden_size and num_attention_heads");
    if (*heads <= 0) invalid(top.field("num_attention_heads") + " must be > 0, got " + std::to_string(*heads));
    spec.head_dim = cls.head_dim_hidden_multiple * *hidden / *heads;  // Zamba2: 2 * hidden / heads
  }
  // Bound head_dim before deriving rotary_dim from it (a hostile value must not overflow the cast below).
  if (spec.head_dim <= 0 || spec.head_dim > (int64_t(1) << 16))
    invalid(top.field("head_dim") + " must be in [1, 65536], got " + std::to_string(spec.head_dim) +
            (top.has("head_dim") || top.has("qk_rope_head_dim") ? "" : " (hidden_size / num_attention_heads)"));
  spec.max_position_embeddings = top.integer("max_position_embeddings").value_or(top.integer("n_positions").value_or(0));
  if ((cls.max_pos_key_wins || !top.has("max_position_embeddings")) && !cls.max_pos_key.empty())
    spec.max_position_embeddings = top.integer(std::string(cls.max_pos_key)).value_or(spec.max_position_embeddings);

  // --- the RoPE dict (the caller chose it: rope_parameters, rope_scaling, or one layer type's entry).
  const Fields rp(*d.dict, d.field + ".");

  std::string type_name = "default";
  std::string type_field = rp.field("rope_type");
  if (auto t = rp.string("rope_type")) {
    type_name = *t;
  } else if (auto t2 = rp.string("type")) {
    type_name = *t2;
    type_field = rp.field("type");
  }
  if (type_name == "mrope") type_name = "default";  // Qwen2-VL: default frequencies + sections
  // Phi-3 / Phi-4-multimodal configs from before longrope's name: transformers renames "su" and "yarn" to longrope.
  if ((model_type == "phi3" || model_type == "phi4_multimodal") && (type_name == "su" || type_name == "yarn"))
    type_name = "longrope";
  Scaling& sc = spec.scaling;
  sc.type = rope_type_from(type_name, type_field);
  // --- base and partial rotary: dict first (v5), then top level (v4), then legacy names. GPT-NeoX's config
  // class reads only its own names at the top level (rotary_emb_base, rotary_pct: default 0.25), as transformers.
  const bool neox = model_type == "gpt_neox";
  spec.base = rp.number("rope_theta").value_or(
      neox ? top.number("rotary_emb_base").value_or(10000.0)
           : top.number("rope_theta").value_or(top.number("rotary_emb_base").value_or(cls.rope_theta)));
  // A class whose files keep the base in a sub-object (DBRX: attn_config; model_defaults.h theta_in).
  if (!cls.theta_in.empty() && !rp.has("rope_theta") && !top.has("rope_theta")) {
    const std::string in(cls.theta_in);
    if (top.has(in) && r.root->at(in).is_object())
      spec.base = Fields(r.root->at(in), top.field(in + ".")).number("rope_theta").value_or(spec.base);
  }
  std::optional<double> prf = rp.number("partial_rotary_factor");
  std::string prf_field = prf ? rp.field("partial_rotary_factor") : "";  // where the factor was read (messages)
  // MiMo-V2-Flash's default-type function reads a nested entry's own factor, else its 0.334, not the top level's
  // (its config class does not copy it into the entries; layer_types.cc copies it where transformers does).
  const bool own_default = cls.default_type_partial > 0 && d.layer_entry && sc.type == RopeType::kDefault;
  if (!prf && !neox && !cls.forced_partial && !own_default) {
    prf = top.number("partial_rotary_factor");  // Bamba: the class's
    if (prf) prf_field = top.field("partial_rotary_factor");
  }
  if (!prf) {
    prf = top.number("rotary_pct");  // GPT-NeoX
    if (prf) prf_field = top.field("rotary_pct");
  }
  // The class's factor only where no dict or top level names one (an explicit null means full rotation).
  const bool prf_named = rp.has_key("partial_rotary_factor") ||
                         (top.has_key("partial_rotary_factor") && !cls.forced_partial && !own_default);
  if (!prf && !prf_named && sc.type == RopeType::kDefault && cls.default_type_partial > 0)
    prf = cls.default_type_partial;  // the model's own default-type function's fallback (MiMo-V2-Flash)
  spec.partial_rotary_factor = prf.value_or(neox ? 0.25 : prf_named ? 1.0 : cls.partial_rotary_factor);
  if (!std::isfinite(spec.partial_rotary_factor) || spec.partial_rotary_factor <= 0 || spec.partial_rotary_factor > 1)
    invalid(top.field("partial_rotary_factor") + " must be in (0, 1], got " + show(json(spec.partial_rotary_factor)));

  if (qk_rope && cls.qk_nope_head_dim != 0) {
    // Mistral 4: frequencies over qk_nope + qk_rope (default, proportional) or the factor's share of it (qk_rope's
    // unless the file's dict names one: its class never reads the top level's); its code rotates the qk_rope channels.
    const int64_t qk_head = spec.head_dim + top.integer("qk_nope_head_dim").value_or(cls.qk_nope_head_dim);
    const bool whole = sc.type == RopeType::kDefault || sc.type == RopeType::kProportional;
    const bool named = rp.has_key("partial_rotary_factor");
    const auto share = static_cast<int64_t>(static_cast<double>(qk_head) * spec.partial_rotary_factor);
    if (const int64_t w = whole ? qk_head : named ? share : spec.head_dim; w != spec.head_dim)
      invalid((whole ? type_field : rp.field("partial_rotary_factor")) +
              " must give the " + std::to_string(spec.head_dim) + " qk_rope channels model_type mistral4 rotates, not " +
              std::to_string(w) + " of qk_nope + qk_rope = " + std::to_string(qk_head) + " (transformers' model fails), got " +
              (whole ? quote_value(type_name) : show(json(spec.partial_rotary_factor))));
    spec.rotary_dim = spec.head_dim;
    if (sc.type != RopeType::kProportional || !named) spec.partial_rotary_factor = 1.0;  // proportional keeps its own
  } else if (qk_rope && cls.partial_of_head_dim) {
    // Dots 3 Note: the factor is a share of head_dim; its code rotates the qk_rope_head_dim channels, whole.
    const int64_t head = top.integer("head_dim").value_or(cls.head_dim);
    const auto w = static_cast<int64_t>(static_cast<double>(head) * spec.partial_rotary_factor);
    if (w != spec.head_dim)
      invalid((!prf_field.empty() ? prf_field : rp.field("partial_rotary_factor")) + " must give the " +
              std::to_string(spec.head_dim) + " qk_rope channels model_type " + model_type + " rotates (int(head_dim " +
              std::to_string(head) + " * factor) = " + std::to_string(w) + "), got " + show(json(spec.partial_rotary_factor)));
    spec.rotary_dim = spec.head_dim;
    spec.partial_rotary_factor = 1.0;
  } else if (sc.type == RopeType::kProportional) {
    spec.rotary_dim = spec.head_dim;  // proportional keeps head_dim/2 angles, zero beyond the rotated part
  } else if (sc.type == RopeType::kDefault && cls.default_ignores_partial) {
    spec.rotary_dim = spec.head_dim;  // the model's default frequencies span the whole head (Llama, Gemma 3...):
    spec.partial_rotary_factor = 1.0;  // transformers does not read the factor for them (model_defaults_partial.cc)
  } else if (auto rd = top.integer("rotary_dim"); rd && !cls.ignores_rotary_dim) {
    spec.rotary_dim = *rd;  // GPT-J
  } else {
    spec.rotary_dim = static_cast<int64_t>(static_cast<double>(spec.head_dim) * spec.partial_rotary_factor);
    if (spec.rotary_dim % 2 != 0) {
      // transformers takes such a width (its frequencies span it rounded up); rotary rotates whole pairs only.
      const std::string field = !prf_field.empty() ? prf_field : "the model's default partial_rotary_factor";
      invalid(field + " must give an even rotary width (int(head_dim " + std::to_string(spec.head_dim) + " * factor) = " +
              std::to_string(spec.rotary_dim) + ": rotary rotates whole pairs), got " +
              show(json(spec.partial_rotary_factor)));
    }
  }

  // --- pairing: interleaved where the model's code rotates (x[2i], x[2i+1]) (model_defaults.cc).
  if (cls.interleaved_pairs) spec.pairing = Pairing::kInterleaved;
  if (auto ri = top.boolean("rope_interleave"); ri && !cls.pairing_fixed)
    spec.pairing = *ri ? Pairing::kInterleaved : Pairing::kHalfSplit;

  // --- type-specific keys (only the ones HF reads for this type).
  const std::string& tn = type_name;
  auto read_orig = [&] {
    // transformers 5's standardize_rope_params: for a flat dict, a config attribute replaces the dict's value —
    // Phi-3 / Phi-4-multimodal's (class default 4096), or a top-level key, which every other class but Phi-MoE's
    // (it sets the attribute from the dict) keeps as one. Entries of a dict nested per layer type: their own only.
    const char* key = "original_max_position_embeddings";
    const bool phi3 = !d.layer_entry && (model_type == "phi3" || model_type == "phi4_multimodal");
    const std::optional<int64_t> t = d.layer_entry || model_type == "phimoe" ? std::nullopt : top.integer(key);
    const std::optional<int64_t> o = t ? t : phi3 ? std::optional<int64_t>(4096) : rp.integer(key);
    if (o) sc.original_max_position_embeddings = *o;
    if (sc.original_max_position_embeddings < 0)
      invalid((t ? top : rp).field(key) + " must be > 0, got " + std::to_string(sc.original_max_position_embeddings));
  };
  switch (sc.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      sc.factor = rp.require(rp.number("factor"), "factor", tn);
      break;
    case RopeType::kDynamic:
      // vLLM (get_rope) and HF's Hunyuan models: an alpha makes it NTK-alpha, a fixed base; factor is then unused.
      sc.alpha = rp.number("alpha");
      if (sc.alpha) sc.factor = rp.number("factor");
      else sc.factor = rp.require(rp.number("factor"), "factor", tn);
      break;
    case RopeType::kNtk:  // vLLM's static NTK (NTKScalingRotaryEmbedding), optionally mixed
      sc.factor = rp.require(rp.number("factor"), "factor", tn);
      sc.mixed_b = rp.number("mixed_b");
      break;
    case RopeType::kYarn:
      if (!rp.has_key("factor")) invalid(rp.field("factor") + " is required for rope_type yarn, but it is missing");
      sc.factor = rp.number("factor");  // null: HF falls back to max_position_embeddings / original
      read_orig();
      sc.beta_fast = rp.number("beta_fast").value_or(32.0);
      sc.beta_slow = rp.number("beta_slow").value_or(1.0);
      sc.mscale = rp.number("mscale");
      sc.mscale_all_dim = rp.number("mscale_all_dim");
      sc.attention_factor = rp.number("attention_factor");
      // An entry of a dict nested per layer type takes the nested dict's `truncate` (default true), not its own:
      // transformers 5.25's YaRN reads it from the top level of rope_parameters (docs/scaling.md).
      sc.truncate = rp.boolean("truncate").value_or(true);
      if (d.layer_entry) sc.truncate = d.nested_truncate;
      break;
    case RopeType::kLongRope:
      sc.short_factor = rp.require(rp.numbers("short_factor"), "short_factor", tn);
      sc.long_factor = rp.require(rp.numbers("long_factor"), "long_factor", tn);
      sc.factor = rp.number("factor");
      sc.attention_factor = rp.number("attention_factor");
      read_orig();
      if (model_type == "phimoe") {
        // PhimoeRotaryEmbedding scales cos/sin by short_mscale (long_mscale past orig; both required by its
        // config class) in place of the attention factor. One Spec holds one factor: equal values only.
        const double s = rp.require(rp.number("short_mscale"), "short_mscale", tn);
        const double l = rp.require(rp.number("long_mscale"), "long_mscale", tn);
        if (s != l)
          fail(Error::Kind::kUnsupported, kWhere,
               rp.field("long_mscale") + " must equal " + rp.field("short_mscale") + " (a Spec holds one attention " +
                   "factor for both factor sets), got " + show(json(l)) + " and " + show(json(s)));
        sc.attention_factor = s;
      }
      break;
    case RopeType::kLlama3:
      sc.factor = rp.require(rp.number("factor"), "factor", tn);
      sc.low_freq_factor = rp.require(rp.number("low_freq_factor"), "low_freq_factor", tn);
      sc.high_freq_factor = rp.require(rp.number("high_freq_factor"), "high_freq_factor", tn);
      read_orig();
      break;
    case RopeType::kProportional:
      sc.factor = rp.number("factor");
      break;
  }

  // --- multimodal sections (Qwen2-VL, Qwen2.5-VL, Qwen3-VL).
  // The VL models' code has its own section (and Qwen3-VL's interleaving) when the dict gives none; where
  // that section does not cover this head's rotated part, the head is read as plain RoPE (what the model
  // computes for text positions), not refused over a field the file does not have.
  const auto& cs = cls.mrope_section;
  const bool class_sections = cs[0] != 0 && 2 * (cs[0] + cs[1] + cs[2]) == spec.rotary_dim;
  if (cls.text_positions_only) return spec;  // ERNIE 4.5 VL: its axes' assignment is none of rotary's
  if (auto sec = rp.integers("mrope_section")) spec.mrope.section = *sec;
  else if (class_sections) spec.mrope.section.assign(cs.begin(), cs.end());
  // Qwen3-VL / Qwen3.5 interleave their axes whatever the sections, a file's own included.
  spec.mrope.interleaved = rp.boolean("mrope_interleaved").value_or(!spec.mrope.section.empty() && cls.mrope_interleaved);

  return spec;
}

}  // namespace detail

Spec spec_from_hf_config_json(std::string_view json_text, const std::string& source_name) {
  const json doc = detail::parse_config_text(json_text, source_name);
  const detail::ConfigRoot r = detail::config_root(doc);
  detail::reject_per_layer_overrides(r);
  const detail::RopeDict d = detail::rope_dict(r);
  detail::reject_per_layer_type(r, d);
  return detail::normalized_in(detail::parse_spec(r, d, source_name), source_name);
}

Spec spec_from_hf_config_file(const std::string& path) {
  return spec_from_hf_config_json(detail::read_config_file(path), path);
}

}  // namespace rotary
