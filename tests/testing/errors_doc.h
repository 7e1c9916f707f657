// Test helpers shared by the hostile-input batteries: rows for docs/errors.md and its markdown escaping.
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>

namespace rotary::testing {

/// When ROTARY_ERRORS_DOC names a file, appends "boundary<TAB>case<TAB>kind<TAB>message" rows to it
/// (scripts/gen_errors_doc.py turns them into docs/errors.md).
inline void doc_row(const char* boundary, const std::string& name, const std::string& kind, const std::string& msg) {
  const char* path = std::getenv("ROTARY_ERRORS_DOC");
  if (path == nullptr || *path == '\0') return;
  std::ofstream f(path, std::ios::app);
  std::string m = msg;
  for (char& c : m)
    if (c == '\n' || c == '\t') c = ' ';
  f << boundary << '\t' << name << '\t' << kind << '\t' << m << '\n';
}

/// The markdown form of a message as docs/errors.md lists it ('|' escaped for tables).
inline std::string doc_escape(const std::string& msg) {
  std::string out;
  for (char c : msg) {
    if (c == '|') out += '\\';
    out += (c == '\n' || c == '\t') ? ' ' : c;
  }
  return out;
}

}  // namespace rotary::testing
