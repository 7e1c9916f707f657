// Minimal, strict NumPy .npy reader/writer (format 1.0-3.0, little-endian, C or Fortran order rejected/handled).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rotary/api.h"
#include "rotary/types.h"

namespace rotary {

/// An owned n-d array as read from / written to .npy. Data is C-contiguous.
struct NpyArray {
  DType dtype = DType::kF32;  ///< f32 '<f4', f16 '<f2', f64 '<f8', i32 '<i4', i64 '<i8'; bf16 is not an npy type
  bool is_uint16 = false;     ///< '<u2' arrays (e.g. raw bf16 bit patterns) are read as dtype kBF16 with this set
  std::vector<int64_t> shape;
  std::vector<unsigned char> data;

  int64_t numel() const;
  template <class T> const T* as() const { return reinterpret_cast<const T*>(data.data()); }
  template <class T> T* as() { return reinterpret_cast<T*>(data.data()); }
  /// A contiguous TensorView of this array (rank <= 4).
  TensorView view();
};

/// Parses .npy bytes. Rejects (Error kIo, message naming `name` and the problem): bad magic, unsupported
/// version, big-endian or unsupported dtype, fortran_order True, malformed header, rank > 8,
/// negative/overflowing shape, truncated data.
ROTARY_API NpyArray npy_parse(std::string_view bytes, const std::string& name = "<npy>");
ROTARY_API NpyArray npy_load(const std::string& path);
ROTARY_API std::string npy_serialize(const NpyArray& array);
ROTARY_API void npy_save(const std::string& path, const NpyArray& array);

}  // namespace rotary
