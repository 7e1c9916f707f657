// Test fixture for the CUDA backend: one apply call's tensors in any layout/memory form, with canaries, run twice and compared.
//
// A Call owns every buffer of a call (q, k, outputs, positions, caller cos/sin), each 64-byte aligned and
// filled with a canary pattern outside the elements the call's views cover. clone() copies every byte, so
// two clones can be run through two backends and compared: rotated output elements within the dtype's
// tolerance (testing/tolerances.h), every other byte (pass-through channels, padding, canaries) exactly.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "rotary/apply.h"
#include "testing/shared.h"
#include "testing/tolerances.h"

namespace rotary::testing {

/// 64-byte aligned bytes with a canary fill.
struct Storage {
  std::size_t bytes = 0;
  unsigned char* p = nullptr;
  Storage() = default;
  explicit Storage(std::size_t n) : bytes(n) {
    p = static_cast<unsigned char*>(::operator new(n == 0 ? 64 : n, std::align_val_t(64)));
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(0xA5 ^ (i * 31));
  }
  Storage(const Storage& o) : Storage(o.bytes) { std::memcpy(p, o.p, bytes); }
  Storage& operator=(const Storage&) = delete;
  ~Storage() { ::operator delete(p, std::align_val_t(64)); }
};

/// How a tensor sits in its storage.
enum class Mem {
  kContiguous,      ///< row-major
  kPadded,          ///< row-major with each head row padded by 16 bytes (stays 16-byte aligned)
  kFusedQKV,        ///< q and k are slices of one [.., hq + 2*hk, D] buffer
  kChannelStrided,  ///< every stride doubled (channel stride 2)
  kMisaligned,      ///< row-major, base moved by one element
};

inline void put(void* base, DType dt, int64_t i, double v) {
  switch (dt) {
    case DType::kF32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::kF64: static_cast<double*>(base)[i] = v; break;
    case DType::kF16: static_cast<uint16_t*>(base)[i] = f32_to_f16_bits(static_cast<float>(v)); break;
    case DType::kBF16: static_cast<uint16_t*>(base)[i] = f32_to_bf16_bits(static_cast<float>(v)); break;
    case DType::kI32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DType::kI64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
  }
}

inline double get(const void* base, DType dt, int64_t i) {
  switch (dt) {
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kF64: return static_cast<const double*>(base)[i];
    case DType::kF16: return f16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::kBF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::kI32: return static_cast<const int32_t*>(base)[i];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
  }
  return 0.0;
}

/// A view with user-order `shape` whose last dim is the channel dim, laid out per `mem` in `st`
/// (which must be large enough: view_bytes). `heads_total`/`head_at`: fused QKV (slot of the first head).
struct ViewSpec {
  Layout layout = Layout::kBSHD;
  int64_t B = 1, S = 1, H = 1, D = 2;
  Mem mem = Mem::kContiguous;
  int64_t heads_total = 0, head_at = 0;  // kFusedQKV only
};

inline int64_t elems16(DType dt) { return 16 / static_cast<int64_t>(dtype_size(dt)); }

/// Builds the view (and returns the storage bytes it needs through `need` when st == nullptr).
inline TensorView layout_view(const ViewSpec& v, DType dt, Storage* st, std::size_t* need = nullptr) {
  const bool fused = v.mem == Mem::kFusedQKV;
  const int64_t H = fused ? v.heads_total : v.H;
  const int64_t sd = v.mem == Mem::kChannelStrided ? 2 : 1;
  const int64_t row = v.mem == Mem::kPadded ? v.D + elems16(dt) : v.D;  // channel-dim extent per head
  // user-order shape and row-major strides (in units of sd)
  std::vector<int64_t> shape;
  switch (v.layout) {
    case Layout::kBSHD: shape = {v.B, v.S, H, row}; break;
    case Layout::kBHSD: shape = {v.B, H, v.S, row}; break;
    case Layout::kTHD: shape = {v.S, H, row}; break;
  }
  std::vector<int64_t> strides(shape.size());
  int64_t acc = sd;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[static_cast<std::size_t>(i)] = acc;
    acc *= shape[static_cast<std::size_t>(i)];
  }
  const int64_t shift = v.mem == Mem::kMisaligned ? 1 : 0;
  const std::size_t bytes = static_cast<std::size_t>(acc + shift + 64) * dtype_size(dt);
  if (need) *need = bytes;
  TensorView t;
  if (st == nullptr) return t;
  const int head_dim_index = v.layout == Layout::kBHSD ? 1 : static_cast<int>(shape.size()) - 2;
  int64_t offset = shift;
  if (fused) offset += v.head_at * strides[static_cast<std::size_t>(head_dim_index)];
  t.data = st->p + offset * static_cast<int64_t>(dtype_size(dt));
  t.dtype = dt;
  t.rank = static_cast<int>(shape.size());
  for (int i = 0; i < t.rank; ++i) {
    t.shape[i] = shape[static_cast<std::size_t>(i)];
    t.strides[i] = strides[static_cast<std::size_t>(i)];
  }
  t.shape[t.rank - 1] = v.D;  // padding is not part of the view
  t.shape[head_dim_index] = v.H;
  return t;
}

/// Element offset of (b, s, h, d) in a view of `layout`.
inline int64_t elem_offset(const TensorView& t, Layout layout, int64_t b, int64_t s, int64_t h, int64_t d) {
  switch (layout) {
    case Layout::kBSHD: return b * t.strides[0] + s * t.strides[1] + h * t.strides[2] + d * t.strides[3];
    case Layout::kBHSD: return b * t.strides[0] + h * t.strides[1] + s * t.strides[2] + d * t.strides[3];
    case Layout::kTHD: return s * t.strides[0] + h * t.strides[1] + d * t.strides[2];
  }
  return 0;
}

/// Byte mask of a storage: 1 where an output element of the rotated channels [0, R) lies.
inline void mark_rotated(std::vector<unsigned char>& mask, const Storage& st, const TensorView& t, Layout layout,
                         int64_t B, int64_t S, int64_t H, int64_t R) {
  const std::size_t es = dtype_size(t.dtype);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < R; ++d) {
          const auto at = static_cast<std::size_t>(static_cast<const unsigned char*>(t.data) - st.p) +
                          static_cast<std::size_t>(elem_offset(t, layout, b, s, h, d)) * es;
          for (std::size_t k = 0; k < es; ++k) mask[at + k] = 1;
        }
}

/// Compares two storages: masked elements within `tol` (as `dt` values), every other byte exactly.
/// Returns the number of mismatches (reported through ADD_FAILURE, at most a few).
inline int compare_storage(const Storage& a, const Storage& b, const std::vector<unsigned char>& mask, DType dt,
                           double tol, const std::string& what) {
  int bad = 0;
  const std::size_t es = dtype_size(dt);
  for (std::size_t i = 0; i < a.bytes; ++i) {
    if (mask.empty() || !mask[i]) {
      if (a.p[i] != b.p[i] && bad++ < 3) ADD_FAILURE() << what << ": byte " << i << " outside the rotated elements differs";
      continue;
    }
    if (i % es != 0) continue;  // masks cover whole elements, aligned to the element size from the view's base
    const double x = get(a.p + i, dt, 0), y = get(b.p + i, dt, 0);
    if (!(std::fabs(x - y) <= tol) && bad++ < 3)
      ADD_FAILURE() << what << ": element at byte " << i << " is " << x << ", reference " << y << " (tol " << tol << ")";
  }
  return bad;
}

}  // namespace rotary::testing
