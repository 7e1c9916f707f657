// Entry point of the `rotary` CLI: dispatches to registered subcommands and maps errors to exit codes.
#include <unistd.h>

#include <algorithm>
#include <charconv>
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

Flags::Flags(const std::vector<std::string>& args, const std::vector<std::string>& valued,
             const std::vector<std::string>& boolean) {
  auto is_in = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
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
      if (is_in(valued, name)) {
        if (!inline_value) {
          if (i + 1 >= args.size()) throw UsageError("--" + name + " needs a value");
          value = args[++i];
        }
        values_[name] = value;
      } else if (is_in(boolean, name)) {
        if (inline_value) throw UsageError("--" + name + " takes no value");
        values_[name] = "1";
      } else {
        throw UsageError("unknown option --" + name);
      }
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
    throw UsageError("--" + name + " must be an integer, got \"" + *v + "\"");
  return out;
}

Spec spec_from_flags(const Flags& flags, const std::string& default_preset) {
  bool has_config = flags.has("config"), has_preset = flags.has("preset");
  if (has_config && has_preset) throw UsageError("give either --config or --preset, not both");
  if (has_config) return spec_from_hf_config_file(*flags.get("config"));
  if (has_preset) return preset(*flags.get("preset"));
  if (!default_preset.empty()) return preset(default_preset);
  throw UsageError("one of --config FILE or --preset NAME is required");
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

void print_help() {
  std::printf("rotary %s - rotary position embeddings (RoPE)\n\nCommands:\n", ROTARY_VERSION_STRING);
  auto cmds = rotary::cli::registry();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return std::string(a.name) < b.name; });
  for (const auto& c : cmds) std::printf("  %-9s %s\n", c.name, c.summary);
  std::printf("\nRun `rotary COMMAND --help` for a command's usage.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    print_help();
    return argc < 2 ? 2 : 0;
  }
  if (std::string(argv[1]) == "--version") {
    std::printf("rotary %s\n", ROTARY_VERSION_STRING);
    return 0;
  }
  std::string name = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : rotary::cli::registry()) {
    if (name != c.name) continue;
    if (std::find(args.begin(), args.end(), "--help") != args.end()) {
      std::printf("usage: %s\n%s\n", c.usage, c.summary);
      return 0;
    }
    try {
      return c.run(args);
    } catch (const rotary::cli::UsageError& e) {
      std::fprintf(stderr, "rotary %s: %s\nusage: %s\n", c.name, e.what(), c.usage);
      return 2;
    } catch (const rotary::Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rotary_%s] internal error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "rotary: unknown command '%s'\n", name.c_str());
  print_help();
  return 2;
}
