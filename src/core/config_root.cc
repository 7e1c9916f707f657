// config.json composites: the object holding the language model (as transformers' get_text_config() finds it).
#include <string>

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
/// (VL models: Qwen3-VL), `thinker_config` (Qwen2.5-Omni / Qwen3-Omni-MoE, whose thinker keeps it in its own
/// text_config), `vlm_config` (ColPali, ColQwen2, ColModernVBert), `decoder_config` (Dia) and `decoder` (T5Gemma,
/// T5Gemma 2). Tried in this order on an object without attention-head fields; the search goes down at most 4 levels.
constexpr const char* kTextConfigKeys[] = {"text_config", "thinker_config", "vlm_config", "decoder_config", "decoder"};

}  // namespace

ConfigRoot config_root(const json& doc) {
  ConfigRoot r{&doc, &doc, "", {}};
  for (int depth = 0; depth < 4 && !has_head_fields(*r.root); ++depth) {
    const char* next = nullptr;
    for (const char* key : kTextConfigKeys)
      if (r.root->contains(key) && r.root->at(key).is_object()) {
        next = key;
        break;
      }
    if (next == nullptr) break;
    r.parents.push_back(r.root);
    r.root = &r.root->at(next);
    r.prefix += std::string(next) + ".";
  }
  return r;
}

}  // namespace rotary::detail
