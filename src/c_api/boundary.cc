// The C API's boundary: this thread's last error, exception-to-status mapping, and the C-struct conversions.
#include "c_api/boundary.h"

#include <cstddef>
#include <cstdio>

namespace rotary::c_api {
namespace {

thread_local std::string g_last_error;

}  // namespace

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

rotary_status_t record_error(rotary_status_t status, const char* message) noexcept {
  try {
    g_last_error = message;
  } catch (...) {
    g_last_error.clear();  // out of memory while recording the message; clear() cannot throw
  }
  return status;
}

rotary_status_t record_error(rotary_status_t status, const char* where, const char* what) noexcept {
  char message[256];
  std::snprintf(message, sizeof message, "[%s] %s", where, what);
  return record_error(status, message);
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
  if (dt < 0 || dt > static_cast<int>(rotary::DType::kF8E5M2))
    invalid(where, name + ".dtype must be a rotary_dtype_t value in [0, 8], got " + std::to_string(dt));
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
  // Callers built before the fp8 output scales pass the layout ending at `stream`: accepted, scales 1.
  const bool v0_1_layout = a->struct_size == offsetof(rotary_apply_args_t, stream);
  const bool no_scales = v0_1_layout || a->struct_size == offsetof(rotary_apply_args_t, q_out_scale);
  if (!no_scales)
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
  out.q_out_scale = no_scales ? 1.0f : a->q_out_scale;
  out.k_out_scale = no_scales ? 1.0f : a->k_out_scale;
  return out;
}

std::optional<int64_t> to_seq_len(int64_t seq_len, const char* where) {
  if (seq_len == -1) return std::nullopt;
  if (seq_len <= 0) invalid(where, "seq_len must be -1 (none) or > 0, got " + std::to_string(seq_len));
  return seq_len;
}

rotary::Pairing to_pairing(rotary_pairing_t p, const char* where, const char* name, bool allow_default) {
  const int v = static_cast<int>(p);
  if (v == 0 || v == 1) return static_cast<rotary::Pairing>(v);
  if (allow_default && v == -1) return rotary::Pairing::kHalfSplit;
  invalid(where, std::string(name) + " must be HALF (0) or INTERLEAVED (1)" + (allow_default ? " or DEFAULT (-1)" : "") +
                     ", got " + std::to_string(v));
}

}  // namespace rotary::c_api

extern "C" const char* rotary_last_error(void) { return rotary::c_api::g_last_error.c_str(); }
