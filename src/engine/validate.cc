// Validation of one apply call (tensors, strides, aliasing, positions, caller cos/sin) and Plan building.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "engine/build.h"
#include "rotary/multimodal.h"

namespace rotary::detail {
namespace {

using Kind = Error::Kind;
constexpr int64_t kMaxPosition = (int64_t(1) << 31) - 1;  // positions must be < 2^31

/// Cores to use for threads = 0. hardware_concurrency() reads /sys on glibc (microseconds): asked once.
int all_cores() {
  static const int n = [] {
    const unsigned hc = std::thread::hardware_concurrency();
    return hc == 0 ? 1 : static_cast<int>(hc);
  }();
  return n;
}

[[noreturn]] void invalid(const std::string& msg) { fail(Kind::kInvalidArgument, kApplyWhere, msg); }
[[noreturn]] void out_of_range(const std::string& msg) { fail(Kind::kOutOfRange, kApplyWhere, msg); }

std::string str(int64_t v) { return std::to_string(v); }

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

/// Dims shown for a view: its rank clamped to [0, kMaxRank] (messages may describe a view with a bad rank).
int shown_rank(const TensorView& v) { return v.rank < 0 ? 0 : (v.rank > kMaxRank ? kMaxRank : v.rank); }

std::string shape_str(const TensorView& v) {
  std::string s = "[";
  for (int i = 0; i < shown_rank(v); ++i) s += (i ? "," : "") + str(v.shape[i]);
  return s + "]";
}

std::string strides_str(const TensorView& v) {
  std::string s = "[";
  for (int i = 0; i < shown_rank(v); ++i) s += (i ? "," : "") + str(v.strides[i]);
  return s + "]";
}

/// "absent" = no data and no shape (a default TensorView).
bool absent(const TensorView& v) { return v.data == nullptr && v.rank == 0; }

bool valid_dtype(DType d) { return static_cast<int>(d) >= 0 && static_cast<int>(d) <= 5; }

/// Element size in bytes as int64 (views reaching here have a valid dtype).
inline int64_t elem_size(DType d) { return static_cast<int64_t>(dtype_size(d)); }

/// Rank, shape, stride, null-pointer and byte-size checks shared by every tensor argument.
/// `allow_broadcast_zero`: zero strides on dims of size > 1 (read-only index tensors).
void check_view(const TensorView& v, const char* name, bool allow_broadcast_zero = false) {
  if (v.rank < 0 || v.rank > kMaxRank) invalid(std::string(name) + " rank must be in [0, 4], got " + str(v.rank));
  if (!valid_dtype(v.dtype)) invalid(std::string(name) + " dtype is not a rotary::DType, got " + str(static_cast<int>(v.dtype)));
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

/// An activation tensor in the canonical (b, s, h, d) order.
struct Canon {
  int64_t B = 0, S = 0, H = 0, D = 0;
  int64_t sb = 0, ss = 0, sh = 0, sd = 0;
};

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

int expected_rank(Layout l) { return l == Layout::kTHD ? 3 : 4; }

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
  if (!is_floating(v.dtype)) invalid(std::string(name) + " dtype must be floating (f32, f16, bf16, f64), got " + dtype_name(v.dtype));
}

/// Insertion sort of at most 4 dim indices (std::sort trips GCC 12's -Warray-bounds on tiny arrays).
template <class Less>
void sort_dims(int* idx, int n, Less less) {
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && less(idx[j], idx[j - 1]); --j) std::swap(idx[j], idx[j - 1]);
}

/// An output must not write two elements to one address: with dims sorted by stride, every
/// stride must exceed the extent of all faster dims (a sufficient, standard condition).
void check_no_self_overlap(const TensorView& v, const char* name) {
  if (!has_elements(v)) return;
  // Fast path (the common case): row-major strides, each dim exactly the extent of the faster ones.
  bool row_major = true;
  int64_t expect = 1;
  for (int i = v.rank - 1; i >= 0 && row_major; --i) {
    row_major = v.shape[i] == 1 || v.strides[i] == expect;
    expect *= v.shape[i];  // no overflow: check_view bounded the element count
  }
  if (row_major) return;
  int idx[kMaxRank];
  int n = 0;
  for (int i = 0; i < v.rank; ++i)
    if (v.shape[i] > 1) idx[n++] = i;
  sort_dims(idx, n, [&](int a, int b) { return v.strides[a] < v.strides[b]; });
  int64_t span = 0;
  for (int k = 0; k < n; ++k) {
    const int i = idx[k];
    if (v.strides[i] <= span)
      invalid(std::string(name) + " elements overlap in memory: stride " + str(v.strides[i]) + " of dim " + str(i) +
              " is not larger than the extent " + str(span) + " of the faster dims (shape " + shape_str(v) +
              ", strides " + strides_str(v) + ")");
    span += v.strides[i] * (v.shape[i] - 1);
  }
}

/// Byte grid of a canonical tensor.
struct Grid {
  uintptr_t base = 0;
  int64_t n[4] = {0, 0, 0, 0};
  int64_t st[4] = {0, 0, 0, 0};  // bytes
  int64_t es = 0;
  bool empty() const { return n[0] == 0 || n[1] == 0 || n[2] == 0 || n[3] == 0; }
  uintptr_t lo() const { return base; }
  uintptr_t hi() const {  // exclusive
    int64_t e = 0;
    for (int i = 0; i < 4; ++i) e += (n[i] - 1) * st[i];
    return base + static_cast<uintptr_t>(e + es);
  }
};

Grid grid_of(const TensorView& v, Layout layout) {
  Canon c = canonical(v, layout);
  Grid g;
  g.base = reinterpret_cast<uintptr_t>(v.data);
  g.es = elem_size(v.dtype);
  const int64_t n[4] = {c.B, c.S, c.H, c.D};
  const int64_t s[4] = {c.sb, c.ss, c.sh, c.sd};
  for (int i = 0; i < 4; ++i) {
    g.n[i] = n[i];
    g.st[i] = s[i] * g.es;
  }
  return g;
}

bool intervals_overlap(const Grid& a, const Grid& b) {
  if (a.empty() || b.empty()) return false;
  return a.lo() < b.hi() && b.lo() < a.hi();
}

/// Largest element start offset (bytes, relative to g.base) that is <= y, or -1. Exact for
/// grids passing check_no_self_overlap (each stride exceeds the extent of the faster dims).
int64_t largest_start_le(const Grid& g, int64_t y) {
  if (y < 0) return -1;
  int idx[4] = {0, 1, 2, 3};
  sort_dims(idx, 4, [&](int a, int b) { return g.st[a] > g.st[b]; });
  int64_t rem = y, start = 0;
  for (int k = 0; k < 4; ++k) {
    const int i = idx[k];
    if (g.n[i] <= 1 || g.st[i] == 0) continue;
    const int64_t take = std::min<int64_t>(g.n[i] - 1, rem / g.st[i]);
    rem -= take * g.st[i];
    start += take * g.st[i];
  }
  return start;
}

/// Exact test: does any element of `a` share a byte with an element of `out` (an output grid
/// that passed check_no_self_overlap)? Cost O(rows of a) and only when the ranges intersect.
bool elements_overlap(const Grid& a, const Grid& out) {
  if (!intervals_overlap(a, out)) return false;
  const bool contiguous_rows = a.st[3] == a.es || a.n[3] == 1;
  auto hits = [&](uintptr_t lo, uintptr_t hi_excl) {  // any element of `out` intersecting [lo, hi)
    const int64_t y = static_cast<int64_t>(hi_excl - 1) - static_cast<int64_t>(out.base);
    const int64_t start = largest_start_le(out, y);
    if (start < 0) return false;
    return out.base + static_cast<uintptr_t>(start + out.es) > lo;
  };
  for (int64_t b = 0; b < a.n[0]; ++b)
    for (int64_t s = 0; s < a.n[1]; ++s)
      for (int64_t h = 0; h < a.n[2]; ++h) {
        const uintptr_t row = a.base + static_cast<uintptr_t>(b * a.st[0] + s * a.st[1] + h * a.st[2]);
        if (contiguous_rows) {
          if (hits(row, row + static_cast<uintptr_t>(a.n[3] * a.es))) return true;
        } else {
          for (int64_t d = 0; d < a.n[3]; ++d) {
            const uintptr_t e = row + static_cast<uintptr_t>(d * a.st[3]);
            if (hits(e, e + static_cast<uintptr_t>(a.es))) return true;
          }
        }
      }
  return false;
}

/// "N bytes after" / "N bytes before" / "at the same address as" the reference pointer, for aliasing messages.
std::string byte_offset_str(const void* p, const void* ref) {
  const intptr_t d = reinterpret_cast<intptr_t>(p) - reinterpret_cast<intptr_t>(ref);
  if (d == 0) return "at the same address";
  return std::to_string(d > 0 ? d : -d) + (d > 0 ? " bytes after it" : " bytes before it");
}

bool same_view(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i] || (a.shape[i] > 1 && a.strides[i] != b.strides[i])) return false;
  return true;
}

// ---------------------------------------------------------------- positions

int64_t read_int(const void* base, DType dt, int64_t idx) {
  return dt == DType::kI32 ? static_cast<const int32_t*>(base)[idx] : static_cast<const int64_t*>(base)[idx];
}

double read_float(const void* base, DType dt, int64_t idx) {
  switch (dt) {
    case DType::kI32: return static_cast<const int32_t*>(base)[idx];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(base)[idx]);
    case DType::kF32: return static_cast<const float*>(base)[idx];
    case DType::kF64: return static_cast<const double*>(base)[idx];
    default: return 0.0;
  }
}

void check_int_vector(const TensorView& v, const char* name, int64_t expected_len, const std::string& what) {
  if (v.rank != 1) invalid(std::string(name) + " must have rank 1 [" + what + "], got rank " + str(v.rank) + " (shape " + shape_str(v) + ")");
  check_view(v, name, /*allow_broadcast_zero=*/true);
  if (!is_integer(v.dtype)) invalid(std::string(name) + " dtype must be i32 or i64, got " + dtype_name(v.dtype));
  if (expected_len >= 0 && v.shape[0] != expected_len)
    invalid(std::string(name) + " must have shape [" + what + "] = [" + str(expected_len) + "], got " + shape_str(v));
}

void note_position(PositionRange* r, int64_t p) {
  r->any = true;
  r->max_int = std::max(r->max_int, p);
  r->max_f = std::max(r->max_f, static_cast<double>(p));
}

void check_int_position(int64_t p, const std::string& where_text) {
  if (p < 0) invalid(where_text + " must be >= 0 (negative positions are invalid), got " + str(p));
  if (p > kMaxPosition) out_of_range(where_text + " must be < 2^31, got " + str(p));
}

/// `scan`: read position values (false for empty calls, whose token grid may be huge and unbacked).
void plan_offset(const Positions& pos, Plan& plan, PositionRange* range, bool scan, bool device) {
  if (pos.offset < 0) invalid("positions.offset must be >= 0, got " + str(pos.offset));
  if (pos.offset > kMaxPosition) out_of_range("positions.offset must be < 2^31, got " + str(pos.offset));
  plan.pos.kind = PlanPositions::Kind::kOffset;
  plan.pos.offset = pos.offset;
  int64_t max_bo = 0;
  if (!absent(pos.batch_offsets)) {
    check_int_vector(pos.batch_offsets, "positions.batch_offsets", plan.B, "B");
    range->unknown = device;
    for (int64_t b = 0; scan && !device && b < plan.B; ++b) {
      const int64_t v = read_int(pos.batch_offsets.data, pos.batch_offsets.dtype, b * pos.batch_offsets.strides[0]);
      check_int_position(v, "positions.batch_offsets[" + str(b) + "]");
      max_bo = std::max(max_bo, v);
    }
    plan.pos.batch_offsets = pos.batch_offsets.data;
    plan.pos.batch_offsets_dtype = pos.batch_offsets.dtype;
    plan.pos.batch_offsets_stride = pos.batch_offsets.strides[0];
  }
  if (scan && plan.B > 0 && plan.S > 0) {
    const int64_t last = pos.offset + max_bo + (plan.S - 1);  // each term < 2^31: no overflow
    if (last > kMaxPosition)
      out_of_range("positions: offset " + str(pos.offset) + " + batch offset " + str(max_bo) + " + seq index " +
                   str(plan.S - 1) + " = position " + str(last) + " must be < 2^31");
    note_position(range, last);
  }
}

void plan_ids(const Positions& pos, Layout layout, const PlanRequest& req, Plan& plan, PositionRange* range,
              bool scan, bool device) {
  const TensorView& ids = pos.ids;
  const char* name = "positions.ids";
  const bool thd = layout == Layout::kTHD;
  const char* grid = thd ? "T" : "B,S";
  if (ids.rank < 1 || ids.rank > 3) invalid(std::string(name) + " must have rank 1, 2 or 3, got rank " + str(ids.rank));
  check_view(ids, name, /*allow_broadcast_zero=*/true);
  const bool frac = ids.dtype == DType::kF32 || ids.dtype == DType::kF64;
  if (!is_integer(ids.dtype) && !frac) invalid(std::string(name) + " dtype must be i32, i64, f32 or f64, got " + dtype_name(ids.dtype));
  if (frac && !req.allow_fractional)
    invalid(std::string(name) + " dtype is " + dtype_name(ids.dtype) +
            " (fractional positions) but this cos/sin source only supports integer positions; "
            "use apply_frequencies or Rope (on-the-fly) for fractional positions");

  PlanPositions& pp = plan.pos;
  pp.kind = PlanPositions::Kind::kIds;
  pp.ids = ids.data;
  pp.ids_dtype = ids.dtype;
  // Dims after the optional leading axis dim: [B,S] / [S] (bshd/bhsd), [T] / [1,T] (thd).
  int first = 0;
  if (req.mrope) {
    if (ids.rank < 2 || ids.shape[0] != 3)
      invalid(std::string(name) + " must have shape [3," + grid + "] (t, h, w position per token) for an M-RoPE spec, got " + shape_str(ids));
    pp.n_axes = 3;
    pp.ids_sa = ids.strides[0];
    first = 1;
  } else {
    pp.n_axes = 1;
    pp.ids_sa = 0;
  }
  const int rest = ids.rank - first;
  if (rest == 2) {
    if (ids.shape[first] != plan.B || ids.shape[first + 1] != plan.S)
      invalid(std::string(name) + " shape " + shape_str(ids) + " does not match the token grid [" + (req.mrope ? "3," : "") +
              str(plan.B) + "," + str(plan.S) + "] (" + grid + ")");
    pp.ids_sb = ids.shape[first] == 1 ? 0 : ids.strides[first];
    pp.ids_ss = ids.strides[first + 1];
  } else if (rest == 1) {
    if (ids.shape[first] != plan.S)
      invalid(std::string(name) + " shape " + shape_str(ids) + " does not match " + (thd ? "T = " : "S = ") + str(plan.S) +
              " (expected [" + (req.mrope ? "3," : "") + grid + "]" + (thd ? "" : " or [S] broadcast over batch") + ")");
    pp.ids_sb = 0;
    pp.ids_ss = ids.strides[first];
  } else {
    invalid(std::string(name) + " must have shape [" + (req.mrope ? "3," : "") + grid + "]" + (thd ? "" : " or [S]") + ", got " +
            shape_str(ids));
  }

  range->fractional = frac;
  if (device) {  // values live on the device: not read (docs/cuda.md)
    range->unknown = true;
    return;
  }
  if (!scan) return;
  for (int a = 0; a < pp.n_axes; ++a)
    for (int64_t b = 0; b < plan.B; ++b)
      for (int64_t s = 0; s < plan.S; ++s) {
        const int64_t idx = a * pp.ids_sa + b * pp.ids_sb + s * pp.ids_ss;
        auto label = [&] {
          std::string l = std::string(name) + "[";
          if (req.mrope) l += str(a) + ",";
          if (!thd && rest == 2) l += str(b) + ",";
          return l + str(s) + "]";
        };
        if (frac) {
          const double v = read_float(ids.data, ids.dtype, idx);
          if (!std::isfinite(v)) invalid(label() + " must be a finite position, got " + num(v));
          if (v < 0) invalid(label() + " must be >= 0 (negative positions are invalid), got " + num(v));
          if (v >= 2147483648.0) out_of_range(label() + " must be < 2^31, got " + num(v));
          range->any = true;
          range->max_f = std::max(range->max_f, v);
          range->max_int = std::max(range->max_int, static_cast<int64_t>(std::floor(v)));
        } else {
          const int64_t v = read_int(ids.data, ids.dtype, idx);
          if (v < 0 || v > kMaxPosition) check_int_position(v, label());
          note_position(range, v);
        }
      }
}

void plan_packed(const Positions& pos, Layout layout, Plan& plan, PositionRange* range, bool scan, bool device) {
  if (layout != Layout::kTHD)
    invalid(std::string("positions.kind packed (cu_seqlens) requires layout thd, got layout ") + layout_name(layout));
  const TensorView& cu = pos.cu_seqlens;
  if (absent(cu)) invalid("positions.cu_seqlens must be given for packed positions, got none");
  check_int_vector(cu, "positions.cu_seqlens", -1, "N+1");
  if (cu.shape[0] < 1) invalid("positions.cu_seqlens must have at least 1 entry [N+1], got shape " + shape_str(cu));
  const int64_t n_seq = cu.shape[0] - 1;
  const int64_t T = plan.S;
  if (device) {  // values live on the device: each token finds its sequence there (docs/cuda.md)
    if (!absent(pos.seq_offsets)) check_int_vector(pos.seq_offsets, "positions.seq_offsets", n_seq, "N");
    PlanPositions& pp = plan.pos;
    pp.kind = PlanPositions::Kind::kPacked;
    pp.cu_seqlens = cu.data;
    pp.cu_seqlens_dtype = cu.dtype;
    pp.cu_seqlens_stride = cu.strides[0];
    pp.n_seq = n_seq;
    pp.seq_offsets = pos.seq_offsets.data;
    pp.seq_offsets_dtype = pos.seq_offsets.dtype;
    pp.seq_offsets_stride = absent(pos.seq_offsets) ? 0 : pos.seq_offsets.strides[0];
    range->unknown = true;
    return;
  }
  auto cu_at = [&](int64_t i) { return read_int(cu.data, cu.dtype, i * cu.strides[0]); };
  if (cu_at(0) != 0) invalid("positions.cu_seqlens[0] must be 0, got " + str(cu_at(0)));
  for (int64_t i = 1; scan && i <= n_seq; ++i)
    if (cu_at(i) < cu_at(i - 1))
      invalid("positions.cu_seqlens must be non-decreasing, got cu_seqlens[" + str(i) + "] = " + str(cu_at(i)) +
              " < cu_seqlens[" + str(i - 1) + "] = " + str(cu_at(i - 1)));
  if (cu_at(n_seq) != T)
    invalid("positions.cu_seqlens[" + str(n_seq) + "] (the last entry) must equal the token count T = " + str(T) +
            ", got " + str(cu_at(n_seq)));
  const bool has_off = !absent(pos.seq_offsets);
  if (has_off) check_int_vector(pos.seq_offsets, "positions.seq_offsets", n_seq, "N");
  if (!scan) return;
  plan.pos.kind = PlanPositions::Kind::kPerToken;
  plan.pos.per_token.assign(static_cast<std::size_t>(T), 0);
  for (int64_t n = 0; n < n_seq; ++n) {
    int64_t off = 0;
    if (has_off) {
      off = read_int(pos.seq_offsets.data, pos.seq_offsets.dtype, n * pos.seq_offsets.strides[0]);
      check_int_position(off, "positions.seq_offsets[" + str(n) + "]");
    }
    const int64_t begin = cu_at(n), end = cu_at(n + 1);
    if (end > begin) {
      const int64_t last = off + (end - 1 - begin);
      if (last > kMaxPosition)
        out_of_range("positions: sequence " + str(n) + " reaches position " + str(last) + " (seq_offsets " + str(off) +
                     " + length " + str(end - begin) + " - 1), must be < 2^31");
      note_position(range, last);
    }
    for (int64_t t = begin; t < end; ++t) plan.pos.per_token[static_cast<std::size_t>(t)] = off + (t - begin);
  }
}

}  // namespace

void check_frequencies(const Frequencies& freqs, const char* name) {
  if (freqs.inv_freq.empty()) invalid(std::string(name) + ".inv_freq must not be empty, got 0 entries");
  for (std::size_t i = 0; i < freqs.inv_freq.size(); ++i)
    if (!std::isfinite(freqs.inv_freq[i]))
      invalid(std::string(name) + ".inv_freq[" + str(static_cast<int64_t>(i)) + "] must be finite, got " + num(freqs.inv_freq[i]));
  if (!std::isfinite(freqs.attention_factor))
    invalid(std::string(name) + ".attention_factor must be finite, got " + num(freqs.attention_factor));
}

namespace {

/// A present, non-empty, row-major contiguous floating tensor of the layout's rank whose every
/// check in build_plan_full passes by construction; `bytes` = its exact byte extent.
bool simple_tensor(const TensorView& v, Layout layout, int64_t* bytes) {
  if (v.data == nullptr || v.rank != expected_rank(layout) || !is_floating(v.dtype)) return false;
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

bool disjoint(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa + static_cast<uintptr_t>(a_bytes) <= pb || pb + static_cast<uintptr_t>(b_bytes) <= pa;
}

}  // namespace

/// The common call (contiguous tensors, q and k and any outputs in disjoint memory, offset
/// positions) planned without the general checks, which it passes by construction: a decode step
/// spends most of its validation time here otherwise. Returns false, touching nothing, for
/// anything else (build_plan_full then validates and reports).
bool build_plan_fast(const ApplyArgs& args, const PlanRequest& req, Plan* plan, PositionRange* range) {
  const int layout_i = static_cast<int>(args.layout);
  const Pairing pairing = args.pairing.value_or(req.default_pairing);
  const int pairing_i = static_cast<int>(pairing), direction_i = static_cast<int>(args.direction);
  const int backend_i = static_cast<int>(args.backend);
  if (layout_i < 0 || layout_i > 2 || pairing_i < 0 || pairing_i > 1 || direction_i < 0 || direction_i > 1 ||
      backend_i < 0 || backend_i > 3 || (backend_i == 3 && !cuda_available()) || args.threads < 0)
    return false;
  const Positions& pos = args.positions;
  if (pos.kind != Positions::Kind::kOffset || !absent(pos.batch_offsets) || pos.offset < 0 ||
      pos.offset > kMaxPosition)
    return false;
  if (args.seq_len && *args.seq_len <= 0) return false;
  const Layout layout = args.layout;
  int64_t q_bytes = 0, k_bytes = 0, qo_bytes = 0, ko_bytes = 0;
  if (!simple_tensor(args.q, layout, &q_bytes)) return false;
  const Canon cq = canonical(args.q, layout);
  const bool has_k = !absent(args.k);
  Canon ck;
  if (has_k) {
    if (!simple_tensor(args.k, layout, &k_bytes) || args.k.dtype != args.q.dtype) return false;
    ck = canonical(args.k, layout);
    if (ck.B != cq.B || ck.S != cq.S || ck.D != cq.D || !disjoint(args.q.data, q_bytes, args.k.data, k_bytes))
      return false;
  } else if (!absent(args.k_out)) {
    return false;
  }
  // An output that is the input's own view (same data, shape and strides) means in place.
  const bool q_same = !absent(args.q_out) && same_view(args.q_out, args.q);
  const bool k_same = has_k && !absent(args.k_out) && same_view(args.k_out, args.k);
  if ((q_same && (!simple_tensor(args.q_out, layout, &qo_bytes) || args.q_out.dtype != args.q.dtype)) ||
      (k_same && (!simple_tensor(args.k_out, layout, &ko_bytes) || args.k_out.dtype != args.k.dtype)))
    return false;
  const bool q_oop = !absent(args.q_out) && !q_same, k_oop = !absent(args.k_out) && !k_same;
  if (q_oop) {  // a separate output: same shape and dtype, touching no other tensor of the call
    if (!simple_tensor(args.q_out, layout, &qo_bytes) || args.q_out.dtype != args.q.dtype) return false;
    for (int i = 0; i < args.q.rank; ++i)
      if (args.q_out.shape[i] != args.q.shape[i]) return false;
    if (!disjoint(args.q_out.data, qo_bytes, args.q.data, q_bytes) ||
        (has_k && !disjoint(args.q_out.data, qo_bytes, args.k.data, k_bytes)))
      return false;
  }
  if (k_oop) {
    if (!simple_tensor(args.k_out, layout, &ko_bytes) || args.k_out.dtype != args.k.dtype) return false;
    for (int i = 0; i < args.k.rank; ++i)
      if (args.k_out.shape[i] != args.k.shape[i]) return false;
    if (!disjoint(args.k_out.data, ko_bytes, args.q.data, q_bytes) ||
        !disjoint(args.k_out.data, ko_bytes, args.k.data, k_bytes) ||
        (q_oop && !disjoint(args.k_out.data, ko_bytes, args.q_out.data, qo_bytes)))
      return false;
  }
  const int64_t R = req.rotary_dim;
  if (R <= 0 || R % 2 != 0 || R > cq.D) return false;
  const int64_t last = pos.offset + (cq.S - 1);  // both < 2^31: no overflow
  if (last > kMaxPosition) return false;

  plan->dtype = args.q.dtype;
  plan->pairing = pairing;
  plan->direction = args.direction;
  plan->head_dim = cq.D;
  plan->rotary_dim = R;
  plan->half = R / 2;
  plan->B = cq.B;
  plan->S = cq.S;
  auto fill = [&](PlanTensor& t, const Canon& ci, const TensorView& in, const TensorView& out) {
    const Canon co = &out == &in ? ci : canonical(out, layout);
    t.in = in.data;
    t.out = out.data;
    t.heads = ci.H;
    t.in_sb = ci.sb; t.in_ss = ci.ss; t.in_sh = ci.sh; t.in_sd = ci.sd;
    t.out_sb = co.sb; t.out_ss = co.ss; t.out_sh = co.sh; t.out_sd = co.sd;
  };
  plan->ntensors = 0;
  fill(plan->t[plan->ntensors++], cq, args.q, absent(args.q_out) ? args.q : args.q_out);
  if (has_k) fill(plan->t[plan->ntensors++], ck, args.k, absent(args.k_out) ? args.k : args.k_out);
  plan->threads = args.threads > 0 ? args.threads : all_cores();
  plan->device = req.device || args.backend == Backend::kCuda;
  plan->stream = args.stream;
  plan->pos.kind = PlanPositions::Kind::kOffset;
  plan->pos.offset = pos.offset;
  *range = PositionRange{};
  note_position(range, last);
  return true;
}

Plan build_plan(const ApplyArgs& args, const PlanRequest& req, PositionRange* range) {
  Plan plan;
  if (build_plan_fast(args, req, &plan, range)) return plan;
  return build_plan_full(args, req, range);
}

Plan build_plan_full(const ApplyArgs& args, const PlanRequest& req, PositionRange* range) {
  *range = PositionRange{};
  // ---- enums (the C API may pass arbitrary integers)
  const int layout_i = static_cast<int>(args.layout);
  if (layout_i < 0 || layout_i > 2) invalid("layout must be bshd, bhsd or thd, got " + str(layout_i));
  const Layout layout = args.layout;
  const Pairing pairing = args.pairing.value_or(req.default_pairing);
  if (static_cast<int>(pairing) < 0 || static_cast<int>(pairing) > 1)
    invalid("pairing must be half or interleaved, got " + str(static_cast<int>(pairing)));
  if (static_cast<int>(args.direction) < 0 || static_cast<int>(args.direction) > 1)
    invalid("direction must be forward or backward, got " + str(static_cast<int>(args.direction)));
  const int backend_i = static_cast<int>(args.backend);
  if (backend_i < 0 || backend_i > 3) invalid("backend must be auto, cpu, reference or cuda, got " + str(backend_i));
  if (args.backend == Backend::kCuda && !cuda_available())
    fail(Kind::kUnsupported, kApplyWhere, "backend cuda was requested, got a rotary built without CUDA");
  if (args.threads < 0) invalid("threads must be >= 0 (0 = all cores), got " + str(args.threads));
  const int pos_kind = static_cast<int>(args.positions.kind);
  if (pos_kind < 0 || pos_kind > 2) invalid("positions.kind must be offset, ids or packed, got " + str(pos_kind));

  // ---- q, k, outputs
  check_activation(args.q, "q", layout);
  const Canon cq = canonical(args.q, layout);
  const bool has_k = !absent(args.k);
  Canon ck;
  if (has_k) {
    check_activation(args.k, "k", layout);
    ck = canonical(args.k, layout);
    if (args.k.dtype != args.q.dtype)
      invalid(std::string("k dtype must equal q dtype ") + dtype_name(args.q.dtype) + ", got " + dtype_name(args.k.dtype));
    if (ck.B != cq.B) invalid("k batch size must equal q's " + str(cq.B) + ", got " + str(ck.B) + " (k shape " + shape_str(args.k) + ")");
    if (ck.S != cq.S)
      invalid(std::string("k ") + (layout == Layout::kTHD ? "token count T" : "sequence length S") + " must equal q's " +
              str(cq.S) + ", got " + str(ck.S) + " (k shape " + shape_str(args.k) + ")");
    if (ck.D != cq.D) invalid("k head_dim must equal q's " + str(cq.D) + ", got " + str(ck.D) + " (k shape " + shape_str(args.k) + ")");
  }
  auto check_out = [&](const TensorView& out, const TensorView& in, const char* name, const char* in_name) {
    if (absent(out)) return;
    check_activation(out, name, layout);
    if (out.dtype != in.dtype)
      invalid(std::string(name) + " dtype must equal " + in_name + " dtype " + dtype_name(in.dtype) + ", got " + dtype_name(out.dtype));
    for (int i = 0; i < in.rank; ++i)
      if (out.shape[i] != in.shape[i])
        invalid(std::string(name) + " shape must equal " + in_name + " shape " + shape_str(in) + ", got " + shape_str(out));
  };
  check_out(args.q_out, args.q, "q_out", "q");
  if (!absent(args.k_out) && !has_k) invalid("k_out is given but k is absent, got k_out shape " + shape_str(args.k_out));
  if (has_k) check_out(args.k_out, args.k, "k_out", "k");

  // ---- rotary_dim
  const int64_t R = req.rotary_dim;
  if (R <= 0) invalid("rotary_dim must be > 0, got " + str(R));
  if (R % 2 != 0) invalid("rotary_dim must be even, got " + str(R));
  if (R > cq.D) invalid("rotary_dim must be <= head_dim " + str(cq.D) + ", got " + str(R));

  // ---- aliasing
  const TensorView& q_out = absent(args.q_out) ? args.q : args.q_out;
  const TensorView& k_out = absent(args.k_out) ? args.k : args.k_out;
  const bool q_inplace = same_view(q_out, args.q);
  check_no_self_overlap(q_out, absent(args.q_out) ? "q (rotated in place)" : "q_out");
  const Grid gq = grid_of(args.q, layout);
  const Grid gqo = &q_out == &args.q ? gq : grid_of(q_out, layout);  // in place (q_out absent): same grid
  if (!q_inplace && intervals_overlap(gq, gqo))
    invalid("q_out must either be q itself (same data and strides: in place) or not overlap q's memory, got q_out "
            "overlapping q, starting " + byte_offset_str(q_out.data, args.q.data) + " with strides " + strides_str(q_out) +
            " vs q's " + strides_str(args.q));
  if (has_k) {
    const bool k_inplace = same_view(k_out, args.k);
    check_no_self_overlap(k_out, absent(args.k_out) ? "k (rotated in place)" : "k_out");
    const Grid gk = grid_of(args.k, layout);
    const Grid gko = &k_out == &args.k ? gk : grid_of(k_out, layout);
    if (!k_inplace && intervals_overlap(gk, gko))
      invalid("k_out must either be k itself (same data and strides: in place) or not overlap k's memory, got k_out "
              "overlapping k, starting " + byte_offset_str(k_out.data, args.k.data) + " with strides " +
              strides_str(k_out) + " vs k's " + strides_str(args.k));
    if (elements_overlap(gko, gqo))
      invalid(std::string("the outputs for q and k overlap in memory (") + (q_inplace ? "q" : "q_out") + " and " +
              (k_inplace ? "k" : "k_out") + " share elements), got q and k outputs that alias");
    if (!k_inplace && elements_overlap(gk, gqo))
      invalid(std::string(q_inplace ? "q (rotated in place)" : "q_out") + " overlaps input k: writing q would change k before it is read");
    if (!q_inplace && elements_overlap(gq, gko))
      invalid(std::string(k_inplace ? "k (rotated in place)" : "k_out") + " overlaps input q: writing k would change q before it is read");
  }

  // ---- plan
  Plan plan;
  plan.dtype = args.q.dtype;
  plan.pairing = pairing;
  plan.direction = args.direction;
  plan.head_dim = cq.D;
  plan.rotary_dim = R;
  plan.half = R / 2;
  plan.B = cq.B;
  plan.S = cq.S;
  auto fill = [&](PlanTensor& t, const TensorView& in, const TensorView& out) {
    const Canon ci = canonical(in, layout), co = canonical(out, layout);
    t.in = in.data;
    t.out = out.data;
    t.heads = ci.H;
    t.in_sb = ci.sb; t.in_ss = ci.ss; t.in_sh = ci.sh; t.in_sd = ci.sd;
    t.out_sb = co.sb; t.out_ss = co.ss; t.out_sh = co.sh; t.out_sd = co.sd;
  };
  plan.ntensors = 0;
  if (cq.H > 0) fill(plan.t[plan.ntensors++], args.q, q_out);
  if (has_k && ck.H > 0) fill(plan.t[plan.ntensors++], args.k, k_out);
  plan.threads = args.threads > 0 ? args.threads : all_cores();
  const bool device = req.device || args.backend == Backend::kCuda;
  plan.device = device;
  plan.stream = args.stream;

  // ---- positions (an empty call is checked for shape only: its token grid may be huge and unbacked)
  const bool scan = plan.ntensors > 0 && plan.B > 0 && plan.S > 0;
  switch (args.positions.kind) {
    case Positions::Kind::kOffset: plan_offset(args.positions, plan, range, scan, device); break;
    case Positions::Kind::kIds:
      if (absent(args.positions.ids)) invalid("positions.ids must be given for positions of kind ids, got none");
      plan_ids(args.positions, layout, req, plan, range, scan, device);
      break;
    case Positions::Kind::kPacked: plan_packed(args.positions, layout, plan, range, scan, device); break;
  }
  if (args.seq_len && *args.seq_len <= 0) invalid("seq_len must be > 0 when given, got " + str(*args.seq_len));
  return plan;
}

void attach_caller_cos_sin(Plan& plan, const TensorView& cos, const TensorView& sin, const ApplyArgs& args,
                           const PositionRange& range) {
  if (cos.rank != 2 && cos.rank != 3)
    invalid("cos must have rank 2 [max_pos, R/2] or rank 3 [B, S, R/2], got rank " + str(cos.rank) + " (shape " + shape_str(cos) + ")");
  check_view(cos, "cos", /*allow_broadcast_zero=*/true);
  check_view(sin, "sin", /*allow_broadcast_zero=*/true);
  if (!is_floating(cos.dtype)) invalid(std::string("cos dtype must be floating (f32, f16, bf16, f64), got ") + dtype_name(cos.dtype));
  if (sin.dtype != cos.dtype)
    invalid(std::string("sin dtype must equal cos dtype ") + dtype_name(cos.dtype) + ", got " + dtype_name(sin.dtype));
  if (sin.rank != cos.rank) invalid("sin shape must equal cos shape " + shape_str(cos) + ", got " + shape_str(sin));
  for (int i = 0; i < cos.rank; ++i)
    if (sin.shape[i] != cos.shape[i]) invalid("sin shape must equal cos shape " + shape_str(cos) + ", got " + shape_str(sin));
  const int64_t last = cos.shape[cos.rank - 1];
  if (last != plan.half)
    invalid("cos last dim must be rotary_dim/2 = " + str(plan.half) + ", got shape " + shape_str(cos));
  if (cos.rank == 2) {
    if (range.fractional) invalid("positions.ids must be integer with a caller cos/sin table, got fractional ids");
    // Device positions are not read here: the kernel writes NaN for a position outside [0, max_pos).
    if (range.any && !range.unknown && range.max_int >= cos.shape[0])
      out_of_range("position " + str(range.max_int) + " is out of range for cos/sin with " + str(cos.shape[0]) +
                   " rows (shape " + shape_str(cos) + "); positions must be < max_pos");
  } else {
    const Positions& p = args.positions;
    if (p.kind != Positions::Kind::kOffset || p.offset != 0 || !absent(p.batch_offsets))
      invalid("positions must be the default (offset 0, no ids) with an already gathered rank-3 cos [B,S,R/2], got "
              "positions of kind " + std::string(p.kind == Positions::Kind::kIds ? "ids" : p.kind == Positions::Kind::kPacked ? "packed" : "offset") +
              (p.kind == Positions::Kind::kOffset ? " " + str(p.offset) : ""));
    if ((cos.shape[0] != plan.B && cos.shape[0] != 1) || cos.shape[1] != plan.S)
      invalid("cos shape must be [B,S,R/2] = [" + str(plan.B) + "," + str(plan.S) + "," + str(plan.half) + "], got " + shape_str(cos));
  }
  plan.cs.kind = PlanCosSin::Kind::kCaller;
  plan.cs.cos = cos;
  plan.cs.sin = sin;
}

std::vector<uint8_t> mrope_axis_of_freq(const MRope& mrope, int64_t half) {
  return mrope_axis_map(mrope, half);  // core (rotary/multimodal.h): strict section checks + the axis rule
}

}  // namespace rotary::detail
