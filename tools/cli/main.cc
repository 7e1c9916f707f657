// Entry point of the `rotary` CLI: dispatches to registered subcommands and maps errors to exit codes.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "cli.h"
#include "rotary/config.h"
#include "rotary/types.h"
#include "rotary/version.h"

namespace rotary::cli {

std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

Registrar::Registrar(Command c) { registry().push_back(c); }

Flags::Flags(const std::vector<std::string>& args, const Options& options) {
  auto find = [&](const std::string& name) -> const Option* {
    for (const Option& o : options)
      if (name == o.name) return &o;
    return nullptr;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) == 0 && a.size() > 2) {
      std::string name = a.substr(2), value;
      bool inline_value = false;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        inline_value = true;
      }
      const Option* o = find(name);
      if (!o) {
        std::vector<std::string> known;
        for (const Option& k : options) known.push_back(std::string("--") + k.name);
        const std::string guess = did_you_mean("--" + name, known);
        throw UsageError("unknown option --" + cut_for_message(name) + (guess.empty() ? "" : " (did you mean " + guess + "?)"));
      }
      if (o->metavar) {
        if (!inline_value) {
          if (i + 1 >= args.size()) throw UsageError("--" + name + " needs a value (" + o->metavar + ")");
          value = args[++i];
        }
        if (value.empty()) throw UsageError("--" + name + " needs a value (" + o->metavar + "), got an empty one");
      } else {
        if (inline_value) throw UsageError("--" + name + " takes no value");
        value = "1";
      }
      // Each option once: a second --seq-len (a pasted command, a script's default and its override) would
      // otherwise silently win or lose.
      if (auto it = values_.find(name); it != values_.end())
        throw UsageError("--" + name + " is given twice" +
                         (o->metavar ? " (" + cut_for_message(it->second) + " and " + cut_for_message(value) + ")" : ""));
      values_[name] = value;
    } else if (a.size() > 1 && a[0] == '-' && !(a[1] >= '0' && a[1] <= '9')) {
      throw UsageError("unknown option " + cut_for_message(a) + " (options are spelled --name; -h is help)");
    } else {
      positional_.push_back(a);
    }
  }
}

bool Flags::has(const std::string& name) const { return values_.count(name) != 0; }

std::optional<std::string> Flags::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Flags::require(const std::string& name) const {
  auto v = get(name);
  if (!v) throw UsageError("--" + name + " is required");
  return *v;
}

std::optional<long long> Flags::get_int(const std::string& name) const {
  auto v = get(name);
  if (!v) return std::nullopt;
  long long out = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || p != v->data() + v->size())
    throw UsageError("--" + name + " must be an integer, got " + quote_value(*v));
  return out;
}

std::optional<long long> Flags::get_count(const std::string& name, long long max, const std::string& max_text) const {
  const auto n = get_int(name);
  if (n && (*n < 1 || *n > max))
    throw UsageError("--" + name + " must be in [1, " + max_text + "], got " + std::to_string(*n));
  return n;
}

Option config_option() {
  return {"config", "FILE", "a Hugging Face config.json (v4 rope_scaling or v5 rope_parameters) to read the RoPE from", "none"};
}

Option preset_option(const char* fallback) {
  return {"preset", "NAME", "a built-in model preset (`rotary presets` lists them)", fallback};
}

Option layer_type_option() {
  return {"layer-type", "NAME",
          "with --config: the layer type whose RoPE to use, for configs with rope parameters per layer type "
          "(e.g. Gemma 3's sliding_attention)",
          "none"};
}

Spec spec_from_flags(const Flags& flags, const std::string& default_preset) {
  bool has_config = flags.has("config"), has_preset = flags.has("preset");
  if (has_config && has_preset) throw UsageError("give either --config or --preset, not both");
  if (auto layer_type = flags.get("layer-type")) {
    if (!has_config) throw UsageError("--layer-type needs --config (a config with rope parameters per layer type)");
    const LayerTypeSpecs specs = layer_type_specs_from_hf_config_file(*flags.get("config"));
    if (specs.by_type.size() == 1 && specs.by_type[0].layer_type.empty())  // its one entry answers every name
      throw Error(Error::Kind::kInvalidArgument,  // a config error (exit 1), as an unknown type of a typed config
                  "[rotary_config] layer_type " + quote_value(*layer_type) + " is not in the config, which has no "
                  "layer_types (one RoPE for every layer): leave --layer-type out");
    return specs.spec_for(*layer_type);
  }
  if (has_config) return spec_from_hf_config_file(*flags.get("config"));
  const std::string name = has_preset ? *flags.get("preset") : default_preset;
  if (name.empty()) throw UsageError("one of --config FILE or --preset NAME is required");
  const std::vector<std::string> names = preset_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    const std::string guess = did_you_mean(name, names);
    throw UsageError("unknown preset " + quote_value(name) + (guess.empty() ? "" : " (did you mean " + guess + "?)") +
                     "; `rotary presets` lists them");
  }
  return preset(name);
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  // Levenshtein distance; a candidate within a third of the word's length (at least 2 edits allowed for
  // short words) counts as a likely typo, as does one that the word is a prefix of.
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    const size_t d = c.rfind(word, 0) == 0 && word.size() >= 3 ? 1 : distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

Progress::Progress(std::string label, long long total)
    : label_(std::move(label)), total_(total), tty_(isatty(STDERR_FILENO) != 0) {}

void Progress::step(long long done) {
  if (!tty_) return;
  std::fprintf(stderr, "\r[%s] %lld/%lld", label_.c_str(), done, total_);
  std::fflush(stderr);
}

void Progress::done() {
  if (!tty_) return;
  std::fprintf(stderr, "\r[%s] %lld/%lld done\n", label_.c_str(), total_, total_);
}

std::string format_double(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, p);
}

}  // namespace rotary::cli

namespace {

using rotary::cli::Command;

constexpr const char* kExitCodes = "exit status: 0 success, 1 runtime failure, 2 usage error";

std::vector<Command> sorted_commands() {
  auto cmds = rotary::cli::registry();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return std::string(a.name) < b.name; });
  return cmds;
}

void print_help(FILE* out) {
  std::fprintf(out, "rotary %s - rotary position embeddings (RoPE)\n\nusage: rotary COMMAND [OPTIONS]\n\ncommands:\n",
               ROTARY_VERSION_STRING);
  for (const auto& c : sorted_commands()) std::fprintf(out, "  %-9s %s\n", c.name, c.summary);
  std::fprintf(out,
               "\noptions:\n  -h, --help  show this help and exit\n  --version   print the version and exit\n\n"
               "Run `rotary COMMAND --help` for a command's options.\n%s\n",
               kExitCodes);
}

void print_command_help(const Command& c) {
  std::printf("usage: %s\n\n%s\n\noptions:\n", c.usage, c.summary);
  std::vector<std::pair<std::string, std::string>> rows;
  static const rotary::cli::Options kNone;
  for (const auto& o : c.options ? *c.options : kNone) {
    std::string left = std::string("--") + o.name + (o.metavar ? std::string(" ") + o.metavar : "");
    std::string right = std::string(o.help) + " (default: " + (o.fallback ? o.fallback : "none") + ")";
    rows.emplace_back(left, right);
  }
  rows.emplace_back("-h, --help", "show this help and exit");
  rows.emplace_back("--version", "print the version and exit");
  size_t width = 0;
  for (const auto& r : rows) width = std::max(width, r.first.size());
  for (const auto& r : rows) std::printf("  %-*s  %s\n", static_cast<int>(width), r.first.c_str(), r.second.c_str());
  std::printf("\n%s\n", c.exit_codes != nullptr ? c.exit_codes : kExitCodes);
}

bool is_help(const std::string& a) { return a == "-h" || a == "--help"; }

}  // namespace

int main(int argc, char** argv) {
  using namespace rotary::cli;
  // Past a file-size limit, write() then fails with EFBIG and the output is abandoned cleanly (the old
  // file stays, the temporary one is removed) instead of the process being killed mid-write.
  std::signal(SIGXFSZ, SIG_IGN);
  if (argc < 2) {
    print_help(stderr);
    return kExitUsage;
  }
  const std::string first = argv[1];
  if (is_help(first)) {
    print_help(stdout);
    return kExitOk;
  }
  if (first == "--version") {
    std::printf("rotary %s\n", ROTARY_VERSION_STRING);
    return kExitOk;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  std::string name = first;
  if (name == "help") {  // `rotary help [COMMAND]`
    if (args.empty()) {
      print_help(stdout);
      return kExitOk;
    }
    name = args[0];
    args = {"--help"};
  }
  std::vector<std::string> names;
  for (const auto& c : registry()) {
    names.push_back(c.name);
    if (name != c.name) continue;
    // -h/--help and --version anywhere before a `--` win over everything else, as in most CLIs.
    for (const auto& a : args) {
      if (a == "--") break;
      if (is_help(a)) {
        print_command_help(c);
        return kExitOk;
      }
      if (a == "--version") {
        std::printf("rotary %s\n", ROTARY_VERSION_STRING);
        return kExitOk;
      }
    }
    try {
      return c.run(args);
    } catch (const UsageError& e) {
      std::fprintf(stderr, "rotary %s: %s\nusage: %s\nRun `rotary %s --help` for the options.\n", c.name, e.what(),
                   c.usage, c.name);
      return kExitUsage;
    } catch (const rotary::Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return kExitFailure;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rotary_%s] internal error: %s\n", c.name, e.what());
      return kExitFailure;
    }
  }
  const std::string guess = did_you_mean(name, names);
  std::fprintf(stderr, "rotary: unknown command '%s'%s\nRun `rotary --help` for the commands.\n", cut_for_message(name).c_str(),
               guess.empty() ? "" : (" (did you mean '" + guess + "'?)").c_str());
  return kExitUsage;
}
