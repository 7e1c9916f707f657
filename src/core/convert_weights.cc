// Row permutation of q/k projection weights and biases between interleaved and half-split pairing.
#include "rotary/convert_weights.h"

#include <cstring>
#include <utility>
#include <string>

#include "core/messages.h"

namespace rotary {
namespace {

using Kind = Error::Kind;
constexpr const char* kWhere = "rotary_permute_qk";

[[noreturn]] void invalid(const std::string& msg) { fail(Kind::kInvalidArgument, kWhere, msg); }
using detail::str;

void check_perm(const QkPermutation& p) {
  if (p.n_heads <= 0) invalid("n_heads must be > 0, got " + str(p.n_heads));
  if (p.head_dim <= 0) invalid("head_dim must be > 0, got " + str(p.head_dim));
  if (p.head_dim > (int64_t(1) << 16)) invalid("head_dim must be <= 65536 (rotary's limit), got " + str(p.head_dim));
  int64_t rows = 0;
  if (__builtin_mul_overflow(p.n_heads, p.head_dim, &rows))
    invalid("n_heads * head_dim overflows int64, got " + str(p.n_heads) + " * " + str(p.head_dim));
  const int64_t R = p.rotary_dim == 0 ? p.head_dim : p.rotary_dim;
  if (R <= 0 || R % 2 != 0) invalid("rotary_dim must be even and > 0, got " + str(R));
  if (R > p.head_dim) invalid("rotary_dim must be <= head_dim " + str(p.head_dim) + ", got " + str(R));
  for (Pairing q : {p.from, p.to})
    if (static_cast<int>(q) < 0 || static_cast<int>(q) > 1)
      invalid("from/to must be half or interleaved, got " + str(static_cast<int>(q)));
}

/// Bytes spanned by a [rows, cols] view with the given element strides (rows, cols >= 1, strides >= 0),
/// i.e. ((rows-1)*s_row + (cols-1)*s_col + 1) * es, refusing (naming `name`) when it overflows int64.
int64_t byte_extent(const char* name, int64_t rows, int64_t cols, int64_t s_row, int64_t s_col, int64_t es) {
  int64_t a = 0, b = 0, extent = 0;
  if (__builtin_mul_overflow(rows - 1, s_row, &a) || __builtin_mul_overflow(cols - 1, s_col, &b) ||
      __builtin_add_overflow(a, b, &extent) || __builtin_add_overflow(extent, int64_t(1), &extent) ||
      __builtin_mul_overflow(extent, es, &extent))
    invalid(std::string(name) + " memory extent overflows int64 (shape [" + str(rows) + "," + str(cols) + "], strides [" +
            str(s_row) + "," + str(s_col) + "])");
  return extent;
}

/// An output never maps two elements to one address: sorted by stride, each dim of size > 1 must step
/// past the whole extent of the faster one.
void check_no_self_overlap(const char* name, int64_t rows, int64_t cols, int64_t s_row, int64_t s_col) {
  int64_t n_in = cols, s_in = s_col, n_out = rows, s_out = s_row;
  if (n_in == 1 || (n_out > 1 && s_out < s_in)) {
    std::swap(n_in, n_out);
    std::swap(s_in, s_out);
  }
  const int64_t inner = (n_in - 1) * s_in + 1;  // no overflow: byte_extent checked these products
  if ((n_in > 1 && s_in == 0) || (n_out > 1 && s_out < inner))
    invalid(std::string(name) + " elements overlap in memory (shape [" + str(rows) + "," + str(cols) + "], strides [" +
            str(s_row) + "," + str(s_col) + "]): an output must not map two elements to one address");
}

}  // namespace

std::vector<int64_t> qk_row_permutation(const QkPermutation& p) {
  check_perm(p);
  const int64_t D = p.head_dim, R = p.rotary_dim == 0 ? p.head_dim : p.rotary_dim, h = R / 2;
  std::vector<int64_t> perm(static_cast<std::size_t>(p.n_heads * D));
  for (int64_t head = 0; head < p.n_heads; ++head) {
    const int64_t base = head * D;
    for (int64_t d = 0; d < D; ++d) perm[static_cast<std::size_t>(base + d)] = base + d;
    if (p.from == p.to) continue;
    for (int64_t i = 0; i < h; ++i)
      for (int64_t c = 0; c < 2; ++c) {
        const int64_t half_row = c * h + i, inter_row = 2 * i + c;
        if (p.to == Pairing::kHalfSplit) perm[static_cast<std::size_t>(base + half_row)] = base + inter_row;
        else perm[static_cast<std::size_t>(base + inter_row)] = base + half_row;
      }
  }
  return perm;
}

void permute_qk_weight(const TensorView& src, const TensorView& dst, const QkPermutation& p) {
  const std::vector<int64_t> perm = qk_row_permutation(p);
  const int64_t rows = static_cast<int64_t>(perm.size());
  if (src.rank != 1 && src.rank != 2)
    invalid("src must be a weight [n_heads*head_dim, in] (rank 2) or a bias [n_heads*head_dim] (rank 1), got rank " +
            str(src.rank));
  if (!is_floating(src.dtype)) invalid(std::string("src dtype must be f32, f16, bf16 or f64, got ") + dtype_name(src.dtype));
  if (src.shape[0] != rows)
    invalid("src.shape[0] must be n_heads*head_dim = " + str(p.n_heads) + "*" + str(p.head_dim) + " = " + str(rows) +
            ", got " + str(src.shape[0]));
  if (dst.rank != src.rank || dst.dtype != src.dtype)
    invalid("dst must have the rank and dtype of src (rank " + str(src.rank) + ", " + dtype_name(src.dtype) + "), got rank " +
            str(dst.rank) + ", " + dtype_name(dst.dtype));
  for (int i = 0; i < src.rank; ++i) {
    if (dst.shape[i] != src.shape[i])
      invalid("dst.shape[" + str(i) + "] must equal src.shape[" + str(i) + "] = " + str(src.shape[i]) + ", got " +
              str(dst.shape[i]));
    if (src.strides[i] < 0 || dst.strides[i] < 0) invalid("strides must be >= 0");
  }
  const int64_t cols = src.rank == 2 ? src.shape[1] : 1;
  if (cols < 0) invalid("src.shape[1] must be >= 0, got " + str(cols));
  if (rows == 0 || cols == 0) return;
  if (src.data == nullptr || dst.data == nullptr) invalid("src.data and dst.data must not be null");
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype));
  const int64_t s_row = src.strides[0], s_col = src.rank == 2 ? src.strides[1] : 1;
  const int64_t d_row = dst.strides[0], d_col = dst.rank == 2 ? dst.strides[1] : 1;
  // The same byte-count checks as an apply call: element count, byte size and both extents fit in int64.
  int64_t bytes = 0;
  if (__builtin_mul_overflow(rows, cols, &bytes) || __builtin_mul_overflow(bytes, es, &bytes))
    invalid("src byte size overflows int64 (shape [" + str(rows) + "," + str(cols) + "], " + dtype_name(src.dtype) + ")");
  const int64_t src_extent = byte_extent("src", rows, cols, s_row, s_col, es);
  const int64_t dst_extent = byte_extent("dst", rows, cols, d_row, d_col, es);
  check_no_self_overlap("dst", rows, cols, d_row, d_col);

  const bool same = src.data == dst.data && s_row == d_row && s_col == d_col;
  const auto* sb = static_cast<const unsigned char*>(src.data);
  auto* db = static_cast<unsigned char*>(dst.data);
  if (!same) {
    // Byte ranges must not intersect (a partial overlap would read rows already overwritten).
    const auto lo_s = reinterpret_cast<uintptr_t>(sb), lo_d = reinterpret_cast<uintptr_t>(db);
    const auto hi_s = lo_s + static_cast<uintptr_t>(src_extent), hi_d = lo_d + static_cast<uintptr_t>(dst_extent);
    if (lo_s < hi_d && lo_d < hi_s) invalid("dst overlaps src without being src itself (in place needs equal data and strides)");
    // Disjoint: gather straight into dst, no temporary.
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t from = perm[static_cast<std::size_t>(r)];
      for (int64_t c = 0; c < cols; ++c)
        std::memcpy(db + (r * d_row + c * d_col) * es, sb + (from * s_row + c * s_col) * es, static_cast<std::size_t>(es));
    }
    return;
  }
  // In place: gather into a contiguous buffer first (its size is the checked byte count above).
  std::vector<unsigned char> tmp(static_cast<std::size_t>(bytes));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t from = perm[static_cast<std::size_t>(r)];
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(tmp.data() + (r * cols + c) * es, sb + (from * s_row + c * s_col) * es, static_cast<std::size_t>(es));
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(db + (r * d_row + c * d_col) * es, tmp.data() + (r * cols + c) * es, static_cast<std::size_t>(es));
}

}  // namespace rotary
