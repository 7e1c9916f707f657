// Spec -> Hugging Face v5 config.json text (spec_to_json): every Spec field, in keys config.cc reads back.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "rotary/config.h"

namespace rotary {

std::string spec_to_json(const Spec& spec, int indent) {
  // One list of every Spec field (docs/cli.md describes each). Keys are the ones config.cc's reader reads, so the
  // text reads back to an equal Spec; fields the rope_type does not use are written too (the reader skips them).
  using ordered = nlohmann::ordered_json;
  auto optional = [](const std::optional<double>& v) { return v ? ordered(*v) : ordered(nullptr); };
  const Scaling& sc = spec.scaling;
  ordered rp;
  rp["rope_type"] = rope_type_name(sc.type);
  rp["rope_theta"] = spec.base;
  rp["partial_rotary_factor"] = spec.partial_rotary_factor;
  rp["factor"] = optional(sc.factor);
  rp["original_max_position_embeddings"] = sc.original_max_position_embeddings;
  rp["beta_fast"] = sc.beta_fast;
  rp["beta_slow"] = sc.beta_slow;
  rp["mscale"] = optional(sc.mscale);
  rp["mscale_all_dim"] = optional(sc.mscale_all_dim);
  rp["truncate"] = sc.truncate;
  rp["attention_factor"] = optional(sc.attention_factor);
  rp["short_factor"] = sc.short_factor;
  rp["long_factor"] = sc.long_factor;
  rp["low_freq_factor"] = sc.low_freq_factor;
  rp["high_freq_factor"] = sc.high_freq_factor;
  rp["alpha"] = optional(sc.alpha);
  rp["mixed_b"] = optional(sc.mixed_b);
  rp["mrope_section"] = spec.mrope.section;
  rp["mrope_interleaved"] = spec.mrope.interleaved;
  ordered doc;
  doc["name"] = spec.name;
  doc["head_dim"] = spec.head_dim;
  doc["rotary_dim"] = spec.effective_rotary_dim();
  doc["max_position_embeddings"] = spec.max_position_embeddings;
  doc["rope_interleave"] = spec.pairing == Pairing::kInterleaved;
  doc["rope_parameters"] = std::move(rp);
  // A name that is not UTF-8 (a file path in another encoding) is written with U+FFFD, not refused.
  return doc.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace rotary
