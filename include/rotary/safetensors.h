// Strict .safetensors reader/writer (8-byte LE header length, JSON header, raw LE data) and one loader for .npy/.safetensors.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rotary/api.h"
#include "rotary/types.h"

namespace rotary {

/// An owned, C-contiguous n-d array as read from or written to a tensor file (.safetensors, .npy).
struct HostArray {
  DType dtype = DType::kF32;  ///< f32, f16, bf16 (.safetensors BF16), f64, i32, i64
  bool is_uint16 = false;     ///< .npy '<u2' arrays (e.g. raw bf16 bit patterns) are read as dtype kBF16 with this set
  std::vector<int64_t> shape;
  std::vector<unsigned char> data;

  ROTARY_API int64_t numel() const;
  template <class T> const T* as() const { return reinterpret_cast<const T*>(data.data()); }
  template <class T> T* as() { return reinterpret_cast<T*>(data.data()); }
  /// A contiguous TensorView of this array (rank <= 4).
  ROTARY_API TensorView view();
};

/// Named tensors (in file order) plus the string metadata of a .safetensors file ("__metadata__").
struct TensorFile {
  std::vector<std::pair<std::string, HostArray>> tensors;
  std::map<std::string, std::string> metadata;
  /// The tensor called `name`, or nullptr.
  ROTARY_API const HostArray* find(std::string_view name) const;
  /// The tensor called `name`, else the only one whose name ends in "." + name (a state_dict key), else nullptr.
  ROTARY_API const HostArray* find_like(std::string_view name) const;
};

/// Parses .safetensors bytes: u64 little-endian header size N, N bytes of JSON
///   {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
/// then the data buffer. dtypes F64, F32, F16, BF16, I64, I32 (BF16 arrives as DType::kBF16).
/// Rejects with Error(kIo) naming `name` and the problem: a header size beyond the file or over 100 MB,
/// malformed or non-object JSON, duplicate names, unknown keys, other dtypes, negative or overflowing shapes,
/// offsets that are reversed, out of the buffer, of the wrong size for the shape, overlapping, or leaving
/// holes, non-string metadata.
ROTARY_API TensorFile safetensors_parse(std::string_view bytes, const std::string& name = "<safetensors>");
ROTARY_API TensorFile safetensors_load(const std::string& path);
/// Serializes (tensors in the given order, header padded with spaces to a multiple of 8 bytes).
/// Error(kInvalidArgument) for an empty or duplicate name, "__metadata__" as a tensor name, or data whose
/// size does not match its shape.
ROTARY_API std::string safetensors_serialize(const TensorFile& file);

/// Reads `path` by its extension: .safetensors (every tensor and the metadata) or .npy (one tensor, named
/// `npy_name`). Anything else is Error(kInvalidArgument) naming the extensions accepted.
ROTARY_API TensorFile load_tensor_file(const std::string& path, const std::string& npy_name);
/// Writes bytes to `path` atomically: a temporary file in the same folder, fsynced and renamed over `path`, so
/// that on any error `path` keeps its old contents (or stays absent) and no temporary file is left (Error(kIo)
/// naming the path and the reason).
ROTARY_API void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace rotary
