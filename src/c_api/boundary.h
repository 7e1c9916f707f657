// Internal: the C API's boundary: handle types, exception-to-status mapping, and C-struct-to-C++ conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "core/messages.h"
#include "rotary/apply.h"
#include "rotary/config.h"
#include "rotary/multimodal.h"
#include "rotary/rotary_c.h"
#include "rotary/spec.h"

struct rotary_spec_t {
  rotary::Spec spec;
};

struct rotary_layer_specs_t {
  rotary::LayerTypeSpecs specs;
};

struct rotary_axis_freqs_t {
  rotary::AxisFrequencies freqs;
};

struct rotary_rope_t {
  explicit rotary_rope_t(rotary::Spec spec, rotary::RopeOptions options) : rope(std::move(spec), options) {}
  rotary::Rope rope;
};

namespace rotary::c_api {

using rotary::Error;
using rotary::detail::invalid;

/// Records `message` as this thread's last error and returns `status`. Never throws.
rotary_status_t record_error(rotary_status_t status, const char* message) noexcept;

/// The C status of an Error kind.
rotary_status_t status_of(Error::Kind kind);

/// Records "[where] what" (formatted without allocating: out of memory included) and returns `status`. Never throws.
rotary_status_t record_error(rotary_status_t status, const char* where, const char* what) noexcept;

/// Runs `body`, mapping every exception to a status + last error naming the entry point `where`. Never throws.
template <class F>
rotary_status_t guarded(const char* where, F&& body) noexcept {
  try {
    body();
    return ROTARY_OK;
  } catch (const Error& e) {
    return record_error(status_of(e.kind()), e.what());
  } catch (const std::bad_alloc&) {
    return record_error(ROTARY_ERROR_INTERNAL, where, "out of memory");
  } catch (const std::exception& e) {
    try {
      std::string msg = std::string("[") + where + "] internal error: " + e.what();
      return record_error(ROTARY_ERROR_INTERNAL, msg.c_str());
    } catch (...) {
      return record_error(ROTARY_ERROR_INTERNAL, where, "internal error");
    }
  } catch (...) {
    return record_error(ROTARY_ERROR_INTERNAL, where, "internal error (unknown exception)");
  }
}

template <class T>
void require_non_null(const T* p, const char* where, const char* name) {
  if (p == nullptr) invalid(where, std::string(name) + " must not be NULL");
}

/// `got` must be sizeof(type): catches a caller compiled against another header version.
void check_struct_size(size_t got, size_t expected, const char* where, const char* name, const char* type,
                       const char* init);

/// A C tensor as a TensorView (absent when data is NULL); checks rank and dtype values.
rotary::TensorView to_view(const rotary_tensor_t& t, const char* where, const std::string& name);

/// C positions as Positions (kind checked, messages name `args->positions.*`).
rotary::Positions to_positions(const rotary_positions_t& p, const char* where);

/// C apply arguments as ApplyArgs (enum values checked, messages name `args->field`).
rotary::ApplyArgs to_apply_args(const rotary_apply_args_t* a, const char* where);

/// -1 = none, else > 0.
std::optional<int64_t> to_seq_len(int64_t seq_len, const char* where);

/// HALF (0) / INTERLEAVED (1), or DEFAULT (-1) when allowed (read as half-split).
rotary::Pairing to_pairing(rotary_pairing_t p, const char* where, const char* name, bool allow_default);

}  // namespace rotary::c_api
