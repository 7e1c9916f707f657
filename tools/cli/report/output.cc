// The report's tables: the spec and band table on the console, bands.csv, and the bands section of report.json.
#include "output.h"

#include <cmath>
#include <cstdio>
#include <map>

#include "../cli.h"
#include "format.h"

namespace rotary::cli::report {

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
  if (sc.type == RopeType::kDynamic && sc.alpha) std::printf(", alpha %s (NTK-alpha, vLLM)", format_double(*sc.alpha).c_str());
  if (sc.type == RopeType::kNtk && sc.mixed_b) std::printf(", mixed_b %s", format_double(*sc.mixed_b).c_str());
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

namespace {

void write_bands_csv(const std::vector<Band>& bands, const std::filesystem::path& path) {
  TextFile f(path);
  f << "pair,theta,theta_default,wavelength,wavelength_default,ratio,class\n";
  for (const auto& b : bands)
    f << b.i << "," << csv_num(b.theta) << "," << csv_num(b.theta_default) << "," << csv_num(b.wavelength) << ","
      << csv_num(b.wavelength_default) << "," << csv_num(b.ratio) << "," << class_key(b.cls) << "\n";
  f.commit();
}

void print_bands(const ModelView& m, const std::vector<Band>& bands) {
  std::printf("\nbands (L = %lld tokens = %s; wavelength = 2*pi/theta in tokens; ratio = theta_default/theta)\n",
              (long long)m.L,
              m.spec.scaling.type == RopeType::kDefault ? "max_position_embeddings"
              : m.L_from_factor ? "original context, max_position_embeddings / factor"
                                : "original context");
  std::printf("  %s\n", type_explanation(m).c_str());
  std::printf("  %4s  %-12s %-12s %12s %12s %9s  %s\n", "pair", "theta", "theta_dflt", "wavelength", "wl_default",
              "ratio", "class");
  for (const auto& b : bands)
    std::printf("  %4lld  %-12.6g %-12.6g %12s %12s %9.4g  %s\n", (long long)b.i, b.theta, b.theta_default,
                wavelength_text(b.wavelength).c_str(), wavelength_text(b.wavelength_default).c_str(), b.ratio,
                class_label(b.cls));
  std::printf("  summary:\n");
  size_t j = 0;
  while (j < bands.size()) {
    size_t e = j;
    while (e + 1 < bands.size() && bands[e + 1].cls == bands[j].cls) ++e;
    std::printf("    pairs %3lld-%-3lld (%2zu)  %-32s wavelength %s .. %s tokens\n", (long long)bands[j].i,
                (long long)bands[e].i, e - j + 1, class_label(bands[j].cls),
                wavelength_text(bands[j].wavelength).c_str(), wavelength_text(bands[e].wavelength).c_str());
    j = e + 1;
  }
}

Json bands_json(const ModelView& m, const std::vector<Band>& bands) {
  /// Non-finite numbers (the wavelength of a zero frequency) become JSON null.
  auto num = [](double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); };
  Json pairs = Json::array();
  std::map<std::string, int> counts;
  for (const auto& b : bands) {
    pairs.push_back({{"pair", b.i},
                     {"theta", b.theta},
                     {"theta_default", b.theta_default},
                     {"wavelength", num(b.wavelength)},
                     {"wavelength_default", num(b.wavelength_default)},
                     {"ratio", b.ratio},
                     {"class", class_key(b.cls)}});
    counts[class_key(b.cls)]++;
  }
  Json classes = Json::object();
  for (auto c : kBandClasses)
    classes[class_key(c)] = {{"label", class_label(c)}, {"meaning", class_meaning(c)}, {"count", counts[class_key(c)]}};
  return {{"L", m.L},
          {"full_factor", m.full_factor},
          {"explanation", type_explanation(m)},
          {"classes", classes},
          {"pairs", pairs}};
}

}  // namespace

void report_bands(const ModelView& m, const std::filesystem::path& dir, Json& rep) {
  const auto bands = make_bands(m);
  print_bands(m, bands);
  write_bands_csv(bands, dir / "bands.csv");
  rep["bands"] = bands_json(m, bands);
}

}  // namespace rotary::cli::report
