// The checks of the prologue family's own arguments: cache geometry and dtype, slots, scales, norm weights, sources, disjointness.
#include "engine/prologue_checks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>
#include <string>

#include "core/freqs_internal.h"
#include "core/messages.h"
#include "engine/overlap.h"
#include "engine/plan_request.h"
#include "engine/tensor_checks.h"
#include "plan/dtype_scalar.h"
#include "rotary/multimodal.h"

namespace rotary {

const char* cache_layout_name(CacheLayout l) {
  switch (l) {
    case CacheLayout::kNHD: return "nhd";
    case CacheLayout::kHND: return "hnd";
    case CacheLayout::kBSHD: return "bshd";
    case CacheLayout::kBHSD: return "bhsd";
  }
  return "unknown";
}

CacheLayout parse_cache_layout(std::string_view name, const char* what, const char* where) {
  for (int i = 0; i < 4; ++i)
    if (name == cache_layout_name(static_cast<CacheLayout>(i))) return static_cast<CacheLayout>(i);
  fail(Error::Kind::kInvalidArgument, where,
       std::string(what) + " must be nhd, hnd, bshd or bhsd, got " + quote_value(name));
}

namespace detail {

namespace {
bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

/// The message with each whole word "q" / "q_out" (not inside another word) as "k" / "k_out".
std::string q_words_as_k(const std::string& msg) {
  std::string out;
  out.reserve(msg.size());
  for (size_t i = 0; i < msg.size(); ++i) {
    const bool starts = msg[i] == 'q' && (i == 0 || !word_char(msg[i - 1]));
    size_t len = 0;
    if (starts && (i + 1 == msg.size() || !word_char(msg[i + 1]))) len = 1;
    else if (starts && msg.compare(i, 5, "q_out") == 0 && (i + 5 == msg.size() || !word_char(msg[i + 5]))) len = 5;
    if (len == 0) {
      out += msg[i];
      continue;
    }
    out += len == 1 ? "k" : "k_out";
    i += len - 1;
  }
  return out;
}
}  // namespace

void rethrow_as(const Error& e, const char* where, bool q_is_k) {
  std::string msg = e.what();
  const std::string from = std::string("[") + kApplyWhere + "]";
  if (msg.compare(0, from.size(), from) == 0) msg = std::string("[") + where + "]" + msg.substr(from.size());
  if (q_is_k) msg = q_words_as_k(msg);
  throw Error(e.kind(), msg, e.cause());
}

const char* cache_dims(CacheLayout layout) {
  switch (layout) {
    case CacheLayout::kNHD: return "[num_blocks, block_size, Hkv, D]";
    case CacheLayout::kHND: return "[num_blocks, Hkv, block_size, D]";
    case CacheLayout::kBSHD: return "[B, S_max, Hkv, D]";
    case CacheLayout::kBHSD: return "[B, Hkv, S_max, D]";
  }
  return "?";
}

namespace {

/// Axis of the cache's minor (slot-within-block or sequence) and head dims for a layout.
void cache_axes(CacheLayout layout, int* minor_axis, int* head_axis) {
  const bool heads_second = layout == CacheLayout::kHND || layout == CacheLayout::kBHSD;
  *minor_axis = heads_second ? 2 : 1;
  *head_axis = heads_second ? 1 : 2;
}

bool cache_dtype(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kI8 || is_fp8(d);
}

}  // namespace

void cache_rows(const TensorView& cache, CacheLayout layout, const char* name, int64_t heads, int64_t dim,
                const char* where, int64_t* major, PlanRows* rows, bool dense) {
  if (cache.rank != 4)
    invalid(where, std::string(name) + " must have rank 4 " + cache_dims(layout) + " for cache_layout " + cache_layout_name(layout) +
                       ", got rank " + str(cache.rank) + " (shape " + shape_str(cache) + ")");
  if (!dense) {
    try {
      check_view(cache, name);
    } catch (const Error& e) {
      rethrow_as(e, where);
    }
  }
  if (!cache_dtype(cache.dtype))
    invalid_dtype(where, std::string(name) + " dtype must be f32, f16, bf16, i8, f8e4m3 or f8e5m2, got " + dtype_name(cache.dtype));
  int minor_axis, head_axis;
  cache_axes(layout, &minor_axis, &head_axis);
  if (cache.shape[head_axis] != heads || cache.shape[3] != dim)
    invalid(where, std::string(name) + " must have shape " + cache_dims(layout) + " with Hkv = " + str(heads) + " and D = " + str(dim) +
                       " (cache_layout " + cache_layout_name(layout) + "), got " + shape_str(cache));
  if (!dense) {
    try {
      check_no_self_overlap(cache, name);
    } catch (const Error& e) {
      rethrow_as(e, where);
    }
  }
  PlanRows& r = *rows;
  r = PlanRows{};
  r.data = cache.data;
  r.dtype = cache.dtype;
  r.heads = heads;
  r.dim = dim;
  r.minor_count = cache.shape[minor_axis];  // 0 (no block_size or S_max): a capacity of 0, no slot passes check_slots
  r.s_major = cache.strides[0];
  r.s_minor = cache.strides[minor_axis];
  r.s_head = cache.strides[head_axis];
  r.s_d = cache.strides[3];
  *major = cache.shape[0];
}

void attach_scale(PlanRows& rows, const TensorView& scale, const TensorView& cache, CacheLayout layout,
                  const char* name, const char* cache_name, const char* where, bool dense) {
  const bool given = !absent(scale);
  if (rows.dtype != DType::kI8 && !is_fp8(rows.dtype)) {
    if (given)
      invalid(where, std::string(name) + " is given but " + cache_name + " dtype is " + dtype_name(rows.dtype) +
                         " (scales belong to i8 and fp8 caches), got " + name + " shape " + shape_str(scale));
    return;
  }
  if (!given)
    invalid(where, std::string(name) + " must be given for an " + dtype_name(rows.dtype) + " " + cache_name + " (" +
                       (rows.dtype == DType::kI8 ? "f32, one scale per row and head, written by the call"
                                                 : "f32, the per-tensor scale") +
                       "), got none");
  if (!dense) {
    try {
      check_view(scale, name, /*allow_broadcast_zero=*/rows.dtype != DType::kI8);
    } catch (const Error& e) {
      rethrow_as(e, where);
    }
  }
  if (scale.dtype != DType::kF32) invalid_dtype(where, std::string(name) + " dtype must be f32, got " + dtype_name(scale.dtype));
  if (is_fp8(rows.dtype)) {
    if (scale.numel() != 1)
      invalid(where, std::string(name) + " must hold one value (the per-tensor scale of an " + dtype_name(rows.dtype) + " " + cache_name +
                         "), got shape " + shape_str(scale));
    const float v = *static_cast<const float*>(scale.data);
    if (!(std::isfinite(v) && v > 0.0f)) invalid(where, std::string(name) + " must be finite and > 0, got " + num(v));
    rows.tensor_scale = v;
    return;
  }
  int minor_axis, head_axis;
  cache_axes(layout, &minor_axis, &head_axis);
  bool ok = scale.rank == 3;
  for (int i = 0; ok && i < 3; ++i) ok = scale.shape[i] == cache.shape[i];
  if (!ok)
    invalid(where, std::string(name) + " must have " + cache_name + "'s shape without its last axis [" + str(cache.shape[0]) + "," +
                       str(cache.shape[1]) + "," + str(cache.shape[2]) + "] (one f32 scale per row and head), got " +
                       shape_str(scale));
  if (!dense) {
    try {
      check_no_self_overlap(scale, name);
    } catch (const Error& e) {
      rethrow_as(e, where);
    }
  }
  rows.scales = static_cast<float*>(scale.data);
  rows.sc_major = scale.strides[0];
  rows.sc_minor = scale.strides[minor_axis];
  rows.sc_head = scale.strides[head_axis];
}

void read_indices(const TensorView& v, const char* name, int64_t n, const std::string& shape_text, const char* where,
                  std::vector<int64_t>* out, int64_t rank2_b, int64_t rank2_s) {
  const bool grid = rank2_b >= 0 && v.rank == 2;
  if (v.rank != 1 && !grid)
    invalid(where, std::string(name) + " must have shape " + shape_text + ", got rank " + str(v.rank) + " (shape " + shape_str(v) + ")");
  try {
    check_view(v, name, /*allow_broadcast_zero=*/true);
  } catch (const Error& e) {
    rethrow_as(e, where);
  }
  if (!is_integer(v.dtype)) invalid_dtype(where, std::string(name) + " dtype must be i32 or i64, got " + dtype_name(v.dtype));
  const bool shape_ok = grid ? v.shape[0] == rank2_b && v.shape[1] == rank2_s : v.shape[0] == n;
  if (!shape_ok) invalid(where, std::string(name) + " must have shape " + shape_text + ", got " + shape_str(v));
  out->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t off = grid ? (i / rank2_s) * v.strides[0] + (i % rank2_s) * v.strides[1] : i * v.strides[0];
    (*out)[static_cast<size_t>(i)] = load_int_index(v.data, v.dtype, off);
  }
}

void check_slots(const int64_t* slots, int64_t n, int64_t capacity, const char* name, const char* capacity_text,
                 const char* where) {
  for (int64_t i = 0; i < n; ++i)
    if (slots[i] < -1 || slots[i] >= capacity)
      out_of_range(where, std::string(name) + "[" + str(i) + "] must be -1 (skip) or in [0, " + capacity_text + " = " +
                              str(capacity) + "), got " + str(slots[i]));
  if (n < 2) return;
  std::vector<std::pair<int64_t, int64_t>> sorted;  // (slot, index)
  sorted.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    if (slots[i] >= 0) sorted.emplace_back(slots[i], i);
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i].first == sorted[i - 1].first)
      invalid(where, std::string(name) + "[" + str(sorted[i].second) + "] repeats " + name + "[" +
                         str(sorted[i - 1].second) + "] = " + str(sorted[i].first) +
                         ": a row may be written once per call");
}

const float* norm_weight(const TensorView& w, const char* name, int64_t dim, double offset, const char* where,
                         std::vector<float>* storage) {
  if (w.rank != 1) invalid(where, std::string(name) + " must have shape [D] = [" + str(dim) + "], got rank " + str(w.rank));
  try {
    check_view(w, name, /*allow_broadcast_zero=*/true);
  } catch (const Error& e) {
    rethrow_as(e, where);
  }
  if (!is_floating(w.dtype)) invalid_dtype(where, std::string(name) + " dtype must be floating (f32, f16, bf16, f64), got " + dtype_name(w.dtype));
  if (w.shape[0] != dim) invalid(where, std::string(name) + " must have shape [D] = [" + str(dim) + "], got " + shape_str(w));
  const auto off = static_cast<float>(offset);
  if (w.dtype == DType::kF32 && off == 0.0f && w.strides[0] == 1) return static_cast<const float*>(w.data);
  storage->resize(static_cast<size_t>(dim));
  for (int64_t i = 0; i < dim; ++i)
    (*storage)[static_cast<size_t>(i)] = static_cast<float>(load_as_double(w.data, w.dtype, i * w.strides[0])) + off;
  return storage->data();
}

void byte_range(const TensorView& v, uintptr_t* lo, uintptr_t* hi) {
  *lo = *hi = reinterpret_cast<uintptr_t>(v.data);
  if (!has_elements(v)) return;
  int64_t extent = 0;
  for (int i = 0; i < v.rank; ++i) extent += (v.shape[i] - 1) * v.strides[i];
  *hi = *lo + static_cast<uintptr_t>((extent + 1) * elem_size(v.dtype));
}

namespace {

/// Whether some element of grid a (offset 0) and of grid b (offset delta bytes, same dims and strides,
/// each stride larger than the extent of the faster dims) share a byte: delta = sum d_k * st_k + e with
/// |d_k| < n_k and |e| < element size. Each level admits at most two digits (stride > faster extent).
bool shifted_grid_hits(const int64_t* n, const int64_t* st, const int* order, int k, int rank, int64_t delta, int64_t es) {
  if (k == rank) return delta > -es && delta < es;
  const int i = order[k];
  if (n[i] <= 1 || st[i] == 0) return shifted_grid_hits(n, st, order, k + 1, rank, delta, es);
  const int64_t q = delta >= 0 ? delta / st[i] : -((-delta) / st[i]);
  for (int64_t d = q - 1; d <= q + 1; ++d)
    if (d > -n[i] && d < n[i] && shifted_grid_hits(n, st, order, k + 1, rank, delta - d * st[i], es)) return true;
  return false;
}

/// Whether a and b provably share no byte because their rows interleave: a view's row is the bytes its
/// fastest dim (smallest stride among dims of size > 1) spans from one origin, or a single element; every
/// other stride of both views is a multiple of p (their gcd), so modulo p each view's rows start at its data
/// address. Disjoint when, modulo p, b's rows [d, d + wb) lie in the gap after a's [0, wa). Each view is tried
/// both ways (a sufficient condition either way). E.g. vLLM's MLA cache [..., L + P] as v = [..., :L] and
/// k = [..., L:], or an int8 cache row and its f32 scale packed after it in one arena.
bool rows_interleave(const TensorView& a, const TensorView& b) {
  const TensorView* v[2] = {&a, &b};
  int fast[2] = {-1, -1};
  for (int t = 0; t < 2; ++t)
    for (int i = 0; i < v[t]->rank; ++i)
      if (v[t]->shape[i] > 1 && (fast[t] < 0 || v[t]->strides[i] < v[t]->strides[fast[t]])) fast[t] = i;
  const auto delta = static_cast<int64_t>(reinterpret_cast<uintptr_t>(b.data) - reinterpret_cast<uintptr_t>(a.data));
  for (int choice = 0; choice < 4; ++choice) {  // bit t: view t's row is one element
    int64_t p = 0, w[2] = {0, 0};
    for (int t = 0; t < 2; ++t) {
      const TensorView& x = *v[t];
      const int64_t es = elem_size(x.dtype);
      const int row = (choice >> t) & 1 ? -1 : fast[t];
      w[t] = row < 0 ? es : (x.shape[row] - 1) * x.strides[row] * es + es;
      for (int i = 0; i < x.rank; ++i)
        if (i != row && x.shape[i] > 1) p = std::gcd(p, x.strides[i] * es);
    }
    if (p <= 0 || w[0] > p || w[1] > p) continue;
    const int64_t d = ((delta % p) + p) % p;
    if (d >= w[0] && d + w[1] <= p) return true;
  }
  return false;
}

}  // namespace

void check_disjoint(const TensorView& out, const char* out_name, const TensorView& other, const char* other_name,
                    const char* where, const Layout* activations) {
  if (absent(out) || absent(other) || !has_elements(out) || !has_elements(other)) return;
  uintptr_t a0, a1, b0, b1;
  byte_range(out, &a0, &a1);
  byte_range(other, &b0, &b1);
  if (a1 <= b0 || b1 <= a0) return;
  if (activations != nullptr && !activations_overlap(other, out, *activations)) return;
  bool same_grid = out.rank == other.rank && out.dtype == other.dtype;
  for (int i = 0; same_grid && i < out.rank; ++i) same_grid = out.shape[i] == other.shape[i] && out.strides[i] == other.strides[i];
  if (same_grid && out.data != other.data) {
    const int64_t es = elem_size(out.dtype);
    int64_t n[kMaxRank], st[kMaxRank];
    int order[kMaxRank];
    for (int i = 0; i < out.rank; ++i) {
      n[i] = out.shape[i];
      st[i] = out.strides[i] * es;
      order[i] = i;
    }
    for (int x = 1; x < out.rank; ++x)  // insertion sort (std::sort trips GCC 12's -Warray-bounds on tiny arrays)
      for (int y = x; y > 0 && st[order[y]] > st[order[y - 1]]; --y) std::swap(order[y], order[y - 1]);
    const auto delta = static_cast<int64_t>(b0 - a0);
    // Exact only for grids without self-overlap (written outputs are checked for that first).
    bool nested = true;
    int64_t span = es;
    for (int k = out.rank - 1; k >= 0; --k) {
      const int i = order[k];
      if (n[i] <= 1) continue;
      nested = nested && st[i] >= span;
      span += st[i] * (n[i] - 1);
    }
    if (nested && !shifted_grid_hits(n, st, order, 0, out.rank, delta, es)) return;
  }
  if (rows_interleave(out, other)) return;
  invalid(where, std::string(out_name) + " must not share memory with " + other_name + " (it is written by the call), got " +
                     out_name + " at bytes [" + str(0) + ", " + str(static_cast<int64_t>(a1 - a0)) + ") overlapping " +
                     other_name + " at [" + str(static_cast<int64_t>(b0) - static_cast<int64_t>(a0)) + ", " +
                     str(static_cast<int64_t>(b1) - static_cast<int64_t>(a0)) + ") relative to it");
}

void check_source(const FrequencySource& s, const char* name, int64_t index, const char* where) {
  // The source's name, built only for a message (this runs on every call).
  auto n_of = [&] { return std::string(name) + (index >= 0 ? "[" + str(index) + "]" : std::string()); };
  if (s.rope == nullptr) invalid(where, n_of() + ".rope must not be null");
  if (s.seq_len && *s.seq_len <= 0) invalid(where, n_of() + ".seq_len must be > 0 when given, got " + str(*s.seq_len));
  if (s.seq_len && *s.seq_len > kMaxSeqLen)
    out_of_range(where, n_of() + ".seq_len must be <= 2^31 (positions are < 2^31), got " + str(*s.seq_len));
}

SourceGeometry check_sources(const std::vector<FrequencySource>& sources, const char* name, const char* where) {
  SourceGeometry g;
  for (size_t i = 0; i < sources.size(); ++i) {
    auto n_of = [&] { return std::string(name) + "[" + str(static_cast<int64_t>(i)) + "]"; };
    check_source(sources[i], name, static_cast<int64_t>(i), where);
    const Spec& s = sources[i].rope->spec();
    SourceGeometry h;
    h.head_dim = s.head_dim;
    h.rotary_dim = s.effective_rotary_dim();
    h.pairing = s.pairing;
    h.n_axes = s.mrope.enabled() ? 3 : 1;
    if (i == 0) {
      g = h;
      continue;
    }
    if (h.head_dim != g.head_dim || h.rotary_dim != g.rotary_dim || h.pairing != g.pairing || h.n_axes != g.n_axes)
      invalid(where, n_of() + " must share head_dim " + str(g.head_dim) + ", rotary_dim " + str(g.rotary_dim) + ", pairing " +
                         pairing_name(g.pairing) + " and " + (g.n_axes > 1 ? "M-RoPE" : "no M-RoPE") + " with " + name +
                         "[0], got head_dim " + str(h.head_dim) + ", rotary_dim " + str(h.rotary_dim) + ", pairing " +
                         pairing_name(h.pairing) + (h.n_axes > 1 ? ", M-RoPE" : ", no M-RoPE"));
  }
  return g;
}

}  // namespace detail
}  // namespace rotary
