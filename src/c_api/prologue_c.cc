// The C API of the prologue family: rotary_prologue and rotary_rerotate_cache over their C++ counterparts.
#include "c_api/boundary.h"
#include "rotary/prologue.h"

using namespace rotary::c_api;

namespace {

rotary::FrequencySource to_source(const rotary_frequency_source_t& s, const char* where, const std::string& name,
                                  bool allow_null) {
  if (s.rope == nullptr && !allow_null) invalid(where, name + ".rope must not be NULL");
  rotary::FrequencySource out;
  out.rope = s.rope != nullptr ? &s.rope->rope : nullptr;
  if (s.seq_len < -1 || s.seq_len == 0)
    invalid(where, name + ".seq_len must be -1 (none) or > 0, got " + std::to_string(s.seq_len));
  if (s.seq_len > (int64_t(1) << 31))
    rotary::detail::out_of_range(where,
                                 name + ".seq_len must be <= 2^31 (positions are < 2^31), got " + std::to_string(s.seq_len));
  if (s.seq_len > 0) out.seq_len = s.seq_len;
  return out;
}

rotary::CacheLayout to_cache_layout(rotary_cache_layout_t l, const char* where, const char* name) {
  const int v = static_cast<int>(l);
  if (v < 0 || v > 3)
    invalid(where, std::string(name) + " must be NHD (0), HND (1), BSHD (2) or BHSD (3), got " + std::to_string(v));
  return static_cast<rotary::CacheLayout>(v);
}

rotary::Backend to_backend(rotary_backend_t b, const char* where) {
  const int v = static_cast<int>(b);
  if (v < 0 || v > 3)
    invalid(where, "args->backend must be AUTO (0), CPU (1), REFERENCE (2) or CUDA (3), got " + std::to_string(v));
  return static_cast<rotary::Backend>(v);
}

}  // namespace

extern "C" {

void rotary_prologue_args_init(rotary_prologue_args_t* args) {
  if (args == nullptr) return;
  *args = rotary_prologue_args_t{};
  args->struct_size = sizeof(rotary_prologue_args_t);
  args->positions.kind = ROTARY_POSITIONS_OFFSET;
  args->layout = ROTARY_LAYOUT_THD;
  args->cache_layout = ROTARY_CACHE_NHD;
  args->norm_eps = 1e-6;
  args->backend = ROTARY_BACKEND_AUTO;
}

rotary_status_t rotary_prologue(const rotary_prologue_args_t* a) {
  constexpr const char* where = "rotary_prologue";
  return guarded(where, [&] {
    require_non_null(a, where, "args");
    check_struct_size(a->struct_size, sizeof(rotary_prologue_args_t), where, "args", "rotary_prologue_args_t",
                      "rotary_prologue_args_init");
    rotary::PrologueArgs p;
    p.q = to_view(a->q, where, "args->q");
    p.k = to_view(a->k, where, "args->k");
    p.v = to_view(a->v, where, "args->v");
    p.q_out = to_view(a->q_out, where, "args->q_out");
    p.k_out = to_view(a->k_out, where, "args->k_out");
    p.positions = to_positions(a->positions, where);
    const int layout = static_cast<int>(a->layout);
    if (layout < 0 || layout > 2)
      invalid(where, "args->layout must be BSHD (0), BHSD (1) or THD (2), got " + std::to_string(layout));
    p.layout = static_cast<rotary::Layout>(layout);
    if (a->n_sources < 0 || a->n_sources > 255)
      invalid(where, "args->n_sources must be in [0, 255], got " + std::to_string(a->n_sources));
    if (a->n_sources > 0 && a->sources == nullptr) invalid(where, "args->sources must not be NULL when n_sources > 0");
    for (int64_t i = 0; i < a->n_sources; ++i)
      p.sources.push_back(to_source(a->sources[i], where, "args->sources[" + std::to_string(i) + "]", false));
    p.source_index = to_view(a->source_index, where, "args->source_index");
    p.cache_layout = to_cache_layout(a->cache_layout, where, "args->cache_layout");
    p.k_cache = to_view(a->k_cache, where, "args->k_cache");
    p.v_cache = to_view(a->v_cache, where, "args->v_cache");
    p.slot_mapping = to_view(a->slot_mapping, where, "args->slot_mapping");
    p.cache_positions = to_view(a->cache_positions, where, "args->cache_positions");
    p.k_scale = to_view(a->k_scale, where, "args->k_scale");
    p.v_scale = to_view(a->v_scale, where, "args->v_scale");
    p.q_norm_weight = to_view(a->q_norm_weight, where, "args->q_norm_weight");
    p.k_norm_weight = to_view(a->k_norm_weight, where, "args->k_norm_weight");
    p.norm_eps = a->norm_eps;
    p.norm_offset = a->norm_offset;
    if (a->threads < 0) invalid(where, "args->threads must be >= 0, got " + std::to_string(a->threads));
    p.threads = a->threads;
    p.backend = to_backend(a->backend, where);
    rotary::prologue(p);
  });
}

void rotary_rerotate_args_init(rotary_rerotate_args_t* args) {
  if (args == nullptr) return;
  *args = rotary_rerotate_args_t{};
  args->struct_size = sizeof(rotary_rerotate_args_t);
  args->cache_layout = ROTARY_CACHE_NHD;
  args->from.seq_len = -1;
  args->to.seq_len = -1;
  args->backend = ROTARY_BACKEND_AUTO;
}

rotary_status_t rotary_rerotate_cache(const rotary_rerotate_args_t* a) {
  constexpr const char* where = "rotary_rerotate_cache";
  return guarded(where, [&] {
    require_non_null(a, where, "args");
    check_struct_size(a->struct_size, sizeof(rotary_rerotate_args_t), where, "args", "rotary_rerotate_args_t",
                      "rotary_rerotate_args_init");
    rotary::RerotateArgs r;
    r.k_cache = to_view(a->k_cache, where, "args->k_cache");
    r.cache_layout = to_cache_layout(a->cache_layout, where, "args->cache_layout");
    r.k_scale = to_view(a->k_scale, where, "args->k_scale");
    r.slots = to_view(a->slots, where, "args->slots");
    r.from_positions = to_view(a->from_positions, where, "args->from_positions");
    r.to_positions = to_view(a->to_positions, where, "args->to_positions");
    r.from = to_source(a->from, where, "args->from", false);
    r.to = to_source(a->to, where, "args->to", true);
    if (a->threads < 0) invalid(where, "args->threads must be >= 0, got " + std::to_string(a->threads));
    r.threads = a->threads;
    r.backend = to_backend(a->backend, where);
    rotary::rerotate_cache(r);
  });
}

}  // extern "C"
