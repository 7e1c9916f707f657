// Row permutation of q/k projection weights and biases between interleaved and half-split pairing.
#include "rotary/convert_weights.h"

#include <cstring>
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
  const int64_t R = p.rotary_dim == 0 ? p.head_dim : p.rotary_dim;
  if (R <= 0 || R % 2 != 0) invalid("rotary_dim must be even and > 0, got " + str(R));
  if (R > p.head_dim) invalid("rotary_dim must be <= head_dim " + str(p.head_dim) + ", got " + str(R));
  for (Pairing q : {p.from, p.to})
    if (static_cast<int>(q) < 0 || static_cast<int>(q) > 1)
      invalid("from/to must be half or interleaved, got " + str(static_cast<int>(q)));
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
  if (rows * cols == 0) return;
  if (src.data == nullptr || dst.data == nullptr) invalid("src.data and dst.data must not be null");
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype));
  const int64_t s_row = src.strides[0], s_col = src.rank == 2 ? src.strides[1] : 1;
  const int64_t d_row = dst.strides[0], d_col = dst.rank == 2 ? dst.strides[1] : 1;
  if (rows > 1 && d_row == 0) invalid("dst.strides[0] must be > 0");
  if (cols > 1 && d_col == 0) invalid("dst.strides[1] must be > 0");

  const bool same = src.data == dst.data && s_row == d_row && s_col == d_col;
  const auto* sb = static_cast<const unsigned char*>(src.data);
  auto* db = static_cast<unsigned char*>(dst.data);
  if (!same) {
    // Byte ranges must not intersect (a partial overlap would read rows already overwritten).
    const auto lo_s = reinterpret_cast<uintptr_t>(sb), lo_d = reinterpret_cast<uintptr_t>(db);
    const auto hi_s = lo_s + static_cast<uintptr_t>(((rows - 1) * s_row + (cols - 1) * s_col + 1) * es);
    const auto hi_d = lo_d + static_cast<uintptr_t>(((rows - 1) * d_row + (cols - 1) * d_col + 1) * es);
    if (lo_s < hi_d && lo_d < hi_s) invalid("dst overlaps src without being src itself (in place needs equal data and strides)");
  }
  // Gather into a contiguous buffer first: correct in place, and a plain copy out of place.
  std::vector<unsigned char> tmp(static_cast<std::size_t>(rows * cols * es));
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
