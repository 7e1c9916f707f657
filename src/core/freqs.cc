// Frequency math for every rope_type, in double, following Hugging Face transformers' modeling_rope_utils.
#include "rotary/freqs.h"

#include "core/freqs_internal.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

namespace rotary {
namespace {

constexpr double kTwoPi = 2.0 * std::numbers::pi;

/// pos_freqs[i] = base^(2i/denominator) for i in [0, count): the HF "pos_freqs" (1/theta_i).
std::vector<double> pos_freqs(double base, int64_t denominator, int64_t count) {
  std::vector<double> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    out[static_cast<size_t>(i)] = std::pow(base, static_cast<double>(2 * i) / static_cast<double>(denominator));
  return out;
}

std::vector<double> reciprocal(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = 1.0 / v[i];
  return out;
}

/// YaRN's magnitude correction: 0.1 * m * ln(s) + 1 for s > 1, else 1.
double yarn_get_mscale(double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

/// The dimension index at which `rotations` full turns fit into `context` positions.
double yarn_correction_dim(double rotations, int64_t dim, double base, double context) {
  return (static_cast<double>(dim) * std::log(context / (rotations * 2.0 * std::numbers::pi))) /
         (2.0 * std::log(base));
}

Frequencies yarn(const Spec& s) {
  const Scaling& sc = s.scaling;
  const int64_t dim = s.rotary_dim;
  const detail::YarnRamp r = detail::yarn_ramp(s);
  const double factor = r.factor, low = r.low, high = r.high;

  Frequencies out;
  if (sc.attention_factor) {
    out.attention_factor = *sc.attention_factor;
  } else if (sc.mscale && *sc.mscale != 0.0 && sc.mscale_all_dim && *sc.mscale_all_dim != 0.0) {
    // HF: only when both are truthy; a lone mscale (or mscale_all_dim) is ignored.
    out.attention_factor = yarn_get_mscale(factor, *sc.mscale) / yarn_get_mscale(factor, *sc.mscale_all_dim);
  } else {
    out.attention_factor = yarn_get_mscale(factor, 1.0);
  }

  const int64_t n = dim / 2;
  const std::vector<double> pf = pos_freqs(s.base, dim, n);
  out.inv_freq.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const double ramp = std::clamp((static_cast<double>(j) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    const double p = pf[static_cast<size_t>(j)];
    const double interpolated = 1.0 / (factor * p), extrapolated = 1.0 / p;
    out.inv_freq[static_cast<size_t>(j)] =
        interpolated * (1.0 - extrapolation_weight) + extrapolated * extrapolation_weight;
  }
  return out;
}

Frequencies longrope(const Spec& s, std::optional<double> seq_len) {
  const Scaling& sc = s.scaling;
  const int64_t orig = sc.original_max_position_embeddings;
  const double factor = sc.factor ? *sc.factor
                                  : static_cast<double>(s.max_position_embeddings) / static_cast<double>(orig);
  Frequencies out;
  if (sc.attention_factor)
    out.attention_factor = *sc.attention_factor;
  else
    out.attention_factor =
        factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(orig)));

  const bool use_long = seq_len && *seq_len > static_cast<double>(orig);
  const std::vector<double>& ext = use_long ? sc.long_factor : sc.short_factor;
  const std::vector<double> pf = pos_freqs(s.base, s.rotary_dim, s.rotary_dim / 2);
  out.inv_freq.resize(pf.size());
  for (size_t i = 0; i < pf.size(); ++i) out.inv_freq[i] = 1.0 / (ext[i] * pf[i]);
  return out;
}

Frequencies llama3(const Spec& s) {
  const Scaling& sc = s.scaling;
  const double factor = *sc.factor;
  const double old_context = static_cast<double>(sc.original_max_position_embeddings);
  const double low_wavelen = old_context / sc.low_freq_factor;
  const double high_wavelen = old_context / sc.high_freq_factor;
  Frequencies out;
  out.inv_freq = reciprocal(pos_freqs(s.base, s.rotary_dim, s.rotary_dim / 2));
  for (double& f : out.inv_freq) {
    const double wavelen = kTwoPi / f;
    if (wavelen > low_wavelen) {
      f = f / factor;  // low-frequency band: pure interpolation
    } else if (!(wavelen < high_wavelen) && sc.high_freq_factor > sc.low_freq_factor) {
      // medium band: blend between interpolation and the unchanged frequency (none when low = high: HF's blend
      // there is 0/0, reached only at wavelen = orig / low exactly)
      const double smooth = (old_context / wavelen - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor);
      f = (1.0 - smooth) * f / factor + smooth * f;
    }
    // high-frequency band (wavelen < high_wavelen): unchanged
  }
  return out;
}

Frequencies proportional(const Spec& s) {
  // Denominator is head_dim; only the first floor(prf * head_dim / 2) angles rotate, the rest are 0.
  const int64_t half = s.head_dim / 2;
  const auto angles = std::min<int64_t>(
      half, static_cast<int64_t>(std::floor(s.partial_rotary_factor * static_cast<double>(s.head_dim) / 2.0)));
  const double factor = s.scaling.factor.value_or(1.0);
  Frequencies out;
  out.inv_freq.assign(static_cast<size_t>(half), 0.0);
  const std::vector<double> pf = pos_freqs(s.base, s.head_dim, angles);
  for (int64_t i = 0; i < angles; ++i)
    out.inv_freq[static_cast<size_t>(i)] = (1.0 / pf[static_cast<size_t>(i)]) / factor;
  return out;
}

/// vLLM's NTKScalingRotaryEmbedding (kexue.fm/archives/9706). Fixed: the default ladder of base * factor, every
/// frequency divided by factor^(2/R), so theta_i = base^(-2i/R) * factor^(-(2i+2)/R): the highest frequency is
/// divided by factor^(2/R), the lowest by exactly factor. Mixed (mixed_b = b): the default ladder of base divided by
/// lambda_m = exp(a * m^b), m = i + 1, a = ln(factor) / (R/2)^b, so lambda runs from factor^((2/R)^b) to factor.
Frequencies ntk(const Spec& s) {
  const Scaling& sc = s.scaling;
  const double factor = *sc.factor;
  const double R = static_cast<double>(s.rotary_dim);
  Frequencies out;
  if (!sc.mixed_b) {
    out.inv_freq = default_inv_freq(s.base * factor, s.rotary_dim);
    const double shrink = std::pow(factor, 2.0 / R);
    for (double& f : out.inv_freq) f /= shrink;
    return out;
  }
  const double b = *sc.mixed_b;
  const double a = std::log(factor) / std::pow(R / 2.0, b);
  out.inv_freq = default_inv_freq(s.base, s.rotary_dim);
  for (size_t i = 0; i < out.inv_freq.size(); ++i)
    out.inv_freq[i] /= std::exp(a * std::pow(static_cast<double>(i + 1), b));
  return out;
}

}  // namespace

std::vector<double> default_inv_freq(double base, int64_t rotary_dim) {
  if (!(base > 0) || !std::isfinite(base))
    fail(Error::Kind::kInvalidArgument, "rotary_freqs", "base must be a finite number > 0, got " + std::to_string(base));
  if (rotary_dim <= 0 || rotary_dim % 2 != 0)
    fail(Error::Kind::kInvalidArgument, "rotary_freqs",
         "rotary_dim must be even and > 0, got " + std::to_string(rotary_dim));
  return reciprocal(pos_freqs(base, rotary_dim, rotary_dim / 2));
}

Frequencies compute_frequencies(const Spec& spec, std::optional<int64_t> seq_len) {
  if (seq_len && (*seq_len < 0 || *seq_len > detail::kMaxSeqLen))
    fail(*seq_len < 0 ? Error::Kind::kInvalidArgument : Error::Kind::kOutOfRange, "rotary_freqs",
         "seq_len must be in [0, 2^31] (positions are < 2^31), got " + std::to_string(*seq_len));
  return detail::frequencies_unchecked(spec.normalized(), seq_len);
}

namespace detail {

double dynamic_base(const Spec& s, std::optional<double> seq_len) {
  const double dim = static_cast<double>(s.rotary_dim);
  // vLLM's DynamicNTKAlphaRotaryEmbedding / HF Hunyuan's ntk_alpha: one fixed base, whatever the length.
  if (s.scaling.alpha) return s.base * std::pow(*s.scaling.alpha, dim / (dim - 2.0));
  const double max_pos = static_cast<double>(s.max_position_embeddings);
  const double len = seq_len ? std::max(*seq_len, max_pos) : max_pos;
  const double factor = *s.scaling.factor;
  return s.base * std::pow((factor * len / max_pos) - (factor - 1.0), dim / (dim - 2.0));
}

YarnRamp yarn_ramp(const Spec& s) {
  const Scaling& sc = s.scaling;
  const int64_t dim = s.rotary_dim;
  const double orig = static_cast<double>(sc.original_max_position_embeddings);
  YarnRamp r;
  r.factor = sc.factor ? *sc.factor : static_cast<double>(s.max_position_embeddings) / orig;
  // HF `beta_fast or 32`, `beta_slow or 1`: zero means the default.
  const double beta_fast = sc.beta_fast != 0.0 ? sc.beta_fast : 32.0;
  const double beta_slow = sc.beta_slow != 0.0 ? sc.beta_slow : 1.0;
  double low = yarn_correction_dim(beta_fast, dim, s.base, orig);
  double high = yarn_correction_dim(beta_slow, dim, s.base, orig);
  if (sc.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  r.low = std::max(low, 0.0);
  r.high = std::min(high, static_cast<double>(dim - 1));
  if (r.low == r.high) r.high += 0.001;  // HF: avoid a zero-width ramp
  return r;
}

Frequencies frequencies_unchecked(const Spec& s, std::optional<double> seq_len) {
  const Scaling& sc = s.scaling;
  Frequencies out;
  switch (sc.type) {
    case RopeType::kDefault:
      out.inv_freq = reciprocal(pos_freqs(s.base, s.rotary_dim, s.rotary_dim / 2));
      break;
    case RopeType::kLinear:
      out.inv_freq = reciprocal(pos_freqs(s.base, s.rotary_dim, s.rotary_dim / 2));
      for (double& f : out.inv_freq) f /= *sc.factor;
      break;
    case RopeType::kDynamic:
      out.inv_freq = reciprocal(pos_freqs(dynamic_base(s, seq_len), s.rotary_dim, s.rotary_dim / 2));
      break;
    case RopeType::kYarn:
      out = yarn(s);
      break;
    case RopeType::kLongRope:
      out = longrope(s, seq_len);
      break;
    case RopeType::kLlama3:
      out = llama3(s);
      break;
    case RopeType::kProportional:
      out = proportional(s);
      break;
    case RopeType::kNtk:
      out = ntk(s);
      break;
  }
  return out;
}

}  // namespace detail

}  // namespace rotary
