// The checks every tensor argument of an apply call passes (rank, dtype, shape, strides, sizes) and its canonical form.
#include "engine/tensor_checks.h"

#include "core/messages.h"
#include "engine/plan_request.h"

namespace rotary::detail {
namespace {

[[noreturn]] void invalid(const std::string& msg) { detail::invalid(kApplyWhere, msg); }
[[noreturn]] void invalid_type(const std::string& msg) { detail::invalid_dtype(kApplyWhere, msg); }

bool valid_dtype(DType d) { return static_cast<int>(d) >= 0 && static_cast<int>(d) <= static_cast<int>(DType::kF8E5M2); }

}  // namespace

/// Rank, shape, stride, null-pointer and byte-size checks shared by every tensor argument.
/// `allow_broadcast_zero`: zero strides on dims of size > 1 (read-only index tensors).
void check_view(const TensorView& v, const char* name, bool allow_broadcast_zero) {
  if (v.rank < 0 || v.rank > kMaxRank) invalid(std::string(name) + " rank must be in [0, 4], got " + str(v.rank));
  if (!valid_dtype(v.dtype)) invalid_type(std::string(name) + " dtype is not a rotary::DType, got " + str(static_cast<int>(v.dtype)));
  int64_t numel = 1;
  int64_t extent = 0;  // largest element offset
  bool empty = false;
  for (int i = 0; i < v.rank; ++i)
    if (v.shape[i] == 0) empty = true;
  for (int i = 0; i < v.rank; ++i) {
    if (v.shape[i] < 0) invalid(std::string(name) + " shape[" + str(i) + "] must be >= 0, got " + str(v.shape[i]) + " (shape " + shape_str(v) + ")");
    if (v.strides[i] < 0)
      invalid(std::string(name) + " strides must be >= 0 (negative strides are not supported), got stride " + str(v.strides[i]) +
              " for dim " + str(i) + " (strides " + strides_str(v) + ")");
    if (v.strides[i] == 0 && v.shape[i] > 1 && !allow_broadcast_zero && !empty)
      invalid(std::string(name) + " stride of dim " + str(i) + " is 0 but its size is " + str(v.shape[i]) +
              " (zero strides are only allowed on size-1 dims)");
    if (__builtin_mul_overflow(numel, v.shape[i], &numel))
      invalid(std::string(name) + " element count overflows int64 (shape " + shape_str(v) + ")");
  }
  if (!empty) {
    for (int i = 0; i < v.rank; ++i) {
      int64_t term;
      if (__builtin_mul_overflow(v.shape[i] - 1, v.strides[i], &term) || __builtin_add_overflow(extent, term, &extent))
        invalid(std::string(name) + " memory extent overflows int64 (shape " + shape_str(v) + ", strides " + strides_str(v) + ")");
    }
    int64_t bytes;
    if (__builtin_add_overflow(extent, 1, &bytes) ||
        __builtin_mul_overflow(bytes, elem_size(v.dtype), &bytes) ||
        __builtin_mul_overflow(numel, elem_size(v.dtype), &bytes))
      invalid(std::string(name) + " byte size overflows int64 (shape " + shape_str(v) + ", strides " + strides_str(v) + ")");
    if (v.data == nullptr) invalid(std::string(name) + " data is null but it has " + str(numel) + " elements (shape " + shape_str(v) + ")");
  }
}

bool has_elements(const TensorView& v) {
  for (int i = 0; i < v.rank; ++i)
    if (v.shape[i] == 0) return false;
  return true;
}

bool dense_view(const TensorView& v, int rank, int64_t* bytes) {
  if (v.data == nullptr || v.rank != rank || !valid_dtype(v.dtype)) return false;
  int64_t expect = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    if (v.shape[i] <= 0 || v.shape[i] >= (int64_t(1) << 31)) return false;
    // a size-1 dim's stride never addresses anything (any non-negative value is valid)
    if (v.shape[i] == 1 ? v.strides[i] < 0 : v.strides[i] != expect) return false;
    if (__builtin_mul_overflow(expect, v.shape[i], &expect) || expect > (int64_t(1) << 56)) return false;
  }
  *bytes = expect * elem_size(v.dtype);
  return true;
}

Canon canonical(const TensorView& v, Layout layout) {
  Canon c;
  switch (layout) {
    case Layout::kBSHD:
      c = {v.shape[0], v.shape[1], v.shape[2], v.shape[3], v.strides[0], v.strides[1], v.strides[2], v.strides[3]};
      break;
    case Layout::kBHSD:
      c = {v.shape[0], v.shape[2], v.shape[1], v.shape[3], v.strides[0], v.strides[2], v.strides[1], v.strides[3]};
      break;
    case Layout::kTHD:
      c = {1, v.shape[0], v.shape[1], v.shape[2], 0, v.strides[0], v.strides[1], v.strides[2]};
      break;
  }
  return c;
}

const char* layout_dims(Layout l) {
  switch (l) {
    case Layout::kBSHD: return "[B,S,H,D]";
    case Layout::kBHSD: return "[B,H,S,D]";
    case Layout::kTHD: return "[T,H,D]";
  }
  return "?";
}

void check_activation(const TensorView& v, const char* name, Layout layout) {
  if (v.rank != expected_rank(layout))
    invalid(std::string(name) + " must have rank " + str(expected_rank(layout)) + " " + layout_dims(layout) + " for layout " +
            layout_name(layout) + ", got rank " + str(v.rank) + " (shape " + shape_str(v) + ")");
  check_view(v, name);
  if (!is_floating(v.dtype)) invalid_type(std::string(name) + " dtype must be floating (f32, f16, bf16, f64), got " + dtype_name(v.dtype));
}

void check_int_vector(const TensorView& v, const char* name, int64_t expected_len, const std::string& what) {
  if (v.rank != 1) invalid(std::string(name) + " must have rank 1 [" + what + "], got rank " + str(v.rank) + " (shape " + shape_str(v) + ")");
  check_view(v, name, /*allow_broadcast_zero=*/true);
  if (!is_integer(v.dtype)) invalid_type(std::string(name) + " dtype must be i32 or i64, got " + dtype_name(v.dtype));
  if (expected_len >= 0 && v.shape[0] != expected_len)
    invalid(std::string(name) + " must have shape [" + what + "] = [" + str(expected_len) + "], got " + shape_str(v));
}

bool same_view(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i] || (a.shape[i] > 1 && a.strides[i] != b.strides[i])) return false;
  return true;
}

}  // namespace rotary::detail
