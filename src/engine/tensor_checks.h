// Internal: the checks every tensor argument of an apply call passes, and its canonical (b, s, h, d) form (engine only).
#pragma once

#include <cstdint>
#include <string>

#include "rotary/types.h"

namespace rotary::detail {

/// "absent" = no data and no shape (a default TensorView).
inline bool absent(const TensorView& v) { return v.data == nullptr && v.rank == 0; }

/// Element size in bytes as int64 (views reaching here have a valid dtype).
inline int64_t elem_size(DType d) { return static_cast<int64_t>(dtype_size(d)); }

/// True if no dimension is 0.
bool has_elements(const TensorView& v);

/// Rank, dtype, shape, stride, null-pointer and byte-size checks shared by every tensor argument.
/// `allow_broadcast_zero`: zero strides on dims of size > 1 (read-only index tensors).
void check_view(const TensorView& v, const char* name, bool allow_broadcast_zero = false);

/// An activation tensor (q, k, an output): rank of the layout, check_view, a floating dtype.
void check_activation(const TensorView& v, const char* name, Layout layout);

/// An i32/i64 vector [what] (batch offsets, cu_seqlens, seq offsets) of `expected_len` entries (-1: any).
void check_int_vector(const TensorView& v, const char* name, int64_t expected_len, const std::string& what);

/// An activation tensor in the canonical (b, s, h, d) order.
struct Canon {
  int64_t B = 0, S = 0, H = 0, D = 0;
  int64_t sb = 0, ss = 0, sh = 0, sd = 0;
};

/// The canonical dims and strides of a view of rank expected_rank(layout).
Canon canonical(const TensorView& v, Layout layout);

inline int expected_rank(Layout l) { return l == Layout::kTHD ? 3 : 4; }

/// "[B,S,H,D]" / "[B,H,S,D]" / "[T,H,D]".
const char* layout_dims(Layout l);

/// A present, row-major contiguous view of rank `rank` that passes check_view by construction (every dim
/// in [1, 2^31), a size-1 dim's stride any value >= 0, at most 2^56 elements); `bytes` = its byte extent
/// (dtype any valid one). The fast planners accept only such views.
bool dense_view(const TensorView& v, int rank, int64_t* bytes);

/// Same data, rank, shape and (on dims of size > 1) strides: an output that means "in place".
bool same_view(const TensorView& a, const TensorView& b);

}  // namespace rotary::detail
