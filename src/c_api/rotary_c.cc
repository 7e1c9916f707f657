// The C API (rotary/rotary_c.h) over the C++ API: argument checks, struct conversion, exception-to-status mapping.
#include "rotary/rotary_c.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rotary/apply.h"
#include "rotary/context_parallel.h"
#include "rotary/convert.h"
#include "rotary/ggml.h"
#include "rotary/multimodal.h"
#include "rotary/config.h"
#include "rotary/freqs.h"
#include "rotary/spec.h"
#include "rotary/types.h"
#include "rotary/version.h"

struct rotary_spec_t {
  rotary::Spec spec;
};

struct rotary_axis_freqs_t {
  rotary::AxisFrequencies freqs;
};

struct rotary_rope_t {
  explicit rotary_rope_t(rotary::Spec spec, rotary::RopeOptions options) : rope(std::move(spec), options) {}
  rotary::Rope rope;
};

namespace {

using rotary::Error;

thread_local std::string g_last_error;

rotary_status_t status_of(Error::Kind kind) {
  switch (kind) {
    case Error::Kind::kInvalidArgument: return ROTARY_ERROR_INVALID_ARGUMENT;
    case Error::Kind::kOutOfRange: return ROTARY_ERROR_OUT_OF_RANGE;
    case Error::Kind::kUnsupported: return ROTARY_ERROR_UNSUPPORTED;
    case Error::Kind::kIo: return ROTARY_ERROR_IO;
    case Error::Kind::kInternal: return ROTARY_ERROR_INTERNAL;
  }
  return ROTARY_ERROR_INTERNAL;
}

rotary_status_t set_error(rotary_status_t status, const char* message) noexcept {
  try {
    g_last_error = message;
  } catch (...) {
    g_last_error.clear();  // out of memory while recording the message; clear() cannot throw
  }
  return status;
}

/// Runs `body`, mapping every exception to a status + last error. Never throws.
template <class F>
rotary_status_t guarded(const char* where, F&& body) noexcept {
  try {
    body();
    return ROTARY_OK;
  } catch (const Error& e) {
    return set_error(status_of(e.kind()), e.what());
  } catch (const std::bad_alloc&) {
    return set_error(ROTARY_ERROR_INTERNAL, "[rotary] out of memory");
  } catch (const std::exception& e) {
    try {
      std::string msg = std::string("[") + where + "] internal error: " + e.what();
      return set_error(ROTARY_ERROR_INTERNAL, msg.c_str());
    } catch (...) {
      return set_error(ROTARY_ERROR_INTERNAL, "[rotary] internal error");
    }
  } catch (...) {
    return set_error(ROTARY_ERROR_INTERNAL, "[rotary] internal error (unknown exception)");
  }
}

[[noreturn]] void invalid(const char* where, const std::string& message) {
  rotary::fail(Error::Kind::kInvalidArgument, where, message);
}

template <class T>
void require_non_null(const T* p, const char* where, const char* name) {
  if (p == nullptr) invalid(where, std::string(name) + " must not be NULL");
}

void check_struct_size(size_t got, size_t expected, const char* where, const char* name, const char* type,
                       const char* init) {
  if (got != expected)
    invalid(where, std::string(name) + "->struct_size must be sizeof(" + type + ") = " + std::to_string(expected) +
                       " (initialise with " + init + "), got " + std::to_string(got));
}

rotary::TensorView to_view(const rotary_tensor_t& t, const char* where, const std::string& name) {
  rotary::TensorView v;
  if (t.data == nullptr) return v;  // absent
  if (t.rank < 1 || t.rank > 4)
    invalid(where, name + ".rank must be in [1, 4], got " + std::to_string(t.rank));
  int dt = static_cast<int>(t.dtype);
  if (dt < 0 || dt > static_cast<int>(rotary::DType::kI64))
    invalid(where, name + ".dtype must be a rotary_dtype_t value in [0, 5], got " + std::to_string(dt));
  v.data = t.data;
  v.dtype = static_cast<rotary::DType>(dt);
  v.rank = t.rank;
  for (int i = 0; i < t.rank; ++i) {
    v.shape[i] = t.shape[i];
    v.strides[i] = t.strides[i];
  }
  return v;
}

rotary::Positions to_positions(const rotary_positions_t& p, const char* where) {
  rotary::Positions out;
  int kind = static_cast<int>(p.kind);
  if (kind < 0 || kind > 2)
    invalid(where, "args->positions.kind must be OFFSET (0), IDS (1) or PACKED (2), got " + std::to_string(kind));
  out.kind = static_cast<rotary::Positions::Kind>(kind);
  out.offset = p.offset;
  out.batch_offsets = to_view(p.batch_offsets, where, "args->positions.batch_offsets");
  out.ids = to_view(p.ids, where, "args->positions.ids");
  out.cu_seqlens = to_view(p.cu_seqlens, where, "args->positions.cu_seqlens");
  out.seq_offsets = to_view(p.seq_offsets, where, "args->positions.seq_offsets");
  return out;
}

rotary::ApplyArgs to_apply_args(const rotary_apply_args_t* a, const char* where) {
  require_non_null(a, where, "args");
  // Callers built against 0.1.0 pass the layout that ends at `backend` (no `stream` field): accepted, stream = NULL.
  const bool v0_1_layout = a->struct_size == offsetof(rotary_apply_args_t, stream);
  if (!v0_1_layout)
    check_struct_size(a->struct_size, sizeof(rotary_apply_args_t), where, "args", "rotary_apply_args_t",
                      "rotary_apply_args_init");
  rotary::ApplyArgs out;
  if (a->q.data == nullptr) invalid(where, "args->q.data must not be NULL");
  out.q = to_view(a->q, where, "args->q");
  out.q_out = to_view(a->q_out, where, "args->q_out");
  out.k = to_view(a->k, where, "args->k");
  out.k_out = to_view(a->k_out, where, "args->k_out");
  if (out.k_out.present() && !out.k.present()) invalid(where, "args->k_out is given but args->k.data is NULL");
  out.positions = to_positions(a->positions, where);
  int layout = static_cast<int>(a->layout);
  if (layout < 0 || layout > 2)
    invalid(where, "args->layout must be BSHD (0), BHSD (1) or THD (2), got " + std::to_string(layout));
  out.layout = static_cast<rotary::Layout>(layout);
  int pairing = static_cast<int>(a->pairing);
  if (pairing < -1 || pairing > 1)
    invalid(where, "args->pairing must be DEFAULT (-1), HALF (0) or INTERLEAVED (1), got " + std::to_string(pairing));
  if (pairing >= 0) out.pairing = static_cast<rotary::Pairing>(pairing);
  int direction = static_cast<int>(a->direction);
  if (direction < 0 || direction > 1)
    invalid(where, "args->direction must be FORWARD (0) or INVERSE (1), got " + std::to_string(direction));
  out.direction = static_cast<rotary::Direction>(direction);
  if (a->seq_len < -1 || a->seq_len == 0)
    invalid(where, "args->seq_len must be -1 (none) or > 0, got " + std::to_string(a->seq_len));
  if (a->seq_len > 0) out.seq_len = a->seq_len;
  if (a->threads < 0) invalid(where, "args->threads must be >= 0, got " + std::to_string(a->threads));
  out.threads = a->threads;
  int backend = static_cast<int>(a->backend);
  if (backend < 0 || backend > 3)
    invalid(where, "args->backend must be AUTO (0), CPU (1), REFERENCE (2) or CUDA (3), got " +
                       std::to_string(backend));
  out.backend = static_cast<rotary::Backend>(backend);
  out.stream = v0_1_layout ? nullptr : a->stream;
  return out;
}

std::optional<int64_t> to_seq_len(int64_t seq_len, const char* where) {
  if (seq_len == -1) return std::nullopt;
  if (seq_len <= 0) invalid(where, "seq_len must be -1 (none) or > 0, got " + std::to_string(seq_len));
  return seq_len;
}

std::optional<double> unset_if_zero(double v) {
  if (v == 0.0) return std::nullopt;
  return v;
}

rotary::Spec spec_from_desc(const rotary_spec_desc_t& d, const char* where) {
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
  if (type < 0 || type > static_cast<int>(rotary::RopeType::kProportional))
    invalid(where, "desc->rope_type must be a rotary_rope_type_t value in [0, 6], got " + std::to_string(type));
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
  return s;
}

rotary_spec_t* new_spec(const rotary::Spec& spec) {
  auto handle = std::make_unique<rotary_spec_t>();
  handle->spec = spec.normalized();  // validates (throws naming the field)
  return handle.release();
}

}  // namespace

extern "C" {

const char* rotary_last_error(void) { return g_last_error.c_str(); }

const char* rotary_status_name(rotary_status_t status) {
  switch (status) {
    case ROTARY_OK: return "ok";
    case ROTARY_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case ROTARY_ERROR_OUT_OF_RANGE: return "out of range";
    case ROTARY_ERROR_UNSUPPORTED: return "unsupported";
    case ROTARY_ERROR_IO: return "io";
    case ROTARY_ERROR_INTERNAL: return "internal";
  }
  return "unknown";
}

const char* rotary_version(void) { return ROTARY_VERSION_STRING; }

rotary_status_t rotary_tensor_contiguous(rotary_tensor_t* t, void* data, rotary_dtype_t dtype, int32_t rank,
                                         const int64_t* shape) {
  constexpr const char* where = "rotary_tensor_contiguous";
  return guarded(where, [&] {
    require_non_null(t, where, "t");
    require_non_null(shape, where, "shape");
    if (rank < 1 || rank > 4) invalid(where, "rank must be in [1, 4], got " + std::to_string(rank));
    rotary_tensor_t out{};
    out.data = data;
    out.dtype = dtype;
    out.rank = rank;
    int64_t stride = 1;
    for (int i = rank - 1; i >= 0; --i) {
      if (shape[i] < 0)
        invalid(where, "shape[" + std::to_string(i) + "] must be >= 0, got " + std::to_string(shape[i]));
      out.shape[i] = shape[i];
      out.strides[i] = stride;
      if (shape[i] > 0 && stride > INT64_MAX / shape[i]) invalid(where, "shape overflows int64 element count");
      stride *= shape[i];
    }
    *t = out;
  });
}

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
    *desc = d;
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

namespace {
const std::vector<std::string>* preset_list() noexcept {
  try {
    static const std::vector<std::string> names = rotary::preset_names();
    return &names;
  } catch (...) {
    return nullptr;
  }
}
}  // namespace

int64_t rotary_preset_count(void) {
  const auto* names = preset_list();
  return names ? static_cast<int64_t>(names->size()) : 0;
}

const char* rotary_preset_name(int64_t index) {
  const auto* names = preset_list();
  if (!names || index < 0 || index >= static_cast<int64_t>(names->size())) return nullptr;
  return (*names)[static_cast<size_t>(index)].c_str();
}

void rotary_rope_options_init(rotary_rope_options_t* options) {
  if (options == nullptr) return;
  *options = rotary_rope_options_t{};
  options->struct_size = sizeof(rotary_rope_options_t);
  options->mode = ROTARY_COS_SIN_AUTO;
}

rotary_status_t rotary_rope_create(const rotary_spec_t* spec, const rotary_rope_options_t* options,
                                   rotary_rope_t** out) {
  constexpr const char* where = "rotary_rope_create";
  return guarded(where, [&] {
    require_non_null(spec, where, "spec");
    require_non_null(out, where, "out");
    rotary::RopeOptions opts;
    if (options != nullptr) {
      check_struct_size(options->struct_size, sizeof(rotary_rope_options_t), where, "options",
                        "rotary_rope_options_t", "rotary_rope_options_init");
      int mode = static_cast<int>(options->mode);
      if (mode < 0 || mode > 2)
        invalid(where, "options->mode must be AUTO (0), TABLE (1) or ON_THE_FLY (2), got " + std::to_string(mode));
      opts.mode = static_cast<rotary::CosSinMode>(mode);
      if (options->initial_positions < 0)
        invalid(where, "options->initial_positions must be >= 0, got " + std::to_string(options->initial_positions));
      if (options->max_positions < 0)
        invalid(where, "options->max_positions must be >= 0, got " + std::to_string(options->max_positions));
      opts.table.initial_positions = options->initial_positions;
      if (options->max_positions > 0) opts.table.max_positions = options->max_positions;
    }
    *out = new rotary_rope_t(spec->spec, opts);
  });
}

void rotary_rope_free(rotary_rope_t* rope) { delete rope; }

void rotary_apply_args_init(rotary_apply_args_t* args) {
  if (args == nullptr) return;
  *args = rotary_apply_args_t{};
  args->struct_size = sizeof(rotary_apply_args_t);
  args->positions.kind = ROTARY_POSITIONS_OFFSET;
  args->layout = ROTARY_LAYOUT_BSHD;
  args->pairing = ROTARY_PAIRING_DEFAULT;
  args->direction = ROTARY_DIRECTION_FORWARD;
  args->seq_len = -1;
  args->threads = 0;
  args->backend = ROTARY_BACKEND_AUTO;
}

rotary_status_t rotary_rope_apply(rotary_rope_t* rope, const rotary_apply_args_t* args) {
  constexpr const char* where = "rotary_rope_apply";
  return guarded(where, [&] {
    require_non_null(rope, where, "rope");
    rotary::ApplyArgs a = to_apply_args(args, where);
    rope->rope.apply(a);
  });
}

rotary_status_t rotary_apply_cos_sin(const rotary_tensor_t* cos, const rotary_tensor_t* sin,
                                     const rotary_apply_args_t* args) {
  constexpr const char* where = "rotary_apply_cos_sin";
  return guarded(where, [&] {
    require_non_null(cos, where, "cos");
    require_non_null(sin, where, "sin");
    if (cos->data == nullptr) invalid(where, "cos->data must not be NULL");
    if (sin->data == nullptr) invalid(where, "sin->data must not be NULL");
    rotary::TensorView c = to_view(*cos, where, "cos"), s = to_view(*sin, where, "sin");
    rotary::ApplyArgs a = to_apply_args(args, where);
    rotary::apply_cos_sin(c, s, a);
  });
}

}  // extern "C"

// ------------------------------------------------------------------ multimodal and cross-framework variants

namespace {

rotary::Pairing to_pairing(rotary_pairing_t p, const char* where, const char* name, bool allow_default) {
  const int v = static_cast<int>(p);
  if (v == 0 || v == 1) return static_cast<rotary::Pairing>(v);
  if (allow_default && v == -1) return rotary::Pairing::kHalfSplit;
  invalid(where, std::string(name) + " must be HALF (0) or INTERLEAVED (1)" + (allow_default ? " or DEFAULT (-1)" : "") +
                     ", got " + std::to_string(v));
}

void put_axis_freqs(rotary::AxisFrequencies af, rotary_axis_freqs_t** out) {
  *out = new rotary_axis_freqs_t{std::move(af)};
}

}  // namespace

extern "C" {

rotary_status_t rotary_vision_frequencies(rotary_vision_t convention, int64_t head_dim, double base,
                                          rotary_pairing_t pairing, rotary_axis_freqs_t** out) {
  constexpr const char* where = "rotary_vision_frequencies";
  return guarded(where, [&] {
    require_non_null(out, where, "out");
    const int c = static_cast<int>(convention);
    if (c < 0 || c > 2) invalid(where, "convention must be QWEN2VL (0), GGML (1) or PIXTRAL (2), got " + std::to_string(c));
    rotary::VisionSpec vs;
    vs.convention = static_cast<rotary::VisionConvention>(c);
    vs.head_dim = head_dim;
    vs.base = base;
    if (static_cast<int>(pairing) != -1) vs.pairing = to_pairing(pairing, where, "pairing", false);
    put_axis_freqs(rotary::vision_frequencies(vs), out);
  });
}

void rotary_ggml_params_init(rotary_ggml_params_t* params) {
  if (params == nullptr) return;
  *params = rotary_ggml_params_t{};
  params->struct_size = sizeof(rotary_ggml_params_t);
  params->mode = ROTARY_GGML_NORMAL;
  params->freq_base = 10000.0;
  params->freq_scale = 1.0;
  params->ext_factor = 0.0;
  params->attn_factor = 1.0;
  params->beta_fast = 32.0;
  params->beta_slow = 1.0;
}

rotary_status_t rotary_ggml_frequencies(const rotary_ggml_params_t* params, rotary_axis_freqs_t** out) {
  constexpr const char* where = "rotary_ggml_frequencies";
  return guarded(where, [&] {
    require_non_null(params, where, "params");
    require_non_null(out, where, "out");
    check_struct_size(params->struct_size, sizeof(rotary_ggml_params_t), where, "params", "rotary_ggml_params_t",
                      "rotary_ggml_params_init");
    rotary::GgmlRopeParams p;
    p.mode = static_cast<rotary::GgmlRopeMode>(params->mode);  // validated by ggml_frequencies
    p.n_dims = params->n_dims;
    p.n_ctx_orig = params->n_ctx_orig;
    p.freq_base = params->freq_base;
    p.freq_scale = params->freq_scale;
    p.ext_factor = params->ext_factor;
    p.attn_factor = params->attn_factor;
    p.beta_fast = params->beta_fast;
    p.beta_slow = params->beta_slow;
    for (int i = 0; i < 4; ++i) p.sections[static_cast<std::size_t>(i)] = params->sections[i];
    if (params->freq_factors_len < 0)
      invalid(where, "params->freq_factors_len must be >= 0, got " + std::to_string(params->freq_factors_len));
    if (params->freq_factors_len > 0) {
      require_non_null(params->freq_factors, where, "params->freq_factors");
      p.freq_factors.assign(params->freq_factors, params->freq_factors + params->freq_factors_len);
    }
    put_axis_freqs(rotary::ggml_frequencies(p), out);
  });
}

rotary_status_t rotary_spec_axis_frequencies(const rotary_spec_t* spec, int64_t seq_len, rotary_axis_freqs_t** out) {
  constexpr const char* where = "rotary_spec_axis_frequencies";
  return guarded(where, [&] {
    require_non_null(spec, where, "spec");
    require_non_null(out, where, "out");
    put_axis_freqs(rotary::mrope_frequencies(spec->spec, to_seq_len(seq_len, where)), out);
  });
}

rotary_status_t rotary_axis_freqs_describe(const rotary_axis_freqs_t* freqs, int64_t* pairs, int32_t* n_axes,
                                           rotary_pairing_t* pairing, double* attention_factor) {
  constexpr const char* where = "rotary_axis_freqs_describe";
  return guarded(where, [&] {
    require_non_null(freqs, where, "freqs");
    if (pairs) *pairs = static_cast<int64_t>(freqs->freqs.freqs.inv_freq.size());
    if (n_axes) *n_axes = freqs->freqs.n_axes;
    if (pairing) *pairing = static_cast<rotary_pairing_t>(freqs->freqs.pairing);
    if (attention_factor) *attention_factor = freqs->freqs.freqs.attention_factor;
  });
}

rotary_status_t rotary_axis_freqs_get(const rotary_axis_freqs_t* freqs, double* inv_freq, uint8_t* axis_of_freq,
                                      int64_t capacity) {
  constexpr const char* where = "rotary_axis_freqs_get";
  return guarded(where, [&] {
    require_non_null(freqs, where, "freqs");
    if (capacity < 0) invalid(where, "capacity must be >= 0, got " + std::to_string(capacity));
    const auto& f = freqs->freqs;
    const int64_t n = std::min<int64_t>(capacity, static_cast<int64_t>(f.freqs.inv_freq.size()));
    for (int64_t j = 0; j < n; ++j) {
      if (inv_freq) inv_freq[j] = f.freqs.inv_freq[static_cast<std::size_t>(j)];
      if (axis_of_freq) axis_of_freq[j] = f.axis_of_freq[static_cast<std::size_t>(j)];
    }
  });
}

void rotary_axis_freqs_free(rotary_axis_freqs_t* freqs) { delete freqs; }

rotary_status_t rotary_apply_axes(const rotary_axis_freqs_t* freqs, const rotary_apply_args_t* args) {
  constexpr const char* where = "rotary_apply_axes";
  return guarded(where, [&] {
    require_non_null(freqs, where, "freqs");
    rotary::ApplyArgs a = to_apply_args(args, where);
    rotary::apply_axes(freqs->freqs, a);
  });
}

rotary_status_t rotary_cp_positions(int64_t rank, int64_t cp_size, int64_t local_len, int64_t offset, int64_t* out) {
  constexpr const char* where = "rotary_cp_positions";
  return guarded(where, [&] {
    const std::vector<int64_t> pos = rotary::cp_positions({rank, cp_size}, local_len, offset);
    if (!pos.empty()) require_non_null(out, where, "out");
    std::copy(pos.begin(), pos.end(), out);
  });
}

rotary_status_t rotary_cp_positions_packed(int64_t rank, int64_t cp_size, const int64_t* cu_seqlens, int64_t n_cu,
                                           int64_t* out, int64_t capacity, int64_t* count) {
  constexpr const char* where = "rotary_cp_positions_packed";
  return guarded(where, [&] {
    require_non_null(cu_seqlens, where, "cu_seqlens");
    require_non_null(count, where, "count");
    if (n_cu < 1) invalid(where, "n_cu must be >= 1 (N+1 entries), got " + std::to_string(n_cu));
    if (capacity < 0) invalid(where, "capacity must be >= 0, got " + std::to_string(capacity));
    const std::vector<int64_t> pos =
        rotary::cp_positions_packed({rank, cp_size}, std::vector<int64_t>(cu_seqlens, cu_seqlens + n_cu));
    const int64_t n = std::min<int64_t>(capacity, static_cast<int64_t>(pos.size()));
    if (n > 0) require_non_null(out, where, "out");
    std::copy(pos.begin(), pos.begin() + n, out);
    *count = static_cast<int64_t>(pos.size());
  });
}

rotary_status_t rotary_permute_qk_weight(const rotary_tensor_t* src, const rotary_tensor_t* dst, int64_t n_heads,
                                         int64_t head_dim, int64_t rotary_dim, rotary_pairing_t from,
                                         rotary_pairing_t to) {
  constexpr const char* where = "rotary_permute_qk_weight";
  return guarded(where, [&] {
    require_non_null(src, where, "src");
    require_non_null(dst, where, "dst");
    if (src->data == nullptr) invalid(where, "src->data must not be NULL");
    if (dst->data == nullptr) invalid(where, "dst->data must not be NULL");
    rotary::QkPermutation p;
    p.n_heads = n_heads;
    p.head_dim = head_dim;
    p.rotary_dim = rotary_dim;
    p.from = to_pairing(from, where, "from", false);
    p.to = to_pairing(to, where, "to", false);
    rotary::permute_qk_weight(to_view(*src, where, "src"), to_view(*dst, where, "dst"), p);
  });
}

}  // extern "C"
