// CLI conventions: -h/--help and --version on every subcommand, option help with defaults, did-you-mean, exit codes 0/1/2, docs/cli.md coverage.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "rotary/version.h"
#include "testing/shared.h"

namespace rotary {
namespace {

class CliConventions : public ::testing::Test {
 protected:
  void SetUp() override {
    cli_ = testing::cli_path();
    if (cli_.empty() || !std::filesystem::exists(cli_)) GTEST_SKIP() << "rotary CLI not built";
  }
  /// Runs `rotary ARGS`: exit status, stdout in *out, stderr in *err.
  int run(const std::string& args, std::string* out, std::string* err = nullptr) const {
    const std::string err_file = (std::filesystem::temp_directory_path() /
                                  ("rotary_cli_conv_" + std::to_string(::getpid()) + ".err")).string();
    const int rc = testing::run_command("'" + cli_ + "' " + args + " 2>'" + err_file + "'", out);
    if (err) *err = testing::read_file(err_file);
    std::filesystem::remove(err_file);
    return rc;
  }
  /// The subcommands listed by `rotary --help`.
  std::vector<std::string> commands() const {
    std::string out;
    EXPECT_EQ(run("--help", &out), 0);
    std::vector<std::string> names;
    std::istringstream in(out.substr(out.find("commands:")));
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line) && line.rfind("  ", 0) == 0) names.push_back(line.substr(2, line.find(' ', 2) - 2));
    return names;
  }
  /// The --options of a command's help.
  std::vector<std::string> options(const std::string& help) const {
    std::vector<std::string> names;
    std::regex option_line(R"(^  (--[a-z0-9-]+))");
    std::istringstream in(help);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_search(line, m, option_line)) names.push_back(m[1]);
    }
    return names;
  }
  std::string cli_;
};

TEST_F(CliConventions, HelpOnEveryCommandDescribesEveryOptionWithItsDefault) {
  const auto names = commands();
  ASSERT_GE(names.size(), 6u);
  for (const std::string& c : names) {
    SCOPED_TRACE(c);
    for (const char* flag : {"-h", "--help"}) {
      std::string out, err;
      ASSERT_EQ(run(c + " " + flag, &out, &err), 0) << err;
      EXPECT_EQ(out.rfind("usage: rotary " + c, 0), 0u) << out;
      // `check` exits 1 when the data disagrees (docs/cli.md), and says so.
      EXPECT_NE(out.find(c == "check" ? "exit status: 0 the data agrees with the config, 1 it disagrees, 2 usage or input error"
                                      : "exit status: 0 success, 1 runtime failure, 2 usage error"),
                std::string::npos)
          << out;
      std::istringstream in(out);
      for (std::string line; std::getline(in, line);)
        if (line.rfind("  --", 0) == 0 && line.find("--help") == std::string::npos &&
            line.find("--version") == std::string::npos)
          EXPECT_NE(line.find("(default: "), std::string::npos) << "option without a default: " << line;
    }
    std::string out;
    EXPECT_EQ(run("help " + c, &out), 0);
  }
}

TEST_F(CliConventions, UsageLineListsTheChoicesTheOptionTableAccepts) {
  // `rotary apply`'s usage once listed --backend auto|cpu|reference while the option accepted cuda too.
  const std::regex choice(R"((--[a-z0-9-]+) ([A-Za-z0-9_.-]+(\|[A-Za-z0-9_.-]+)+))");
  for (const std::string& c : commands()) {
    std::string out;
    ASSERT_EQ(run(c + " --help", &out), 0) << c;
    const size_t split = out.find("\n\n");
    std::map<std::string, std::string> table;
    std::istringstream in(out.substr(split));
    std::smatch m;
    for (std::string line; std::getline(in, line);)
      if (line.rfind("  --", 0) == 0 && std::regex_search(line, m, choice) && m.position(0) == 2) table[m[1]] = m[2];
    // Every choice the table accepts appears where the usage names the option (bench's two forms: the union).
    const std::string usage = out.substr(0, split);
    std::map<std::string, std::string> named;
    for (auto it = std::sregex_iterator(usage.begin(), usage.end(), choice); it != std::sregex_iterator(); ++it)
      named[(*it)[1]] += "|" + (*it)[2].str() + "|";
    for (const auto& [opt, choices] : named) {
      auto t = table.find(opt);
      if (t == table.end()) continue;
      std::istringstream each(t->second);
      for (std::string one; std::getline(each, one, '|');)
        EXPECT_NE(choices.find("|" + one + "|"), std::string::npos) << c << " usage: " << opt << " lacks " << one;
    }
  }
}

TEST_F(CliConventions, VersionEverywhere) {
  std::string out;
  ASSERT_EQ(run("--version", &out), 0);
  EXPECT_EQ(out, std::string("rotary ") + ROTARY_VERSION_STRING + "\n");
  for (const std::string& c : commands()) {
    ASSERT_EQ(run(c + " --version", &out), 0) << c;
    EXPECT_EQ(out, std::string("rotary ") + ROTARY_VERSION_STRING + "\n") << c;
  }
}

TEST_F(CliConventions, TyposGetASuggestionAndExitTwo) {
  std::string out, err;
  EXPECT_EQ(run("freq --preset llama-2-7b", &out, &err), 2);
  EXPECT_NE(err.find("unknown command 'freq' (did you mean 'freqs'?)"), std::string::npos) << err;
  EXPECT_EQ(out, "");
  EXPECT_EQ(run("reprot", &out, &err), 2);
  EXPECT_NE(err.find("did you mean 'report'?"), std::string::npos) << err;
  EXPECT_EQ(run("freqs --presett llama-2-7b", &out, &err), 2);
  EXPECT_NE(err.find("unknown option --presett (did you mean --preset?)"), std::string::npos) << err;
  EXPECT_EQ(run("bench --jsn", &out, &err), 2);
  EXPECT_NE(err.find("did you mean --json?"), std::string::npos) << err;
  EXPECT_EQ(run("apply --inverted", &out, &err), 2);
  EXPECT_NE(err.find("did you mean --inverse?"), std::string::npos) << err;
  EXPECT_EQ(run("freqs --preset llama-3.1-8", &out, &err), 2);
  EXPECT_NE(err.find("unknown preset \"llama-3.1-8\" (did you mean llama-3.1-8b?)"), std::string::npos) << err;
  EXPECT_EQ(run("freqs --frobnicate", &out, &err), 2);
  EXPECT_EQ(err.find("did you mean"), std::string::npos) << "no suggestion for a word that is not close: " << err;
  EXPECT_NE(err.find("Run `rotary freqs --help`"), std::string::npos) << err;
}

TEST_F(CliConventions, EmptyValuesAndRepeatedOptionsAreUsageErrors) {
  // `--preset=` used to report that no --config or --preset was given, and a repeated option silently kept the
  // last value; freqs took a --seq-len of 0 that apply refuses.
  std::string out, err;
  const std::pair<std::string, std::string> cases[] = {
      {"freqs --preset=", "--preset needs a value (NAME), got an empty one"},
      {"freqs --preset ''", "--preset needs a value (NAME), got an empty one"},
      {"freqs --preset llama-2-7b --seq-len 4096 --seq-len 8192", "--seq-len is given twice (4096 and 8192)"},
      {"freqs --preset llama-2-7b --json --json", "--json is given twice"},
      {"freqs --preset llama-2-7b --seq-len 0", "--seq-len must be in [1, 2^31], got 0"},
      // Past the range a usage error too, naming the option (they were exit 1, "[rotary_freqs] seq_len ...").
      {"freqs --preset llama-2-7b --seq-len 9223372036854775807", "--seq-len must be in [1, 2^31], got 9223372036854775807"},
  };
  for (const auto& [args, message] : cases) {
    SCOPED_TRACE(args);
    EXPECT_EQ(run(args, &out, &err), 2);
    EXPECT_NE(err.find("rotary freqs: " + message), std::string::npos) << err;
    EXPECT_EQ(out, "");
  }
}

TEST_F(CliConventions, OutOfRangeOptionValuesAreUsageErrorsNamingTheOption) {
  // `export --max-pos 4194305` was exit 1 with "[rotary_export] positions must be in ...", a field the user did not type.
  std::string out, err;
  const std::pair<std::string, std::string> cases[] = {
      {"export --preset llama-2-7b --layout hf --out /nonexistent/t.npz --max-pos 4194305", "rotary export: --max-pos must be in [1, 4194304], got 4194305"},
      {"export --preset llama-2-7b --layout hf --out /nonexistent/t.npz --max-pos 0", "rotary export: --max-pos must be in [1, 4194304], got 0"},
      {"apply --preset llama-2-7b --input /nonexistent/q.npy --positions /nonexistent/p.npy --output /nonexistent/o.npy --seq-len 2147483649", "rotary apply: --seq-len must be in [1, 2^31], got 2147483649"},
  };
  for (const auto& [args, message] : cases) {
    SCOPED_TRACE(args);
    EXPECT_EQ(run(args, &out, &err), 2);
    EXPECT_NE(err.find(message), std::string::npos) << err;
  }
}

TEST_F(CliConventions, ExitCodesSeparateUsageErrorsFromRuntimeFailures) {
  std::string out, err;
  EXPECT_EQ(run("", &out, &err), 2);                                  // no command
  EXPECT_EQ(run("freqs", &out, &err), 2);                             // missing --config/--preset
  EXPECT_EQ(run("freqs --preset llama-2-7b --seq-len", &out, &err), 2);  // missing value
  EXPECT_EQ(run("freqs --preset llama-2-7b --seq-len ten", &out, &err), 2);
  EXPECT_EQ(run("freqs --preset llama-2-7b --json=yes", &out, &err), 2);
  EXPECT_EQ(run("freqs --preset llama-2-7b -j", &out, &err), 2);
  EXPECT_EQ(run("bench --case P3", &out, &err), 2);
  EXPECT_EQ(run("freqs --config /nonexistent/config.json", &out, &err), 1);  // runtime: the file
  EXPECT_NE(err.find("/nonexistent/config.json"), std::string::npos) << err;
  EXPECT_EQ(run("plot /nonexistent-report-dir", &out, &err), 1);
  EXPECT_EQ(run("freqs --preset llama-2-7b --json", &out, &err), 0);
}

TEST_F(CliConventions, DocsDescribeEveryCommandOptionAndExitCode) {
  const std::string doc = testing::read_file(std::string(ROTARY_SOURCE_DIR) + "/docs/cli.md");
  ASSERT_FALSE(doc.empty());
  for (const char* code : {"| 0 |", "| 1 |", "| 2 |"}) EXPECT_NE(doc.find(code), std::string::npos) << code;
  for (const std::string& c : commands()) {
    EXPECT_NE(doc.find("### `rotary " + c), std::string::npos) << "docs/cli.md has no section for " << c;
    std::string out;
    ASSERT_EQ(run(c + " --help", &out), 0);
    const size_t section = doc.find("### `rotary " + c);
    const size_t end = doc.find("\n### ", section + 1);
    const std::string text = doc.substr(section, end == std::string::npos ? std::string::npos : end - section);
    for (const std::string& o : options(out))
      if (o != "--help" && o != "--version")
        EXPECT_NE(text.find("`" + o), std::string::npos) << "docs/cli.md: `rotary " << c << "` lacks " << o;
  }
}

}  // namespace
}  // namespace rotary
