// config.json composites: the object holding the language model (as transformers' get_text_config() finds it).
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config_parse.h"

namespace rotary::detail {
namespace {

using json = nlohmann::json;

/// The object holds the attention-head fields a Spec is read from.
bool has_head_fields(const json& obj) {
  for (const char* key : {"head_dim", "num_attention_heads", "n_head", "qk_rope_head_dim"})
    if (has_value(obj, key)) return true;
  return false;
}

/// Where a composite document keeps its language model, as transformers' get_text_config() finds it: `text_config`
/// for any model (VL models: Qwen3-VL), and the containers of the composites whose config class looks elsewhere,
/// only for those model types (other models holding an object of that name keep their own fields: BLT's
/// `decoder_config` is one of its four RoPE parts; an encoder-decoder's `decoder` has no RoPE).
struct Container {
  const char* key;
  std::vector<std::string_view> model_types;  ///< empty: any
};
const Container kContainers[] = {
    {"text_config", {}},
    {"thinker_config", {"qwen2_5_omni", "qwen3_omni_moe"}},  // the thinker keeps its text_config
    {"vlm_config", {"colpali", "colqwen2", "colmodernvbert"}},  // the VLM keeps its text_config
    {"decoder_config", {"dia"}},
    {"decoder", {"t5gemma", "t5gemma2"}},
};

/// The container of `obj` (model_type `type`) holding its language model, or null.
const char* container_of(const json& obj, std::string_view type) {
  for (const Container& c : kContainers) {
    if (!obj.contains(c.key) || !obj.at(c.key).is_object()) continue;
    if (c.model_types.empty() ||
        std::find(c.model_types.begin(), c.model_types.end(), type) != c.model_types.end())
      return c.key;
  }
  return nullptr;
}

}  // namespace

std::string_view type_of(const json& obj) {
  const auto it = obj.find("model_type");
  return it != obj.end() && it->is_string() ? std::string_view(it->get_ref<const std::string&>()) : std::string_view();
}

ConfigRoot config_root(const json& doc) {
  ConfigRoot r{&doc, &doc, "", {}};
  for (int depth = 0; depth < 4 && !has_head_fields(*r.root); ++depth) {
    const char* next = container_of(*r.root, type_of(*r.root));
    if (next == nullptr) break;
    r.parents.push_back(r.root);
    r.root = &r.root->at(next);
    r.prefix += std::string(next) + ".";
  }
  return r;
}

}  // namespace rotary::detail
