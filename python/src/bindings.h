// Shared pieces of the rotary._rotary extension: the Python-side Spec holder and array conversion.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <memory>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>

#include "rotary/onnx.h"
#include "rotary/prologue.h"
#include "rotary/rotary.h"

namespace rotary_py {

namespace nb = nanobind;

/// Read-only and writable CPU arrays of any dtype and strides (numpy via the buffer protocol or DLPack,
/// torch CPU tensors via DLPack). No copies are ever made.
using InArray = nb::ndarray<nb::ro, nb::device::cpu>;
using OutArray = nb::ndarray<nb::device::cpu>;

/// rotary.Spec as seen from Python: an immutable, normalized rotary::Spec plus the rotary::Rope
/// (its cos/sin table) built on first use and shared by every copy of this object, so repeated
/// rotary.apply(..., spec) calls reuse one table. Immutability is what makes the cache safe.
class PySpec {
 public:
  /// Normalizes and validates (throws rotary::Error naming the bad field).
  explicit PySpec(const rotary::Spec& spec);

  const rotary::Spec& spec() const { return spec_; }
  /// The Rope for this spec, created on first call (thread-safe).
  rotary::Rope& rope() const;
  /// True once rope() has been called.
  bool has_rope() const;

 private:
  /// The Rope, published with a compare-exchange (a racing loser deletes its own): no lock, so that a
  /// fork() (DataLoader workers) while another thread builds it cannot leave the child blocked.
  struct Cache {
    std::atomic<rotary::Rope*> rope{nullptr};
    ~Cache() { delete rope.load(); }
  };
  rotary::Spec spec_;
  std::shared_ptr<Cache> cache_;
};

/// Describes an array to the core. `bf16_bits`: the array holds raw bfloat16 bits as uint16
/// (how rotary/__init__.py passes ml_dtypes.bfloat16 numpy arrays, which DLPack cannot carry).
/// Throws nb::type_error for an unsupported dtype and ValueError for rank > 4, naming `what` in the words of the
/// Python entry point `where` ("[rotary_apply] x has an unsupported dtype ...").
rotary::TensorView to_view(const InArray& a, const char* where, const char* what, bool bf16_bits = false);
rotary::TensorView to_view(const OutArray& a, const char* where, const char* what, bool bf16_bits = false);

/// The same for arrays whose elements are the raw bits of another rotary dtype (`bits_as`, a rotary::DType
/// value, or -1): ml_dtypes bfloat16 / float8 numpy arrays and torch float8 tensors arrive as uint16 / uint8.
rotary::TensorView to_view_as(const InArray& a, const char* where, const char* what, int bits_as);
rotary::TensorView to_view_as(const OutArray& a, const char* where, const char* what, int bits_as);
/// Positions of a call from the Python arguments: packed (cu_seqlens [+ seq_offsets]; a nonzero int `offset`
/// with cu_seqlens is every sequence's start, its [N] array kept in `storage`), ids, or an offset
/// (+ batch_offsets). Arguments of two schemes at once are an error of `where` naming them, never ignored
/// (python/src/apply.cc).
rotary::Positions positions_of(int64_t offset, const std::optional<InArray>& ids, const std::optional<InArray>& cu_seqlens,
                               const std::optional<InArray>& seq_offsets, const std::optional<InArray>& batch_offsets,
                               const char* where, std::vector<int64_t>* storage);

// Layout, pairing, backend and cache layout names: the core's one set of spellings (ValueError naming the argument),
// refused in the words of the Python entry point `where` (the core's parsers with `where` first; apply.cc).
rotary::Layout parse_layout(const char* where, std::string_view name, const char* what = "layout");
rotary::Pairing parse_pairing(const char* where, std::string_view name, const char* what = "pairing");
rotary::Backend parse_backend(const char* where, std::string_view name, const char* what = "backend");
rotary::CacheLayout parse_cache_layout(const char* where, std::string_view name, const char* what = "cache_layout");

void register_errors();
void bind_spec(nb::module_& m);
void bind_apply(nb::module_& m);
void bind_multimodal(nb::module_& m);  // multimodal.cc
void bind_check(nb::module_& m);       // check.cc
void bind_torch_entry(nb::module_& m);  // torch_entry.cc
void bind_numpy_entry(nb::module_& m);  // numpy_entry.cc
void bind_prologue(nb::module_& m);    // prologue.cc

}  // namespace rotary_py
