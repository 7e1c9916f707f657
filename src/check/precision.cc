// Precision of engine data vs exact fp64 values as a function of position, and of f32-formed angles.
#include "check/precision.h"

#include <algorithm>
#include <cmath>

namespace rotary::parity {
namespace {

/// Accumulates per-position errors into octaves and first crossings.
struct Series {
  PrecisionSeries s;
  void add(int64_t pos, double err) {
    if (!(err <= s.max_err)) s.max_err = std::isnan(err) ? s.max_err : err;
    if (err > 1e-3 && (!s.first_pos_err_1e3 || pos < *s.first_pos_err_1e3)) s.first_pos_err_1e3 = pos;
    if (err > 1e-2 && (!s.first_pos_err_1e2 || pos < *s.first_pos_err_1e2)) s.first_pos_err_1e2 = pos;
    const int64_t start = pos <= 0 ? 0 : int64_t(1) << (63 - __builtin_clzll(static_cast<unsigned long long>(pos)));
    auto it = std::lower_bound(s.octave_start.begin(), s.octave_start.end(), start);
    const auto at = it - s.octave_start.begin();
    if (it == s.octave_start.end() || *it != start) {
      s.octave_start.insert(it, start);
      s.octave_max_err.insert(s.octave_max_err.begin() + at, err);
    } else {
      s.octave_max_err[static_cast<size_t>(at)] = std::max(s.octave_max_err[static_cast<size_t>(at)], err);
    }
  }
};

/// |x| reduced to [0, pi] modulo 2*pi (cheap when it already is: the usual case).
double wrapped(double x) {
  x = std::fabs(x);
  return x <= M_PI ? x : std::fabs(std::remainder(x, 2 * M_PI));
}

/// Positions examined in [0, n): all below 4096, then 2048 evenly spaced per octave [2^k, 2^(k+1)) (its last
/// position included), so a first crossing beyond 4096 is found to within 1/2048 of its octave.
std::vector<int64_t> range_positions(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t p = 0; p < std::min<int64_t>(n, 4096); ++p) out.push_back(p);
  for (int64_t s = 4096; s < n; s *= 2) {
    const int64_t e = std::min(2 * s, n);  // [s, e)
    for (int64_t k = 0; k < 2048; ++k) {
      const int64_t p = s + (e - s - 1) * k / 2047;
      if (out.back() != p) out.push_back(p);
    }
  }
  return out;
}

}  // namespace

PrecisionSeries data_precision(const Canonical& d, const std::vector<double>& theta, double af, int64_t range) {
  Series out;
  const int64_t ht = static_cast<int64_t>(theta.size());
  auto th = [&](int64_t j) { return j < ht ? theta[static_cast<size_t>(j)] : 0.0; };
  if (d.form == Form::kFreqs) {
    out.s.description = "angles pos*inv_freq formed exactly from the given inv_freq (" + std::string(dtype_name(d.dtype)) +
                        ") vs exact, positions [0, " + std::to_string(range) + ")";
    double dtheta = 0;
    for (int64_t j = 0; j < std::max(d.half, ht); ++j)
      dtheta = std::max(dtheta, std::fabs((j < d.half ? d.inv_freq[static_cast<size_t>(j)] : 0.0) - th(j)));
    const double daf = d.attention_factor ? std::fabs(*d.attention_factor - af) : 0.0;
    for (int64_t p : range_positions(range)) out.add(p, std::max(std::min(2.0, static_cast<double>(p) * dtheta) * std::max(1.0, af), daf));
    return out.s;
  }
  out.s.description = std::string(d.form == Form::kAngles ? "angles" : "cos/sin") + " as given (" + dtype_name(d.dtype) +
                      ") vs exact, per position (all below 4096, then 2048 per octave)";
  // File tables (row r = position r) are examined like a range; rotated tokens (arbitrary positions) all.
  std::vector<int64_t> rows;
  bool by_row = true;
  for (int64_t r = 0; r < d.rows() && by_row; ++r) by_row = d.positions[static_cast<size_t>(r)] == static_cast<double>(r);
  if (by_row) rows = range_positions(d.rows());
  else for (int64_t r = 0; r < d.rows(); ++r) rows.push_back(r);
  for (int64_t r : rows) {
    const double p = d.positions[static_cast<size_t>(r)];
    double err = 0;
    for (int64_t j = 0; j < d.half; ++j) {
      const double exact = p * th(j);
      const size_t k = static_cast<size_t>(r * d.half + j);
      double e;
      if (d.form == Form::kAngles) {
        const double da = wrapped(d.a[k] - exact);
        e = std::max({da, std::fabs(std::cos(d.a[k]) - std::cos(exact)), std::fabs(std::sin(d.a[k]) - std::sin(exact))});
      } else {
        const double ec = std::fabs(d.a[k] - af * std::cos(exact)), es = std::fabs(d.b[k] - af * std::sin(exact));
        double da = 0;
        if (std::hypot(d.a[k], d.b[k]) > 1e-3) da = wrapped(std::atan2(d.b[k], d.a[k]) - std::remainder(exact, 2 * M_PI));
        e = std::max({ec, es, da});
      }
      err = std::max(err, e);
    }
    out.add(static_cast<int64_t>(std::llround(p)), err);
  }
  return out.s;
}

PrecisionSeries f32_angle_precision(const std::vector<double>& theta, double af, int64_t range, bool ggml,
                                    const std::vector<double>& ggml_ladder_f32_scale) {
  Series out;
  out.s.description = ggml ? "angles formed as ggml does (theta = p, theta *= theta_scale per pair, / freq_factor, in f32), positions [0, " +
                                 std::to_string(range) + ")"
                           : "angles formed as f32(p) * f32(inv_freq) in f32 (HF, vLLM, TE, FlashInfer), positions [0, " +
                                 std::to_string(range) + ")";
  std::vector<float> t32(theta.size());
  for (size_t j = 0; j < theta.size(); ++j) t32[j] = static_cast<float>(theta[j]);
  const double scale = std::max(1.0, af);
  for (int64_t p : range_positions(range)) {
    double err = 0;
    const float pf = static_cast<float>(p);
    float run = pf;
    for (size_t j = 0; j < theta.size(); ++j) {
      float a;
      if (ggml && !ggml_ladder_f32_scale.empty()) {
        if (j > 0) run *= static_cast<float>(ggml_ladder_f32_scale[0]);
        a = run * static_cast<float>(ggml_ladder_f32_scale[1 + j]);
      } else {
        a = pf * t32[j];
      }
      err = std::max(err, wrapped(static_cast<double>(a) - static_cast<double>(p) * theta[j]));
    }
    out.add(p, std::min(2.0, err) * scale);
  }
  return out.s;
}

}  // namespace rotary::parity
