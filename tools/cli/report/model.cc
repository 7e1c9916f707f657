// The model a report describes: context sizes, scaled vs unscaled frequencies, band classes, comparison variants.
#include "model.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "../cli.h"
#include "format.h"

namespace rotary::cli::report {
namespace {

constexpr double kTwoPi = 2.0 * std::numbers::pi;

double wavelength_of(double theta) { return theta > 0 ? kTwoPi / theta : INFINITY; }

std::optional<int64_t> scaled_seq_len(const Spec& s, int64_t L) {
  if (s.scaling.type == RopeType::kDynamic && !s.scaling.alpha && s.max_position_embeddings > 0)
    return int64_t(std::llround(s.scaling.factor.value_or(1.0) * double(s.max_position_embeddings)));
  if (s.scaling.type == RopeType::kLongRope) return std::max<int64_t>(s.max_position_embeddings, L + 1);
  return std::nullopt;
}

Frequencies unscaled_frequencies(const Spec& s) {
  if (s.scaling.type == RopeType::kProportional) {
    // Gemma-style proportional frequencies have their own denominator; "unscaled" = the same type at factor 1.
    Spec u = s;
    u.scaling.factor = 1.0;
    try {
      return compute_frequencies(u);
    } catch (const Error&) {
    }
  }
  return Frequencies{default_inv_freq(s.base, s.effective_rotary_dim()), 1.0};
}

}  // namespace

const char* class_key(BandClass c) {
  switch (c) {
    case BandClass::kFullRotations: return "full_rotations";
    case BandClass::kInterpolated: return "interpolated";
    case BandClass::kBlended: return "blended";
    case BandClass::kSubRotation: return "sub_rotation";
  }
  return "?";
}

const char* class_label(BandClass c) {
  switch (c) {
    case BandClass::kFullRotations: return "full rotations within L";
    case BandClass::kInterpolated: return "interpolated";
    case BandClass::kBlended: return "blended";
    case BandClass::kSubRotation: return "less than one rotation within L";
  }
  return "?";
}

const char* class_meaning(BandClass c) {
  switch (c) {
    case BandClass::kFullRotations:
      return "theta unchanged and wavelength < L: high-frequency pair, completes full turns in training, kept "
             "(extrapolated) as is";
    case BandClass::kInterpolated:
      return "theta divided by the full scaling factor: positions squeezed back into the trained angle range";
    case BandClass::kBlended:
      return "theta changed by more than 1x but less than the full factor (llama3 smoothing band, YaRN ramp, "
             "NTK base change, LongRoPE per-pair factor)";
    case BandClass::kSubRotation:
      return "theta unchanged but wavelength >= L: low-frequency pair never completes a turn within L";
  }
  return "";
}

ModelView make_model_view(Spec spec) {
  ModelView m;
  if (spec.mrope.enabled()) spec.mrope = MRope{};  // text tokens: t = h = w, so M-RoPE equals 1-D RoPE
  m.spec = spec.normalized();
  const Spec& s = m.spec;
  m.max_pos = s.max_position_embeddings;
  m.L = s.scaling.original_max_position_embeddings > 0 ? s.scaling.original_max_position_embeddings : s.max_position_embeddings;
  if (m.L <= 0) m.L = 4096;  // unknown context: a conventional value, reported as such
  // Linear scaling names no original context: max_position_embeddings is already the scaled one (transformers reads
  // no original_max for it; Gemma 3's ×8 full attention serves 131072), so L is max_position_embeddings / factor.
  if (s.scaling.type == RopeType::kLinear && s.scaling.original_max_position_embeddings <= 0 && s.scaling.factor &&
      *s.scaling.factor > 1 && m.max_pos > 0) {
    m.L = std::max<int64_t>(1, std::llround(double(m.max_pos) / *s.scaling.factor));
    m.L_from_factor = true;
  }
  if (s.scaling.factor) m.nominal_factor = *s.scaling.factor;
  else if (m.max_pos > m.L) m.nominal_factor = double(m.max_pos) / double(m.L);
  m.extended = std::max<int64_t>(m.max_pos, int64_t(std::llround(m.nominal_factor * double(m.L))));
  m.seq_len = scaled_seq_len(s, m.L);
  m.scaled = compute_frequencies(s, m.seq_len);
  m.unscaled = unscaled_frequencies(s);
  double max_ratio = 1.0;
  for (size_t i = 0; i < m.scaled.inv_freq.size() && i < m.unscaled.inv_freq.size(); ++i)
    if (m.scaled.inv_freq[i] > 0) max_ratio = std::max(max_ratio, m.unscaled.inv_freq[i] / m.scaled.inv_freq[i]);
  // Dynamic NTK has no fixed factor: the lowest frequency is scaled by the most, call that "full".
  m.full_factor = s.scaling.type == RopeType::kDynamic ? max_ratio : std::max(1.0, m.nominal_factor);
  return m;
}

std::vector<Band> make_bands(const ModelView& m) {
  std::vector<Band> bands;
  const double rel = 1e-9;
  for (size_t i = 0; i < m.scaled.inv_freq.size(); ++i) {
    Band b;
    b.i = int64_t(i);
    b.theta = m.scaled.inv_freq[i];
    b.theta_default = i < m.unscaled.inv_freq.size() ? m.unscaled.inv_freq[i] : b.theta;
    b.wavelength = wavelength_of(b.theta);
    b.wavelength_default = wavelength_of(b.theta_default);
    b.ratio = (b.theta > 0 && b.theta_default > 0) ? b.theta_default / b.theta : 1.0;
    if (std::abs(b.ratio - 1.0) <= rel)
      b.cls = b.wavelength_default < double(m.L) ? BandClass::kFullRotations : BandClass::kSubRotation;
    else if (m.full_factor > 1.0 && b.ratio >= m.full_factor * (1.0 - 1e-6))
      b.cls = BandClass::kInterpolated;
    else
      b.cls = BandClass::kBlended;
    bands.push_back(b);
  }
  return bands;
}

std::string type_explanation(const ModelView& m) {
  const Scaling& sc = m.spec.scaling;
  std::ostringstream o;
  switch (sc.type) {
    case RopeType::kDefault:
      o << "no scaling: pairs whose wavelength is below L = " << m.L
        << " complete full turns during training; the rest never see a full turn within L.";
      break;
    case RopeType::kLinear:
      o << "linear (position interpolation): every theta is divided by factor " << format_double(m.nominal_factor)
        << ", so every pair is interpolated.";
      break;
    case RopeType::kDynamic:
      if (sc.alpha) {
        o << "dynamic NTK-alpha (vLLM, Hunyuan): one fixed base rope_theta * alpha^(R/(R-2)) with alpha "
          << format_double(*sc.alpha) << ", whatever the sequence length: pair 0 keeps theta, later pairs are scaled "
          << "progressively more (blended), the last by " << fmt("%.4g", m.full_factor) << " (interpolated).";
        break;
      }
      o << "dynamic NTK: beyond max_position_embeddings the base grows with the sequence length; shown at seq_len "
        << m.seq_len.value_or(0) << " (factor x max_position_embeddings): pair 0 keeps theta, later pairs are "
        << "scaled progressively more (blended), the last by the full NTK ratio " << fmt("%.4g", m.full_factor)
        << " (interpolated).";
      break;
    case RopeType::kYarn:
      o << "YaRN: pairs with more than beta_fast = " << format_double(sc.beta_fast) << " turns within L keep theta "
        << "(extrapolated), pairs with fewer than beta_slow = " << format_double(sc.beta_slow)
        << " turns are divided by factor " << format_double(m.nominal_factor)
        << " (interpolated), a linear ramp blends the pairs between; cos/sin are multiplied by the attention factor.";
      break;
    case RopeType::kLlama3:
      o << "Llama 3: wavelengths below L/high_freq_factor = " << format_double(double(m.L) / sc.high_freq_factor)
        << " keep theta, wavelengths above L/low_freq_factor = " << format_double(double(m.L) / sc.low_freq_factor)
        << " are divided by factor " << format_double(m.nominal_factor) << ", a smooth blend between.";
      break;
    case RopeType::kLongRope:
      o << "LongRoPE: each pair is divided by its own factor (long_factor beyond L = " << m.L
        << ", short_factor within); shown with the long factors (seq_len " << m.seq_len.value_or(0)
        << "); 'interpolated' = stretched by at least the context ratio " << fmt("%.4g", m.full_factor) << ".";
      break;
    case RopeType::kProportional:
      o << "proportional (Gemma-style): frequencies use head_dim as denominator, zero beyond the partial rotary "
        << "part; compared with the same type at factor 1.";
      break;
    case RopeType::kNtk:
      if (sc.mixed_b)
        o << "mixed NTK (vLLM, mixed_b " << format_double(*sc.mixed_b) << "): pair i is divided by factor^(((i+1)/(R/2))^b), "
          << "from nearly 1 (blended) up to factor " << format_double(m.nominal_factor) << " for the last pair (interpolated).";
      else
        o << "static NTK (vLLM): the base is multiplied by factor " << format_double(m.nominal_factor)
          << " and every theta divided by factor^(2/R): pair i is divided by factor^((2i+2)/R), the last pair by the "
          << "full factor (interpolated), the others less (blended).";
      break;
  }
  return o.str();
}

std::vector<Variant> make_variants(const ModelView& m) {
  std::vector<Variant> out;
  const Spec& s = m.spec;
  const std::string type = rope_type_name(s.scaling.type);
  std::string model_label = "model: " + type;
  if (s.scaling.type != RopeType::kDefault) model_label += " x" + fmt("%g", m.nominal_factor);
  out.push_back({"model", model_label, m.scaled});
  if (s.scaling.type != RopeType::kDefault)
    out.push_back({"unscaled", "no scaling (base " + fmt("%g", s.base) + ")", m.unscaled});
  const double f = m.nominal_factor > 1.0 ? m.nominal_factor : 4.0;
  const std::string fs = fmt("%g", f);
  auto add = [&](RopeType t, const std::string& key, const std::string& label, std::optional<int64_t> seq) {
    if (t == s.scaling.type) return;
    Spec v = s;
    v.scaling = Scaling{};
    v.scaling.type = t;
    v.scaling.factor = f;
    v.scaling.original_max_position_embeddings = m.L;
    if (v.max_position_embeddings <= 0) v.max_position_embeddings = m.L;
    try {
      out.push_back({key, label, compute_frequencies(v, seq)});
    } catch (const Error&) {
      // a variant this spec cannot express (e.g. a too-small rotary_dim) is simply not drawn
    }
  };
  add(RopeType::kLinear, "linear", "linear x" + fs, std::nullopt);
  {
    // Dynamic NTK is defined relative to max_position_embeddings = L; shown at the extended length f * L.
    Spec v = s;
    v.scaling = Scaling{};
    v.scaling.type = RopeType::kDynamic;
    v.scaling.factor = f;
    v.max_position_embeddings = m.L;
    if (s.scaling.type != RopeType::kDynamic) {
      try {
        const auto len = int64_t(std::llround(f * double(m.L)));
        out.push_back({"dynamic", "dynamic NTK x" + fs + " (at " + std::to_string(len) + " tokens)",
                       compute_frequencies(v, len)});
      } catch (const Error&) {
      }
    }
  }
  add(RopeType::kYarn, "yarn", "yarn x" + fs, std::nullopt);
  add(RopeType::kLlama3, "llama3", "llama3 x" + fs, std::nullopt);
  if (s.scaling.type == RopeType::kLongRope) {
    try {
      out.push_back({"longrope_short", "longrope short factors (within L)", compute_frequencies(s, m.L)});
    } catch (const Error&) {
    }
  }
  if (s.base != 10000.0)
    out.push_back({"roformer", "RoFormer base 10000, no scaling",
                   Frequencies{default_inv_freq(10000.0, s.effective_rotary_dim()), 1.0}});
  return out;
}

}  // namespace rotary::cli::report
