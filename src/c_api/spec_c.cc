// The C API's specs: creation from presets, config.json and descriptors; description; frequencies; preset names.
#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "c_api/boundary.h"
#include "rotary/config.h"
#include "rotary/freqs.h"

using namespace rotary::c_api;

namespace {

std::optional<double> unset_if_zero(double v) {
  if (v == 0.0) return std::nullopt;
  return v;
}

/// The 0.1.0 layout of rotary_spec_desc_t ends at mrope_interleaved (alpha and mixed_b came later).
constexpr size_t kDescV01Size = offsetof(rotary_spec_desc_t, alpha);

rotary::Spec spec_from_desc(const rotary_spec_desc_t& d, const char* where) {
  const bool v0_1_layout = d.struct_size == kDescV01Size;
  if (!v0_1_layout)
    check_struct_size(d.struct_size, sizeof(rotary_spec_desc_t), where, "desc", "rotary_spec_desc_t",
                      "rotary_spec_desc_init");
  rotary::Spec s;
  if (d.name) s.name = d.name;
  s.head_dim = d.head_dim;
  s.rotary_dim = d.rotary_dim;
  s.base = d.base;
  int pairing = static_cast<int>(d.pairing);
  if (pairing != 0 && pairing != 1)
    invalid(where, "desc->pairing must be HALF (0) or INTERLEAVED (1), got " + std::to_string(pairing));
  s.pairing = static_cast<rotary::Pairing>(pairing);
  s.max_position_embeddings = d.max_position_embeddings;
  s.partial_rotary_factor = d.partial_rotary_factor;
  int type = static_cast<int>(d.rope_type);
  if (type < 0 || type > static_cast<int>(rotary::RopeType::kNtk))
    invalid(where, "desc->rope_type must be a rotary_rope_type_t value in [0, 7], got " + std::to_string(type));
  s.scaling.type = static_cast<rotary::RopeType>(type);
  s.scaling.factor = unset_if_zero(d.factor);
  s.scaling.original_max_position_embeddings = d.original_max_position_embeddings;
  s.scaling.beta_fast = d.beta_fast;
  s.scaling.beta_slow = d.beta_slow;
  s.scaling.mscale = unset_if_zero(d.mscale);
  s.scaling.mscale_all_dim = unset_if_zero(d.mscale_all_dim);
  s.scaling.truncate = d.truncate != 0;
  s.scaling.attention_factor = unset_if_zero(d.attention_factor);
  auto copy_array = [&](const double* p, int64_t n, const char* name) {
    if (n < 0) invalid(where, std::string("desc->") + name + "_len must be >= 0, got " + std::to_string(n));
    if (n > 0 && p == nullptr)
      invalid(where, std::string("desc->") + name + " must not be NULL when " + name + "_len = " + std::to_string(n));
    if (n > (int64_t(1) << 24)) invalid(where, std::string("desc->") + name + "_len is too large: " + std::to_string(n));
    return std::vector<double>(p, p + n);
  };
  s.scaling.short_factor = copy_array(d.short_factor, d.short_factor_len, "short_factor");
  s.scaling.long_factor = copy_array(d.long_factor, d.long_factor_len, "long_factor");
  s.scaling.low_freq_factor = d.low_freq_factor;
  s.scaling.high_freq_factor = d.high_freq_factor;
  if (d.mrope_section_len < 0 || d.mrope_section_len > 64)
    invalid(where, "desc->mrope_section_len must be in [0, 64], got " + std::to_string(d.mrope_section_len));
  if (d.mrope_section_len > 0 && d.mrope_section == nullptr)
    invalid(where, "desc->mrope_section must not be NULL when mrope_section_len = " +
                       std::to_string(d.mrope_section_len));
  if (d.mrope_section_len > 0)
    s.mrope.section.assign(d.mrope_section, d.mrope_section + d.mrope_section_len);
  s.mrope.interleaved = d.mrope_interleaved != 0;
  if (!v0_1_layout) {
    s.scaling.alpha = unset_if_zero(d.alpha);
    s.scaling.mixed_b = unset_if_zero(d.mixed_b);
  }
  return s;
}

rotary_spec_t* new_spec(const rotary::Spec& spec) {
  auto handle = std::make_unique<rotary_spec_t>();
  handle->spec = spec.normalized();  // validates (throws naming the field)
  return handle.release();
}

/// The preset names, built once. Published with a compare-exchange rather than a function-local static,
/// whose initialisation guard is a lock a fork() could leave held in the child.
std::atomic<const std::vector<std::string>*> g_preset_names{nullptr};

const std::vector<std::string>* preset_list() noexcept {
  const std::vector<std::string>* have = g_preset_names.load(std::memory_order_acquire);
  if (have != nullptr) return have;
  try {
    auto* made = new std::vector<std::string>(rotary::preset_names());  // never freed: lives with the process
    if (g_preset_names.compare_exchange_strong(have, made, std::memory_order_acq_rel)) return made;
    delete made;
    return have;
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

extern "C" {

void rotary_spec_desc_init(rotary_spec_desc_t* desc) {
  if (desc == nullptr) return;
  *desc = rotary_spec_desc_t{};
  desc->struct_size = sizeof(rotary_spec_desc_t);
  desc->base = 10000.0;
  desc->pairing = ROTARY_PAIRING_HALF;
  desc->partial_rotary_factor = 1.0;
  desc->rope_type = ROTARY_ROPE_DEFAULT;
  desc->beta_fast = 32.0;
  desc->beta_slow = 1.0;
  desc->truncate = 1;
  desc->low_freq_factor = 1.0;
  desc->high_freq_factor = 4.0;
}

rotary_status_t rotary_spec_from_preset(const char* name, rotary_spec_t** out) {
  constexpr const char* where = "rotary_spec_from_preset";
  return guarded(where, [&] {
    require_non_null(name, where, "name");
    require_non_null(out, where, "out");
    *out = new_spec(rotary::preset(name));
  });
}

rotary_status_t rotary_spec_from_config_json(const char* json_text, size_t length, rotary_spec_t** out) {
  constexpr const char* where = "rotary_spec_from_config_json";
  return guarded(where, [&] {
    require_non_null(json_text, where, "json_text");
    require_non_null(out, where, "out");
    *out = new_spec(rotary::spec_from_hf_config_json(std::string_view(json_text, length)));
  });
}

rotary_status_t rotary_spec_from_config_file(const char* path, rotary_spec_t** out) {
  constexpr const char* where = "rotary_spec_from_config_file";
  return guarded(where, [&] {
    require_non_null(path, where, "path");
    require_non_null(out, where, "out");
    *out = new_spec(rotary::spec_from_hf_config_file(path));
  });
}

rotary_status_t rotary_spec_create(const rotary_spec_desc_t* desc, rotary_spec_t** out) {
  constexpr const char* where = "rotary_spec_create";
  return guarded(where, [&] {
    require_non_null(desc, where, "desc");
    require_non_null(out, where, "out");
    *out = new_spec(spec_from_desc(*desc, where));
  });
}

void rotary_spec_free(rotary_spec_t* spec) { delete spec; }

rotary_status_t rotary_spec_describe(const rotary_spec_t* spec, rotary_spec_desc_t* desc) {
  constexpr const char* where = "rotary_spec_describe";
  return guarded(where, [&] {
    require_non_null(spec, where, "spec");
    require_non_null(desc, where, "desc");
    // The caller's struct_size says how much it has room for: the 0.1.0 layout or the current one (nothing
    // is written otherwise).
    if (desc->struct_size != kDescV01Size)
      check_struct_size(desc->struct_size, sizeof(rotary_spec_desc_t), where, "desc", "rotary_spec_desc_t",
                        "rotary_spec_desc_init");
    const rotary::Spec& s = spec->spec;
    rotary_spec_desc_t d;
    rotary_spec_desc_init(&d);
    d.name = s.name.c_str();
    d.head_dim = s.head_dim;
    d.rotary_dim = s.effective_rotary_dim();
    d.base = s.base;
    d.pairing = static_cast<rotary_pairing_t>(static_cast<int>(s.pairing));
    d.max_position_embeddings = s.max_position_embeddings;
    d.partial_rotary_factor = s.partial_rotary_factor;
    d.rope_type = static_cast<rotary_rope_type_t>(static_cast<int>(s.scaling.type));
    d.factor = s.scaling.factor.value_or(0.0);
    d.original_max_position_embeddings = s.scaling.original_max_position_embeddings;
    d.beta_fast = s.scaling.beta_fast;
    d.beta_slow = s.scaling.beta_slow;
    d.mscale = s.scaling.mscale.value_or(0.0);
    d.mscale_all_dim = s.scaling.mscale_all_dim.value_or(0.0);
    d.truncate = s.scaling.truncate ? 1 : 0;
    d.attention_factor = s.scaling.attention_factor.value_or(0.0);
    d.short_factor = s.scaling.short_factor.empty() ? nullptr : s.scaling.short_factor.data();
    d.short_factor_len = static_cast<int64_t>(s.scaling.short_factor.size());
    d.long_factor = s.scaling.long_factor.empty() ? nullptr : s.scaling.long_factor.data();
    d.long_factor_len = static_cast<int64_t>(s.scaling.long_factor.size());
    d.low_freq_factor = s.scaling.low_freq_factor;
    d.high_freq_factor = s.scaling.high_freq_factor;
    d.mrope_section = s.mrope.section.empty() ? nullptr : s.mrope.section.data();
    d.mrope_section_len = static_cast<int64_t>(s.mrope.section.size());
    d.mrope_interleaved = s.mrope.interleaved ? 1 : 0;
    d.alpha = s.scaling.alpha.value_or(0.0);
    d.mixed_b = s.scaling.mixed_b.value_or(0.0);
    // A caller built against 0.1.0 (struct_size of that layout) has no room for the later fields.
    if (desc->struct_size == kDescV01Size) {
      d.struct_size = kDescV01Size;
      std::memcpy(static_cast<void*>(desc), &d, kDescV01Size);
    } else {
      *desc = d;
    }
  });
}

rotary_status_t rotary_spec_inv_freq(const rotary_spec_t* spec, int64_t seq_len, double* out, int64_t capacity,
                                     int64_t* count) {
  constexpr const char* where = "rotary_spec_inv_freq";
  return guarded(where, [&] {
    require_non_null(spec, where, "spec");
    require_non_null(count, where, "count");
    if (capacity < 0) invalid(where, "capacity must be >= 0, got " + std::to_string(capacity));
    if (capacity > 0 && out == nullptr)
      invalid(where, "out must not be NULL when capacity = " + std::to_string(capacity));
    rotary::Frequencies f = rotary::compute_frequencies(spec->spec, to_seq_len(seq_len, where));
    const int64_t n = static_cast<int64_t>(f.inv_freq.size());
    for (int64_t i = 0; i < n && i < capacity; ++i) out[i] = f.inv_freq[static_cast<size_t>(i)];
    *count = n;
  });
}

rotary_status_t rotary_spec_attention_factor(const rotary_spec_t* spec, int64_t seq_len, double* out) {
  constexpr const char* where = "rotary_spec_attention_factor";
  return guarded(where, [&] {
    require_non_null(spec, where, "spec");
    require_non_null(out, where, "out");
    *out = rotary::compute_frequencies(spec->spec, to_seq_len(seq_len, where)).attention_factor;
  });
}

int64_t rotary_preset_count(void) {
  const auto* names = preset_list();
  return names ? static_cast<int64_t>(names->size()) : 0;
}

const char* rotary_preset_name(int64_t index) {
  const auto* names = preset_list();
  if (!names || index < 0 || index >= static_cast<int64_t>(names->size())) return nullptr;
  return (*names)[static_cast<size_t>(index)].c_str();
}

}  // extern "C"
