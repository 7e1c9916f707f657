// The report's numerical checks on this machine: relative-position identity, inverse∘forward, error vs fp64 truth.
#include "verify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "../cli.h"
#include "rotary/apply.h"
#include "vectors.h"

namespace rotary::cli::report {
namespace {

/// The accuracy contract: f32 output vs fp64 truth for |x| ~ 1, times max(1, attention factor).
constexpr double kContractF32 = 4e-6;

struct IdentityRow {
  int64_t m = 0, n = 0;
  double diff = 0;      ///< |<R(m)q,R(n)k> − <R(m−n)q,R(0)k>| / af², unit q and k, rotary f32 kernel
  double diff_f32 = 0;  ///< the same with f32 angles (f32 theta × f32 position), rotation in double
};

struct InverseRow {
  int64_t first_position = 0;
  double max_err = 0;  ///< max |inverse(forward(x)) − af²·x| (af folded into both directions, as in HF's grad)
};

struct AccuracyRow {
  int64_t position = 0;
  std::string path;  ///< which entry point and cos/sin source rotated the data
  double max_err = 0;
  double attention_factor = 1;
};

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

/// An angle as common implementations form it: f32 theta × f32 position, rounded to f32.
double f32_angle(double theta, int64_t pos) { return double(float(theta) * float(pos)); }

/// The identity on unit random q, k at ten (m, n) pairs up to 2^24-1, with the model's scaled frequencies.
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

/// 32 tokens of N(0,1) data from positions 0, L-16 and 2^24-32 through Rope::apply forward, then inverse.
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

/// 8 heads of N(0,1) data at positions 10^3, 10^6, 2^24-1, through Rope::apply and apply_frequencies.
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

}  // namespace

void report_verification(const ModelView& mv, int64_t D, Json& rep) {
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
}

}  // namespace rotary::cli::report
