// Layer types a config class derives without layer_types: every n-th layer full_attention, n read as transformers reads it.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/config_parse.h"
#include "core/messages.h"
#include "core/model_defaults.h"

namespace rotary::detail {

using json = nlohmann::json;

namespace {

/// A count n of "every n-th layer is full_attention" (`key`; absent: `fallback`) as transformers reads it. A class
/// whose field is a strict int (ERGO's dataclass: int_only) takes a JSON integer only (its validation refuses a
/// float, a bool and null). The others read a kwarg with Python's `%`: an integral float computes as that integer
/// (2.0 as 2, 1e300 as beyond any layer count) and a bool as 0 / 1; null or a string raises TypeError there, and a
/// fraction (2.5) marks the layers its multiples hit, which no count means, so both are refused, as is 0 (false,
/// 0.0: ZeroDivisionError). A negative n marks the layers -n does (Python's modulo).
int64_t every_n_count(const ConfigRoot& r, const char* key, int64_t fallback, bool int_only) {
  if (!r.root->contains(key)) return fallback;
  const json& v = r.root->at(key);
  const std::string field = r.prefix + key;
  if (int_only && !v.is_number_integer()) invalid(kConfigWhere, field + " must be an integer, got " + show_json(v));
  int64_t n = 0;
  bool ok = true;
  if (v.is_number_unsigned())
    n = v.get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : v.get<int64_t>();
  else if (v.is_number_integer())
    n = v.get<int64_t>();
  else if (v.is_boolean())
    n = v.get<bool>() ? 1 : 0;
  else if (v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>())
    n = std::fabs(v.get<double>()) >= 0x1p62 ? (v.get<double>() > 0 ? INT64_MAX : -INT64_MAX)  // beyond any count
                                              : static_cast<int64_t>(v.get<double>());
  else
    ok = false;
  if (!ok || n == 0)
    invalid(kConfigWhere, field + " must be a nonzero integer (every n-th layer is full_attention), got " + show_json(v));
  return n;
}

}  // namespace

/// transformers' defaults when layer_types is absent (the class's, `cls`). Gemma 3: every sliding_window_pattern-th
/// layer is full (five sliding layers, then one full); Gemma 3n: every fifth; OLMo 3: every fourth; MiMo-V2-Flash
/// also layer 0, NeoMME also the last; ModernBERT: every global_attn_every_n_layers-th from layer 0 (default 3).
/// A count read from the file is read by every_n_count.
std::vector<std::string> default_layer_types(const ConfigRoot& r, const ModelDefaults& cls) {
  const int64_t layers = integer_or(r, "num_hidden_layers", 0);
  const bool modernbert = type_of(*r.root) == "modernbert" || type_of(*r.doc) == "modernbert";
  std::vector<std::string> out;
  if (layers <= 0 || layers > (int64_t(1) << 20)) return out;
  // transformers computes (i + 1) % n (ModernBERT: i % n) in Python, for each layer (none: the count is not used).
  const char* key = modernbert ? "global_attn_every_n_layers" : cls.full_every_key;
  const int64_t pattern = key == nullptr ? cls.full_every
                                         : every_n_count(r, key, modernbert ? 3 : cls.full_every,
                                                         !modernbert && cls.full_every_int_only);
  if (pattern == 0) return out;  // (no class derives with a fixed 0)
  const int64_t every = pattern > 0 ? pattern : pattern == INT64_MIN ? INT64_MAX : -pattern;  // both beyond any count
  for (int64_t i = 0; i < layers; ++i) {
    const bool full = modernbert ? i % every == 0
                                 : (i + 1) % every == 0 || (cls.first_full && i == 0) || (cls.last_full && i == layers - 1);
    out.push_back(full ? "full_attention" : "sliding_attention");
  }
  return out;
}

}  // namespace rotary::detail
