// The C API's RoPE per layer type: rotary::LayerTypeSpecs from config.json, its layer types and their specs.
#include <memory>
#include <string>
#include <string_view>

#include "c_api/boundary.h"
#include "rotary/config.h"

using namespace rotary::c_api;

namespace {

rotary_layer_specs_t* new_layer_specs(rotary::LayerTypeSpecs specs) {
  auto handle = std::make_unique<rotary_layer_specs_t>();
  handle->specs = std::move(specs);
  return handle.release();
}

void check_index(int64_t index, size_t count, const char* where, const char* name, const char* what) {
  if (index < 0 || index >= static_cast<int64_t>(count))
    invalid(where, std::string(name) + " must be in [0, " + std::to_string(count) + ") (" + what + "), got " +
                       std::to_string(index));
}

}  // namespace

extern "C" {

rotary_status_t rotary_layer_specs_from_config_json(const char* json_text, size_t length, rotary_layer_specs_t** out) {
  constexpr const char* where = "rotary_layer_specs_from_config_json";
  return guarded(where, [&] {
    require_non_null(json_text, where, "json_text");
    require_non_null(out, where, "out");
    *out = new_layer_specs(rotary::layer_type_specs_from_hf_config_json(std::string_view(json_text, length)));
  });
}

rotary_status_t rotary_layer_specs_from_config_file(const char* path, rotary_layer_specs_t** out) {
  constexpr const char* where = "rotary_layer_specs_from_config_file";
  return guarded(where, [&] {
    require_non_null(path, where, "path");
    require_non_null(out, where, "out");
    *out = new_layer_specs(rotary::layer_type_specs_from_hf_config_file(path));
  });
}

void rotary_layer_specs_free(rotary_layer_specs_t* specs) { delete specs; }

rotary_status_t rotary_layer_specs_describe(const rotary_layer_specs_t* specs, int64_t* n_types, int64_t* n_layers,
                                            int32_t* nested) {
  constexpr const char* where = "rotary_layer_specs_describe";
  return guarded(where, [&] {
    require_non_null(specs, where, "specs");
    if (n_types) *n_types = static_cast<int64_t>(specs->specs.by_type.size());
    if (n_layers) *n_layers = static_cast<int64_t>(specs->specs.layer_types.size());
    if (nested) *nested = specs->specs.nested ? 1 : 0;
  });
}

rotary_status_t rotary_layer_specs_type_name(const rotary_layer_specs_t* specs, int64_t index, const char** name) {
  constexpr const char* where = "rotary_layer_specs_type_name";
  return guarded(where, [&] {
    require_non_null(specs, where, "specs");
    require_non_null(name, where, "name");
    check_index(index, specs->specs.by_type.size(), where, "index", "the number of layer types");
    *name = specs->specs.by_type[static_cast<size_t>(index)].layer_type.c_str();
  });
}

rotary_status_t rotary_layer_specs_layer_type(const rotary_layer_specs_t* specs, int64_t layer, const char** name) {
  constexpr const char* where = "rotary_layer_specs_layer_type";
  return guarded(where, [&] {
    require_non_null(specs, where, "specs");
    require_non_null(name, where, "name");
    check_index(layer, specs->specs.layer_types.size(), where, "layer", "the number of layer_types");
    *name = specs->specs.layer_types[static_cast<size_t>(layer)].c_str();
  });
}

rotary_status_t rotary_layer_specs_get(const rotary_layer_specs_t* specs, const char* layer_type, rotary_spec_t** out) {
  constexpr const char* where = "rotary_layer_specs_get";
  return guarded(where, [&] {
    require_non_null(specs, where, "specs");
    require_non_null(layer_type, where, "layer_type");
    require_non_null(out, where, "out");
    auto handle = std::make_unique<rotary_spec_t>();
    handle->spec = specs->specs.spec_for(layer_type);  // already normalized
    *out = handle.release();
  });
}

}  // extern "C"
