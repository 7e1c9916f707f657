// Names, `rotary export`'s tables, and the JSON/text forms of a check result.
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "check/canonical.h"
#include "rotary/config.h"
#include "rotary/freqs.h"

namespace rotary {
namespace {

using parity::kWhere;
using Json = nlohmann::ordered_json;

Json num_or_null(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }
template <class T> Json opt(const std::optional<T>& v) { return v ? Json(*v) : Json(nullptr); }

Json series_json(const PrecisionSeries& s) {
  Json octaves = Json::array();
  for (size_t i = 0; i < s.octave_start.size(); ++i)
    octaves.push_back({{"start", s.octave_start[i]}, {"max_err", num_or_null(s.octave_max_err[i])}});
  return {{"description", s.description}, {"first_pos_err_1e-3", opt(s.first_pos_err_1e3)},
          {"first_pos_err_1e-2", opt(s.first_pos_err_1e2)}, {"max_err", num_or_null(s.max_err)}, {"octaves", octaves}};
}

std::string g(double v, int digits = 6) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}
std::string pos(const std::optional<int64_t>& p) { return p ? std::to_string(*p) : "none"; }

}  // namespace

const char* engine_layout_name(EngineLayout l) { return parity::layout_info(l).name; }

EngineLayout parse_engine_layout(const std::string& s, const char* where) {
  for (auto l : {EngineLayout::kHf, EngineLayout::kVllm, EngineLayout::kFlashInfer, EngineLayout::kTe, EngineLayout::kGgml,
                 EngineLayout::kOnnx, EngineLayout::kRaw})
    if (s == engine_layout_name(l)) return l;
  fail(Error::Kind::kInvalidArgument, where, "layout must be one of hf, vllm, flashinfer, te, ggml, onnx, raw, got " + quote_value(s));
}

const char* table_kind_name(TableKind k) {
  switch (k) {
    case TableKind::kInvFreq: return "inv_freq";
    case TableKind::kCosSin: return "cos_sin";
    case TableKind::kRotated: return "rotated";
  }
  return "unknown";
}

TensorFile export_tables(const Spec& spec_in, const ExportOptions& o) {
  const Spec spec = spec_in.normalized();
  const auto& info = parity::layout_info(o.layout);
  constexpr const char* W = "rotary_export";
  const int64_t rows = o.positions > 0 ? o.positions : spec.max_position_embeddings > 0 ? spec.max_position_embeddings : 4096;
  if (o.positions < 0 || rows > (int64_t(1) << 22))
    fail(Error::Kind::kInvalidArgument, W, "positions must be in [1, 4194304], got " + std::to_string(o.positions ? o.positions : rows));
  if (o.dtype != DType::kF32 && o.dtype != DType::kF16 && o.dtype != DType::kBF16 &&
      !(o.dtype == DType::kF64 && o.layout == EngineLayout::kRaw))
    fail(Error::Kind::kInvalidArgument, W, std::string("dtype must be f32, f16 or bf16 (f64: raw only), got ") + dtype_name(o.dtype));
  if ((info.f32_only || info.angles) && o.dtype != DType::kF32 && o.what == TableKind::kCosSin)
    fail(Error::Kind::kInvalidArgument, W, std::string(info.name) + " tables are float32 only (" +
                                               (info.angles ? "TE forces fp32 freqs" : "FlashInfer raises ValueError otherwise") +
                                               "), got " + dtype_name(o.dtype));
  if (o.what == TableKind::kRotated) fail(Error::Kind::kInvalidArgument, W, "export writes inv_freq or cos/sin tables, not rotated q/k");
  if (o.what == TableKind::kInvFreq && !info.inv_freq && o.layout != EngineLayout::kGgml)
    fail(Error::Kind::kInvalidArgument, W, std::string(info.name) + " has no inv_freq tensor: export its cos/sin table");
  const std::optional<int64_t> seq_len = o.what == TableKind::kCosSin ? std::optional<int64_t>(rows) : std::nullopt;
  const Frequencies f = compute_frequencies(spec, seq_len);
  TensorFile out = o.layout == EngineLayout::kGgml ? parity::encode_ggml(spec, f.inv_freq, f.attention_factor)
                                                   : parity::encode(info, o.what, f.inv_freq, f.attention_factor, rows, o.dtype, spec.pairing);
  out.metadata["rotary.layout"] = info.name;
  out.metadata["rotary.kind"] = o.layout == EngineLayout::kGgml ? "ggml_params" : table_kind_name(o.what);
  out.metadata["rotary.rope_type"] = rope_type_name(spec.scaling.type);
  out.metadata["rotary.spec"] = spec_to_json(spec);
  out.metadata["rotary.attention_factor"] = g(f.attention_factor, 17);
  if (seq_len) out.metadata["rotary.seq_len"] = std::to_string(*seq_len);
  return out;
}

std::string check_result_json(const CheckResult& r) {
  Json diags = Json::array();
  for (const auto& d : r.diagnoses) diags.push_back({{"code", d.code}, {"message", d.message}});
  Json bands = Json::array();
  int64_t bad = 0;
  for (const auto& b : r.bands) {
    bands.push_back({{"index", b.index}, {"expected", b.expected}, {"found", num_or_null(b.found)},
                     {"rel_err", num_or_null(b.rel_err)}, {"wavelength", num_or_null(b.wavelength)}, {"ok", b.ok}});
    bad += b.ok ? 0 : 1;
  }
  Json j = {{"verdict", r.agree ? "agree" : "disagree"},
            {"spec", r.spec_json.empty() ? Json(nullptr) : Json::parse(r.spec_json)},
            {"layout", r.layout},
            {"kind", r.kind},
            {"dtype", r.dtype},
            {"positions", r.positions},
            {"seq_len", opt(r.seq_len)},
            {"rotary_dim_expected", r.rotary_dim_expected},
            {"rotary_dim_found", r.rotary_dim_found},
            {"pairing_found", r.pairing_found.empty() ? Json(nullptr) : Json(r.pairing_found)},
            {"max_rel_err_inv_freq", opt(r.max_rel_err_inv_freq)},
            {"attention_factor_expected", r.attention_factor_expected},
            {"attention_factor_found", opt(r.attention_factor_found)},
            {"diagnoses", diags},
            {"first_pos_err_1e-3", opt(r.precision.first_pos_err_1e3)},
            {"first_pos_err_1e-2", opt(r.precision.first_pos_err_1e2)},
            {"precision", series_json(r.precision)},
            {"precision_f32_angles", series_json(r.precision_f32_angles)},
            {"bands_disagreeing", bad},
            {"bands", bands},
            {"notes", r.notes}};
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";  // U+FFFD for a name that is not UTF-8
}

std::string check_result_text(const CheckResult& r) {
  std::string o;
  char line[512];
  std::snprintf(line, sizeof line, "rotary check: %s %s (%s), %lld positions, seq_len %s\n", r.layout.c_str(), r.kind.c_str(),
                r.dtype.c_str(), static_cast<long long>(r.positions), pos(r.seq_len).c_str());
  o += line;
  std::snprintf(line, sizeof line, "rotary_dim       expected %lld, found %lld%s%s\n", static_cast<long long>(r.rotary_dim_expected),
                static_cast<long long>(r.rotary_dim_found), r.pairing_found.empty() ? "" : ", pairing ",
                r.pairing_found.c_str());
  o += line;
  o += "attention factor expected " + g(r.attention_factor_expected) + ", found " +
       (r.attention_factor_found ? g(*r.attention_factor_found) : std::string("(not in this data)")) + "\n";
  int64_t bad = 0;
  for (const auto& b : r.bands) bad += b.ok ? 0 : 1;
  o += "bands            " + std::to_string(r.bands.size() - static_cast<size_t>(bad)) + " agree, " + std::to_string(bad) +
       " disagree; max relative error of the resolved inv_freq " +
       (r.max_rel_err_inv_freq ? g(*r.max_rel_err_inv_freq, 3) : std::string("n/a (no band resolved)")) + "\n";
  int shown = 0;
  for (const auto& b : r.bands) {
    if (b.ok) continue;
    if (++shown > 12) { o += "  ... (" + std::to_string(bad - 12) + " more in --json)\n"; break; }
    std::snprintf(line, sizeof line, "  band %3lld  wavelength %-10s tokens  expected %-12s found %-12s rel err %s\n",
                  static_cast<long long>(b.index), g(b.wavelength, 5).c_str(), g(b.expected, 7).c_str(), g(b.found, 7).c_str(),
                  g(b.rel_err, 3).c_str());
    o += line;
  }
  for (const auto& d : r.diagnoses) o += "diagnosis        " + d.code + ": " + d.message + "\n";
  o += "precision        " + r.precision.description + ": error > 1e-3 from position " + pos(r.precision.first_pos_err_1e3) +
       ", > 1e-2 from " + pos(r.precision.first_pos_err_1e2) + ", max " + g(r.precision.max_err, 3) + "\n";
  o += "                 " + r.precision_f32_angles.description + ": > 1e-3 from " + pos(r.precision_f32_angles.first_pos_err_1e3) +
       ", > 1e-2 from " + pos(r.precision_f32_angles.first_pos_err_1e2) + ", max " + g(r.precision_f32_angles.max_err, 3) + "\n";
  for (const auto& n : r.notes) o += "note             " + n + "\n";
  o += r.agree ? "verdict: AGREE\n"
               : "verdict: DISAGREE (" + std::to_string(r.diagnoses.size()) + (r.diagnoses.size() == 1 ? " diagnosis" : " diagnoses") + ")\n";
  return o;
}

}  // namespace rotary
