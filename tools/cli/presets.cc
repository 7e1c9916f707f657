// `rotary presets`: lists the built-in model presets, or prints one preset's embedded config.json.
#include <algorithm>
#include <cstdio>
#include <string>

#include "cli.h"
#include "rotary/config.h"

namespace rotary::cli {
namespace {

constexpr const char* kUsage = "rotary presets [--show NAME]";

const Options kOptions = {
    {"show", "NAME", "print the preset's embedded config.json instead of the list", "none: list every preset"},
};

int run(const std::vector<std::string>& args) {
  Flags flags(args, kOptions);
  if (!flags.positional().empty()) throw UsageError("unexpected argument " + quote_value(flags.positional()[0]));
  if (auto name = flags.get("show")) {
    const std::vector<std::string> names = preset_names();
    if (std::find(names.begin(), names.end(), *name) == names.end()) {
      const std::string guess = did_you_mean(*name, names);
      throw UsageError("unknown preset " + quote_value(*name) + (guess.empty() ? "" : " (did you mean " + guess + "?)") +
                       "; `rotary presets` lists them");
    }
    std::fputs(preset_config_json(*name).c_str(), stdout);
    return 0;
  }
  for (const std::string& name : preset_names()) {
    const Spec s = preset(name);
    std::printf("%-16s %-12s D=%-4lld R=%-4lld %s\n", name.c_str(), rope_type_name(s.scaling.type),
                static_cast<long long>(s.head_dim), static_cast<long long>(s.rotary_dim),
                preset_description(name).c_str());
  }
  return 0;
}

}  // namespace

ROTARY_CLI_COMMAND("presets", kUsage, "list built-in model presets (--show NAME prints the embedded config.json)", run,
                   &kOptions);

}  // namespace rotary::cli
