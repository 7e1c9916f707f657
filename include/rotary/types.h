// Basic vocabulary types shared by every layer: dtypes, pairings, layouts, strided tensor views, errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

#include "rotary/api.h"

namespace rotary {

/// Element types. Floating types are rotated (math always in f32, f64 for kF64);
/// integer types are only used for positions and cu_seqlens. The 8-bit types are storage formats of
/// quantised outputs only (KV caches of rotary::prologue, fp8 outputs of apply; docs/prologue.md):
/// they are never rotated as inputs except by rerotate_cache, which dequantises them first.
enum class DType : int {
  kF32 = 0,
  kF16 = 1,   ///< IEEE binary16
  kBF16 = 2,  ///< bfloat16 (top 16 bits of an f32), round-to-nearest-even on store
  kF64 = 3,   ///< reference and gradient checks
  kI32 = 4,
  kI64 = 5,
  kI8 = 6,      ///< int8 with an f32 scale per (token, head): symmetric, round half to even
  kF8E4M3 = 7,  ///< fp8 e4m3fn (OCP, no infinities, max 448) with an f32 per-tensor scale, saturating
  kF8E5M2 = 8,  ///< fp8 e5m2 (max finite 57344) with an f32 per-tensor scale, saturating
};

ROTARY_API const char* dtype_name(DType dtype);  ///< "f32", "f16", "bf16", "f64", "i32", "i64", "i8", "f8e4m3", "f8e5m2"
/// Bytes per element (0 for a value that is not a DType).
inline std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kF64: case DType::kI64: return 8;
    case DType::kI8: case DType::kF8E4M3: case DType::kF8E5M2: return 1;
  }
  return 0;
}
inline bool is_floating(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF64; }
inline bool is_integer(DType d) { return d == DType::kI32 || d == DType::kI64; }
/// The fp8 storage types (quantised with a per-tensor scale).
inline bool is_fp8(DType d) { return d == DType::kF8E4M3 || d == DType::kF8E5M2; }

/// Which channels form a rotated 2-D pair (R = rotary_dim, channels >= R pass through).
///
///   kHalfSplit   pairs (x[i], x[i + R/2])   GPT-NeoX / HF rotate_half / ggml NEOX / mlx traditional=False
///                channel map  [c c c c s s s s | p p]   (c: first of pair, s: second, p: pass-through)
///   kInterleaved pairs (x[2i], x[2i+1])      GPT-J / Meta / ggml NORMAL / mlx traditional=True / ONNX interleaved=1
///                channel map  [c s c s c s c s | p p]
enum class Pairing : int { kHalfSplit = 0, kInterleaved = 1 };

/// kForward rotates by +pos*theta; kInverse by -pos*theta (the backward pass of RoPE,
/// since the rotation is orthogonal: grad_x = R(-theta) grad_y).
enum class Direction : int { kForward = 0, kInverse = 1 };

/// Logical layout of an activation tensor. Only the *meaning* of the axes differs;
/// the memory order is given by strides, so non-contiguous views work.
///   kBSHD  [batch, seq, heads, head_dim]   (HF unsqueeze_dim=2, flash-attn, TE bshd)
///   kBHSD  [batch, heads, seq, head_dim]   (HF default unsqueeze_dim=1, ONNX 4-D)
///   kTHD   [tokens, heads, head_dim]       (packed / varlen; B = 1, S = T)
enum class Layout : int { kBSHD = 0, kBHSD = 1, kTHD = 2 };

/// Where an apply call runs.
enum class Backend : int {
  kAuto = 0,       ///< best available (CPU SIMD today)
  kCpu = 1,        ///< SIMD kernels (Highway, runtime ISA dispatch) + threads
  kReference = 2,  ///< literal scalar kernel: the test oracle
  kCuda = 3,       ///< NVIDIA GPU (Error(kUnsupported) unless built with ROTARY_BUILD_CUDA): every tensor of the
                   ///< call, positions included, is device memory and is never read on the host (docs/cuda.md)
};

ROTARY_API const char* pairing_name(Pairing p);     ///< "half" / "interleaved"
ROTARY_API const char* layout_name(Layout l);       ///< "bshd" / "bhsd" / "thd"
ROTARY_API const char* direction_name(Direction d); ///< "forward" / "inverse"
ROTARY_API const char* backend_name(Backend b);     ///< "auto" / "cpu" / "reference" / "cuda"

/// The one set of names every adapter accepts (C++, the C API's rotary_*_from_name, Python, the CLI);
/// the *_name functions above print the first of each:
///   layout     bshd | bhsd | thd
///   pairing    half (also half_split, neox) | interleaved (also gptj)
///   direction  forward | inverse
///   backend    auto | cpu | reference | cuda
/// Anything else throws Error(kInvalidArgument) naming the argument `what` in the words of the entry point
/// `where`: parse_pairing("zigzag") says `[rotary] pairing must be half or interleaved, got "zigzag"`, and
/// parse_pairing("zigzag", "pairing", "rotary_pairing_from_name") `[rotary_pairing_from_name] pairing must be ...`.
ROTARY_API Layout parse_layout(std::string_view name, const char* what = "layout", const char* where = "rotary");
ROTARY_API Pairing parse_pairing(std::string_view name, const char* what = "pairing", const char* where = "rotary");
ROTARY_API Direction parse_direction(std::string_view name, const char* what = "direction",
                                     const char* where = "rotary");
ROTARY_API Backend parse_backend(std::string_view name, const char* what = "backend", const char* where = "rotary");

inline constexpr int kMaxRank = 4;

/// A non-owning strided view. Shape and strides are in *elements* (not bytes).
/// A view with data == nullptr is "absent".
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int rank = 0;
  int64_t shape[kMaxRank] = {0, 0, 0, 0};
  int64_t strides[kMaxRank] = {0, 0, 0, 0};

  bool present() const { return data != nullptr; }
  ROTARY_API int64_t numel() const;
  ROTARY_API bool is_contiguous() const;

  /// Row-major contiguous view of `shape`.
  ROTARY_API static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape);
  ROTARY_API static TensorView contiguous(const void* data, DType dtype, std::initializer_list<int64_t> shape);
  ROTARY_API static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                       std::initializer_list<int64_t> strides);
};

/// Every failure in rotary is reported as rotary::Error. The message always has the
/// form "[where] what, got value" (e.g. "[rotary_apply] rotary_dim must be even, got 7").
class ROTARY_API Error : public std::runtime_error {
 public:
  enum class Kind : int {
    kInvalidArgument = 1,  ///< a value/shape/stride/dtype is wrong
    kOutOfRange = 2,       ///< a position or size beyond a documented limit
    kUnsupported = 3,      ///< valid, but not built/implemented (e.g. CUDA without CUDA)
    kIo = 4,               ///< file could not be read/written or is malformed
    kInternal = 5,
  };
  /// What a kInvalidArgument error is about: a wrong value/shape/stride, or a wrong element type
  /// (a dtype; Python raises TypeError for these, ValueError for the others).
  enum class Cause : int { kValue = 0, kType = 1 };
  Error(Kind kind, const std::string& message, Cause cause = Cause::kValue)
      : std::runtime_error(message), kind_(kind), cause_(cause) {}
  Kind kind() const { return kind_; }
  Cause cause() const { return cause_; }

 private:
  Kind kind_;
  Cause cause_;
};

/// Throws rotary::Error(kind, "[where] " + message).
[[noreturn]] ROTARY_API void fail(Error::Kind kind, const char* where, const std::string& message);

/// User text as messages quote it: in double quotes, bytes outside printable ASCII as \xNN, and cut
/// after `max_chars` characters with the total size appended ("...\" (50000000 bytes)"), so that
/// a message stays short whatever the input (every message that quotes user input goes through this).
ROTARY_API std::string quote_value(std::string_view text, std::size_t max_chars = 48);

}  // namespace rotary
