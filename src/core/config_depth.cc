// config.json's text before the JSON parser: its nesting depth bounded, Python's NaN / Infinity tokens made strings.
#include <string>
#include <string_view>

#include "core/config_parse.h"

namespace rotary::detail {
namespace {

// Deepest nesting of arrays/objects a config may have (HF configs use 3 or 4 levels). Bounding it keeps
// every recursive walk of the parsed document (copy, render, destroy) far from the stack's limit.
constexpr int kMaxDepth = 64;

}  // namespace

/// Refuses text whose arrays/objects nest deeper than kMaxDepth, before the parser builds anything.
/// Brackets inside strings do not count; malformed text is left to the parser's own error.
void check_config_depth(std::string_view text, const std::string& source, const char* where) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // skip the escaped character
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth)
        fail(Error::Kind::kIo, where,
             source + " nests arrays/objects deeper than " + std::to_string(kMaxDepth) + " levels (at byte " +
                 std::to_string(i) + "); config.json files use a few levels");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

/// Python's json module writes float('nan') and float('inf') as the bare tokens NaN, Infinity and -Infinity, which
/// JSON does not have; transformers' save_pretrained does so for non-RoPE fields of hybrid models (Bamba, Falcon-H1,
/// Granite 4.0-H, Nemotron-H: "time_step_limit": [0.0, Infinity]). Each such token in a value position (after ':',
/// or after '[' or ',' in an array; not inside strings) becomes the JSON string of itself, so the document parses and
/// a RoPE field holding one is refused by its reader, naming the field. Other text is left as it is.
std::string python_json_tokens(std::string_view text, bool same_length) {
  std::string out;
  out.reserve(text.size());
  std::string open;  // the containers around the position: '{' or '['
  char last = '\0';  // the last character outside strings and blanks
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    const bool value = last == ':' || ((last == '[' || last == ',') && !open.empty() && open.back() == '[');
    bool token = false;
    for (std::string_view t : {std::string_view("NaN"), std::string_view("Infinity"), std::string_view("-Infinity")})
      if (value && text.substr(i, t.size()) == t) {
        out += '"';
        out += same_length ? t.substr(0, t.size() - 2) : t;  // same_length: every later byte keeps its offset
        out += '"';
        i += t.size() - 1;
        token = true;
        break;
      }
    if (token) {
      last = '"';
      continue;
    }
    out += c;
    if (c == '"') in_string = true;
    if (c == '{' || c == '[') open += c;
    if ((c == '}' || c == ']') && !open.empty()) open.pop_back();
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') last = c;
  }
  return out;
}

}  // namespace rotary::detail
