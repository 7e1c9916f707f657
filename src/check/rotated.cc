// Rotated q/k -> canonical cos/sin: per token and pair, the rotation (times the attention factor) that maps input to output.
#include <algorithm>
#include <cmath>

#include "check/canonical.h"

namespace rotary::parity {
namespace {

[[noreturn]] void bad(const std::string& msg) { fail(Error::Kind::kInvalidArgument, kWhere, msg); }

/// Unit roundoff of a dtype (2^-p).
double unit(DType d) { return half_ulp(d, 1.0); }

struct Tokens {
  int64_t tokens = 0, heads = 0, dim = 0;
  std::vector<double> x, y, pos;  // x/y [tokens, heads, dim]
};

struct Fit {
  double residual = INFINITY;  ///< rms of y - fit over the rotated channels, relative to rms(y)
  bool pass_ok = false;        ///< channels >= width unchanged
  std::vector<double> c, s;    ///< [tokens, width/2]
};

Fit fit(const Tokens& t, int64_t width, Pairing pairing, double tol) {
  Fit f;
  const int64_t h = width / 2;
  f.pass_ok = true;
  for (int64_t i = 0; i < t.tokens * t.heads && f.pass_ok; ++i)
    for (int64_t d = width; d < t.dim; ++d) {
      const double xv = t.x[static_cast<size_t>(i * t.dim + d)], yv = t.y[static_cast<size_t>(i * t.dim + d)];
      if (std::fabs(yv - xv) > tol * std::max(1.0, std::fabs(xv))) { f.pass_ok = false; break; }
    }
  f.c.assign(static_cast<size_t>(t.tokens * h), 0.0);
  f.s.assign(f.c.size(), 0.0);
  double res = 0, energy = 0;
  for (int64_t tok = 0; tok < t.tokens; ++tok)
    for (int64_t j = 0; j < h; ++j) {
      const int64_t i0 = pairing == Pairing::kHalfSplit ? j : 2 * j, i1 = pairing == Pairing::kHalfSplit ? j + h : 2 * j + 1;
      double xx = 0, cs = 0, sn = 0;
      for (int64_t hd = 0; hd < t.heads; ++hd) {
        const size_t base = static_cast<size_t>((tok * t.heads + hd) * t.dim);
        const double x0 = t.x[base + i0], x1 = t.x[base + i1], y0 = t.y[base + i0], y1 = t.y[base + i1];
        xx += x0 * x0 + x1 * x1;
        cs += x0 * y0 + x1 * y1;
        sn += x0 * y1 - x1 * y0;
      }
      if (xx == 0) bad("rotated: input pair (" + std::to_string(i0) + ", " + std::to_string(i1) + ") of token " +
                       std::to_string(tok) + " is zero in every head, so its rotation cannot be measured (use random inputs)");
      const double c = cs / xx, s = sn / xx;
      f.c[static_cast<size_t>(tok * h + j)] = c;
      f.s[static_cast<size_t>(tok * h + j)] = s;
      for (int64_t hd = 0; hd < t.heads; ++hd) {
        const size_t base = static_cast<size_t>((tok * t.heads + hd) * t.dim);
        const double x0 = t.x[base + i0], x1 = t.x[base + i1], y0 = t.y[base + i0], y1 = t.y[base + i1];
        const double e0 = y0 - (c * x0 - s * x1), e1 = y1 - (s * x0 + c * x1);
        res += e0 * e0 + e1 * e1;
        energy += y0 * y0 + y1 * y1;
      }
    }
  f.residual = energy > 0 ? std::sqrt(res / energy) : 0.0;
  return f;
}

}  // namespace

Canonical decode_rotated(const LayoutInfo& info, const TensorFile& tf, Pairing expected, int64_t expected_r) {
  const NpyArray& xa = pick_tensor(tf, {"input"}, false, info.name);
  const NpyArray& ya = pick_tensor(tf, {"rotated"}, false, info.name);
  const NpyArray& pa = pick_tensor(tf, {"positions"}, false, info.name);
  if (xa.shape != ya.shape)
    bad("rotated and input must have the same shape, got " + shape_string(ya.shape) + " and " + shape_string(xa.shape));
  const bool bhsd = info.layout == EngineLayout::kHf && xa.shape.size() == 4;
  if (!bhsd && (xa.shape.size() < 2 || xa.shape.size() > 3))
    bad(std::string("input must have shape [T, D] or [T, H, D]") + (info.layout == EngineLayout::kHf ? " or [B, H, S, D]" : "") +
        ", got " + shape_string(xa.shape));
  const std::vector<double> x = tensor_doubles(xa, "input"), y = tensor_doubles(ya, "rotated");
  const std::vector<double> p = tensor_doubles(pa, "positions", true);
  Tokens t;
  t.dim = xa.shape.back();
  if (t.dim <= 0 || xa.numel() == 0) bad("input must not be empty, got shape " + shape_string(xa.shape));
  if (bhsd) {
    const int64_t B = xa.shape[0], H = xa.shape[1], S = xa.shape[2];
    if (!(pa.numel() == S || pa.numel() == B * S))
      bad("positions must have shape [S] or [B, S] = [" + std::to_string(B) + ", " + std::to_string(S) + "], got " + shape_string(pa.shape));
    t.tokens = B * S, t.heads = H;
    t.x.resize(x.size()), t.y.resize(y.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t hd = 0; hd < H; ++hd)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t d = 0; d < t.dim; ++d) {
            const size_t from = static_cast<size_t>(((b * H + hd) * S + s) * t.dim + d);
            const size_t to = static_cast<size_t>(((b * S + s) * H + hd) * t.dim + d);
            t.x[to] = x[from], t.y[to] = y[from];
          }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) t.pos.push_back(p[static_cast<size_t>(pa.numel() == S ? s : b * S + s)]);
  } else {
    t.tokens = xa.shape[0];
    t.heads = xa.shape.size() == 3 ? xa.shape[1] : 1;
    if (pa.numel() != t.tokens) bad("positions must have shape [T] = [" + std::to_string(t.tokens) + "], got " + shape_string(pa.shape));
    t.x = x, t.y = y, t.pos = p;
  }
  for (size_t i = 0; i < t.pos.size(); ++i)
    if (!(t.pos[i] >= 0 && t.pos[i] < 2147483648.0))
      bad("positions[" + std::to_string(i) + "] must be in [0, 2^31), got " + std::to_string(t.pos[i]));
  // Rotary width candidates: the config's, the whole head, and the last channel the engine changed.
  const double tol = 8 * unit(ya.dtype) + 8 * unit(xa.dtype);
  int64_t last = -1;
  for (size_t i = 0; i < t.x.size(); ++i)
    if (std::fabs(t.y[i] - t.x[i]) > tol * std::max(1.0, std::fabs(t.x[i]))) last = std::max<int64_t>(last, static_cast<int64_t>(i % static_cast<size_t>(t.dim)));
  // An output equal to its input is an engine that did not rotate, a disagreement the comparison reports
  // (every pair fits cos 1, sin 0), unless every position is 0, where no rotation is measured.
  if (last < 0 && std::all_of(t.pos.begin(), t.pos.end(), [](double p) { return p == 0; }))
    bad("rotated equals input in every channel and every position is 0: nothing can be measured (include positions > 0)");
  std::vector<int64_t> widths = {expected_r, t.dim, (last + 2) / 2 * 2};
  const double fit_tol = 16 * unit(ya.dtype) + 16 * unit(xa.dtype) + 1e-6;
  // The config's (pairing, width) if it fits; else the best-fitting other candidate; else the config's.
  struct Candidate { Fit fit; int64_t width; Pairing pairing; bool ok; };
  std::vector<Candidate> cands;
  for (Pairing pr : {expected, expected == Pairing::kHalfSplit ? Pairing::kInterleaved : Pairing::kHalfSplit})
    for (int64_t w : widths) {
      if (w <= 0 || w > t.dim || w % 2) continue;
      bool seen = false;
      for (const auto& cd : cands) seen = seen || (cd.width == w && cd.pairing == pr);
      if (seen) continue;
      Fit f = fit(t, w, pr, tol);
      const bool ok = f.pass_ok && f.residual <= fit_tol;
      cands.push_back({std::move(f), w, pr, ok});
    }
  size_t pick = 0;  // cands[0] is the config's pairing and width when that width is possible
  if (!cands[0].ok)
    for (size_t i = 1; i < cands.size(); ++i)
      if (cands[i].ok && (!cands[pick].ok || cands[i].fit.residual < cands[pick].fit.residual)) pick = i;
  Candidate& best_c = cands[pick];
  Fit& best = best_c.fit;
  const int64_t best_w = best_c.width;
  const Pairing best_p = best_c.pairing;
  const bool fits = best_c.ok;
  Canonical c;
  c.form = Form::kValues;
  c.dtype = ya.dtype;
  c.half = best_w / 2;
  c.noise_scale = 8.0;
  c.a = std::move(best.c);
  c.b = std::move(best.s);
  c.positions = t.pos;
  // With one head every pairing fits exactly (two equations, two unknowns): the data then cannot tell.
  if (t.heads > 1 && fits && last >= 0) c.pairing = best_p;
  if (!fits)
    c.notes.push_back("the output is not a rotation of the input pairs for any pairing and width tried (relative residual " +
                      std::to_string(best.residual) + ")");
  if (last < 0) c.notes.push_back("the output equals the input in every channel: nothing was rotated");
  if (t.heads == 1) c.notes.push_back("one head per token: the pairing cannot be determined from the data");
  return c;
}

}  // namespace rotary::parity
