// `rotary freqs`: prints a spec's inverse frequencies and attention factor (JSON or a readable table).
#include <cmath>
#include <cstdio>
#include <numbers>
#include <string>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "rotary/freqs.h"

namespace rotary::cli {
namespace {

constexpr const char* kUsage =
    "rotary freqs (--config FILE [--layer-type NAME] | --preset NAME) [--seq-len N] [--json]";

/// One line: the spec's rope_type, dims and base, then inv_freq and attention_factor (fields: docs/cli.md).
void print_json(const Spec& spec, const Frequencies& f) {
  nlohmann::ordered_json j;
  j["rope_type"] = rope_type_name(spec.scaling.type);
  j["head_dim"] = spec.head_dim;
  j["rotary_dim"] = spec.rotary_dim;
  j["base"] = spec.base;
  j["inv_freq"] = f.inv_freq;
  j["attention_factor"] = f.attention_factor;
  std::printf("%s\n", j.dump().c_str());
}

void print_table(const Spec& spec, const Frequencies& f, std::optional<int64_t> seq_len) {
  std::printf("spec        %s\n", spec.name.c_str());
  std::printf("rope_type   %s\n", rope_type_name(spec.scaling.type));
  std::printf("head_dim    %lld   rotary_dim %lld   pairing %s\n", static_cast<long long>(spec.head_dim),
              static_cast<long long>(spec.rotary_dim), pairing_name(spec.pairing));
  std::printf("base        %s\n", format_double(spec.base).c_str());
  const Scaling& sc = spec.scaling;
  if (sc.type != RopeType::kDefault) {
    std::string line = "scaling    ";
    if (sc.factor) line += " factor " + format_double(*sc.factor);
    if (sc.original_max_position_embeddings > 0 &&
        (sc.type == RopeType::kYarn || sc.type == RopeType::kLongRope || sc.type == RopeType::kLlama3))
      line += " original_max " + std::to_string(sc.original_max_position_embeddings);
    if (sc.type == RopeType::kYarn) {
      line += " beta_fast " + format_double(sc.beta_fast) + " beta_slow " + format_double(sc.beta_slow);
      if (sc.mscale) line += " mscale " + format_double(*sc.mscale);
      if (sc.mscale_all_dim) line += " mscale_all_dim " + format_double(*sc.mscale_all_dim);
      line += sc.truncate ? " truncate" : " no-truncate";
    }
    if (sc.type == RopeType::kLlama3)
      line += " low_freq_factor " + format_double(sc.low_freq_factor) + " high_freq_factor " +
              format_double(sc.high_freq_factor);
    if (sc.type == RopeType::kProportional) line += " partial_rotary_factor " + format_double(spec.partial_rotary_factor);
    if (sc.type == RopeType::kDynamic && sc.alpha) line += " alpha " + format_double(*sc.alpha);
    if (sc.type == RopeType::kNtk && sc.mixed_b) line += " mixed_b " + format_double(*sc.mixed_b);
    std::printf("%s\n", line.c_str());
  }
  if (spec.max_position_embeddings > 0)
    std::printf("max_pos     %lld\n", static_cast<long long>(spec.max_position_embeddings));
  if (spec.length_dependent())
    std::printf("seq_len     %s\n", seq_len ? std::to_string(*seq_len).c_str() : "(none)");
  if (spec.mrope.enabled())
    std::printf("mrope       [%lld, %lld, %lld]%s\n", static_cast<long long>(spec.mrope.section[0]),
                static_cast<long long>(spec.mrope.section[1]), static_cast<long long>(spec.mrope.section[2]),
                spec.mrope.interleaved ? " interleaved" : "");
  std::printf("attention_factor %s\n\n", format_double(f.attention_factor).c_str());

  // The unscaled reference: base^(-2i/R) (proportional uses the head_dim denominator).
  const int64_t denom = spec.scaling.type == RopeType::kProportional ? spec.head_dim : spec.rotary_dim;
  std::printf("%5s  %-24s  %-16s  %s\n", "i", "theta_i", "wavelength", "theta_i / default");
  for (size_t i = 0; i < f.inv_freq.size(); ++i) {
    const double theta = f.inv_freq[i];
    const double unscaled = std::pow(spec.base, -static_cast<double>(2 * i) / static_cast<double>(denom));
    const double ratio = theta / unscaled;
    char wavelength[32];
    if (theta > 0)
      std::snprintf(wavelength, sizeof wavelength, "%.6g", 2.0 * std::numbers::pi / theta);
    else
      std::snprintf(wavelength, sizeof wavelength, "inf (no rotation)");
    std::string change = "unchanged";
    if (ratio == 0) {
      change = "zeroed (pass-through)";
    } else if (std::fabs(ratio - 1.0) >= 1e-12) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "x %.6g (= 1/%.6g)", ratio, 1.0 / ratio);
      change = buf;
    }
    std::printf("%5zu  %-24s  %-16s  %s\n", i, format_double(theta).c_str(), wavelength, change.c_str());
  }
}

const Options kOptions = {
    config_option(),
    layer_type_option(),
    preset_option(),
    {"seq-len", "N", "the sequence length that length-dependent scaling (dynamic, longrope) sees", "none: the "
     "config's own length"},
    {"json", nullptr, "print one JSON line (fields: docs/cli.md) instead of a table", "off"},
};

int run(const std::vector<std::string>& args) {
  Flags flags(args, kOptions);
  if (!flags.positional().empty()) throw UsageError("unexpected argument " + quote_value(flags.positional()[0]));
  const Spec spec = spec_from_flags(flags).normalized();
  std::optional<int64_t> seq_len;
  if (auto n = flags.get_count("seq-len", 1LL << 31, "2^31")) seq_len = *n;  // positions are < 2^31
  const Frequencies f = compute_frequencies(spec, seq_len);
  if (flags.has("json"))
    print_json(spec, f);
  else
    print_table(spec, f, seq_len);
  return 0;
}

}  // namespace

ROTARY_CLI_COMMAND("freqs", kUsage, "inverse frequencies theta_i and attention factor of a config or preset", run,
                   &kOptions);

}  // namespace rotary::cli
