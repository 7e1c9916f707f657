// The report's curves against relative distance and position: decay bound, attention score, cos/sin error (CSV files).
#include "curves.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "../cli.h"
#include "format.h"
#include "rotary/table.h"
#include "vectors.h"

namespace rotary::cli::report {
namespace {

/// Bin starts for the curves: every integer up to 16, then ~`per_decade` log-spaced points up to r_max.
std::vector<int64_t> distance_grid(int64_t r_max, int per_decade) {
  std::vector<int64_t> r;
  for (int64_t i = 0; i <= std::min<int64_t>(16, r_max); ++i) r.push_back(i);
  const double step = std::pow(10.0, 1.0 / per_decade);
  for (double x = 16.0 * step; x <= double(r_max); x *= step) {
    const auto v = int64_t(std::llround(x));
    if (v > r.back()) r.push_back(v);
  }
  return r;  // the last bin runs to r_max inclusive
}

/// Statistics of one curve over a bin [r_j, r_{j+1}) of relative distances.
struct BinStats {
  double at = 0;  ///< value at r_j exactly
  double sum = 0, min = INFINITY, max = -INFINITY;
  int64_t n = 0;
  void add(double v) {
    if (n == 0) at = v;
    sum += v;
    min = std::min(min, v);
    max = std::max(max, v);
    ++n;
  }
  double mean() const { return n ? sum / double(n) : NAN; }
};

/// Per variant and bin: the RoFormer bound, the random-pair score and the self (k = q) score.
struct VariantCurves {
  std::vector<BinStats> decay, pair, self;
};

/// Evaluates, at EVERY integer distance r in [0, r_max], for one set of frequencies:
///   decay(r) = (1/h) Σ_{j=1..h} |S_j|, S_j = Σ_{k<j} e^{i r θ_k}   (RoFormer's relative upper bound)
///   score(r) = <R(r)q, R(0)k> = af² Σ_i [cos(rθ_i)(q0k0 + q1k1) + sin(rθ_i)(q0k1 − q1k0)] + pass-through q·k
/// (pairs in half-split order; for random vectors the pairing does not matter), and bins them by `grid`.
/// e^{i r θ} is advanced by complex multiplication and re-seeded exactly every 1024 steps.
VariantCurves evaluate_curves(const Frequencies& f, const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<int64_t>& grid, int64_t r_max) {
  const auto D = int64_t(q.size());
  const auto h = int64_t(f.inv_freq.size());
  const double af2 = f.attention_factor * f.attention_factor;
  const auto hn = static_cast<size_t>(h);
  std::vector<double> A(hn), B(hn), As(hn);
  double pass_pair = 0, pass_self = 0;
  for (int64_t i = 0; i < h; ++i) {
    const double q0 = q[size_t(i)], q1 = q[size_t(i + h)], k0 = k[size_t(i)], k1 = k[size_t(i + h)];
    A[size_t(i)] = q0 * k0 + q1 * k1;
    B[size_t(i)] = q0 * k1 - q1 * k0;
    As[size_t(i)] = q0 * q0 + q1 * q1;  // self score: q0k1 - q1k0 = 0
  }
  for (int64_t c = 2 * h; c < D; ++c) {
    pass_pair += double(q[size_t(c)]) * double(k[size_t(c)]);
    pass_self += double(q[size_t(c)]) * double(q[size_t(c)]);
  }
  VariantCurves out;
  out.decay.resize(grid.size());
  out.pair.resize(grid.size());
  out.self.resize(grid.size());
  std::vector<double> zr(hn), zi(hn), wr(hn), wi(hn);
  for (int64_t i = 0; i < h; ++i) {
    wr[size_t(i)] = std::cos(f.inv_freq[size_t(i)]);
    wi[size_t(i)] = std::sin(f.inv_freq[size_t(i)]);
  }
  size_t bin = 0;
  for (int64_t r = 0; r <= r_max; ++r) {
    if (r % 1024 == 0) {
      for (int64_t i = 0; i < h; ++i) {
        const double a = double(r) * f.inv_freq[size_t(i)];
        zr[size_t(i)] = std::cos(a);
        zi[size_t(i)] = std::sin(a);
      }
    }
    while (bin + 1 < grid.size() && r >= grid[bin + 1]) ++bin;  // r_max: the caller's bound, >= grid.back()
    double sr = 0, si = 0, bound = 0, pair = 0, self = 0;
    for (int64_t i = 0; i < h; ++i) {
      const double c = zr[size_t(i)], s = zi[size_t(i)];
      sr += c;
      si += s;
      bound += std::sqrt(sr * sr + si * si);
      pair += c * A[size_t(i)] + s * B[size_t(i)];
      self += c * As[size_t(i)];
      // advance to r + 1
      zr[size_t(i)] = c * wr[size_t(i)] - s * wi[size_t(i)];
      zi[size_t(i)] = c * wi[size_t(i)] + s * wr[size_t(i)];
    }
    out.decay[bin].add(h ? bound / double(h) : 0.0);
    out.pair[bin].add(af2 * pair + pass_pair);
    out.self[bin].add(af2 * self + pass_self);
  }
  return out;
}

/// <R(r)q, R(0)k> for one head evaluated directly in double (the check of rotary's kernel on the curve).
double score_f64(const Frequencies& f, const std::vector<float>& q, const std::vector<float>& k, int64_t r) {
  const auto D = int64_t(q.size());
  const int64_t half = int64_t(f.inv_freq.size());
  double s = 0;
  for (int64_t i = 0; i < half; ++i) {
    const double a = double(r) * f.inv_freq[size_t(i)], c = std::cos(a), sn = std::sin(a);
    const double q0 = q[size_t(i)], q1 = q[size_t(i + half)], k0 = k[size_t(i)], k1 = k[size_t(i + half)];
    s += (q0 * c - q1 * sn) * k0 + (q0 * sn + q1 * c) * k1;
  }
  s *= f.attention_factor * f.attention_factor;
  for (int64_t c = 2 * half; c < D; ++c) s += double(q[size_t(c)]) * double(k[size_t(c)]);
  return s;
}

struct Curves {
  std::vector<int64_t> distances;    ///< bin starts (every integer up to 16, then 80 per decade)
  int64_t r_max = 0;                 ///< every integer distance 0..r_max is evaluated
  double score_kernel_max_diff = 0;  ///< rotary's f32 kernel vs the f64 score, model variant
  double curve_self_check = 0;       ///< |recurrence − direct f64 score| at the bin starts, model variant
};
struct PhaseSummary {
  double f32_max_err = 0, rotary_max_err = 0;  ///< over all positions
  double f32_err_at_max = 0, rotary_err_at_max = 0;  ///< at 2^24-1
};
/// Writes decay.csv and score.csv for `variants` (the model's first) into `dir`.
Curves write_curves(const ModelView& mv, const std::vector<Variant>& variants, int64_t D,
                    const std::filesystem::path& dir) {
  Curves out;
  out.r_max = std::max<int64_t>({2 * mv.extended, 2 * mv.L, 65536});
  out.distances = distance_grid(out.r_max, 80);
  const auto& rs = out.distances;
  auto q = random_normal(size_t(D), 41), k = random_normal(size_t(D), 42);
  normalize(q);
  normalize(k);
  Progress progress("report: decay and score curves", (long long)variants.size());
  std::vector<VariantCurves> curves;
  for (size_t v = 0; v < variants.size(); ++v) {
    curves.push_back(evaluate_curves(variants[v].freqs, q, k, rs, out.r_max));
    progress.step((long long)v + 1);
  }
  progress.done();
  for (size_t j = 0; j < rs.size(); ++j)
    out.curve_self_check =
        std::max(out.curve_self_check, std::abs(curves[0].pair[j].at - score_f64(variants[0].freqs, q, k, rs[j])));
  {
    TextFile f(dir / "decay.csv");
    f << "distance";
    for (const auto& v : variants) f << "," << v.key << "," << v.key << "_mean," << v.key << "_min," << v.key << "_max";
    f << "\n";
    for (size_t j = 0; j < rs.size(); ++j) {
      f << rs[j];
      for (const auto& c : curves) {
        const BinStats& b = c.decay[j];
        f << "," << csv_num(b.at) << "," << csv_num(b.mean()) << "," << csv_num(b.min) << "," << csv_num(b.max);
      }
      f << "\n";
    }
    f.commit();
  }
  // The model's pair score also through rotary's f32 kernel: q rotated to r (ids), k to 0.
  std::vector<double> kernel_scores(rs.size());
  {
    const auto T = int64_t(rs.size());
    std::vector<float> qs, ks;
    for (int64_t j = 0; j < T; ++j) {
      qs.insert(qs.end(), q.begin(), q.end());
      ks.insert(ks.end(), k.begin(), k.end());
    }
    std::vector<int64_t> zeros(rs.size(), 0);
    // score_f64 pairs channels half-split, so the kernel does too here (the spec's pairing is checked above).
    rotate_ids(mv.scaled, Pairing::kHalfSplit, qs, T, 1, D, rs);
    rotate_ids(mv.scaled, Pairing::kHalfSplit, ks, T, 1, D, zeros);
    for (int64_t j = 0; j < T; ++j) {
      kernel_scores[size_t(j)] = dot(&qs[size_t(j * D)], &ks[size_t(j * D)], D);
      out.score_kernel_max_diff = std::max(
          out.score_kernel_max_diff, std::abs(kernel_scores[size_t(j)] - score_f64(mv.scaled, q, k, rs[size_t(j)])));
    }
  }
  {
    TextFile f(dir / "score.csv");
    f << "distance";
    for (const auto& v : variants) {
      const std::string p = v.key + "_pair", s = v.key + "_self";
      f << "," << p << "," << p << "_mean," << p << "_min," << p << "_max";
      f << "," << s << "," << s << "_mean," << s << "_min," << s << "_max";
    }
    f << ",model_pair_kernel\n";
    for (size_t j = 0; j < rs.size(); ++j) {
      f << rs[j];
      for (const auto& c : curves)
        for (const BinStats* b : {&c.pair[j], &c.self[j]})
          f << "," << csv_num(b->at) << "," << csv_num(b->mean()) << "," << csv_num(b->min) << "," << csv_num(b->max);
      f << "," << csv_num(kernel_scores[j]) << "\n";
    }
    f.commit();
  }
  return out;
}

/// Writes phase_error.csv: max |cos/sin error| vs position, f32 angles against rotary's rows.
PhaseSummary write_phase_error(const ModelView& mv, const std::filesystem::path& dir) {
  const Frequencies& f = mv.scaled;
  const auto half = int64_t(f.inv_freq.size());
  std::vector<int64_t> positions;
  for (double x = 1.0; x < double(kMaxExactPosition); x *= std::pow(10.0, 1.0 / 40)) {
    const auto p = int64_t(std::llround(x));
    if (positions.empty() || p > positions.back()) positions.push_back(p);
  }
  positions.push_back(kMaxExactPosition);
  TextFile out(dir / "phase_error.csv");
  out << "position,f32_cos_err,f32_sin_err,f32_angle_err_rad,rotary_cos_err,rotary_sin_err\n";
  PhaseSummary sum;
  const auto af = float(f.attention_factor);
  std::vector<float> rc(static_cast<size_t>(half)), rsn(static_cast<size_t>(half));
  for (int64_t p : positions) {
    compute_cos_sin_row(f, double(p), rc.data(), rsn.data());
    double fc = 0, fs = 0, fa = 0, xc = 0, xs = 0;
    for (int64_t i = 0; i < half; ++i) {
      const double th = f.inv_freq[size_t(i)];
      const long double ang = (long double)p * (long double)th;
      const long double tc = f.attention_factor * cosl(ang), ts = f.attention_factor * sinl(ang);
      const float a32 = float(th) * float(p);  // f32 theta × f32 position, rounded to f32
      const float c32 = float(std::cos(double(a32))) * af, s32 = float(std::sin(double(a32))) * af;
      fc = std::max(fc, double(std::abs((long double)c32 - tc)));
      fs = std::max(fs, double(std::abs((long double)s32 - ts)));
      fa = std::max(fa, double(std::abs((long double)a32 - ang)));
      xc = std::max(xc, double(std::abs((long double)rc[size_t(i)] - tc)));
      xs = std::max(xs, double(std::abs((long double)rsn[size_t(i)] - ts)));
    }
    out << p << "," << csv_num(fc) << "," << csv_num(fs) << "," << csv_num(fa) << "," << csv_num(xc) << ","
        << csv_num(xs) << "\n";
    sum.f32_max_err = std::max({sum.f32_max_err, fc, fs});
    sum.rotary_max_err = std::max({sum.rotary_max_err, xc, xs});
    if (p == kMaxExactPosition) {
      sum.f32_err_at_max = std::max(fc, fs);
      sum.rotary_err_at_max = std::max(xc, xs);
    }
  }
  out.commit();
  return sum;
}

}  // namespace

void report_curves(const ModelView& mv, int64_t D, const std::filesystem::path& dir, Json& rep) {
  const auto variants = make_variants(mv);
  const Curves curves = write_curves(mv, variants, D, dir);
  const PhaseSummary phase = write_phase_error(mv, dir);
  Json vj = Json::array();
  for (const auto& v : variants)
    vj.push_back({{"key", v.key}, {"label", v.label}, {"attention_factor", v.freqs.attention_factor}});
  rep["curves"] = {{"variants", vj},
                   {"bins", curves.distances.size()},
                   {"max_distance", curves.r_max},
                   {"description", "every integer distance 0..max_distance evaluated; rows are bins [distance, next "
                                   "distance) (single integers up to 16, then 80 per decade) with the value at the "
                                   "bin start and the bin's mean/min/max"},
                   {"score_kernel_vs_f64_max_abs_diff", curves.score_kernel_max_diff},
                   {"score_recurrence_vs_f64_max_abs_diff", curves.curve_self_check}};
  rep["phase_error"] = {{"f32_angles_max_err", phase.f32_max_err},
                        {"rotary_max_err", phase.rotary_max_err},
                        {"f32_angles_err_at_2^24-1", phase.f32_err_at_max},
                        {"rotary_err_at_2^24-1", phase.rotary_err_at_max}};
  std::printf("  cos/sin values up to position 2^24-1: max |err| f32 angles %.3g, rotary %.3g\n", phase.f32_max_err,
              phase.rotary_max_err);
  std::printf("  score curve: rotary kernel vs fp64 at %zu distances up to %lld: max |diff| %.3g\n",
              curves.distances.size(), (long long)curves.r_max, curves.score_kernel_max_diff);
}

}  // namespace rotary::cli::report
