// rotary::Rope: a spec plus lazily grown tables, choosing frequencies and the cos/sin source per call like HF's forward.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/freqs_internal.h"
#include "core/messages.h"
#include "engine/build_plan.h"
#include "engine/cos_sin_source.h"
#include "engine/fp8_output.h"
#include "engine/overlap.h"
#include "engine/rope_access.h"
#include "engine/run_plan.h"
#include "engine/tensor_checks.h"
#include "plan/dtype_scalar.h"
#include "rotary/apply.h"
#include "rotary/multimodal.h"

namespace rotary {

namespace {

using detail::PositionRange;

constexpr const char* kCosSinWhere = "rotary_cos_sin";

bool same_frequencies(const Frequencies& a, const Frequencies& b) {
  return a.attention_factor == b.attention_factor && a.inv_freq == b.inv_freq;
}

/// The frequencies and cos/sin source of one call.
struct Source {
  Frequencies local;                      ///< set when the call's frequencies differ from the base ones
  const Frequencies* freqs = nullptr;     ///< the call's frequencies (base or local)
  CosSinTable* table = nullptr;           ///< the table to use, or null: rows on the fly
  CosSinTable* device_table = nullptr;    ///< device calls without `table`: read this one as it is instead
};

}  // namespace

struct Rope::Impl {
  Spec spec;                         // normalized (rotary_dim resolved), validated
  RopeOptions options;
  Frequencies base;                  // compute_frequencies(spec): the frequencies of the main table
  std::unique_ptr<CosSinTable> main; // table for `base`
  std::vector<uint8_t> axis_of_freq; // M-RoPE map, empty = off

  // LongRoPE's second frequency set (long factors, used past original_max_position_embeddings) gets its
  // own table, created empty with the Rope so that no lock is ever needed to find it (a lock held by
  // another thread at fork() would block a forked child). Dynamic NTK (a new set per length) is
  // computed on the fly instead.
  std::unique_ptr<CosSinTable> long_table;

  CosSinTable* table_for(const Frequencies& f) {
    if (same_frequencies(f, base)) return main.get();
    if (long_table && same_frequencies(f, long_table->frequencies())) return long_table.get();
    return nullptr;  // not a stored set: on the fly
  }

  /// Frequencies for the call's length (HF: seq_len = max(position) + 1 when not given) and the
  /// one table-or-on-the-fly decision (detail::use_table) for `tokens` tokens over `range`; `device` calls
  /// of heads the device cannot compute on the fly read the table as it is (detail::use_device_table_as_is).
  void choose(const PositionRange& range, std::optional<int64_t> seq_len, int64_t tokens, Source* src,
              bool device = false) {
    src->freqs = &base;
    CosSinTable* table = main.get();
    if (spec.length_dependent()) {
      // The spec was validated when the Rope was built, and seq_len is <= 2^31 (checked by the callers: build_plan,
      // cos_sin, the prologue's check_sources; the prologue's fast path declines a longer one).
      // Fractional ids: HF's max(position) + 1 as it is (a LongRoPE switch at 4095.5 + 1 > 4096, a dynamic base
      // continuous in it), not the floor's.
      const double len = seq_len                ? static_cast<double>(*seq_len)
                         : !range.any          ? 1.0
                         : range.fractional    ? range.max_f + 1.0
                                               : static_cast<double>(range.max_int + 1);
      src->local = detail::frequencies_unchecked(spec, len);
      if (!same_frequencies(src->local, base)) {
        src->freqs = &src->local;
        // Dynamic NTK beyond the context: a new frequency set per length -> on the fly, never stored.
        // LongRoPE: only two sets (short/long) -> the long set's own table.
        table = spec.scaling.type == RopeType::kDynamic ? nullptr : table_for(src->local);
      }
    }
    src->table = detail::use_table(table, options.mode, range, tokens) ? table : nullptr;
    const int64_t half = spec.effective_rotary_dim() / 2;
    if (device && src->table == nullptr && detail::use_device_table_as_is(table, options.mode, range, half))
      src->device_table = table;
  }
};

Rope::Rope(Spec spec, RopeOptions options) : impl_(std::make_unique<Impl>()) {
  const int mode = static_cast<int>(options.mode);
  if (mode < 0 || mode > 2)
    fail(Error::Kind::kInvalidArgument, detail::kApplyWhere, "options.mode must be auto, table or on_the_fly, got " + std::to_string(mode));
  impl_->spec = spec.normalized();
  impl_->options = options;
  impl_->base = compute_frequencies(impl_->spec);
  impl_->main = std::make_unique<CosSinTable>(impl_->base, options.table);
  const int64_t orig = impl_->spec.scaling.original_max_position_embeddings;
  if (impl_->spec.scaling.type == RopeType::kLongRope && orig < detail::kMaxSeqLen) {
    // The set every call past original_max_position_embeddings uses (any such length gives the same one).
    const Frequencies long_set = detail::frequencies_unchecked(impl_->spec, orig + 1);
    if (!same_frequencies(long_set, impl_->base)) {
      TableOptions o = options.table;
      o.initial_positions = 0;
      impl_->long_table = std::make_unique<CosSinTable>(long_set, o);
    }
  }
  if (impl_->spec.mrope.enabled())
    impl_->axis_of_freq = mrope_axis_map(impl_->spec.mrope, impl_->spec.effective_rotary_dim() / 2);
}

Rope::~Rope() = default;

const Spec& Rope::spec() const { return impl_->spec; }

Frequencies Rope::frequencies(std::optional<int64_t> seq_len) const {
  if (seq_len && (*seq_len < 0 || *seq_len > detail::kMaxSeqLen))
    return compute_frequencies(impl_->spec, seq_len);  // throws the range error
  return detail::frequencies_unchecked(impl_->spec, seq_len);  // validated when the Rope was built
}

CosSinTable& Rope::table() { return *impl_->main; }

void Rope::apply(const ApplyArgs& args) {
  if (detail::has_fp8_output(args)) return detail::apply_fp8_outputs(args, [this](const ApplyArgs& a) { apply(a); });
  Impl& im = *impl_;
  const Spec& spec = im.spec;
  detail::PlanRequest req;
  req.rotary_dim = spec.effective_rotary_dim();
  req.head_dim = spec.head_dim;
  req.default_pairing = spec.pairing;
  req.allow_fractional = im.options.mode != CosSinMode::kTable;
  if (spec.mrope.enabled()) {
    req.n_axes = 3;
    req.axes_what = "t, h, w position per token for an M-RoPE spec";
    req.axes_accept_single = true;  // [B,S] / [S] / [T]: text-only, the same position on t, h and w
  }
  PositionRange range;
  detail::Plan plan = detail::build_plan(args, req, &range);
  if (plan.ntensors == 0 || plan.B == 0 || plan.S == 0) return;  // nothing to rotate (validated above)
  plan.cs.axis_of_freq = im.axis_of_freq;

  if (range.unknown && spec.length_dependent() && !args.seq_len)
    fail(Error::Kind::kInvalidArgument, detail::kApplyWhere,
         std::string("seq_len must be given for a ") + rope_type_name(spec.scaling.type) +
             " spec when positions are device memory (backend cuda does not read them on the host), got none");
  Source src;  // outlives run_plan when the rows are computed on the fly
  im.choose(range, args.seq_len, plan.B * plan.S, &src, plan.device);
  if (src.table) detail::attach_table(plan, *src.table, range, args.seq_len, im.options.mode == CosSinMode::kAuto);
  else if (src.device_table) detail::attach_device_table(plan, *src.device_table, 0);
  else detail::attach_on_the_fly(plan, *src.freqs);
  detail::run_plan(plan, args.backend);
}

void Rope::cos_sin(const TensorView& positions, std::optional<int64_t> seq_len, float* cos_out, float* sin_out) {
  using detail::str;
  Impl& im = *impl_;
  if (im.spec.mrope.enabled())
    detail::invalid(kCosSinWhere, "M-RoPE specs have per-section positions (t, h, w); use apply, got a spec with mrope_section");
  if (positions.rank != 1)
    detail::invalid(kCosSinWhere, "positions must be 1-D [N], got rank " + str(positions.rank) + " (shape " +
                                      detail::shape_str(positions) + ")");
  detail::check_view(positions, "positions", /*allow_broadcast_zero=*/true);
  const bool frac = positions.dtype == DType::kF32 || positions.dtype == DType::kF64;
  if (!frac && !is_integer(positions.dtype))
    detail::invalid_dtype(kCosSinWhere, std::string("positions dtype must be i32, i64, f32 or f64, got ") +
                                            dtype_name(positions.dtype));
  if (seq_len && *seq_len <= 0) detail::invalid(kCosSinWhere, "seq_len must be > 0 when given, got " + str(*seq_len));
  if (seq_len && *seq_len > detail::kMaxSeqLen)
    detail::out_of_range(kCosSinWhere, "seq_len must be <= 2^31 (positions are < 2^31), got " + str(*seq_len));
  const int64_t n = positions.shape[0];
  if (n > 0 && (cos_out == nullptr || sin_out == nullptr))
    detail::invalid(kCosSinWhere, "cos_out and sin_out must not be null for " + str(n) + " positions");
  if (n > 0) {  // the outputs [N, R/2] must not share memory with the positions or with each other
    const int64_t half = im.spec.effective_rotary_dim() / 2;
    int64_t bytes;
    if (__builtin_mul_overflow(n, half * static_cast<int64_t>(sizeof(float)), &bytes))
      detail::invalid(kCosSinWhere, "positions count " + str(n) + " times rotary_dim/2 " + str(half) + " overflows the output size");
    TensorView c, s;
    c.data = cos_out;
    s.data = sin_out;
    c.dtype = s.dtype = DType::kF32;
    c.rank = s.rank = 2;
    c.shape[0] = s.shape[0] = n;
    c.shape[1] = s.shape[1] = half;
    c.strides[0] = s.strides[0] = half;
    c.strides[1] = s.strides[1] = 1;
    for (const auto& [out, name] : {std::pair<const TensorView*, const char*>{&c, "cos_out"}, {&s, "sin_out"}})
      if (detail::views_overlap(positions, *out))
        detail::invalid(kCosSinWhere, std::string(name) + " overlaps positions in memory: writing " + name +
                                          " would change positions before they are read");
    if (detail::views_overlap(c, s)) detail::invalid(kCosSinWhere, "sin_out overlaps cos_out in memory: the two outputs must not share memory");
  }
  const int64_t stride = positions.strides[0];
  PositionRange range;
  range.fractional = frac;
  for (int64_t i = 0; i < n; ++i) {
    const double p = detail::load_index(positions.data, positions.dtype, i * stride);
    const std::string label = "positions[" + str(i) + "]";
    if (!std::isfinite(p)) detail::invalid(kCosSinWhere, label + " must be a finite position, got " + detail::num(p));
    if (p < 0) detail::invalid(kCosSinWhere, label + " must be >= 0 (negative positions are invalid), got " + detail::num(p));
    if (p >= 2147483648.0) detail::out_of_range(kCosSinWhere, label + " must be < 2^31, got " + detail::num(p));
    range.any = true;
    range.max_int = std::max(range.max_int, static_cast<int64_t>(std::floor(p)));
    range.max_f = std::max(range.max_f, p);
  }
  if (n == 0) return;

  Source src;
  im.choose(range, seq_len, n, &src);
  const int64_t half = im.spec.effective_rotary_dim() / 2;
  if (src.table) {
    const CosSinTable::View v = src.table->view_for(range.max_int + 1);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = detail::load_int_index(positions.data, positions.dtype, i * stride);
      std::memcpy(cos_out + i * half, v.cos(p), sizeof(float) * static_cast<std::size_t>(half));
      std::memcpy(sin_out + i * half, v.sin(p), sizeof(float) * static_cast<std::size_t>(half));
    }
  } else {
    for (int64_t i = 0; i < n; ++i)
      compute_cos_sin_row(*src.freqs, detail::load_index(positions.data, positions.dtype, i * stride), cos_out + i * half,
                          sin_out + i * half);
  }
}

}  // namespace rotary

namespace rotary::detail {

void RopeAccess::attach(Rope& rope, const PositionRange& range, std::optional<int64_t> seq_len, int64_t tokens,
                        Plan& plan, std::list<Frequencies>& storage) {
  Rope::Impl& im = *rope.impl_;
  Source src;
  im.choose(range, seq_len, tokens, &src, plan.device);
  if (src.table) {
    attach_table(plan, *src.table, range, seq_len, im.options.mode == CosSinMode::kAuto);
  } else if (src.device_table) {
    attach_device_table(plan, *src.device_table, 0);
  } else if (src.freqs == &src.local) {
    storage.push_back(std::move(src.local));
    attach_on_the_fly(plan, storage.back());
  } else {
    attach_on_the_fly(plan, *src.freqs);
  }
  plan.cs.axis_of_freq = im.axis_of_freq;
}

const Frequencies& RopeAccess::frequencies(Rope& rope, std::optional<int64_t> seq_len, int64_t max_position,
                                           std::list<Frequencies>& storage) {
  Rope::Impl& im = *rope.impl_;
  if (!im.spec.length_dependent()) return im.base;
  Frequencies f = compute_frequencies(im.spec, seq_len ? *seq_len : max_position + 1);
  if (same_frequencies(f, im.base)) return im.base;
  storage.push_back(std::move(f));
  return storage.back();
}

void RopeAccess::check_table_limit(Rope& rope, std::optional<int64_t> seq_len, int64_t max_position, const char* where,
                                   const char* name, int64_t index) {
  Rope::Impl& im = *rope.impl_;
  if (im.options.mode != CosSinMode::kTable || max_position < 0) return;
  PositionRange range;
  range.any = true;
  range.max_int = max_position;
  range.max_f = static_cast<double>(max_position);
  Source src;
  im.choose(range, seq_len, 1, &src);
  if (src.table == nullptr || max_position < src.table->max_positions()) return;
  const std::string who = std::string(name) + (index >= 0 ? "[" + str(index) + "]" : "");
  out_of_range(where, who + ": position " + str(max_position) + " is beyond the table limit: max_positions is " +
                          str(src.table->max_positions()) + " (a rope in table mode; RopeOptions::table.max_positions)");
}

}  // namespace rotary::detail
