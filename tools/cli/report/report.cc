// `rotary report`: one model's RoPE explained and verified on this machine (bands, decay, accuracy, speed) + plot data.
//
// Output (printed, and written to DIR): the spec with every scaling parameter, the band table (which dimension
// pairs rotate fully within the original context, which are interpolated / blended / never complete a turn),
// the attention factor, numerical checks (relative-position identity, inverse∘forward, error vs fp64 truth at
// large positions), a speed line, and the CSVs behind the four plots. Where each part is made:
//   model.cc    the model's frequencies, band classes and comparison variants
//   output.cc   the spec and band table on the console, bands.csv
//   verify.cc   the numerical checks
//   curves.cc   decay.csv (RoFormer's bound (1/(d/2)) Σ_j |S_j|, S_j = Σ_{k<j} e^{i r θ_k}), score.csv
//               (<R(m)q, R(n)k> vs r = m − n for a fixed random q/k pair, and q = k), phase_error.csv
//   speed.cc    the speed line (the timing harness of `rotary bench`, ../timing.h)
//   this file   the command: runs the parts in order and writes report.json (fields: docs/cli.md)
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "../cli.h"
#include "../plot.h"
#include "curves.h"
#include "format.h"
#include "model.h"
#include "output.h"
#include "rotary/config.h"
#include "rotary/version.h"
#include "speed.h"
#include "verify.h"

namespace rotary::cli::report {
namespace {

/// The command's options after parsing.
struct ReportOptions {
  Spec spec;  ///< normalized
  std::string out_dir;
  bool plots = true;
  bool quick = false;
  std::string layer_type;       ///< set for one layer type of a config with rope parameters per layer type
  std::vector<int64_t> layers;  ///< the layers of that type (indices into the config's layer_types)
};

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
  // The spec as config.json text that `--config` (and Spec.from_hf_config) read back: the model's own spec,
  // M-RoPE sections included.
  rep["spec"] = Json::parse(spec_to_json(o.spec.normalized()));
  if (!o.layer_type.empty()) {
    rep["layer_type"] = o.layer_type;
    rep["layers"] = o.layers;
  }
  if (o.spec.mrope.enabled())
    rep["note"] = "M-RoPE spec: shown for text tokens (t = h = w positions), where it equals 1-D RoPE";
  if (mv.max_pos <= 0 && mv.spec.scaling.original_max_position_embeddings <= 0)
    rep["note"] = "the config gives no context length: L = 4096 is assumed for the band classes";
  rep["context"] = {{"original", mv.L},
                    {"max_position_embeddings", mv.max_pos},
                    {"factor", mv.nominal_factor},
                    {"extended", mv.extended},
                    {"scaled_seq_len", mv.seq_len ? Json(*mv.seq_len) : Json(nullptr)}};

  print_spec(mv, description);
  if (rep.contains("note")) std::printf("  note: %s\n", rep["note"].get<std::string>().c_str());

  report_bands(mv, dir, rep);

  // Attention factor.
  rep["attention_factor"] = mv.scaled.attention_factor;
  std::printf("\nattention_factor %.9g (multiplies cos and sin; logits scale by its square %.6g)\n",
              mv.scaled.attention_factor, mv.scaled.attention_factor * mv.scaled.attention_factor);

  report_verification(mv, D, rep);
  report_curves(mv, D, dir, rep);
  report_speed(mv, D, o.quick, rep);
  rep["files"] = {"report.json", "bands.csv", "decay.csv", "score.csv", "phase_error.csv"};
  {
    TextFile f(dir / "report.json");
    f << rep.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";  // U+FFFD for a non-UTF-8 name
    f.commit();
  }
  std::printf("\nwrote %s/{report.json, bands.csv, decay.csv, score.csv, phase_error.csv}\n", o.out_dir.c_str());
  return rep;
}

const Options kOptions = {
    preset_option("llama-3.1-8b"),
    config_option(),
    layer_type_option(),
    {"out", "DIR", "the folder for report.json, the CSVs and the plots (created if missing)", "out/report"},
    {"no-plots", nullptr, "do not draw the PNGs (no Python needed)", "off: plots with matplotlib when present"},
    {"quick", nullptr, "a shorter speed measurement", "off"},
};

void report_and_plot(const ReportOptions& o) {
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
}

/// A layer type's name as a directory name: letters, digits, '-', '_' and '.' kept, others '_'.
std::string dir_name(const std::string& layer_type) {
  std::string d = layer_type.empty() ? "_" : layer_type;
  for (char& c : d)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  if (d == "." || d == "..") d = "_";
  return d;
}

/// A config whose rope parameters differ per layer type: one report per type, in DIR/<type>/.
void report_layer_types(const ReportOptions& base, const LayerTypeSpecs& l) {
  std::printf("rope parameters per layer type: %s (%zu layers)\n", l.type_names().c_str(), l.layer_types.size());
  for (const auto& e : l.by_type) {
    ReportOptions o = base;
    o.layer_type = e.layer_type;
    for (size_t i = 0; i < l.layer_types.size(); ++i)
      if (l.layer_types[i] == e.layer_type) o.layers.push_back(static_cast<int64_t>(i));
    std::string which;
    for (int64_t i : o.layers) which += (which.empty() ? "" : ", ") + std::to_string(i);
    std::printf("\n=== layer type %s: %zu layer%s%s%s ===\n", e.layer_type.c_str(), o.layers.size(),
                o.layers.size() == 1 ? "" : "s", o.layers.empty() ? "" : " (", o.layers.empty() ? "" : (which + ")").c_str());
    if (!e.spec) {
      std::printf("no RoPE (its rope_parameters entry is null)\n");
      continue;
    }
    o.spec = *e.spec;
    o.out_dir = (std::filesystem::path(base.out_dir) / dir_name(e.layer_type)).string();
    report_and_plot(o);
  }
}

int report_main(const std::vector<std::string>& args) {
  Flags flags(args, kOptions);
  if (!flags.positional().empty()) throw UsageError("unexpected argument " + quote_value(flags.positional()[0]));
  ReportOptions o;
  o.out_dir = flags.get("out").value_or("out/report");
  o.plots = !flags.has("no-plots");
  o.quick = flags.has("quick");
  if (flags.has("config") && !flags.has("preset") && !flags.has("layer-type")) {
    const LayerTypeSpecs l = layer_type_specs_from_hf_config_file(*flags.get("config"));
    if (l.nested) {
      report_layer_types(o, l);
      return 0;
    }
  }
  o.spec = spec_from_flags(flags, "llama-3.1-8b");
  if (auto t = flags.get("layer-type")) o.layer_type = *t;
  if (!o.layer_type.empty()) {
    const LayerTypeSpecs l = layer_type_specs_from_hf_config_file(*flags.get("config"));
    for (size_t i = 0; i < l.layer_types.size(); ++i)
      if (l.layer_types[i] == o.layer_type) o.layers.push_back(static_cast<int64_t>(i));
  }
  report_and_plot(o);
  return 0;
}

}  // namespace

ROTARY_CLI_COMMAND("report",
                   "rotary report [--preset NAME | --config FILE [--layer-type NAME]] [--out DIR] [--no-plots] [--quick]",
                   "a model's RoPE bands, decay, accuracy and speed on this machine, with plots (default preset "
                   "llama-3.1-8b, DIR out/report; a config with rope parameters per layer type: one report per "
                   "type in DIR/<type>)",
                   report_main, &kOptions);

}  // namespace rotary::cli::report
