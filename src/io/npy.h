// Internal (not installed; CLI and tests reach it through the rotary_io target): the strict .npy reader/writer behind load_tensor_file (Fortran order is read into C order).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rotary/api.h"
#include "rotary/safetensors.h"
#include "rotary/types.h"

namespace rotary {

/// The arrays .npy files hold are rotary::HostArray (rotary/safetensors.h), under their .npy name.
using NpyArray = HostArray;

/// Parses .npy bytes. Rejects (Error kIo, message naming `name` and the problem): bad magic, unsupported
/// version, big-endian or unsupported dtype, malformed header, rank > 8,
/// negative/overflowing shape, truncated data.
ROTARY_API NpyArray npy_parse(std::string_view bytes, const std::string& name = "<npy>");
ROTARY_API NpyArray npy_load(const std::string& path);
ROTARY_API std::string npy_serialize(const NpyArray& array);
ROTARY_API void npy_save(const std::string& path, const NpyArray& array);

}  // namespace rotary
