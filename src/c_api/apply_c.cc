// The C API's status names, version, tensors, and the Rope/apply entry points.
#include "c_api/boundary.h"
#include "rotary/version.h"

#include <string>

using namespace rotary::c_api;

namespace {

/// Reads `name` with a core parser into the C enum `out`; a name it does not know is refused in the words of the C
/// function `where`.
template <class CEnum, class Parse>
rotary_status_t from_name(const char* where, const char* what, const char* name, CEnum* out, Parse parse) {
  return guarded(where, [&] {
    require_non_null(name, where, "name");
    require_non_null(out, where, "out");
    *out = static_cast<CEnum>(static_cast<int>(parse(name, what, where)));
  });
}

}  // namespace

extern "C" {

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

rotary_status_t rotary_layout_from_name(const char* name, rotary_layout_t* out) {
  return from_name("rotary_layout_from_name", "layout", name, out, rotary::parse_layout);
}

rotary_status_t rotary_pairing_from_name(const char* name, rotary_pairing_t* out) {
  return from_name("rotary_pairing_from_name", "pairing", name, out, rotary::parse_pairing);
}

rotary_status_t rotary_direction_from_name(const char* name, rotary_direction_t* out) {
  return from_name("rotary_direction_from_name", "direction", name, out, rotary::parse_direction);
}

rotary_status_t rotary_backend_from_name(const char* name, rotary_backend_t* out) {
  return from_name("rotary_backend_from_name", "backend", name, out, rotary::parse_backend);
}

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
  args->q_out_scale = 1.0f;
  args->k_out_scale = 1.0f;
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
