// Drawing a report's figures with the Python plotter (python/rotary/report.py), for `rotary plot` and `rotary report`.
#pragma once

#include <string>

namespace rotary::cli {

/// Draws the report's PNGs from DIR with the Python plotter (docs/report.md says which one is run).
/// Returns 0 when the figures were written; otherwise a non-zero code and a one-line `note` saying why.
int run_plotter(const std::string& dir, std::string* note);

}  // namespace rotary::cli
