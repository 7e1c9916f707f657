// Shared plumbing for `rotary` subcommands: registration, a small flag parser, error-to-exit-code mapping.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rotary/spec.h"
#include "rotary/types.h"

namespace rotary::cli {

/// A subcommand: `rotary NAME args...`. run() returns the process exit code.
struct Command {
  const char* name;
  const char* usage;    ///< one line, e.g. "rotary freqs (--config FILE | --preset NAME) [--seq-len N] [--json]"
  const char* summary;  ///< one line for `rotary --help`
  int (*run)(const std::vector<std::string>& args);
};

/// Registers a command at static-initialisation time (one .cc file per command).
struct Registrar {
  explicit Registrar(Command c);
};
std::vector<Command>& registry();

/// Exception for command-line misuse: main prints "rotary NAME: message" + usage, exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Flags of the form --name VALUE or --name (boolean). Unknown flags are a UsageError.
class Flags {
 public:
  /// `valued`: flags that take a value; `boolean`: flags that do not.
  Flags(const std::vector<std::string>& args, const std::vector<std::string>& valued,
        const std::vector<std::string>& boolean);
  bool has(const std::string& name) const;
  std::optional<std::string> get(const std::string& name) const;
  std::string require(const std::string& name) const;
  std::optional<long long> get_int(const std::string& name) const;  ///< UsageError if not an integer
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

/// A flag's value read by one of the core's name parsers (rotary::parse_layout, parse_pairing, ...): a bad
/// value is a UsageError naming the flag, e.g. `--layout must be bshd, bhsd or thd, got "bsdh"`.
template <class T>
T parse_flag(T (*parse)(std::string_view, const char*), const std::string& value, const char* flag) {
  try {
    return parse(value, flag);
  } catch (const Error& e) {
    const std::string msg = e.what();
    const size_t end = msg.rfind("] ", msg.find(' '));  // drop the "[where] " prefix
    throw UsageError(end == std::string::npos ? msg : msg.substr(end + 2));
  }
}

/// --config FILE | --preset NAME (exactly one; neither: `default_preset` if non-empty, else UsageError).
Spec spec_from_flags(const Flags& flags, const std::string& default_preset = "");

/// Prints a progress line to stderr ("\r[label] i/n") only when stderr is a terminal.
class Progress {
 public:
  Progress(std::string label, long long total);
  void step(long long done);
  void done();

 private:
  std::string label_;
  long long total_;
  bool tty_;
};

/// Formats a double so that it parses back to the same value (shortest round-trip).
std::string format_double(double v);

}  // namespace rotary::cli

#define ROTARY_CLI_CONCAT2(a, b) a##b
#define ROTARY_CLI_CONCAT(a, b) ROTARY_CLI_CONCAT2(a, b)
#define ROTARY_CLI_COMMAND(...) \
  static ::rotary::cli::Registrar ROTARY_CLI_CONCAT(rotary_cli_registrar_, __LINE__)(::rotary::cli::Command{__VA_ARGS__})
