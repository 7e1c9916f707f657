// `rotary check`: decode an engine's data, test the config and each suspected mistake against it, report.
#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <set>

#include "check/canonical.h"
#include "check/hypotheses.h"
#include "check/model.h"
#include "check/precision.h"
#include "rotary/config.h"
#include "rotary/freqs.h"

namespace rotary {
namespace {

using namespace parity;

/// theta estimated from the data per band, with its absolute uncertainty (NaN: not resolved).
void estimate_bands(const Canonical& d, double af, std::vector<double>& found, std::vector<double>& sigma) {
  found.assign(static_cast<size_t>(d.half), NAN);
  sigma.assign(found.size(), NAN);
  if (d.form == Form::kFreqs) {
    for (int64_t j = 0; j < d.half; ++j) {
      found[static_cast<size_t>(j)] = d.inv_freq[static_cast<size_t>(j)];
      sigma[static_cast<size_t>(j)] = 2 * half_ulp(d.dtype, d.inv_freq[static_cast<size_t>(j)]);
    }
    return;
  }
  // Rows in position order; the phase is unwrapped along the run of consecutive integer positions from the first.
  std::vector<int64_t> order(static_cast<size_t>(d.rows()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return d.positions[static_cast<size_t>(x)] < d.positions[static_cast<size_t>(y)]; });
  std::vector<int64_t> run;
  for (int64_t r : order) {
    const double p = d.positions[static_cast<size_t>(r)];
    if (!run.empty()) {
      const double prev = d.positions[static_cast<size_t>(run.back())];
      if (p == prev) continue;
      if (p != prev + 1) break;
    }
    if (p != std::floor(p)) break;
    run.push_back(r);
  }
  if (run.size() < 2) return;
  const double p0 = d.positions[static_cast<size_t>(run.front())], span = d.positions[static_cast<size_t>(run.back())] - p0;
  for (int64_t j = 0; j < d.half; ++j) {
    auto at = [&](int64_t r) { return static_cast<size_t>(r * d.half + j); };
    double est, noise;
    if (d.form == Form::kAngles) {
      est = (d.a[at(run.back())] - d.a[at(run.front())]) / span;
      noise = 4 * half_ulp(d.dtype, std::fabs(d.a[at(run.back())]));
    } else {
      double phase = 0, prev = std::atan2(d.b[at(run[0])], d.a[at(run[0])]);
      for (size_t k = 1; k < run.size(); ++k) {
        const double cur = std::atan2(d.b[at(run[k])], d.a[at(run[k])]);
        double inc = cur - prev;  // atan2 differences lie in (-2pi, 2pi): one fold puts them in [-pi, pi]
        if (inc > std::numbers::pi) inc -= 2 * std::numbers::pi;
        else if (inc < -std::numbers::pi) inc += 2 * std::numbers::pi;
        phase += inc;
        prev = cur;
      }
      est = phase / span;
      noise = 4 * d.noise_scale * half_ulp(d.dtype, std::max(1.0, af)) / std::max(1e-3, std::fabs(af));
    }
    found[static_cast<size_t>(j)] = est;
    sigma[static_cast<size_t>(j)] = noise / span + kAngleRel * std::fabs(est);
  }
}

std::string fmt(double v, int digits = 6) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

CheckResult check_one(const Spec& spec, const CheckInput& in);

/// vLLM's Phi-3 LongRoPE class keeps no cos_sin_cache but long_short_cos_sin_cache = cat(the short-factor cache
/// [orig rows], the long-factor cache [max_pos rows]), and adds orig to every position of a batch with a position
/// past orig. For a longrope spec and a vllm table of orig + max_pos rows: its rows, and whether it is named so.
struct LongShort {
  const HostArray* rows = nullptr;
  bool named = false;
};
LongShort long_short_table(const Spec& spec, const CheckInput& in) {
  const int64_t orig = spec.scaling.original_max_position_embeddings, max_pos = spec.max_position_embeddings;
  if (in.kind != TableKind::kCosSin || in.layout != EngineLayout::kVllm || in.max_pos ||
      spec.scaling.type != RopeType::kLongRope || orig <= 0 || max_pos <= orig)
    return {};
  LongShort ls{in.tensors.find_like("long_short_cos_sin_cache"), true};
  if (!ls.rows) ls = {in.tensors.find_like("cos_sin_cache"), false};
  if (!ls.rows && in.tensors.tensors.size() == 1) ls = {&in.tensors.tensors[0].second, false};
  if (!ls.rows || ls.rows->shape.size() != 2 || ls.rows->shape[0] != orig + max_pos) return {};
  return ls;
}

/// Rows [begin, end) of a [N, W] table as a vllm cos_sin_cache.
CheckInput table_rows(const CheckInput& in, const HostArray& a, int64_t begin, int64_t end) {
  CheckInput part = in;
  part.tensors.tensors.clear();
  HostArray rows;
  rows.dtype = a.dtype;
  rows.is_uint16 = a.is_uint16;
  rows.shape = {end - begin, a.shape[1]};
  const size_t row_bytes = a.data.size() / static_cast<size_t>(a.shape[0]);
  rows.data.assign(a.data.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(begin) * row_bytes),
                   a.data.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(end) * row_bytes));
  part.tensors.tensors.emplace_back("cos_sin_cache", std::move(rows));
  part.max_pos = end - begin;
  return part;
}

}  // namespace

CheckResult check_parity(const Spec& spec_in, const CheckInput& in) {
  const Spec spec = spec_in.normalized();
  const LongShort ls = long_short_table(spec, in);
  if (!ls.rows) return check_one(spec, in);
  // A table of orig + max_pos rows not named long_short_cos_sin_cache may be one cache of that length: read as one
  // unless only the two-cache reading agrees.
  std::optional<CheckResult> whole;
  if (!ls.named) {
    whole = check_one(spec, in);
    if (whole->agree) return *whole;
  }
  // Both caches, each at the length that selects its factors; the report is the long cache's (the one every
  // position past orig reads), with the short cache's verdict and diagnoses added.
  const int64_t orig = spec.scaling.original_max_position_embeddings, n = ls.rows->shape[0];
  const CheckResult short_part = check_one(spec, table_rows(in, *ls.rows, 0, orig));
  CheckResult res = check_one(spec, table_rows(in, *ls.rows, orig, n));
  const bool agree = res.agree && short_part.agree;
  const std::string rows_short = "rows [0, " + std::to_string(orig) + ")";
  const std::string split = "vLLM's long_short_cos_sin_cache: " + rows_short + " checked as the short-factor cache (seq_len " +
                            std::to_string(orig) + "): " + (short_part.agree ? "agree" : "DISAGREE") + "; rows [" +
                            std::to_string(orig) + ", " + std::to_string(n) + ") as the long-factor cache (seq_len " +
                            std::to_string(n - orig) + "): " + (res.agree ? "agree" : "DISAGREE");
  if (whole && !agree) {  // neither reading agrees: the table as given, with what the other reading found
    whole->notes.push_back("read as " + split + " (name the tensor long_short_cos_sin_cache to be reported that way)");
    return *whole;
  }
  res.notes.insert(res.notes.begin(), split + ", reported below");
  for (const ParityDiagnosis& dg : short_part.diagnoses)
    res.diagnoses.push_back({dg.code, "short cache (" + rows_short + "): " + dg.message});
  for (const std::string& note : short_part.notes)
    if (std::find(res.notes.begin(), res.notes.end(), note) == res.notes.end()) res.notes.push_back("short cache: " + note);
  res.agree = agree;
  return res;
}

namespace {

/// The audit of one table or one set of frequencies against `spec` (already normalized).
CheckResult check_one(const Spec& spec, const CheckInput& in) {
  const LayoutInfo& info = layout_info(in.layout);
  if (in.max_pos && *in.max_pos <= 0) fail(Error::Kind::kInvalidArgument, kWhere, "max_pos must be > 0, got " + std::to_string(*in.max_pos));
  const Canonical d = decode(info, in.kind, in.tensors, spec.pairing, spec.effective_rotary_dim());

  CheckResult res;
  res.spec_json = spec_to_json(spec);
  res.layout = info.name;
  res.kind = table_kind_name(in.kind);
  res.dtype = dtype_name(d.dtype);
  res.notes = d.notes;
  res.rotary_dim_expected = spec.effective_rotary_dim();
  res.rotary_dim_found = 2 * d.half;
  if (d.pairing) res.pairing_found = pairing_name(*d.pairing);

  // A table whose every row is at position 0 holds cos 1 and sin 0 (or angle 0) whatever the frequencies: it would
  // "agree" with any config. Refused, as the rotated form refuses positions that are all 0.
  if (d.form != Form::kFreqs && std::all_of(d.positions.begin(), d.positions.end(), [](double p) { return p == 0; }))
    fail(Error::Kind::kInvalidArgument, kWhere, "every row of the table is at position 0 (" + std::to_string(d.rows()) +
         " row(s)), where cos is 1 and sin 0 whatever the frequencies: nothing can be measured (include positions > 0)");
  // The sequence length HF would see, and the positions the data covers.
  std::optional<int64_t> seq_len = in.max_pos;
  int64_t range = 0;
  if (d.form == Form::kFreqs) {
    range = in.max_pos ? *in.max_pos : spec.max_position_embeddings > 0 ? spec.max_position_embeddings : 4096;
  } else {
    double maxp = 0;
    for (double p : d.positions) maxp = std::max(maxp, p);
    range = static_cast<int64_t>(std::ceil(maxp)) + 1;
    if (!seq_len) seq_len = range;
  }
  res.seq_len = seq_len;
  res.positions = d.form == Form::kFreqs ? range : d.rows();
  const Frequencies truth = compute_frequencies(spec, seq_len);
  res.attention_factor_expected = truth.attention_factor;

  // Attention factor found in the data.
  if (d.form == Form::kFreqs) {
    res.attention_factor_found = d.attention_factor;
  } else if (d.form == Form::kValues) {
    std::vector<double> mags;
    for (int64_t r : sample_rows(d.rows()))
      for (int64_t j = 0; j < d.half; ++j) {
        const size_t k = static_cast<size_t>(r * d.half + j);
        mags.push_back(std::hypot(d.a[k], d.b[k]));
      }
    std::nth_element(mags.begin(), mags.begin() + static_cast<std::ptrdiff_t>(mags.size() / 2), mags.end());
    res.attention_factor_found = mags[mags.size() / 2];
  } else if (truth.attention_factor != 1.0) {
    res.notes.push_back("the " + std::string(info.name) + " layout carries no attention factor: the engine must apply " +
                        fmt(truth.attention_factor) + " to cos/sin (or q and k) itself");
  }

  // Hypotheses: the config, then each suspected mistake; combinations of one frequency and one factor mistake.
  const std::vector<int64_t> rows = sample_rows(d.rows());
  const bool af_testable = d.form == Form::kValues || (d.form == Form::kFreqs && d.attention_factor);
  std::vector<double> found, sigma;
  estimate_bands(d, res.attention_factor_found.value_or(truth.attention_factor), found, sigma);
  Hypotheses hyp = make_hypotheses(spec, seq_len, truth, d, af_testable, found, sigma);
  const std::vector<double> slack = engine_blend_slack(spec);  // HF's f32 llama3 / YaRN blend
  const double truth_score = score(d, {truth.inv_freq, truth.attention_factor, std::nullopt, slack}, rows);
  // Bands judge the frequencies alone: at the attention factor found in the data (reported on its own line).
  std::vector<double> truth_bands;
  score(d, {truth.inv_freq, res.attention_factor_found.value_or(truth.attention_factor), std::nullopt, slack}, rows,
        &truth_bands);
  const bool truth_explains = truth_score <= 1.0;
  std::set<std::string> seen;
  auto declare = [&](const std::string& code, const std::string& msg) {
    if (seen.insert(code + msg).second) res.diagnoses.push_back({code, msg});
  };
  if (!truth_explains) {
    // Fewest mistakes first; a fitted base only when no other explanation holds (a denominator or width mistake
    // is also a change of base: base^(-2i/D) = (base^(R/D))^(-2i/R)).
    for (int mistakes = 1; mistakes <= 2 && res.diagnoses.empty(); ++mistakes)
      for (bool allow_fitted : {false, true}) {
        if (!res.diagnoses.empty()) break;
        // Fits of one base on different bands are one mistake: only the best-scoring fit per code is declared.
        std::map<std::string, std::pair<double, std::pair<const FreqVariant*, const FactorVariant*>>> best_fit;
        for (const auto& fv : hyp.freqs)
          for (const auto& av : hyp.factors) {
            if ((fv.code.empty() ? 0 : 1) + (av.code.empty() ? 0 : 1) != mistakes || fv.fitted != allow_fitted) continue;
            const double sc = score(d, {fv.inv_freq, av.af, fv.low_precision_angles, slack}, rows);
            if (sc > 1.0) continue;
            if (fv.fitted) {
              auto [it, fresh] = best_fit.try_emplace(fv.code + '\n' + av.code, sc, std::pair{&fv, &av});
              if (!fresh && sc < it->second.first) it->second = {sc, {&fv, &av}};
              continue;
            }
            if (!fv.code.empty()) declare(fv.code, fv.message);
            if (!av.code.empty()) declare(av.code, av.message);
          }
        for (const auto& [key, best] : best_fit) {
          declare(best.second.first->code, best.second.first->message);
          if (!best.second.second->code.empty()) declare(best.second.second->code, best.second.second->message);
        }
      }
  }
  for (const auto& s : hyp.structural) declare(s.code, s.message);

  // Bands.
  const int64_t hb = std::max<int64_t>(d.half, static_cast<int64_t>(truth.inv_freq.size()));
  for (int64_t j = 0; j < hb; ++j) {
    BandParity b;
    b.index = j;
    b.expected = j < static_cast<int64_t>(truth.inv_freq.size()) ? truth.inv_freq[static_cast<size_t>(j)] : 0.0;
    b.found = j < d.half ? found[static_cast<size_t>(j)] : NAN;
    b.wavelength = b.expected > 0 ? 2 * std::numbers::pi / b.expected : INFINITY;
    const double sg = j < d.half ? sigma[static_cast<size_t>(j)] : NAN;
    const bool resolved = std::isfinite(b.found) && (b.expected == 0 ? sg < 1e-6 : sg <= 1e-3 * b.expected);
    b.rel_err = !resolved ? NAN : b.expected == 0 ? std::fabs(b.found) : std::fabs(b.found / b.expected - 1);
    if (resolved) res.max_rel_err_inv_freq = std::max(res.max_rel_err_inv_freq.value_or(0.0), b.rel_err);
    b.ok = truth_bands[static_cast<size_t>(j)] <= 1.0;
    res.bands.push_back(b);
  }

  // Precision.
  res.precision = data_precision(d, truth.inv_freq, truth.attention_factor, range);
  std::vector<double> ladder;
  if (d.ggml) {
    const double n = static_cast<double>(2 * truth.inv_freq.size());
    ladder.push_back(std::pow(spec.base, -2.0 / n));
    for (size_t j = 0; j < truth.inv_freq.size(); ++j)
      ladder.push_back(truth.inv_freq[j] * std::pow(spec.base, static_cast<double>(2 * j) / n));
  }
  res.precision_f32_angles = f32_angle_precision(truth.inv_freq, truth.attention_factor, range, d.ggml, ladder);
  if (auto lp = dtype_precision_diagnosis(d, truth, range)) declare("low_precision_table", *lp);

  res.agree = truth_explains && res.diagnoses.empty();
  if (!truth_explains && res.diagnoses.empty())
    res.notes.push_back("no single known mistake (or pair of them) explains the data; see the bands that disagree");
  return res;
}

}  // namespace
}  // namespace rotary
