// rotary::Rope: the seed's module (spec + lazily grown tables), choosing frequencies per call like HF's forward.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/build.h"
#include "rotary/apply.h"

namespace rotary {

namespace {
// Rows a kAuto call may always add to a table, whatever its token count.
constexpr int64_t kAutoGrowthSlack = 8192;

bool same_frequencies(const Frequencies& a, const Frequencies& b) {
  return a.attention_factor == b.attention_factor && a.inv_freq == b.inv_freq;
}
}  // namespace

struct Rope::Impl {
  Spec spec;                         // normalized (rotary_dim resolved), validated
  RopeOptions options;
  Frequencies base;                  // compute_frequencies(spec): the frequencies of the main table
  std::unique_ptr<CosSinTable> main; // table for `base`
  std::vector<uint8_t> axis_of_freq; // M-RoPE map, empty = off

  // Tables for other frequency sets that occur for a bounded number of lengths (LongRoPE's long
  // factors), created lazily. Guarded by `extra_mutex`; tables are never removed, so a pointer
  // obtained under the lock stays valid for the lifetime of the Rope.
  std::mutex extra_mutex;
  std::vector<std::unique_ptr<CosSinTable>> extra;

  CosSinTable* table_for(const Frequencies& f) {
    if (same_frequencies(f, base)) return main.get();
    std::lock_guard<std::mutex> lock(extra_mutex);
    for (auto& t : extra)
      if (same_frequencies(t->frequencies(), f)) return t.get();
    TableOptions o = options.table;
    o.initial_positions = 0;
    extra.push_back(std::make_unique<CosSinTable>(f, o));
    return extra.back().get();
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
  if (impl_->spec.mrope.enabled())
    impl_->axis_of_freq = detail::mrope_axis_of_freq(impl_->spec.mrope, impl_->spec.effective_rotary_dim() / 2);
}

Rope::~Rope() = default;

const Spec& Rope::spec() const { return impl_->spec; }

Frequencies Rope::frequencies(std::optional<int64_t> seq_len) const { return compute_frequencies(impl_->spec, seq_len); }

CosSinTable& Rope::table() { return *impl_->main; }

void Rope::apply(const ApplyArgs& args) {
  Impl& im = *impl_;
  const Spec& spec = im.spec;
  detail::PlanRequest req;
  req.rotary_dim = spec.effective_rotary_dim();
  req.default_pairing = spec.pairing;
  req.allow_fractional = im.options.mode != CosSinMode::kTable;
  req.mrope = spec.mrope.enabled();
  detail::PositionRange range;
  detail::Plan plan = detail::build_plan(args, req, &range);
  if (plan.head_dim != spec.head_dim)
    fail(Error::Kind::kInvalidArgument, detail::kApplyWhere,
         "q head_dim must equal spec.head_dim " + std::to_string(spec.head_dim) + ", got " +
             std::to_string(plan.head_dim));
  if (plan.ntensors == 0 || plan.B == 0 || plan.S == 0) return;  // nothing to rotate (validated above)
  plan.cs.axis_of_freq = im.axis_of_freq;

  // Frequencies for this call's length (HF: seq_len = max(position_ids) + 1 when not given).
  if (range.unknown && spec.length_dependent() && !args.seq_len)
    fail(Error::Kind::kInvalidArgument, detail::kApplyWhere,
         std::string("seq_len must be given for a ") + rope_type_name(spec.scaling.type) +
             " spec when positions are device memory (backend cuda does not read them on the host), got none");
  const int64_t seq_len = args.seq_len ? *args.seq_len : (range.any ? range.max_int + 1 : 1);
  Frequencies local;              // outlives run_plan when used on the fly
  const Frequencies* freqs = &im.base;
  CosSinTable* table = im.main.get();
  if (spec.length_dependent()) {
    local = compute_frequencies(spec, seq_len);
    if (!same_frequencies(local, im.base)) {
      freqs = &local;
      // Dynamic NTK beyond the context: a new frequency set per length -> on the fly, never stored.
      // LongRoPE: only two sets (short/long) -> a lazily created table.
      table = spec.scaling.type == RopeType::kDynamic ? nullptr : im.table_for(local);
    }
  }

  bool use_table = table != nullptr && im.options.mode != CosSinMode::kOnTheFly && !range.fractional;
  if (use_table && range.unknown) {
    // Device positions: the table's rows up to seq_len (when given) go to the device once; the device
    // computes the rows of positions past them (kTable mode too: it cannot report them from there).
    detail::attach_device_table(plan, *table, args.seq_len.value_or(0));
    detail::run_plan(plan, args.backend);
    return;
  }
  if (use_table && im.options.mode == CosSinMode::kAuto) {
    // Auto: the table up to max_positions, on the fly beyond. Also on the fly when this call would
    // make the table grow by far more rows than it has tokens (e.g. one decode step at position 1e6
    // on a fresh table): the rows are the same compute_cos_sin_row values either way, so the
    // results are bit-identical; only the cost differs.
    const int64_t tokens = plan.B * plan.S;
    const int64_t missing = range.max_int + 1 - table->size();
    if (range.max_int >= table->max_positions()) use_table = false;
    else if (missing > std::max<int64_t>(kAutoGrowthSlack, tokens > INT64_MAX / 16 ? INT64_MAX : 16 * tokens))
      use_table = false;
  }

  if (use_table) {
    plan.cs.kind = detail::PlanCosSin::Kind::kTable;
    if (range.any) {
      const CosSinTable::View v = table->view_for(range.max_int + 1);  // kTable mode: throws past the limit
      plan.cs.table = v.data;
      plan.cs.table_size = v.size;
      if (plan.device) detail::attach_device_table(plan, *table, 0);
    }
  } else {
    plan.cs.kind = detail::PlanCosSin::Kind::kOnTheFly;
    plan.cs.inv_freq = freqs->inv_freq.data();
    plan.cs.attention_factor = freqs->attention_factor;
  }
  detail::run_plan(plan, args.backend);
}

}  // namespace rotary
