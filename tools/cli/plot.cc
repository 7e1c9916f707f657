// `rotary plot DIR`: draws a report's PNGs with the Python plotter (rotary.report), also used by `rotary report`.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.h"
#include "plot.h"

extern char** environ;

namespace rotary::cli {
namespace {

/// Exit code python/rotary/report.py uses when matplotlib is missing.
constexpr int kNoMatplotlib = 3;

/// Runs argv (PATH lookup) and returns its exit status; 127 if it could not start. `quiet` discards its output.
int spawn_wait(const std::vector<std::string>& argv, bool quiet) {
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return 127;
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/// Where python/rotary/report.py is. `source_tree` selects the candidates that belong to a source checkout:
/// env ROTARY_SOURCE_DIR, then the tree this file was compiled from (CMake passes absolute paths, so __FILE__
/// is <src>/tools/cli/plot.cc). Otherwise: folders above the executable, then <prefix>/share/rotary.
std::string find_plot_script(bool source_tree) {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (source_tree) {
    if (const char* env = std::getenv("ROTARY_SOURCE_DIR"); env && *env)
      candidates.push_back(fs::path(env) / "python/rotary/report.py");
#ifdef ROTARY_SOURCE_DIR
    candidates.push_back(fs::path(ROTARY_SOURCE_DIR) / "python/rotary/report.py");
#endif
    const fs::path self(__FILE__);
    if (self.is_absolute())
      candidates.push_back(self.parent_path().parent_path().parent_path() / "python/rotary/report.py");
  } else {
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      fs::path d = exe.parent_path();
      for (int up = 0; up < 4 && !d.empty(); ++up, d = d.parent_path()) {
        candidates.push_back(d / "python/rotary/report.py");
        candidates.push_back(d / "share/rotary/report.py");
      }
    }
  }
  std::error_code ec;
  for (const auto& c : candidates)
    if (fs::is_regular_file(c, ec)) return c.string();
  return "";
}

const Options kOptions = {};

/// The folders DIR/<type>/ holding a report.json (a config with rope parameters per layer type), sorted.
std::vector<std::string> layer_type_reports(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (std::error_code e2; it->is_directory(e2) && fs::is_regular_file(it->path() / "report.json", e2))
      out.push_back(it->path().string());
  std::sort(out.begin(), out.end());
  return out;
}

int plot_one(const std::string& dir, std::string* note) {
  std::string python = "python3";
  if (const char* env = std::getenv("ROTARY_PYTHON"); env && *env) python = env;
  std::vector<std::string> argv;
  // The plotter of the source tree this CLI was built from (same version as the CLI); else the installed
  // package (python -m rotary.report); else a copy next to the executable. The script never imports the
  // compiled extension, so it runs from a plain checkout.
  if (std::string script = find_plot_script(true); !script.empty()) {
    argv = {python, script, dir};
  } else if (spawn_wait({python, "-c", "import rotary.report"}, true) == 0) {
    argv = {python, "-m", "rotary.report", dir};
  } else if (script = find_plot_script(false); !script.empty()) {
    argv = {python, script, dir};
  } else {
    *note = "the plotter python/rotary/report.py was not found (set ROTARY_SOURCE_DIR to the source tree, or "
            "install the rotary Python package)";
    return 2;
  }
  std::fflush(stdout);
  const int rc = spawn_wait(argv, false);
  if (rc == 0) return 0;
  if (rc == 127)
    *note = "no Python interpreter '" + python + "' (install python3, or set ROTARY_PYTHON)";
  else if (rc == kNoMatplotlib)
    *note = "matplotlib is not installed for " + python + " (pip install 'rotary[plots]' or pip install matplotlib; or set ROTARY_PYTHON to a Python that has it)";
  else
    *note = "the plotter failed (" + argv[0] + " " + argv[1] + (argv.size() > 3 ? " " + argv[2] : "") +
            " exited with status " + std::to_string(rc) + ")";
  return rc;
}

int plot_main(const std::vector<std::string>& args) {
  Flags flags(args, kOptions);
  if (flags.positional().size() != 1) throw UsageError("expected exactly one report directory");
  std::string note;
  const int rc = run_plotter(flags.positional()[0], &note);
  if (rc != 0) {
    std::fprintf(stderr, "rotary plot: %s\n", note.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int run_plotter(const std::string& dir, std::string* note) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(std::filesystem::path(dir) / "report.json", ec)) return plot_one(dir, note);
  const std::vector<std::string> types = layer_type_reports(dir);
  if (types.empty()) {
    *note = dir + "/report.json not found (run `rotary report --out " + dir + "` first)";
    return 2;
  }
  for (const std::string& d : types) {  // one report per layer type, as `rotary report` writes them
    std::printf("plots of %s:\n", d.c_str());
    if (const int rc = plot_one(d, note); rc != 0) return rc;
  }
  return 0;
}

ROTARY_CLI_COMMAND("plot", "rotary plot DIR",
                   "draw the PNGs of a `rotary report` directory, or of each DIR/<layer type>/ one (needs Python "
                   "with matplotlib; ROTARY_PYTHON)",
                   plot_main, &kOptions);

}  // namespace rotary::cli
