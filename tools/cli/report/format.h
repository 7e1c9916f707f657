// Formatting shared by the report's parts: numbers for the console, CSV cells and labels; the JSON type.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace rotary::cli::report {

/// report.json and its sections (keys in the order written).
using Json = nlohmann::ordered_json;

/// printf of one double with `format`, e.g. fmt("%.4g", x).
inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

/// A CSV cell: 10 significant digits, "inf" / "-inf" / "nan" spelled out.
inline std::string csv_num(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  return fmt("%.10g", v);
}

/// A wavelength in tokens for the console ("inf" for a zero frequency).
inline std::string wavelength_text(double w) { return std::isfinite(w) ? fmt("%.6g", w) : std::string("inf"); }

}  // namespace rotary::cli::report
