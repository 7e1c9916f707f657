// `rotary report`: one model's RoPE explained and verified on this machine (bands, decay, accuracy, speed) + plot data.
//
// Output (printed, and written to DIR): the spec with every scaling parameter, the band table (which dimension
// pairs rotate fully within the original context, which are interpolated / blended / never complete a turn),
// the attention factor, numerical checks of the seed's claims (relative-position identity, inverse∘forward,
// error vs fp64 truth at large positions), a speed line, and the CSVs behind the four plots:
//   bands.csv        one row per dimension pair (theta, wavelength, class)
//   decay.csv        RoFormer long-term decay bound (1/(d/2)) Σ_j |S_j|, S_j = Σ_{k<j} e^{i r θ_k}, per variant
//   score.csv        <R(m)q, R(n)k> vs r = m − n for a fixed random q/k pair (and q = k), per variant
//   phase_error.csv  max |cos/sin error| vs position: f32 angles (what others do) vs rotary's exact rows
//   report.json      everything above in one object
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "rotary/rotary.h"

namespace rotary::cli {

/// Draws the report's PNGs from DIR with the Python plotter (defined in plot.cc).
/// Returns 0 when the figures were written; otherwise a non-zero code and a one-line `note` saying why.
int run_plotter(const std::string& dir, std::string* note);

namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr double kTwoPi = 2.0 * std::numbers::pi;
constexpr int64_t kMaxExactPosition = (int64_t(1) << 24) - 1;  // accuracy contract holds for positions < 2^24
constexpr double kContractF32 = 4e-6;  // issue contract: f32 output vs fp64 truth, |x| ~ 1

/// Band classes relative to the original context L.
enum class BandClass { kFullRotations, kInterpolated, kBlended, kSubRotation };

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

/// A command's options after parsing.
struct ReportOptions {
  Spec spec;              ///< normalized
  std::string out_dir;
  bool plots = true;
  bool quick = false;
};

/// One set of frequencies shown in the decay/score curves.
struct Variant {
  std::string key;    ///< column name in decay.csv / score.csv
  std::string label;  ///< legend text
  Frequencies freqs;
};

/// The model's context sizes and the frequencies being compared.
struct ModelView {
  Spec spec;                       ///< normalized (text-only copy for M-RoPE specs)
  int64_t L = 0;                   ///< original context
  int64_t max_pos = 0;             ///< max_position_embeddings
  int64_t extended = 0;            ///< context the scaling is meant for: max(max_pos, factor * L)
  double nominal_factor = 1.0;     ///< the spec's scaling factor (HF default where unset)
  std::optional<int64_t> seq_len;  ///< length at which length-dependent types are shown scaled
  Frequencies scaled;              ///< what the model uses at long context
  Frequencies unscaled;            ///< the same base without scaling
  double full_factor = 1.0;        ///< ratio that counts as "interpolated"
};

struct Band {
  int64_t i = 0;
  double theta = 0, theta_default = 0, wavelength = 0, wavelength_default = 0, ratio = 1;
  BandClass cls = BandClass::kFullRotations;
};

// ------------------------------------------------------------------ small helpers

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// Non-finite numbers become JSON null (nlohmann does that too, but explicitly is clearer).
Json num(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

std::string csv_num(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  return fmt("%.10g", v);
}

double wavelength_of(double theta) { return theta > 0 ? kTwoPi / theta : INFINITY; }

std::vector<float> random_normal(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

void normalize(std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  const float inv = float(1.0 / std::sqrt(s));
  for (auto& x : v) x *= inv;
}

/// Channel indices (a, b) of rotated pair i.
std::pair<int64_t, int64_t> pair_channels(Pairing p, int64_t half, int64_t i) {
  return p == Pairing::kHalfSplit ? std::pair{i, i + half} : std::pair{2 * i, 2 * i + 1};
}

/// fp64 truth (long double) of rotating one head `x` (D channels) to position `pos`.
std::vector<long double> rotate_truth(const Frequencies& f, Pairing pairing, const float* x, int64_t D, double pos) {
  const int64_t half = int64_t(f.inv_freq.size());
  std::vector<long double> out(x, x + D);
  const long double af = f.attention_factor;
  for (int64_t i = 0; i < half; ++i) {
    auto [a, b] = pair_channels(pairing, half, i);
    const long double ang = (long double)pos * (long double)f.inv_freq[size_t(i)];
    const long double c = cosl(ang), s = sinl(ang);
    out[size_t(a)] = af * (x[a] * c - x[b] * s);
    out[size_t(b)] = af * (x[a] * s + x[b] * c);
  }
  return out;
}

/// Rotates x ([T, H, D] f32, in place) at per-token positions `ids` with the exact on-the-fly path.
void rotate_ids(const Frequencies& f, Pairing pairing, std::vector<float>& x, int64_t T, int64_t H, int64_t D,
                const std::vector<int64_t>& ids) {
  ApplyArgs a;
  a.q = TensorView::contiguous(x.data(), DType::kF32, {T, H, D});
  a.layout = Layout::kTHD;
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {T}));
  a.pairing = pairing;
  a.threads = 1;
  apply_frequencies(f, a);
}

double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(a[i]) * double(b[i]);
  return s;
}

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

// ------------------------------------------------------------------ the model's frequencies

std::optional<int64_t> scaled_seq_len(const Spec& s, int64_t L) {
  if (s.scaling.type == RopeType::kDynamic && s.max_position_embeddings > 0)
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

ModelView make_model_view(Spec spec) {
  ModelView m;
  if (spec.mrope.enabled()) spec.mrope = MRope{};  // text tokens: t = h = w, so M-RoPE equals 1-D RoPE
  m.spec = spec.normalized();
  const Spec& s = m.spec;
  m.max_pos = s.max_position_embeddings;
  m.L = s.scaling.original_max_position_embeddings > 0 ? s.scaling.original_max_position_embeddings : s.max_position_embeddings;
  if (m.L <= 0) m.L = 4096;  // unknown context: a conventional value, reported as such
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
  }
  return o.str();
}

/// The model's frequencies plus the same context extended with other scaling types (decay/score curves).
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

// ------------------------------------------------------------------ verification

struct IdentityRow {
  int64_t m = 0, n = 0;
  double diff = 0;      ///< |<R(m)q,R(n)k> − <R(m−n)q,R(0)k>| / af², unit q and k, rotary f32 kernel
  double diff_f32 = 0;  ///< the same with f32 angles (f32 theta × f32 position), rotation in double
};

double f32_angle(double theta, int64_t pos) { return double(float(theta) * float(pos)); }

/// The seed's identity on unit random q, k at several (m, n), with the model's scaled frequencies.
std::vector<IdentityRow> check_identity(const ModelView& mv, int64_t D) {
  const int64_t L = mv.L;
  std::vector<std::pair<int64_t, int64_t>> pairs = {
      {1, 0},       {17, 5},           {300, 299},        {4096, 0},         {L - 1, 3},
      {65553, 65000}, {1000000, 999000}, {kMaxExactPosition, kMaxExactPosition - 8191},
      {kMaxExactPosition, 0}, {kMaxExactPosition, kMaxExactPosition}};
  const Pairing pairing = mv.spec.pairing;
  const Frequencies& f = mv.scaled;
  auto q = random_normal(size_t(D), 11), k = random_normal(size_t(D), 12);
  normalize(q);
  normalize(k);
  std::vector<float> qm, kn, qd, k0;
  std::erase_if(pairs, [](const auto& p) { return p.first < p.second; });
  const auto P = int64_t(pairs.size());
  std::vector<int64_t> m_ids, n_ids, d_ids, z_ids(size_t(P), 0);
  for (auto [m, n] : pairs) {
    qm.insert(qm.end(), q.begin(), q.end());
    qd.insert(qd.end(), q.begin(), q.end());
    kn.insert(kn.end(), k.begin(), k.end());
    k0.insert(k0.end(), k.begin(), k.end());
    m_ids.push_back(m);
    n_ids.push_back(n);
    d_ids.push_back(m - n);
  }
  rotate_ids(f, pairing, qm, P, 1, D, m_ids);
  rotate_ids(f, pairing, kn, P, 1, D, n_ids);
  rotate_ids(f, pairing, qd, P, 1, D, d_ids);
  rotate_ids(f, pairing, k0, P, 1, D, z_ids);
  const double af2 = f.attention_factor * f.attention_factor;
  const int64_t half = int64_t(f.inv_freq.size());
  // f32-angle rotation (the common way), done in double so that only the angle is inexact.
  auto rot_f32 = [&](const std::vector<float>& x, int64_t pos) {
    std::vector<double> out(x.begin(), x.end());
    for (int64_t i = 0; i < half; ++i) {
      auto [a, b] = pair_channels(pairing, half, i);
      const double ang = f32_angle(f.inv_freq[size_t(i)], pos), c = std::cos(ang), s = std::sin(ang);
      out[size_t(a)] = x[size_t(a)] * c - x[size_t(b)] * s;
      out[size_t(b)] = x[size_t(a)] * s + x[size_t(b)] * c;
    }
    return out;
  };
  auto dotd = [](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  std::vector<IdentityRow> rows;
  for (int64_t j = 0; j < P; ++j) {
    IdentityRow r;
    r.m = pairs[size_t(j)].first;
    r.n = pairs[size_t(j)].second;
    const double lhs = dot(&qm[size_t(j * D)], &kn[size_t(j * D)], D);
    const double rhs = dot(&qd[size_t(j * D)], &k0[size_t(j * D)], D);
    r.diff = std::abs(lhs - rhs) / af2;
    r.diff_f32 = std::abs(dotd(rot_f32(q, r.m), rot_f32(k, r.n)) - dotd(rot_f32(q, r.m - r.n), rot_f32(k, 0)));
    rows.push_back(r);
  }
  return rows;
}

struct InverseRow {
  int64_t first_position = 0;
  double max_err = 0;  ///< max |inverse(forward(x)) − af²·x| (af folded into both directions, as in HF's grad)
};

std::vector<InverseRow> check_inverse(const ModelView& mv, int64_t D) {
  RopeOptions opt;
  opt.table.max_positions = int64_t(1) << 16;
  Rope rope(mv.spec, opt);
  const int64_t S = 32, H = 8;
  std::vector<InverseRow> rows;
  for (int64_t off : {int64_t(0), std::max<int64_t>(0, mv.L - 16), kMaxExactPosition + 1 - S}) {
    auto x0 = random_normal(size_t(S * H * D), 21 + uint64_t(off));
    auto x = x0;
    ApplyArgs a;
    a.q = TensorView::contiguous(x.data(), DType::kF32, {S, H, D});
    a.layout = Layout::kTHD;
    a.positions = Positions::contiguous(off);
    rope.apply(a);
    a.direction = Direction::kInverse;
    rope.apply(a);
    const double af = rope.frequencies(off + S).attention_factor;
    const int64_t R = 2 * int64_t(rope.frequencies(off + S).inv_freq.size());
    double err = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const bool rotated = int64_t(i % size_t(D)) < R;
      const double want = rotated ? af * af * double(x0[i]) : double(x0[i]);
      err = std::max(err, std::abs(double(x[i]) - want));
    }
    rows.push_back({off, err});
  }
  return rows;
}

struct AccuracyRow {
  int64_t position = 0;
  std::string path;
  double max_err = 0;
  double attention_factor = 1;
};

std::vector<AccuracyRow> check_accuracy(const ModelView& mv, int64_t D) {
  RopeOptions opt;
  opt.table.max_positions = int64_t(1) << 16;
  Rope rope(mv.spec, opt);
  const int64_t H = 8;
  std::vector<AccuracyRow> rows;
  for (int64_t pos : {int64_t(1000), int64_t(1000000), kMaxExactPosition}) {
    const auto x0 = random_normal(size_t(H * D), 31 + uint64_t(pos));
    const std::vector<int64_t> ids = {pos};
    auto measure = [&](const std::vector<float>& y, const Frequencies& f) {
      double err = 0;
      for (int64_t h = 0; h < H; ++h) {
        auto truth = rotate_truth(f, mv.spec.pairing, &x0[size_t(h * D)], D, double(pos));
        for (int64_t c = 0; c < D; ++c)
          err = std::max(err, double(std::abs((long double)y[size_t(h * D + c)] - truth[size_t(c)])));
      }
      return err;
    };
    {  // Rope::apply: table within its capacity, exact on-the-fly rows beyond
      auto y = x0;
      ApplyArgs a;
      a.q = TensorView::contiguous(y.data(), DType::kF32, {1, H, D});
      a.layout = Layout::kTHD;
      a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {1}));
      rope.apply(a);
      const Frequencies f = rope.frequencies(pos + 1);
      const std::string path = pos < opt.table.max_positions ? "Rope::apply (cos/sin table)"
                                                             : "Rope::apply (beyond table: on the fly)";
      rows.push_back({pos, path, measure(y, f), f.attention_factor});
    }
    {  // apply_frequencies with the model's scaled frequencies
      auto y = x0;
      rotate_ids(mv.scaled, mv.spec.pairing, y, 1, H, D, ids);
      rows.push_back({pos, "apply_frequencies (on the fly)", measure(y, mv.scaled), mv.scaled.attention_factor});
    }
  }
  return rows;
}

// ------------------------------------------------------------------ curves

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
  std::vector<int64_t> distances;    ///< bin starts (every integer up to 1024, then log-spaced)
  int64_t r_max = 0;
  double score_kernel_max_diff = 0;  ///< rotary's f32 kernel vs the f64 score, model variant
  double curve_self_check = 0;       ///< |evaluate_curves (recurrence) − score_f64| at the bin starts, model
};

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
    std::ofstream f(dir / "decay.csv");
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
    if (!f) fail(Error::Kind::kIo, "rotary_report", "cannot write " + (dir / "decay.csv").string());
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
    std::ofstream f(dir / "score.csv");
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
    if (!f) fail(Error::Kind::kIo, "rotary_report", "cannot write " + (dir / "score.csv").string());
  }
  return out;
}

struct PhaseSummary {
  double f32_max_err = 0, rotary_max_err = 0;  ///< over all positions
  double f32_err_at_max = 0, rotary_err_at_max = 0;
};

PhaseSummary write_phase_error(const ModelView& mv, const std::filesystem::path& dir) {
  const Frequencies& f = mv.scaled;
  const auto half = int64_t(f.inv_freq.size());
  std::vector<int64_t> positions;
  for (double x = 1.0; x < double(kMaxExactPosition); x *= std::pow(10.0, 1.0 / 40)) {
    const auto p = int64_t(std::llround(x));
    if (positions.empty() || p > positions.back()) positions.push_back(p);
  }
  positions.push_back(kMaxExactPosition);
  std::ofstream out(dir / "phase_error.csv");
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
  if (!out) fail(Error::Kind::kIo, "rotary_report", "cannot write " + (dir / "phase_error.csv").string());
  return sum;
}

// ------------------------------------------------------------------ speed

/// Best time of `reps` runs of an in-place streaming read-modify-write over `data` on `threads` threads
/// (persistent threads synchronised by a barrier, so thread start-up is not timed).
double streaming_rmw_seconds(std::vector<float>& data, int threads, int reps) {
  const size_t n = data.size();
  std::barrier sync(threads);
  std::vector<double> times;
  auto work = [&](int t) {
    const size_t lo = n * size_t(t) / size_t(threads), hi = n * size_t(t + 1) / size_t(threads);
    float* p = data.data();
    for (int r = 0; r < reps; ++r) {
      sync.arrive_and_wait();
      const auto t0 = Clock::now();
      for (size_t i = lo; i < hi; ++i) p[i] = p[i] * 0.999f + 0.001f;
      sync.arrive_and_wait();
      if (t == 0) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  return *std::min_element(times.begin(), times.end());
}

struct SpeedResult {
  int64_t tokens = 0, q_heads = 32, kv_heads = 8, head_dim = 0;
  int threads = 1;
  double prefill_s = 0, prefill_limit_s = 0, prefill_bytes = 0;
  double decode_s = 0, decode_limit_s = 0, decode_bytes = 0;
};

/// One pass of the single-thread in-cache read-modify-write used as the decode reference.
void rmw_pass(std::vector<float>& v) {
  float* p = v.data();
  for (size_t j = 0; j < v.size(); ++j) p[j] = p[j] * 0.999f + 0.001f;
  asm volatile("" : : "r"(p) : "memory");  // keep each pass
}

/// Times rotary and the streaming reference alternately (so both see the same machine load) and keeps the best
/// of each: shared machines make single timings meaningless.
SpeedResult measure_speed(const ModelView& mv, int64_t D, bool quick) {
  SpeedResult r;
  r.tokens = quick ? 512 : 4096;
  r.head_dim = D;
  r.threads = std::max(1, int(std::thread::hardware_concurrency()));
  const int reps = quick ? 5 : 12;
  const int decode_batches = quick ? 10 : 40, decode_batch = 200;
  Rope rope(mv.spec);
  Progress progress("report: speed", reps + decode_batches);
  auto q = random_normal(size_t(r.tokens * r.q_heads * D), 51), k = random_normal(size_t(r.tokens * r.kv_heads * D), 52);
  ApplyArgs a;
  a.q = TensorView::contiguous(q.data(), DType::kF32, {r.tokens, r.q_heads, D});
  a.k = TensorView::contiguous(k.data(), DType::kF32, {r.tokens, r.kv_heads, D});
  a.layout = Layout::kTHD;
  rope.apply(a);  // warm-up: builds the table, faults pages in
  std::vector<float> stream(q.size() + k.size(), 1.0f);
  streaming_rmw_seconds(stream, r.threads, 1);  // warm-up
  r.prefill_s = r.prefill_limit_s = INFINITY;
  for (int i = 0; i < reps; ++i) {
    a.direction = i % 2 ? Direction::kForward : Direction::kInverse;  // keeps magnitudes bounded
    const auto t0 = Clock::now();
    rope.apply(a);
    r.prefill_s = std::min(r.prefill_s, std::chrono::duration<double>(Clock::now() - t0).count());
    r.prefill_limit_s = std::min(r.prefill_limit_s, streaming_rmw_seconds(stream, r.threads, 1));
    progress.step(i + 1);
  }
  r.prefill_bytes = 2.0 * 4.0 * double(q.size() + k.size());

  // Decode: one new token at the next position; best mean over batches of calls.
  std::vector<float> dq(q.begin(), q.begin() + r.q_heads * D), dk(k.begin(), k.begin() + r.kv_heads * D);
  ApplyArgs d;
  d.q = TensorView::contiguous(dq.data(), DType::kF32, {1, r.q_heads, D});
  d.k = TensorView::contiguous(dk.data(), DType::kF32, {1, r.kv_heads, D});
  d.layout = Layout::kTHD;
  d.positions = Positions::contiguous(r.tokens);
  rope.apply(d);
  std::vector<float> small(dq.size() + dk.size(), 1.0f);
  r.decode_s = r.decode_limit_s = INFINITY;
  for (int b = 0; b < decode_batches; ++b) {
    auto t0 = Clock::now();
    for (int i = 0; i < decode_batch; ++i) {
      d.direction = i % 2 ? Direction::kForward : Direction::kInverse;
      rope.apply(d);
    }
    r.decode_s = std::min(r.decode_s, std::chrono::duration<double>(Clock::now() - t0).count() / decode_batch);
    t0 = Clock::now();
    for (int i = 0; i < decode_batch; ++i) rmw_pass(small);
    r.decode_limit_s =
        std::min(r.decode_limit_s, std::chrono::duration<double>(Clock::now() - t0).count() / decode_batch);
    progress.step(reps + b + 1);
  }
  r.decode_bytes = 2.0 * 4.0 * double(dq.size() + dk.size());
  progress.done();
  return r;
}

// ------------------------------------------------------------------ output

Json spec_json(const ModelView& m) {
  const Spec& s = m.spec;
  const Scaling& sc = s.scaling;
  auto opt = [](const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); };
  auto vec_summary = [](const std::vector<double>& v) {
    Json j = Json::object();
    j["count"] = v.size();
    if (!v.empty()) {
      j["min"] = *std::min_element(v.begin(), v.end());
      j["max"] = *std::max_element(v.begin(), v.end());
      j["values"] = v;
    }
    return j;
  };
  Json sj;
  sj["name"] = s.name;
  sj["head_dim"] = s.head_dim;
  sj["rotary_dim"] = s.effective_rotary_dim();
  sj["base"] = s.base;
  sj["pairing"] = pairing_name(s.pairing);
  sj["max_position_embeddings"] = s.max_position_embeddings;
  sj["partial_rotary_factor"] = s.partial_rotary_factor;
  Json scj;
  scj["rope_type"] = rope_type_name(sc.type);
  scj["factor"] = opt(sc.factor);
  scj["factor_effective"] = m.nominal_factor;
  scj["original_max_position_embeddings"] = sc.original_max_position_embeddings;
  scj["beta_fast"] = sc.beta_fast;
  scj["beta_slow"] = sc.beta_slow;
  scj["mscale"] = opt(sc.mscale);
  scj["mscale_all_dim"] = opt(sc.mscale_all_dim);
  scj["truncate"] = sc.truncate;
  scj["attention_factor"] = opt(sc.attention_factor);
  scj["low_freq_factor"] = sc.low_freq_factor;
  scj["high_freq_factor"] = sc.high_freq_factor;
  scj["short_factor"] = vec_summary(sc.short_factor);
  scj["long_factor"] = vec_summary(sc.long_factor);
  sj["scaling"] = scj;
  return sj;
}

/// Prints the scaling parameters that the spec's rope_type reads.
void print_spec(const ModelView& m, const std::string& description) {
  const Spec& s = m.spec;
  const Scaling& sc = s.scaling;
  std::printf("rotary report: %s\n", s.name.c_str());
  if (!description.empty()) std::printf("  %s\n", description.c_str());
  std::printf("\nspec\n");
  std::printf("  head_dim %lld, rotary_dim %lld (%lld pairs, %s pairing), base (rope_theta) %s\n",
              (long long)s.head_dim, (long long)s.effective_rotary_dim(), (long long)(s.effective_rotary_dim() / 2),
              pairing_name(s.pairing), format_double(s.base).c_str());
  std::printf("  max_position_embeddings %lld, partial_rotary_factor %s\n", (long long)s.max_position_embeddings,
              format_double(s.partial_rotary_factor).c_str());
  std::printf("  scaling: rope_type %s", rope_type_name(sc.type));
  if (sc.type != RopeType::kDefault)
    std::printf(", factor %s%s", format_double(m.nominal_factor).c_str(), sc.factor ? "" : " (HF default)");
  if (sc.type == RopeType::kYarn || sc.type == RopeType::kLongRope || sc.type == RopeType::kLlama3)
    std::printf(", original_max_position_embeddings %lld", (long long)sc.original_max_position_embeddings);
  if (sc.type == RopeType::kYarn) {
    std::printf(", beta_fast %s, beta_slow %s, truncate %s", format_double(sc.beta_fast).c_str(),
                format_double(sc.beta_slow).c_str(), sc.truncate ? "true" : "false");
    if (sc.mscale) std::printf(", mscale %s", format_double(*sc.mscale).c_str());
    if (sc.mscale_all_dim) std::printf(", mscale_all_dim %s", format_double(*sc.mscale_all_dim).c_str());
  }
  if (sc.type == RopeType::kLlama3)
    std::printf(", low_freq_factor %s, high_freq_factor %s", format_double(sc.low_freq_factor).c_str(),
                format_double(sc.high_freq_factor).c_str());
  if (sc.attention_factor) std::printf(", attention_factor (explicit) %s", format_double(*sc.attention_factor).c_str());
  std::printf("\n");
  auto print_factors = [](const char* name, const std::vector<double>& v) {
    if (v.empty()) return;
    std::printf("  %s (%zu):", name, v.size());
    for (double x : v) std::printf(" %.4g", x);
    std::printf("\n");
  };
  print_factors("short_factor", sc.short_factor);
  print_factors("long_factor", sc.long_factor);
}

void write_bands_csv(const std::vector<Band>& bands, const std::filesystem::path& path) {
  std::ofstream f(path);
  f << "pair,theta,theta_default,wavelength,wavelength_default,ratio,class\n";
  for (const auto& b : bands)
    f << b.i << "," << csv_num(b.theta) << "," << csv_num(b.theta_default) << "," << csv_num(b.wavelength) << ","
      << csv_num(b.wavelength_default) << "," << csv_num(b.ratio) << "," << class_key(b.cls) << "\n";
  if (!f) fail(Error::Kind::kIo, "rotary_report", "cannot write " + path.string());
}

std::string wl_text(double w) { return std::isfinite(w) ? fmt("%.6g", w) : std::string("inf"); }

void print_bands(const ModelView& m, const std::vector<Band>& bands) {
  std::printf("\nbands (L = %lld tokens = %s; wavelength = 2*pi/theta in tokens; ratio = theta_default/theta)\n",
              (long long)m.L,
              m.spec.scaling.type == RopeType::kDefault ? "max_position_embeddings" : "original context");
  std::printf("  %s\n", type_explanation(m).c_str());
  std::printf("  %4s  %-12s %-12s %12s %12s %9s  %s\n", "pair", "theta", "theta_dflt", "wavelength", "wl_default",
              "ratio", "class");
  for (const auto& b : bands)
    std::printf("  %4lld  %-12.6g %-12.6g %12s %12s %9.4g  %s\n", (long long)b.i, b.theta, b.theta_default,
                wl_text(b.wavelength).c_str(), wl_text(b.wavelength_default).c_str(), b.ratio, class_label(b.cls));
  std::printf("  summary:\n");
  size_t j = 0;
  while (j < bands.size()) {
    size_t e = j;
    while (e + 1 < bands.size() && bands[e + 1].cls == bands[j].cls) ++e;
    std::printf("    pairs %3lld-%-3lld (%2zu)  %-32s wavelength %s .. %s tokens\n", (long long)bands[j].i,
                (long long)bands[e].i, e - j + 1, class_label(bands[j].cls), wl_text(bands[j].wavelength).c_str(),
                wl_text(bands[e].wavelength).c_str());
    j = e + 1;
  }
}

Json run_report(const ReportOptions& o) {
  namespace fs = std::filesystem;
  const fs::path dir(o.out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    fail(Error::Kind::kIo, "rotary_report", "--out " + o.out_dir + " cannot be created: " + ec.message());

  const ModelView mv = make_model_view(o.spec);
  const int64_t D = mv.spec.head_dim;
  std::string description;
  try {
    description = preset_description(mv.spec.name);
  } catch (const Error&) {
  }
  Json rep;
  rep["rotary_version"] = ROTARY_VERSION_STRING;
  rep["model"] = mv.spec.name;
  rep["description"] = description;
  rep["spec"] = spec_json(mv);
  if (o.spec.mrope.enabled())
    rep["note"] = "M-RoPE spec: shown for text tokens (t = h = w positions), where it equals 1-D RoPE";
  if (mv.max_pos <= 0 && mv.spec.scaling.original_max_position_embeddings <= 0)
    rep["note"] = "the config gives no context length: L = 4096 is assumed for the band classes";
  rep["context"] = {{"original", mv.L},
                    {"max_position_embeddings", mv.max_pos},
                    {"extended", mv.extended},
                    {"scaled_seq_len", mv.seq_len ? Json(*mv.seq_len) : Json(nullptr)}};

  print_spec(mv, description);
  if (rep.contains("note")) std::printf("  note: %s\n", rep["note"].get<std::string>().c_str());

  // Bands.
  const auto bands = make_bands(mv);
  print_bands(mv, bands);
  write_bands_csv(bands, dir / "bands.csv");
  Json bj = Json::array();
  std::map<std::string, int> counts;
  for (auto c : {BandClass::kFullRotations, BandClass::kBlended, BandClass::kInterpolated, BandClass::kSubRotation})
    counts[class_key(c)] = 0;
  for (const auto& b : bands) {
    bj.push_back({{"pair", b.i},
                  {"theta", b.theta},
                  {"theta_default", b.theta_default},
                  {"wavelength", num(b.wavelength)},
                  {"wavelength_default", num(b.wavelength_default)},
                  {"ratio", b.ratio},
                  {"class", class_key(b.cls)}});
    counts[class_key(b.cls)]++;
  }
  Json classes = Json::object();
  for (auto c : {BandClass::kFullRotations, BandClass::kBlended, BandClass::kInterpolated, BandClass::kSubRotation})
    classes[class_key(c)] = {{"label", class_label(c)}, {"meaning", class_meaning(c)}, {"count", counts[class_key(c)]}};
  rep["bands"] = {{"L", mv.L},
                  {"full_factor", mv.full_factor},
                  {"explanation", type_explanation(mv)},
                  {"classes", classes},
                  {"pairs", bj}};

  // Attention factor.
  rep["attention_factor"] = mv.scaled.attention_factor;
  std::printf("\nattention_factor %.9g (multiplies cos and sin; logits scale by its square %.6g)\n",
              mv.scaled.attention_factor, mv.scaled.attention_factor * mv.scaled.attention_factor);

  // Verification.
  std::printf("\nverification on this machine (f32 data, fp64 truth)\n");
  Progress vprog("report: verification", 3);
  const auto ident = check_identity(mv, D);
  vprog.step(1);
  const auto inv = check_inverse(mv, D);
  vprog.step(2);
  const auto acc = check_accuracy(mv, D);
  vprog.step(3);
  vprog.done();
  double ident_max = 0, ident_f32_max = 0;
  Json ij = Json::array();
  for (const auto& r : ident) {
    ident_max = std::max(ident_max, r.diff);
    ident_f32_max = std::max(ident_f32_max, r.diff_f32);
    ij.push_back({{"m", r.m}, {"n", r.n}, {"abs_diff", r.diff}, {"abs_diff_f32_angles", r.diff_f32}});
  }
  std::printf("  relative-position identity <R(m)q,R(n)k> = <R(m-n)q,R(0)k>, unit random q,k, %zu (m,n) pairs up to"
              " m = 2^24-1:\n    max |diff| %.3g with rotary   (f32 angles as others compute them: %.3g)\n",
              ident.size(), ident_max, ident_f32_max);
  double inv_max = 0;
  Json invj = Json::array();
  for (const auto& r : inv) {
    inv_max = std::max(inv_max, r.max_err);
    invj.push_back({{"first_position", r.first_position}, {"max_abs_err", r.max_err}});
  }
  std::printf("  inverse(forward(x)) = af^2 x, x ~ N(0,1), 32 tokens from positions 0, %lld, 2^24-32: max |err| %.3g\n",
              (long long)std::max<int64_t>(0, mv.L - 16), inv_max);
  double acc_max = 0;
  Json accj = Json::array();
  std::printf("  rotated output vs fp64 truth, x ~ N(0,1), %lld channels x 8 heads:\n", (long long)D);
  for (const auto& r : acc) {
    acc_max = std::max(acc_max, r.max_err);
    accj.push_back({{"position", r.position}, {"path", r.path}, {"max_abs_err", r.max_err},
                    {"attention_factor", r.attention_factor}});
    std::printf("    position %-9lld %-40s max |err| %.3g\n", (long long)r.position, r.path.c_str(), r.max_err);
  }
  const double contract = kContractF32 * std::max(1.0, mv.scaled.attention_factor);
  std::printf("    contract: <= %.3g (4e-6 x max(1, attention_factor)) -> %s\n", contract,
              acc_max <= contract ? "met" : "NOT MET");
  rep["verification"] = {
      {"identity", {{"description", "|<R(m)q,R(n)k> - <R(m-n)q,R(0)k>| / af^2 for unit random q, k"},
                    {"max_abs_diff", ident_max},
                    {"max_abs_diff_f32_angles", ident_f32_max},
                    {"pairs", ij}}},
      {"inverse_forward", {{"description", "max |inverse(forward(x)) - af^2 x|, x ~ N(0,1)"},
                           {"max_abs_err", inv_max},
                           {"runs", invj}}},
      {"accuracy", {{"description", "max |rotated f32 output - fp64 truth|, x ~ N(0,1)"},
                    {"max_abs_err", acc_max},
                    {"contract", contract},
                    {"contract_met", acc_max <= contract},
                    {"positions", accj}}}};

  // Curves.
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

  // Speed.
  const SpeedResult sp = measure_speed(mv, D, o.quick);
  const double gbs = 1e-9 * sp.prefill_bytes / sp.prefill_s, lim = 1e-9 * sp.prefill_bytes / sp.prefill_limit_s;
  std::printf("\nspeed (%d threads, f32, in place; timings are noisy on shared machines)\n", sp.threads);
  std::printf("  prefill q[%lld,%lld,%lld]+k[%lld,%lld,%lld]: %.3f ms (%.1f GB/s) vs streaming read-modify-write "
              "%.3f ms (%.1f GB/s): %.0f%% of the limit\n",
              (long long)sp.tokens, (long long)sp.q_heads, (long long)D, (long long)sp.tokens, (long long)sp.kv_heads,
              (long long)D, sp.prefill_s * 1e3, gbs, sp.prefill_limit_s * 1e3, lim, 100.0 * sp.prefill_limit_s / sp.prefill_s);
  std::printf("  decode  q[1,%lld,%lld]+k[1,%lld,%lld]: %.2f us per step vs %.2f us to stream the same bytes "
              "(one thread, in cache)\n",
              (long long)sp.q_heads, (long long)D, (long long)sp.kv_heads, (long long)D, sp.decode_s * 1e6,
              sp.decode_limit_s * 1e6);
  rep["speed"] = {{"threads", sp.threads},
                  {"quick", o.quick},
                  {"prefill", {{"q_shape", {sp.tokens, sp.q_heads, D}},
                               {"k_shape", {sp.tokens, sp.kv_heads, D}},
                               {"seconds", sp.prefill_s},
                               {"gb_per_s", gbs},
                               {"streaming_limit_seconds", sp.prefill_limit_s},
                               {"streaming_limit_gb_per_s", lim},
                               {"fraction_of_limit", sp.prefill_limit_s / sp.prefill_s}}},
                  {"decode", {{"q_shape", {1, sp.q_heads, D}},
                              {"k_shape", {1, sp.kv_heads, D}},
                              {"seconds", sp.decode_s},
                              {"streaming_limit_seconds", sp.decode_limit_s}}}};
  rep["files"] = {"report.json", "bands.csv", "decay.csv", "score.csv", "phase_error.csv"};
  {
    std::ofstream f(dir / "report.json");
    f << rep.dump(2) << "\n";
    if (!f) fail(Error::Kind::kIo, "rotary_report", "cannot write " + (dir / "report.json").string());
  }
  std::printf("\nwrote %s/{report.json, bands.csv, decay.csv, score.csv, phase_error.csv}\n", o.out_dir.c_str());
  return rep;
}

int report_main(const std::vector<std::string>& args) {
  Flags flags(args, {"preset", "config", "out"}, {"no-plots", "quick"});
  if (!flags.positional().empty()) throw UsageError("unexpected argument \"" + flags.positional()[0] + "\"");
  ReportOptions o;
  o.spec = spec_from_flags(flags, "llama-3.1-8b");
  o.out_dir = flags.get("out").value_or("out/report");
  o.plots = !flags.has("no-plots");
  o.quick = flags.has("quick");
  std::fflush(stdout);
  run_report(o);
  if (o.plots) {
    std::fflush(stdout);
    std::string note;
    if (run_plotter(o.out_dir, &note) != 0)
      std::printf("note: plots were not drawn: %s\n      (the report data above is complete; `rotary plot %s` "
                  "draws them later)\n",
                  note.c_str(), o.out_dir.c_str());
  }
  return 0;
}

}  // namespace

ROTARY_CLI_COMMAND("report",
                   "rotary report [--preset NAME | --config FILE] [--out DIR] [--no-plots] [--quick]",
                   "a model's RoPE bands, decay, accuracy and speed on this machine, with plots (default preset "
                   "llama-3.1-8b, DIR out/report)",
                   report_main);

}  // namespace rotary::cli
