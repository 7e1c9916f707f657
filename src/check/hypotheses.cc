// The suspected mistakes of `rotary check` (docs/parity.md "Diagnoses"), each re-derived with rotary's exact formulas.
#include "check/hypotheses.h"

#include <cmath>
#include <numbers>

namespace rotary::parity {
namespace {

std::string fmt(double v, int digits = 6) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}
std::string str(int64_t v) { return std::to_string(v); }

double yarn_factor(const Spec& s) {
  if (s.scaling.factor) return *s.scaling.factor;
  return static_cast<double>(s.max_position_embeddings) / static_cast<double>(s.scaling.original_max_position_embeddings);
}
double get_mscale(double f, double m) { return f <= 1 ? 1.0 : 0.1 * m * std::log(f) + 1.0; }

bool same(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::fabs(a[i] - b[i]) > 1e-12 * std::fabs(b[i])) return false;
  return true;
}

/// compute_frequencies of a modified spec, or nullopt if that spec is not valid.
std::optional<Frequencies> freqs_of(const Spec& s, std::optional<int64_t> seq_len) {
  try {
    return compute_frequencies(s.normalized(), seq_len);
  } catch (const Error&) {
    return std::nullopt;
  }
}

/// Bands whose theta does not depend on the base except through the ladder base^(-2i/den): every band for most
/// types; for yarn and llama3 only the unscaled high-frequency bands.
std::vector<int64_t> base_fit_bands(const Spec& s, const Frequencies& truth, int64_t den) {
  std::vector<int64_t> out;
  const bool partial_scaling = s.scaling.type == RopeType::kYarn || s.scaling.type == RopeType::kLlama3;
  const double base0 = s.scaling.type == RopeType::kDynamic && truth.inv_freq.size() > 1
                           ? std::pow(truth.inv_freq[1], -static_cast<double>(den) / 2.0) : s.base;
  for (size_t i = 0; i < truth.inv_freq.size(); ++i) {
    if (truth.inv_freq[i] == 0) continue;
    const double ladder = std::pow(base0, -2.0 * static_cast<double>(i) / static_cast<double>(den));
    if (partial_scaling && std::fabs(truth.inv_freq[i] / ladder - 1) > 1e-9) continue;
    out.push_back(static_cast<int64_t>(i));
  }
  return out;
}

}  // namespace

Hypotheses make_hypotheses(const Spec& spec, std::optional<int64_t> seq_len, const Frequencies& truth,
                           const Canonical& d, bool af_testable, const std::vector<double>& found,
                           const std::vector<double>& sigma) {
  Hypotheses h;
  const Scaling& sc = spec.scaling;
  const int64_t R = spec.effective_rotary_dim(), D = spec.head_dim;
  h.freqs.push_back({"", "", truth.inv_freq, std::nullopt});
  auto add_freq = [&](const std::string& code, const std::string& msg, std::vector<double> inv,
                      std::optional<DType> lp = std::nullopt) {
    if (!lp && same(inv, truth.inv_freq)) return;  // indistinguishable from the config
    h.freqs.push_back({code, msg, std::move(inv), lp, code == "dynamic_base" || code == "base_mismatch"});
  };

  if (sc.type == RopeType::kYarn) {
    const int64_t orig = sc.original_max_position_embeddings, maxp = spec.max_position_embeddings;
    if (maxp > 0 && orig != maxp) {
      Spec s = spec;
      s.scaling.factor = yarn_factor(spec);
      s.scaling.original_max_position_embeddings = maxp;
      if (auto f = freqs_of(s, seq_len))
        add_freq("yarn_range_from_max_pos", "YaRN's correction range was computed from max_position_embeddings (" + str(maxp) +
                 ") instead of original_max_position_embeddings (" + str(orig) + "), as older transformers did", f->inv_freq);
    }
    // mlx-lm's YarnRoPE takes original_max_position_embeddings = 4096 when rope_scaling has no such key, where
    // transformers fills it from max_position_embeddings (the case of max_pos = 4096 is the hypothesis above).
    if (orig != 4096 && maxp != 4096) {
      Spec s = spec;
      s.scaling.factor = yarn_factor(spec);
      s.scaling.original_max_position_embeddings = 4096;
      if (auto f = freqs_of(s, seq_len))
        add_freq("yarn_original_max_default", "YaRN's correction range was computed from original_max_position_embeddings "
                 "4096 (mlx-lm's default when rope_scaling has no such key) instead of the config's " + str(orig) +
                 " (transformers takes max_position_embeddings when the key is absent)", f->inv_freq);
    }
    Spec s = spec;
    s.scaling.truncate = !sc.truncate;
    if (auto f = freqs_of(s, seq_len))
      add_freq("truncate_mismatch", sc.truncate ? "YaRN's correction range was not rounded (truncate: false), but the config "
                                                  "rounds it (floor/ceil; truncate is true or absent)"
                                                : "YaRN's correction range was rounded with floor/ceil, but the config says "
                                                  "truncate: false (as gpt-oss)", f->inv_freq);
  }
  if (sc.type == RopeType::kLongRope) {
    const int64_t orig = sc.original_max_position_embeddings;
    const bool long_used = seq_len && *seq_len > orig;
    if (auto f = freqs_of(spec, long_used ? orig : orig + 1))
      add_freq("longrope_switch", std::string("the data holds LongRoPE's ") + (long_used ? "short" : "long") +
               "_factor frequencies, but HF uses the " + (long_used ? "long" : "short") + " ones for seq_len " +
               (seq_len ? str(*seq_len) : std::string("unset")) + " (long iff seq_len > original_max_position_embeddings " +
               str(orig) + ")" + (long_used ? "" : "; vLLM uses the long ones whenever max_model_len > original_max "
               "(pass --max-pos to say which length you serve)"), f->inv_freq);
  }
  // Base: fitted to the data on the bands whose theta depends on the base only through the ladder.
  const int64_t den = sc.type == RopeType::kProportional ? D : R;
  const double base_t = sc.type == RopeType::kDynamic && truth.inv_freq.size() > 1
                            ? std::pow(truth.inv_freq[1], -static_cast<double>(R) / 2.0) : spec.base;
  std::vector<int64_t> usable;
  for (int64_t i : base_fit_bands(spec, truth, den))
    if (i > 0 && i < d.half && std::isfinite(found[static_cast<size_t>(i)]) && found[static_cast<size_t>(i)] > 0 &&
        sigma[static_cast<size_t>(i)] / found[static_cast<size_t>(i)] < 1e-2)
      usable.push_back(i);
  // Fits on the first 1, 2, 4, 8 and all usable bands: a wrong base also moves YaRN's and llama3's band edges, so
  // the data's own unscaled bands may be fewer than the config's.
  std::vector<double> tried;
  for (size_t n : {size_t(1), size_t(2), size_t(4), size_t(8), usable.size()}) {
    if (n == 0 || n > usable.size()) continue;
    double sw = 0, swy = 0;
    for (size_t k = 0; k < n; ++k) {
      const int64_t i = usable[k];
      const double rel = sigma[static_cast<size_t>(i)] / found[static_cast<size_t>(i)];
      const double x = 2.0 * static_cast<double>(i) / static_cast<double>(den);
      const double y = std::log(found[static_cast<size_t>(i)] / truth.inv_freq[static_cast<size_t>(i)]);
      const double w = 1.0 / (rel * rel + 1e-30);
      sw += w * x * x, swy += w * x * y;
    }
    const double base_f = base_t * std::exp(-swy / sw);
    if (std::fabs(std::log(base_f / base_t)) <= 1e-6) continue;
    bool dup = false;
    for (double b : tried) dup = dup || std::fabs(std::log(b / base_f)) < 1e-9;
    if (dup) continue;
    tried.push_back(base_f);
    {
      {
        Spec s = spec;
        s.base = base_f;
        if (sc.type == RopeType::kDynamic) {  // the fitted base is the data's whole base: plain frequencies
          s.scaling.type = RopeType::kDefault;
          s.scaling.alpha.reset();
        }
        if (auto f = freqs_of(s, seq_len)) {
          if (sc.type == RopeType::kDynamic && sc.alpha) {
            add_freq("base_mismatch", "the frequencies follow base " + fmt(base_f) + " instead of the NTK-alpha base " +
                     fmt(base_t) + " (rope_theta " + fmt(spec.base) + " * alpha " + fmt(*sc.alpha) + "^(R/(R-2)))",
                     f->inv_freq);
          } else if (sc.type == RopeType::kDynamic) {
            const double fct = sc.factor.value_or(1.0), mp = static_cast<double>(spec.max_position_embeddings);
            const double L = mp / fct * (std::pow(base_f / spec.base, static_cast<double>(R - 2) / static_cast<double>(R)) + fct - 1);
            std::string why = std::fabs(std::log(base_f / spec.base)) < 1e-4
                                  ? "the unscaled rope_theta (no dynamic-NTK rescale)"
                                  : "the dynamic-NTK rescale for seq_len ~" + str(std::llround(L));
            add_freq("dynamic_base", "the frequencies follow base " + fmt(base_f) + ", " + why + "; HF's base for seq_len " +
                     (seq_len ? str(*seq_len) : std::string("unset")) + " is " + fmt(base_t) +
                     " (HF rescales per forward from max(position_ids)+1; vLLM computes it once for max_pos*factor)", f->inv_freq);
          } else {
            add_freq("base_mismatch", "the frequencies follow base " + fmt(base_f) + " instead of rope_theta " + fmt(spec.base),
                     f->inv_freq);
          }
        }
      }
    }
  }
  // Rotary width and the exponent's denominator.
  int64_t truth_rotating = static_cast<int64_t>(truth.inv_freq.size());
  while (truth_rotating > 0 && truth.inv_freq[static_cast<size_t>(truth_rotating - 1)] == 0) --truth_rotating;
  if (d.half != static_cast<int64_t>(truth.inv_freq.size()) && d.half != truth_rotating && 2 * d.half <= D && d.half > 0) {
    Spec s = spec;
    s.rotary_dim = 2 * d.half;
    s.partial_rotary_factor = static_cast<double>(2 * d.half) / static_cast<double>(D);
    if (sc.type == RopeType::kProportional) {
      s.scaling.type = sc.factor && *sc.factor > 1 ? RopeType::kLinear : RopeType::kDefault;
      s.partial_rotary_factor = 1.0;
    }
    if (auto f = freqs_of(s, seq_len))
      add_freq("rotary_dim", "the engine rotates " + str(2 * d.half) + " channels (rotary_dim), the config " + str(R) +
               (2 * d.half == D ? " (partial_rotary_factor ignored)" : ""), f->inv_freq);
  }
  if (sc.type != RopeType::kProportional && R < D) {
    std::vector<double> inv = truth.inv_freq;
    for (size_t i = 0; i < inv.size(); ++i)
      inv[i] *= std::pow(spec.base, 2.0 * static_cast<double>(i) * (1.0 / static_cast<double>(R) - 1.0 / static_cast<double>(D)));
    add_freq("rotary_dim", "the frequencies use head_dim " + str(D) + " as the exponent's denominator instead of rotary_dim " +
             str(R) + " (base^(-2i/" + str(D) + "))", inv);
  }
  if (sc.type == RopeType::kProportional && truth_rotating > 0 && truth_rotating < D / 2) {
    std::vector<double> inv = truth.inv_freq;
    const double r2 = static_cast<double>(2 * truth_rotating);
    for (size_t i = 0; i < inv.size(); ++i)
      inv[i] *= std::pow(spec.base, 2.0 * static_cast<double>(i) * (1.0 / static_cast<double>(D) - 1.0 / r2));
    add_freq("rotary_dim", "the frequencies use the rotated width " + str(2 * truth_rotating) + " as the exponent's "
             "denominator; proportional (Gemma) uses head_dim " + str(D), inv);
  }
  // Low precision: inv_freq rounded before forming angles; angles formed in a 16-bit type.
  for (DType t : {DType::kBF16, DType::kF16}) {
    std::vector<double> inv = truth.inv_freq;
    for (double& v : inv) v = round_to(t, v);
    add_freq("low_precision_table", std::string("inv_freq was rounded to ") + dtype_name(t) + " before forming angles", inv);
    if (d.form != Form::kFreqs)
      add_freq("low_precision_table", std::string("the angles pos*inv_freq were formed in ") + dtype_name(t) +
               " (positions and inv_freq rounded to it), losing the phase at long positions", truth.inv_freq, t);
  }

  // Attention factor.
  h.factors.push_back({"", "", truth.attention_factor});
  if (af_testable) {
    auto add_af = [&](const std::string& code, const std::string& msg, double af) {
      for (const auto& f : h.factors)
        if (std::fabs(f.af - af) <= 1e-12 * std::fabs(af)) return;
      h.factors.push_back({code, msg, af});
    };
    const double af = truth.attention_factor;
    if (std::fabs(af - 1) > 1e-12) {
      add_af("attention_factor_missing", "cos/sin lack the attention factor " + fmt(af) + " (" + rope_type_name(sc.type) +
             "): the engine left them unscaled", 1.0);
      add_af("attention_factor_twice", "the attention factor was applied twice: " + fmt(af * af) + " = " + fmt(af) + "^2", af * af);
    }
    if (sc.attention_factor && (sc.type == RopeType::kYarn || sc.type == RopeType::kLongRope)) {
      Spec s = spec;
      s.scaling.attention_factor.reset();
      if (auto f = freqs_of(s, seq_len))
        add_af("attention_factor_missing", "the config's explicit attention_factor " + fmt(*sc.attention_factor) +
               " was ignored: the engine used the formula's " + fmt(f->attention_factor), f->attention_factor);
    }
    if (sc.factor && sc.type == RopeType::kLongRope) {
      // mlx-lm's SuScaledRoPE derives the factor from max_position_embeddings / original_max_position_embeddings,
      // ignoring an explicit factor (and attention_factor).
      Spec s = spec;
      s.scaling.factor.reset();
      s.scaling.attention_factor.reset();
      if (auto f = freqs_of(s, seq_len))
        add_af("longrope_factor_ignored", "LongRoPE's explicit factor " + fmt(*sc.factor) +
               (sc.attention_factor ? " and attention_factor " + fmt(*sc.attention_factor) : std::string()) +
               (sc.attention_factor ? " were" : " was") + " ignored: the engine derived the attention factor " + fmt(f->attention_factor) +
               " from max_position_embeddings / original_max_position_embeddings = " +
               fmt(static_cast<double>(spec.max_position_embeddings) / static_cast<double>(sc.original_max_position_embeddings)) +
               " (as mlx-lm's SuScaledRoPE does); the config gives " + fmt(af), f->attention_factor);
    }
    if (sc.type == RopeType::kYarn && !sc.attention_factor && (sc.mscale || sc.mscale_all_dim)) {
      const double f = yarn_factor(spec);
      add_af("mscale_ignored", "mscale/mscale_all_dim were ignored: the engine used 0.1*ln(factor)+1 = " + fmt(get_mscale(f, 1)) +
             " where the config's mscale " + fmt(sc.mscale.value_or(0)) + " / mscale_all_dim " + fmt(sc.mscale_all_dim.value_or(0)) +
             " give " + fmt(af), get_mscale(f, 1));
      if (sc.mscale && *sc.mscale != 0)
        add_af("mscale_ignored", "mscale_all_dim was ignored: the engine used 0.1*mscale*ln(factor)+1 = " +
               fmt(get_mscale(f, *sc.mscale)) + " where the config gives " + fmt(af), get_mscale(f, *sc.mscale));
    }
  }

  // Pairing the data shows.
  if (d.pairing && *d.pairing != spec.pairing) {
    const bool inter = *d.pairing == Pairing::kInterleaved;
    h.structural.push_back({"pairing_mismatch", std::string("the data pairs channels ") +
                            (inter ? "interleaved (2i, 2i+1)" : "half-split (i, i+R/2)") + " but the config's model is " +
                            (inter ? "half-split (rotate_half; GPT-NeoX/Llama-HF style)" : "interleaved (GPT-J/Meta/DeepSeek style)") +
                            (d.form == Form::kFreqs ? " (ggml mode)" : "")});
  }
  return h;
}

std::optional<std::string> dtype_precision_diagnosis(const Canonical& d, const Frequencies& truth, int64_t range) {
  if (d.dtype != DType::kF16 && d.dtype != DType::kBF16) return std::nullopt;
  if (d.form == Form::kFreqs) {
    double dt = 0;
    for (double v : truth.inv_freq) dt = std::max(dt, std::fabs(round_to(d.dtype, v) - v));
    if (dt <= 0 || dt * static_cast<double>(range - 1) <= 1e-2) return std::nullopt;
    return std::string("inv_freq is stored as ") + dtype_name(d.dtype) + ": pos*inv_freq is off by more than 1e-2 rad from position " +
           std::to_string(static_cast<int64_t>(std::ceil(1e-2 / dt))) + " (positions examined: " + std::to_string(range) + ")";
  }
  if (d.form == Form::kAngles) {
    for (int64_t r = 0; r < d.rows(); ++r)
      for (double v : truth.inv_freq) {
        const double a = d.positions[static_cast<size_t>(r)] * v;
        if (std::fabs(round_to(d.dtype, a) - a) > 1e-2)
          return std::string("angles are stored as ") + dtype_name(d.dtype) + ": they round off by more than 1e-2 rad from position " +
                 std::to_string(static_cast<int64_t>(d.positions[static_cast<size_t>(r)])) + " (an angle of " + fmt(a) + " becomes " +
                 fmt(round_to(d.dtype, a)) + ")";
      }
  }
  return std::nullopt;
}

}  // namespace rotary::parity
