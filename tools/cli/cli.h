// Shared plumbing for `rotary` subcommands: registration, option tables and their parser, help, exit codes.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "atomic_file.h"
#include "rotary/spec.h"
#include "rotary/types.h"

namespace rotary::cli {

/// A text output file written atomically: stream into it, then commit() writes it through io::AtomicFile
/// (temporary file in the same folder, fsync, rename). Until commit() succeeds, and on any failure (full disk,
/// file-size limit), the file at `path` keeps its old contents; commit() throws Error(kIo) naming the path.
class TextFile : public std::ostringstream {
 public:
  explicit TextFile(std::filesystem::path path) : path_(std::move(path)) {}
  void commit() { io::write_file_atomic(path_.string(), str()); }

 private:
  std::filesystem::path path_;
};

/// Exit codes of every subcommand (docs/cli.md): 0 success, 1 runtime failure (bad input file or data, I/O,
/// an internal error), 2 usage error (unknown command or option, missing or malformed option value).
inline constexpr int kExitOk = 0, kExitFailure = 1, kExitUsage = 2;

/// One option of a subcommand: `--name VALUE` (metavar set) or the boolean flag `--name` (metavar null).
/// The same table parses the command line (Flags) and prints `rotary NAME --help`.
struct Option {
  const char* name;      ///< without the leading "--"
  const char* metavar;   ///< e.g. "FILE"; nullptr for a boolean flag
  const char* help;      ///< what it does, one sentence
  const char* fallback;  ///< the default, as shown by --help ("off" for flags, "none" when unset)
};
using Options = std::vector<Option>;

/// A subcommand: `rotary NAME args...`. run() returns the process exit code.
struct Command {
  const char* name;
  const char* usage;    ///< one line, e.g. "rotary freqs (--config FILE | --preset NAME) [--seq-len N] [--json]"
  const char* summary;  ///< one line for `rotary --help`
  int (*run)(const std::vector<std::string>& args);
  const Options* options;  ///< the command's option table (the one its run() parses with)
  const char* exit_codes = nullptr;  ///< its help's "exit status: ..." line where it differs from every other command's
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

/// Flags of the form --name VALUE, --name=VALUE or --name (boolean), from an option table. Unknown options
/// are a UsageError that suggests the closest known one.
class Flags {
 public:
  Flags(const std::vector<std::string>& args, const Options& options);
  bool has(const std::string& name) const;
  std::optional<std::string> get(const std::string& name) const;
  std::string require(const std::string& name) const;
  std::optional<long long> get_int(const std::string& name) const;  ///< UsageError if not an integer
  /// get_int within [1, max]: UsageError "--NAME must be in [1, MAX_TEXT], got N" outside it.
  std::optional<long long> get_count(const std::string& name, long long max, const std::string& max_text) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

/// A flag's value read by one of the core's name parsers (rotary::parse_layout, parse_pairing, ...): a bad
/// value is a UsageError naming the flag, e.g. `--layout must be bshd, bhsd or thd, got "bsdh"`.
template <class T>
T parse_flag(T (*parse)(std::string_view, const char*, const char*), const std::string& value, const char* flag) {
  try {
    return parse(value, flag, "rotary");
  } catch (const Error& e) {
    const std::string msg = e.what();
    const size_t end = msg.rfind("] ", msg.find(' '));  // drop the "[where] " prefix
    throw UsageError(end == std::string::npos ? msg : msg.substr(end + 2));
  }
}

/// The closest of `candidates` to `word` by edit distance, if close enough to be a likely typo ("" otherwise).
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

/// A user token shown bare in a message (option names): itself when short, else cut after a few dozen
/// characters with its size appended, like rotary::quote_value (messages stay short whatever argv holds).
inline std::string cut_for_message(const std::string& token) {
  if (token.size() <= 48) return token;
  return token.substr(0, 48) + "... (" + std::to_string(token.size()) + " bytes)";
}

/// The --config/--preset options of the commands that take a spec (`default_preset` is shown as the default).
Option config_option();
Option preset_option(const char* fallback = "none");
Option layer_type_option();

/// --config FILE | --preset NAME (exactly one; neither: `default_preset` if non-empty, else UsageError).
/// An unknown preset name is a UsageError with a suggestion. --layer-type NAME (with --config, for commands whose
/// table has layer_type_option()) picks one layer type's Spec of a config whose rope parameters differ per layer
/// type (rotary::LayerTypeSpecs).
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
/// ROTARY_CLI_COMMAND(name, usage, summary, run, &options): registers a subcommand.
#define ROTARY_CLI_COMMAND(...) \
  static ::rotary::cli::Registrar ROTARY_CLI_CONCAT(rotary_cli_registrar_, __LINE__)(::rotary::cli::Command{__VA_ARGS__})
