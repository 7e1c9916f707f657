// The layout table (hf, vllm, flashinfer, te, ggml, onnx, raw): canonical <-> engine tensors, used by export and check.
#include <charconv>
#include <cmath>
#include <cstring>

#include "check/canonical.h"
#include "core/messages.h"
#include "plan/dtype_scalar.h"
#include "rotary/ggml.h"

namespace rotary::parity {
namespace {

using Cols = LayoutInfo::Columns;
const LayoutInfo kLayouts[] = {
    {EngineLayout::kHf, "hf", "inv_freq", "cos", "sin", Cols::kDuplicated, false, false},
    {EngineLayout::kVllm, "vllm", "inv_freq", "cos_sin_cache", nullptr, Cols::kCosThenSin, false, false},
    {EngineLayout::kFlashInfer, "flashinfer", nullptr, "cos_sin_cache", nullptr, Cols::kCosThenSin, false, true},
    {EngineLayout::kTe, "te", "inv_freq", "freqs", nullptr, Cols::kDuplicated, true, false},
    {EngineLayout::kGgml, "ggml", nullptr, nullptr, nullptr, Cols::kHalf, false, false},
    {EngineLayout::kOnnx, "onnx", nullptr, "cos_cache", "sin_cache", Cols::kHalf, false, false},
    {EngineLayout::kRaw, "raw", "inv_freq", "cos", "sin", Cols::kHalf, false, false},
};

[[noreturn]] void bad(const std::string& msg) { fail(Error::Kind::kInvalidArgument, kWhere, msg); }

std::string shape_str(const std::vector<int64_t>& s) { return shape_string(s); }

std::string num(double v) {
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, p);
}

/// The shape without leading 1s, keeping at least `keep` dims.
std::vector<int64_t> squeezed(const std::vector<int64_t>& s, size_t keep) {
  size_t i = 0;
  while (s.size() - i > keep && s[i] == 1) ++i;
  return {s.begin() + static_cast<std::ptrdiff_t>(i), s.end()};
}

/// [N, W] of a table tensor (leading 1s dropped; te also [N, 1, 1, W]).
std::pair<int64_t, int64_t> table_shape(const NpyArray& a, const std::string& what, const char* expected) {
  std::vector<int64_t> s = squeezed(a.shape, 2);
  if (s.size() == 4 && s[1] == 1 && s[2] == 1) s = {s[0], s[3]};
  if (s.size() != 2 || s[1] <= 0) bad(what + " must have shape " + expected + ", got " + shape_str(a.shape));
  if (s[0] <= 0) bad(what + " has no rows (positions), got shape " + shape_str(a.shape));
  return {s[0], s[1]};
}

/// Which duplication a [N, W] table shows: {cat(x, x) halves, each value twice}.
std::pair<bool, bool> duplication(const std::vector<double>& v, int64_t n, int64_t w) {
  bool cat = w % 2 == 0, twice = w % 2 == 0;
  const int64_t h = w / 2;
  for (int64_t r = 0; r < n && (cat || twice); ++r)
    for (int64_t j = 0; j < h; ++j) {
      const double* row = v.data() + r * w;
      cat = cat && row[j] == row[j + h];
      twice = twice && row[2 * j] == row[2 * j + 1];
    }
  return {cat, twice};
}

/// True when a [N, W] table shows either duplication.
bool duplicated(const std::vector<double>& v, int64_t n, int64_t w) {
  const auto [cat, twice] = duplication(v, n, w);
  return cat || twice;
}

/// De-duplicates [N, W] to [N, W/2]; returns the pairing the pattern implies (nullopt for cat, which HF uses
/// for both pairings, unless `cat_is_half`).
std::optional<Pairing> undup(const std::vector<double>& v, int64_t n, int64_t w, std::vector<double>& out,
                             const std::string& what, bool cat_is_half) {
  auto [cat, twice] = duplication(v, n, w);
  if (!cat && !twice)
    bad(what + " [" + std::to_string(n) + ", " + std::to_string(w) + "] must hold each frequency twice: equal halves "
        "(cat(freqs, freqs)) or equal neighbours (repeat_interleave); neither holds");
  const int64_t h = w / 2;
  out.resize(static_cast<size_t>(n * h));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < h; ++j) out[static_cast<size_t>(r * h + j)] = v[static_cast<size_t>(r * w + (cat ? j : 2 * j))];
  if (cat && twice) return std::nullopt;  // every row constant: the data does not say
  if (twice) return Pairing::kInterleaved;
  return cat_is_half ? std::optional<Pairing>(Pairing::kHalfSplit) : std::nullopt;
}

double parse_meta(const TensorFile& f, const std::string& key, std::optional<double> dflt) {
  auto it = f.metadata.find(key);
  if (it == f.metadata.end()) {
    if (!dflt) bad("ggml layout needs metadata \"" + key + "\"");
    return *dflt;
  }
  double v = 0;
  const std::string& s = it->second;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v))
    bad("ggml metadata \"" + key + "\" must be a finite number, got " + quote_value(s));
  return v;
}

Canonical decode_ggml(const TensorFile& f) {
  GgmlRopeParams p;
  auto mode = f.metadata.find("mode");
  if (mode == f.metadata.end()) bad("ggml layout needs metadata \"mode\" (neox, normal, mrope, imrope)");
  p.mode = parse_ggml_rope_mode(mode->second, "ggml metadata \"mode\"");
  const double n_dims = parse_meta(f, "n_dims", std::nullopt);
  if (n_dims != std::floor(n_dims) || n_dims <= 0 || n_dims > 65536) bad("ggml metadata \"n_dims\" must be an integer in [1, 65536], got " + num(n_dims));
  p.n_dims = static_cast<int64_t>(n_dims);
  p.freq_base = parse_meta(f, "freq_base", std::nullopt);
  p.freq_scale = parse_meta(f, "freq_scale", 1.0);
  p.ext_factor = parse_meta(f, "ext_factor", 0.0);
  p.attn_factor = parse_meta(f, "attn_factor", 1.0);
  p.beta_fast = parse_meta(f, "beta_fast", 32.0);
  p.beta_slow = parse_meta(f, "beta_slow", 1.0);
  const double orig = parse_meta(f, "n_ctx_orig", 0.0);
  if (orig != std::floor(orig) || orig < 0 || orig > 1e15) bad("ggml metadata \"n_ctx_orig\" must be a non-negative integer, got " + num(orig));
  p.n_ctx_orig = static_cast<int64_t>(orig);
  if (auto s = f.metadata.find("sections"); s != f.metadata.end()) {
    size_t at = 0;
    for (int i = 0; i < 4; ++i) {
      size_t end = s->second.find(',', at);
      std::string part = s->second.substr(at, end == std::string::npos ? std::string::npos : end - at);
      long long v = 0;
      auto [q, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
      if (ec != std::errc() || q != part.data() + part.size() || (i < 3 && end == std::string::npos) || (i == 3 && end != std::string::npos))
        bad("ggml metadata \"sections\" must be four comma-separated integers, got " + quote_value(s->second));
      p.sections[static_cast<size_t>(i)] = v;
      at = end + 1;
    }
  }
  Canonical c;
  c.form = Form::kFreqs;
  c.ggml = true;
  c.dtype = DType::kF32;
  if (f.find("freq_factors") || !f.tensors.empty()) {
    const NpyArray& ff = pick_tensor(f, {"freq_factors", "rope_freqs"}, true, "ggml");
    if (squeezed(ff.shape, 1).size() != 1) bad("ggml freq_factors must have shape [n_dims/2], got " + shape_str(ff.shape));
    p.freq_factors = tensor_doubles(ff, "ggml freq_factors");
    c.dtype = ff.dtype;
  }
  AxisFrequencies af = ggml_frequencies(p);
  c.inv_freq = af.freqs.inv_freq;
  c.attention_factor = af.freqs.attention_factor;
  c.half = static_cast<int64_t>(c.inv_freq.size());
  c.pairing = af.pairing;
  return c;
}

}  // namespace

/// A tensor by exact name, by a unique name ending in "." + name, or (allow_single) the file's only tensor.
const NpyArray& pick_tensor(const TensorFile& f, const std::vector<std::string>& names, bool allow_single, const char* layout) {
  for (const auto& n : names)
    if (const NpyArray* a = f.find_like(n)) return *a;
  if (allow_single && f.tensors.size() == 1) return f.tensors[0].second;
  std::vector<std::string> have;
  for (const auto& [key, arr] : f.tensors) have.push_back(key);
  bad(std::string(layout) + " layout needs a tensor named \"" + names[0] + "\", got tensors [" + detail::shown_names(have, 4) + "]");
}

std::vector<double> tensor_doubles(const NpyArray& a, const std::string& what, bool allow_int) {
  if (!is_floating(a.dtype) && !(allow_int && is_integer(a.dtype)))
    bad(what + " must be a floating-point tensor (f32, f16, bf16, f64), got " + dtype_name(a.dtype));
  const int64_t n = a.numel();
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (a.dtype == DType::kI64) v[static_cast<size_t>(i)] = static_cast<double>(reinterpret_cast<const int64_t*>(a.data.data())[i]);
    else if (a.dtype == DType::kI32) v[static_cast<size_t>(i)] = reinterpret_cast<const int32_t*>(a.data.data())[i];
    else v[static_cast<size_t>(i)] = detail::load_as_double(a.data.data(), a.dtype, i);
    if (!std::isfinite(v[static_cast<size_t>(i)])) bad(what + " holds a non-finite value at flat index " + std::to_string(i));
  }
  return v;
}

std::string shape_string(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

const LayoutInfo& layout_info(EngineLayout layout) {
  for (const auto& l : kLayouts)
    if (l.layout == layout) return l;
  bad("unknown layout " + std::to_string(static_cast<int>(layout)));
}

double half_ulp(DType d, double x) {
  int p = 53, emin = -1022;
  if (d == DType::kF32) p = 24, emin = -126;
  else if (d == DType::kF16) p = 11, emin = -14;
  else if (d == DType::kBF16) p = 8, emin = -126;
  int e = emin;
  if (x != 0) {
    std::frexp(std::fabs(x), &e);
    e = std::max(e - 1, emin);
  }
  return std::ldexp(1.0, e - (p - 1)) / 2;
}

double round_to(DType d, double x) {
  unsigned char buf[8];
  detail::store_from_double(buf, d, 0, x);
  return detail::load_as_double(buf, d, 0);
}

TensorFile encode(const LayoutInfo& info, TableKind what, const std::vector<double>& inv_freq, double af, int64_t rows,
                  DType dtype, Pairing pairing) {
  const int64_t h = static_cast<int64_t>(inv_freq.size());
  auto make = [&](std::vector<int64_t> shape) {
    NpyArray a;
    a.dtype = dtype;
    a.shape = std::move(shape);
    a.data.resize(static_cast<size_t>(a.numel()) * dtype_size(dtype));
    return a;
  };
  auto put = [&](NpyArray& a, int64_t i, double v) { detail::store_from_double(a.data.data(), dtype, i, v); };
  TensorFile f;
  if (what == TableKind::kInvFreq) {
    NpyArray a = make({h});
    for (int64_t i = 0; i < h; ++i) put(a, i, inv_freq[static_cast<size_t>(i)]);
    f.tensors.emplace_back(info.inv_freq, std::move(a));
    return f;
  }
  const bool twice = info.columns == Cols::kDuplicated && pairing == Pairing::kInterleaved;
  const int64_t w = info.columns == Cols::kHalf ? h : 2 * h;
  NpyArray c = make(info.angles ? std::vector<int64_t>{rows, 1, 1, w} : std::vector<int64_t>{rows, w});
  NpyArray s = make({rows, w});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < h; ++j) {
      const double angle = static_cast<double>(r) * inv_freq[static_cast<size_t>(j)];
      const double cv = info.angles ? angle : af * std::cos(angle), sv = af * std::sin(angle);
      switch (info.columns) {
        case Cols::kDuplicated: {
          const int64_t c0 = twice ? 2 * j : j, c1 = twice ? 2 * j + 1 : j + h;
          put(c, r * w + c0, cv), put(c, r * w + c1, cv);
          put(s, r * w + c0, sv), put(s, r * w + c1, sv);
          break;
        }
        case Cols::kCosThenSin: put(c, r * w + j, cv), put(c, r * w + h + j, sv); break;
        case Cols::kHalf: put(c, r * w + j, cv), put(s, r * w + j, sv); break;
      }
    }
  f.tensors.emplace_back(info.cos, std::move(c));
  if (info.sin) f.tensors.emplace_back(info.sin, std::move(s));
  return f;
}

TensorFile encode_ggml(const Spec& spec, const std::vector<double>& inv_freq, double af) {
  // Zero frequencies (proportional's pass-through pairs) get the largest f32 freq_factor: theta ~1e-40, an angle
  // below 1e-30 rad at any position ggml takes. Trimming n_dims instead would move half-split pair partners.
  const int64_t h = static_cast<int64_t>(inv_freq.size());
  TensorFile f;
  const bool mrope = spec.mrope.enabled();
  f.metadata["mode"] = mrope ? (spec.mrope.interleaved ? "imrope" : "mrope")
                             : (spec.pairing == Pairing::kInterleaved ? "normal" : "neox");
  if (mrope)
    f.metadata["sections"] = std::to_string(spec.mrope.section[0]) + "," + std::to_string(spec.mrope.section[1]) + "," +
                             std::to_string(spec.mrope.section[2]) + ",0";
  f.metadata["n_dims"] = std::to_string(2 * h);
  f.metadata["freq_base"] = num(spec.base);
  f.metadata["freq_scale"] = "1";
  f.metadata["ext_factor"] = "0";
  f.metadata["attn_factor"] = num(af);
  f.metadata["beta_fast"] = "32";
  f.metadata["beta_slow"] = "1";
  f.metadata["n_ctx_orig"] = std::to_string(spec.scaling.original_max_position_embeddings);
  NpyArray ff;
  ff.dtype = DType::kF32;
  ff.shape = {h};
  ff.data.resize(static_cast<size_t>(h) * 4);
  for (int64_t j = 0; j < h; ++j) {
    const double ladder = 1.0 / std::pow(spec.base, static_cast<double>(2 * j) / static_cast<double>(2 * h));
    const double t = inv_freq[static_cast<size_t>(j)];
    detail::store_from_double(ff.data.data(), DType::kF32, j, t > 0 ? ladder / t : 3.4028234663852886e38);
  }
  f.tensors.emplace_back("freq_factors", std::move(ff));
  return f;
}

Canonical decode(const LayoutInfo& info, TableKind kind, const TensorFile& t, Pairing expected, int64_t expected_r) {
  const std::string L = info.name;
  if (kind == TableKind::kRotated) return decode_rotated(info, t, expected, expected_r);
  if (info.layout == EngineLayout::kGgml) {
    if (kind != TableKind::kInvFreq)
      bad("the ggml layout holds ggml_rope_ext's parameters, not a table: pass them as --inv-freq (a .safetensors "
          "file with the parameters as metadata and optional freq_factors)");
    return decode_ggml(t);
  }
  Canonical c;
  if (kind == TableKind::kInvFreq) {
    if (!info.inv_freq) bad(L + " layout has no inv_freq tensor (it takes a cos/sin table)");
    const NpyArray& a = pick_tensor(t, {info.inv_freq}, true, info.name);
    if (squeezed(a.shape, 1).size() != 1 || a.numel() == 0)
      bad(L + " inv_freq must have shape [rotary_dim/2], got " + shape_str(a.shape));
    c.form = Form::kFreqs;
    c.dtype = a.dtype;
    c.inv_freq = tensor_doubles(a, L + " inv_freq");
    c.half = static_cast<int64_t>(c.inv_freq.size());
    return c;
  }
  c.form = info.angles ? Form::kAngles : Form::kValues;
  const NpyArray* first = nullptr;
  const NpyArray* second = nullptr;
  if (info.layout == EngineLayout::kRaw && !t.find("cos") && !t.find("sin") && t.tensors.size() == 1) {
    first = &pick_tensor(t, {"cos_sin"}, true, info.name);  // rotary's CosSinTable rows: cos | sin
  } else if (info.sin) {
    const std::string c_alias = info.layout == EngineLayout::kOnnx ? "cos" : info.cos;
    const std::string s_alias = info.layout == EngineLayout::kOnnx ? "sin" : info.sin;
    first = &pick_tensor(t, {info.cos, c_alias}, false, info.name);
    second = &pick_tensor(t, {info.sin, s_alias}, false, info.name);
  } else {
    first = &pick_tensor(t, {info.cos}, true, info.name);
  }
  if (info.f32_only && first->dtype != DType::kF32)
    bad(L + " cos_sin_cache must be float32 (FlashInfer raises ValueError otherwise), got " + dtype_name(first->dtype));
  c.dtype = first->dtype;
  const char* expect = info.angles ? "[N, 1, 1, rotary_dim]" : info.columns == Cols::kHalf && second ? "[N, rotary_dim/2]" : "[N, rotary_dim]";
  auto [n, w] = table_shape(*first, L + " " + (info.cos ? info.cos : "table"), expect);
  std::vector<double> va = tensor_doubles(*first, L + " " + info.cos), vb;
  if (second) {
    if (second->dtype != first->dtype) bad(L + " cos and sin must have one dtype, got " + dtype_name(first->dtype) + " and " + dtype_name(second->dtype));
    auto [n2, w2] = table_shape(*second, L + " " + info.sin, expect);
    if (n2 != n || w2 != w) bad(L + " cos and sin must have the same shape, got " + shape_str(first->shape) + " and " + shape_str(second->shape));
    vb = tensor_doubles(*second, L + " " + info.sin);
  }
  const bool cos_then_sin = info.columns == Cols::kCosThenSin || (info.layout == EngineLayout::kRaw && !second);
  // hf cos/sin of R/2 columns showing neither duplication: each frequency once (GPT-OSS's forward returns them so).
  const bool once = info.columns == Cols::kDuplicated && info.layout == EngineLayout::kHf && w * 2 == expected_r &&
                    !duplicated(va, n, w) && (!second || !duplicated(vb, n, w));
  if ((cos_then_sin || info.columns == Cols::kDuplicated) && !once) {
    if (w % 2 != 0) bad(L + " table width must be even (rotary_dim), got " + std::to_string(w));
  }
  c.half = info.columns == Cols::kHalf && second ? w : w / 2;
  if (cos_then_sin) {
    c.a.resize(static_cast<size_t>(n * c.half));
    c.b.resize(c.a.size());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < c.half; ++j) {
        c.a[static_cast<size_t>(r * c.half + j)] = va[static_cast<size_t>(r * w + j)];
        c.b[static_cast<size_t>(r * c.half + j)] = va[static_cast<size_t>(r * w + c.half + j)];
      }
  } else if (once) {
    // Each frequency once, [N, R/2]: GPT-OSS's RotaryEmbedding.forward returns its freqs without cat(freqs, freqs).
    c.half = w;
    c.a = std::move(va);
    c.b = std::move(vb);
    c.notes.push_back(L + " cos/sin hold each of the " + std::to_string(w) +
                      " frequencies once (as GPT-OSS's rotary embedding returns them)");
  } else if (info.columns == Cols::kDuplicated) {
    const bool te = info.layout == EngineLayout::kTe;
    c.pairing = undup(va, n, w, c.a, L + " " + info.cos, te);
    if (second) {
      auto p2 = undup(vb, n, w, c.b, L + " " + info.sin, te);
      if (p2 && c.pairing && *p2 != *c.pairing) bad(L + " cos and sin repeat their values in different patterns");
      if (!c.pairing) c.pairing = p2;
    }
  } else {
    c.a = std::move(va);
    c.b = std::move(vb);
  }
  c.positions.resize(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) c.positions[static_cast<size_t>(r)] = static_cast<double>(r);
  return c;
}

}  // namespace rotary::parity
