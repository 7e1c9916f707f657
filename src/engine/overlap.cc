// Memory-overlap geometry of strided tensors (exact element tests) and the aliasing rules of q, k and outputs.
#include "engine/overlap.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/messages.h"
#include "engine/plan_request.h"
#include "engine/tensor_checks.h"

namespace rotary::detail {
namespace {

[[noreturn]] void invalid(const std::string& msg) { detail::invalid(kApplyWhere, msg); }

/// Insertion sort of at most 4 dim indices (std::sort trips GCC 12's -Warray-bounds on tiny arrays).
template <class Less>
void sort_dims(int* idx, int n, Less less) {
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && less(idx[j], idx[j - 1]); --j) std::swap(idx[j], idx[j - 1]);
}

}  // namespace

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

namespace {

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

/// Byte grid of any view of rank <= 4 (leading dims padded with size 1): position arrays, cos/sin tables.
Grid grid_of_view(const TensorView& v) {
  Grid g;
  g.base = reinterpret_cast<uintptr_t>(v.data);
  g.es = elem_size(v.dtype);
  const int pad = 4 - v.rank;
  for (int i = 0; i < 4; ++i) {
    g.n[i] = i < pad ? 1 : v.shape[i - pad];
    g.st[i] = i < pad ? 0 : v.strides[i - pad] * g.es;
  }
  return g;
}

/// True if no two elements of `g` share a byte (each stride, by size, exceeds the extent of the faster dims):
/// the condition under which elements_overlap is exact with `g` as its output.
bool distinct_elements(const Grid& g) {
  int idx[4] = {0, 1, 2, 3};
  sort_dims(idx, 4, [&](int a, int b) { return g.st[a] < g.st[b]; });
  int64_t span = g.es;
  for (int k = 0; k < 4; ++k) {
    const int i = idx[k];
    if (g.n[i] <= 1) continue;
    if (g.st[i] < span) return false;
    span += g.st[i] * (g.n[i] - 1);
  }
  return true;
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

}  // namespace

void check_aliasing(const ApplyArgs& args, Layout layout, bool k_read_only) {
  const bool has_k = !absent(args.k);
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
  if (!has_k) return;
  const Grid gk = grid_of(args.k, layout);
  auto q_output_spares_k = [&] {  // k is read: q's output must not change it before
    if (elements_overlap(gk, gqo))
      invalid(std::string(q_inplace ? "q (rotated in place)" : "q_out") + " overlaps input k: writing q would change k before it is read");
  };
  if (k_read_only) return q_output_spares_k();  // k is an input only
  const bool k_inplace = same_view(k_out, args.k);
  check_no_self_overlap(k_out, absent(args.k_out) ? "k (rotated in place)" : "k_out");
  const Grid gko = &k_out == &args.k ? gk : grid_of(k_out, layout);
  if (!k_inplace && intervals_overlap(gk, gko))
    invalid("k_out must either be k itself (same data and strides: in place) or not overlap k's memory, got k_out "
            "overlapping k, starting " + byte_offset_str(k_out.data, args.k.data) + " with strides " +
            strides_str(k_out) + " vs k's " + strides_str(args.k));
  if (elements_overlap(gko, gqo))
    invalid(std::string("the outputs for q and k overlap in memory (") + (q_inplace ? "q" : "q_out") + " and " +
            (k_inplace ? "k" : "k_out") + " share elements), got q and k outputs that alias");
  if (!k_inplace) q_output_spares_k();
  if (!q_inplace && elements_overlap(gq, gko))
    invalid(std::string(k_inplace ? "k (rotated in place)" : "k_out") + " overlaps input q: writing k would change q before it is read");
}

bool views_overlap(const TensorView& input, const TensorView& output) {
  if (!has_elements(input) || !has_elements(output)) return false;
  const Grid in = grid_of_view(input), out = grid_of_view(output);
  if (!distinct_elements(out)) return intervals_overlap(in, out);  // refused elsewhere; stay conservative
  return elements_overlap(in, out);
}

int position_inputs(const Positions& p, NamedInput out[2]) {
  switch (p.kind) {
    case Positions::Kind::kOffset: out[0] = {&p.batch_offsets, "positions.batch_offsets"}; return 1;
    case Positions::Kind::kIds: out[0] = {&p.ids, "positions.ids"}; return 1;
    case Positions::Kind::kPacked:
      out[0] = {&p.cu_seqlens, "positions.cu_seqlens"};
      out[1] = {&p.seq_offsets, "positions.seq_offsets"};
      return 2;
  }
  return 0;
}

void check_outputs_spare_inputs(const ApplyArgs& args, Layout layout, bool positions,
                                std::initializer_list<NamedInput> extra, bool k_read_only) {
  NamedInput inputs[6];
  int n = positions ? position_inputs(args.positions, inputs) : 0;
  for (const NamedInput& e : extra)
    if (n < 6) inputs[n++] = e;
  const bool has_k = !absent(args.k);
  struct Out { const TensorView* v; const char* name; };
  const Out outs[2] = {
      {absent(args.q_out) ? &args.q : &args.q_out, absent(args.q_out) ? "q (rotated in place)" : "q_out"},
      {absent(args.k_out) ? &args.k : &args.k_out, absent(args.k_out) ? "k (rotated in place)" : "k_out"}};
  for (int o = 0; o < (has_k && !k_read_only ? 2 : 1); ++o) {
    if (!has_elements(*outs[o].v)) continue;
    const Grid go = grid_of(*outs[o].v, layout);  // passed check_no_self_overlap (check_aliasing)
    for (int i = 0; i < n; ++i) {
      const TensorView& in = *inputs[i].view;
      if (absent(in) || !has_elements(in)) continue;
      if (elements_overlap(grid_of_view(in), go))
        invalid(std::string(outs[o].name) + " overlaps " + inputs[i].name + " in memory: writing it would change " +
                inputs[i].name + " before it is read (outputs must not share memory with any input)");
    }
  }
}

bool activations_overlap(const TensorView& a, const TensorView& out, Layout layout) {
  return elements_overlap(grid_of(a, layout), grid_of(out, layout));
}

}  // namespace rotary::detail
