// The tolerance test of a hypothesis (frequencies, attention factor, angle precision) against canonical engine data.
#include "check/model.h"

#include "core/freqs_internal.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rotary::parity {

std::vector<int64_t> sample_rows(int64_t rows) {
  std::vector<int64_t> out;
  if (rows <= 4096) {
    for (int64_t r = 0; r < rows; ++r) out.push_back(r);
    return out;
  }
  for (int64_t r = 0; r < 2048; ++r) out.push_back(r);
  const int64_t rest = rows - 2048;
  for (int64_t k = 1; k <= 2048; ++k) out.push_back(2047 + (rest * k + 2047) / 2048);
  out.back() = rows - 1;
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {

/// Extra angle error of angles formed in dtype d: |d(d(p) * d(theta)) - p*theta| plus one rounding of slack.
double low_precision_envelope(DType d, double p, double theta) {
  const double formed = round_to(d, round_to(d, p) * round_to(d, theta));
  return std::fabs(formed - p * theta) + 2 * half_ulp(d, formed);
}

/// The blend's magnification of an error d_weight in the extrapolation (unscaled) weight w: the frequency is
/// θ·((1 - w) / f + w), so its relative change per unit of w is (1 - 1/f) / ((1 - w)/f + w).
double blend_magnification(double f, double w) { return (1 - 1 / f) / ((1 - w) / f + w); }

}  // namespace

std::vector<double> engine_blend_slack(const Spec& spec) {
  std::vector<double> out(static_cast<size_t>(spec.rotary_dim / 2), 0.0);
  const Scaling& sc = spec.scaling;
  const double eps = 0x1p-24;
  if (sc.type == RopeType::kYarn) {
    // HF: ramp = (arange(R/2, f32) - low) / (high - low) in f32 (low and the divisor rounded to f32, then the
    // subtraction and the division: exact for integer bounds, as truncate gives, except the division), and
    // w = 1 - ramp (one more rounding) weighs the unscaled frequency.
    const detail::YarnRamp r = detail::yarn_ramp(spec);
    if (!(r.factor > 1)) return out;
    for (size_t i = 0; i < out.size(); ++i) {
      const double j = static_cast<double>(i), width = r.high - r.low;
      const double ramp = (j - r.low) / width;
      if (!(ramp > -1e-6 && ramp < 1 + 1e-6)) continue;
      const bool exact_low = static_cast<double>(static_cast<float>(r.low)) == r.low;  // integer bounds: truncate
      const double d_num = exact_low ? 0.0 : (std::fabs(r.low) + std::fabs(j - r.low)) * eps;
      const double d_ramp = d_num / width + 2 * eps * std::fabs(ramp);
      const double w = std::clamp(1 - ramp, 0.0, 1.0);
      out[i] = (d_ramp + 2 * eps) * blend_magnification(r.factor, w);
    }
    return out;
  }
  if (sc.type != RopeType::kLlama3 || !sc.factor) return out;
  const double f = *sc.factor, L = static_cast<double>(sc.original_max_position_embeddings);
  const double lo = sc.low_freq_factor, hi = sc.high_freq_factor, R = static_cast<double>(spec.rotary_dim);
  if (!(hi > lo)) return out;  // no blend band (low = high)
  for (size_t i = 0; i < out.size(); ++i) {
    const double x = 2.0 * static_cast<double>(i) / R;
    const double ratio = L * std::pow(spec.base, -x) / (2 * M_PI);  // L / wavelen, in [lo, hi] in the blend
    if (!(ratio >= lo * (1 - 1e-6) && ratio <= hi * (1 + 1e-6))) continue;
    const double smooth = std::clamp((ratio - lo) / (hi - lo), 0.0, 1.0);
    // f32 θ: pow of an f32 exponent (|ln base|·x roundings) and 3 more; 2π / θ and L / wavelen: 2; the subtraction
    // and division: 2 of smooth; the blend magnifies smooth's error as it does YaRN's weight.
    const double theta_rel = (std::fabs(std::log(spec.base)) * x + 3) * eps;
    const double d_smooth = ratio / (hi - lo) * (theta_rel + 2 * eps) + 2 * eps;
    out[i] = d_smooth * blend_magnification(f, smooth);
  }
  return out;
}

double score(const Canonical& data, const Model& m, const std::vector<int64_t>& rows, std::vector<double>* per_band) {
  const int64_t hm = static_cast<int64_t>(m.inv_freq.size());
  const int64_t h = std::max(data.half, hm);
  if (per_band) per_band->assign(static_cast<size_t>(h), 0.0);
  const double inf = std::numeric_limits<double>::infinity();
  double worst = 0;
  auto note = [&](int64_t j, double ratio) {
    worst = std::max(worst, ratio);
    if (per_band) (*per_band)[static_cast<size_t>(j)] = std::max((*per_band)[static_cast<size_t>(j)], ratio);
  };
  auto theta_of = [&](int64_t j) { return j < hm ? m.inv_freq[static_cast<size_t>(j)] : 0.0; };
  auto slack_of = [&](int64_t j) { return j < static_cast<int64_t>(m.band_rel.size()) ? m.band_rel[static_cast<size_t>(j)] : 0.0; };
  // Bands the model rotates but the data does not have.
  for (int64_t j = data.half; j < hm; ++j)
    if (m.inv_freq[static_cast<size_t>(j)] != 0.0) note(j, inf);

  if (data.form == Form::kFreqs) {
    for (int64_t j = 0; j < data.half; ++j) {
      const double t = theta_of(j), d = data.inv_freq[static_cast<size_t>(j)];
      const double tol = 2 * half_ulp(data.dtype, t) + (kFreqRel + slack_of(j)) * std::fabs(t) + kFreqAbs;
      note(j, std::fabs(d - t) / tol);
    }
    if (data.attention_factor) {
      const double ratio = std::fabs(*data.attention_factor - m.af) / (kFactorRel * std::fabs(m.af) + 1e-12);
      for (int64_t j = 0; j < h; ++j) note(j, ratio);
    }
    return worst;
  }
  const double noise = data.noise_scale * 2 * half_ulp(data.dtype, std::max(1.0, std::fabs(m.af)));
  for (int64_t r : rows) {
    const double p = data.positions[static_cast<size_t>(r)];
    for (int64_t j = 0; j < data.half; ++j) {
      const double theta = theta_of(j), angle = p * theta;
      double angle_tol = kAngleAbs + (kAngleRel + slack_of(j)) * std::fabs(angle);
      if (m.low_precision_angles) angle_tol += low_precision_envelope(*m.low_precision_angles, p, theta);
      const size_t k = static_cast<size_t>(r * data.half + j);
      if (data.form == Form::kAngles) {
        const double tol = 2 * half_ulp(data.dtype, angle) + angle_tol;
        note(j, std::fabs(std::remainder(data.a[k] - angle, 2 * M_PI)) / tol);
      } else {
        const double tol = noise + std::fabs(m.af) * angle_tol;
        const double ec = std::fabs(data.a[k] - m.af * std::cos(angle)), es = std::fabs(data.b[k] - m.af * std::sin(angle));
        note(j, std::max(ec, es) / tol);
      }
    }
  }
  return worst;
}

}  // namespace rotary::parity
