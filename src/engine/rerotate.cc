// rotary::rerotate_cache: validates a re-rotation of cached keys into a RerotatePlan, then runs a backend.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/freqs_internal.h"
#include "core/messages.h"
#include "engine/plan_request.h"
#include "engine/prologue_checks.h"
#include "engine/rope_access.h"
#include "engine/tensor_checks.h"
#include "rotary/prologue.h"

namespace rotary {
namespace detail {
namespace {

constexpr const char* kWhere = kRerotateWhere;

[[noreturn]] void invalid(const std::string& msg) { detail::invalid(kWhere, msg); }

/// Checks the positions of the rows that are rotated; a skipped row's (slot -1) are not read.
void check_positions(const std::vector<int64_t>& pos, const std::vector<int64_t>& slots, const char* name) {
  for (size_t i = 0; i < pos.size(); ++i) {
    if (slots[i] < 0) continue;
    const int64_t v = pos[i];
    const std::string label = std::string(name) + "[" + str(static_cast<int64_t>(i)) + "]";
    if (v < 0) invalid(label + " must be >= 0 (negative positions are invalid), got " + str(v));
    if (v > kMaxPosition) out_of_range(kWhere, label + " must be < 2^31, got " + str(v));
  }
}

/// The largest position of the rows that are rotated (0 if none): a length-dependent spec's default length
/// is this + 1, so a skipped row's position must not choose the frequencies of the others.
int64_t max_of(const std::vector<int64_t>& pos, const std::vector<int64_t>& slots) {
  int64_t m = 0;
  for (size_t i = 0; i < pos.size(); ++i)
    if (slots[i] >= 0) m = std::max(m, pos[i]);
  return m;
}

RerotatePlan build_rerotate_plan(const RerotateArgs& a) {
  RerotatePlan p;
  const int bi = static_cast<int>(a.backend);
  if (bi < 0 || bi > 3) invalid("backend must be auto, cpu, reference or cuda, got " + str(bi));
  if (a.backend == Backend::kCuda)
    fail(Error::Kind::kUnsupported, kWhere, "backend cuda: re-rotation runs on the CPU backends (auto, cpu, reference), got cuda");
  if (a.threads < 0) invalid("threads must be >= 0 (0 = all cores), got " + str(a.threads));
  const int ci = static_cast<int>(a.cache_layout);
  if (ci < 0 || ci > 3) invalid("cache_layout must be nhd, hnd, bshd or bhsd, got " + str(ci));
  if (absent(a.k_cache)) invalid("k_cache must be given, got none");
  FrequencySource to = a.to;
  if (to.rope == nullptr) to.rope = a.from.rope;
  const std::vector<FrequencySource> both = {a.from, to};
  static const char* const kNames[] = {"from", "to"};
  // seq_len <= 2^31 for every spec (a length-dependent one's frequencies would say "[rotary_freqs] seq_len ..." otherwise).
  for (int i = 0; i < 2; ++i) check_source(both[static_cast<size_t>(i)], kNames[i], -1, kWhere);
  const Spec& sa = a.from.rope->spec();
  const Spec& sb = to.rope->spec();
  if (sb.head_dim != sa.head_dim || sb.effective_rotary_dim() != sa.effective_rotary_dim() || sb.pairing != sa.pairing)
    invalid("to's spec must share head_dim " + str(sa.head_dim) + ", rotary_dim " + str(sa.effective_rotary_dim()) +
            " and pairing " + pairing_name(sa.pairing) + " with from's spec, got head_dim " + str(sb.head_dim) +
            ", rotary_dim " + str(sb.effective_rotary_dim()) + ", pairing " + pairing_name(sb.pairing));
  const int64_t D = sa.head_dim;
  if (a.k_cache.rank != 4)
    invalid("k_cache must have rank 4 " + std::string(cache_dims(a.cache_layout)) + " for cache_layout " +
            cache_layout_name(a.cache_layout) + ", got rank " + str(a.k_cache.rank));
  const int head_axis = a.cache_layout == CacheLayout::kHND || a.cache_layout == CacheLayout::kBHSD ? 1 : 2;
  int64_t major = 0;
  cache_rows(a.k_cache, a.cache_layout, "k_cache", a.k_cache.shape[head_axis], D, kWhere, &major, &p.rows);
  attach_scale(p.rows, a.k_scale, a.k_cache, a.cache_layout, "k_scale", "k_cache", kWhere);
  if (p.rows.dtype == DType::kI8) check_disjoint(a.k_scale, "k_scale", a.k_cache, "k_cache", kWhere);

  for (const auto& [v, name] : {std::pair{&a.slots, "slots"}, std::pair{&a.from_positions, "from_positions"},
                                 std::pair{&a.to_positions, "to_positions"}})
    if (absent(*v)) invalid(std::string(name) + " must be given, got none");
  read_indices(a.slots, "slots", a.slots.rank == 1 ? a.slots.shape[0] : 0, "[N]", kWhere, &p.slots);
  const auto n = static_cast<int64_t>(p.slots.size());
  read_indices(a.from_positions, "from_positions", n, "[N] = [" + str(n) + "] (one per slot)", kWhere, &p.from_pos);
  read_indices(a.to_positions, "to_positions", n, "[N] = [" + str(n) + "] (one per slot)", kWhere, &p.to_pos);
  const bool paged = is_paged(a.cache_layout);
  check_slots(p.slots.data(), n, major * p.rows.minor_count, "slots",
              paged ? "num_blocks * block_size" : "B * S_max", kWhere);
  check_positions(p.from_pos, p.slots, "from_positions");
  check_positions(p.to_pos, p.slots, "to_positions");
  for (const TensorView* v : {&a.slots, &a.from_positions, &a.to_positions}) {
    check_disjoint(a.k_cache, "k_cache", *v, v == &a.slots ? "slots" : v == &a.from_positions ? "from_positions" : "to_positions", kWhere);
    if (p.rows.dtype == DType::kI8)
      check_disjoint(a.k_scale, "k_scale", *v, v == &a.slots ? "slots" : v == &a.from_positions ? "from_positions" : "to_positions", kWhere);
  }

  p.pairing = sa.pairing;
  p.rotary_dim = sa.effective_rotary_dim();
  p.half = p.rotary_dim / 2;
  // The angles are formed from the frequencies, never read from a table; a table-mode rope's limit still holds.
  const int64_t max_from = max_of(p.from_pos, p.slots), max_to = max_of(p.to_pos, p.slots);
  if (std::any_of(p.slots.begin(), p.slots.end(), [](int64_t s) { return s >= 0; })) {
    RopeAccess::check_table_limit(*a.from.rope, a.from.seq_len, max_from, kWhere, "from (from_positions)");
    RopeAccess::check_table_limit(*to.rope, to.seq_len, max_to, kWhere, "to (to_positions)");
  }
  const Frequencies& fa = RopeAccess::frequencies(*a.from.rope, a.from.seq_len, max_from, p.freq_storage);
  const Frequencies& fb = RopeAccess::frequencies(*to.rope, to.seq_len, max_to, p.freq_storage);
  p.from_freq = fa.inv_freq.data();
  p.to_freq = fb.inv_freq.data();
  p.same_freqs = fa.inv_freq == fb.inv_freq;
  p.factor_ratio = fb.attention_factor / fa.attention_factor;
  if (!std::isfinite(p.factor_ratio))
    invalid("the attention factors must be finite and non-zero, got from " + num(fa.attention_factor) + " and to " +
            num(fb.attention_factor));
  p.threads = a.threads;
  return p;
}

}  // namespace
}  // namespace detail

void rerotate_cache(const RerotateArgs& args) {
  const detail::RerotatePlan plan = detail::build_rerotate_plan(args);
  if (plan.slots.empty() || plan.rows.heads == 0) return;
  if (args.backend == Backend::kReference) return detail::reference_rerotate(plan);
  detail::cpu_rerotate(plan);
}

}  // namespace rotary
