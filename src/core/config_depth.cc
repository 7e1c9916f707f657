// config.json's text: read from a file, its nesting depth bounded, Python's NaN / Infinity tokens made strings, parsed.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/config_parse.h"

namespace rotary::detail {
namespace {

using json = nlohmann::json;
constexpr const char* kWhere = kConfigWhere;

// Deepest nesting of arrays/objects a config may have (HF configs use 3 or 4 levels). Bounding it keeps
// every recursive walk of the parsed document (copy, render, destroy) far from the stack's limit.
constexpr int kMaxDepth = 64;

/// The parser's message, in ASCII, with its quoted "last read" token cut short, or left out (`drop_last_read`: the
/// text parsed was not the file's own).
std::string parse_error_text(std::string_view what, bool drop_last_read = false) {
  std::string s;
  for (const char c : what) {  // the parser copies the input's bytes: keep the message ASCII
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80) {
      s += c;
    } else {
      static const char kHex[] = "0123456789abcdef";
      s += "\\x";
      s += kHex[u >> 4];
      s += kHex[u & 15];
    }
  }
  std::size_t mark = s.find("last read: '");
  if (drop_last_read && mark != std::string::npos) {
    const std::size_t end = s.rfind("'; expected ");  // the parser's own text after the token
    s = s.substr(0, mark >= 2 ? mark - 2 : mark) + (end != std::string::npos && end > mark ? s.substr(end + 1) : "");
    mark = std::string::npos;
  }
  if (mark == std::string::npos || s.size() - mark < 200) return s.size() > 400 ? s.substr(0, 397) + "..." : s;
  const std::size_t start = mark + 12;
  // The token may itself hold "'; ": its end is the last one (nlohmann's own text after it has none).
  std::size_t end = s.rfind("'; ");
  if (end != std::string::npos && end < start) end = std::string::npos;
  const std::string token = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
  std::string tail = end == std::string::npos ? "" : s.substr(end + 1);
  if (tail.size() > 200) tail = tail.substr(0, 197) + "...";
  return s.substr(0, mark) + "last read: " + quote_value(token) + tail;
}

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

json parse_config_text(std::string_view json_text, const std::string& source_name) {
  // The parser takes a NUL byte for the end of its input and would read "{..}\0garbage" as valid; JSON has no
  // NUL outside strings, nor raw control characters inside them (Python's json refuses it too). Trailing NULs
  // only are a C string's terminator counted in the length (`sizeof literal`): the text ends there.
  if (const std::size_t z = json_text.find('\0'); z != std::string_view::npos) {
    if (json_text.find_first_not_of('\0', z) != std::string_view::npos)
      fail(Error::Kind::kIo, kWhere, source_name + " is not valid JSON: a NUL byte at offset " + std::to_string(z) +
                                         " before more text");
    json_text = json_text.substr(0, z);
  }
  check_config_depth(json_text, source_name, kWhere);
  json doc;
  try {
    doc = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    // Python's NaN / Infinity tokens (config_depth.cc) are read as strings; any other fault keeps its own message.
    const std::string text = python_json_tokens(json_text);
    if (text == json_text) fail(Error::Kind::kIo, kWhere, source_name + " is not valid JSON: " + parse_error_text(e.what()));
    doc = json::parse(text.begin(), text.end(), nullptr, false);
    if (doc.is_discarded()) {
      // A fault besides the tokens: the parser's message on the text with tokens as strings of their own length,
      // so its line and column are the file's.
      const std::string same = python_json_tokens(json_text, true);
      try {
        const json unused = json::parse(same.begin(), same.end());  // throws: `same` fails as `text` did
        (void)unused;
      } catch (const json::exception& e2) {
        // Without the parser's "last read" text, which may quote a stand-in that is not in the file.
        fail(Error::Kind::kIo, kWhere, source_name + " is not valid JSON: " + parse_error_text(e2.what(), true));
      }
      fail(Error::Kind::kIo, kWhere, source_name + " is not valid JSON: " + parse_error_text(e.what()));
    }
  }
  if (!doc.is_object())
    fail(Error::Kind::kIo, kWhere, source_name + " must hold a JSON object, got " + show_json(doc));
  return doc;
}

std::string read_config_file(const std::string& path) {
  // A config.json is kilobytes (the largest multimodal ones about a megabyte): a bound keeps /dev/zero or a
  // mistaken multi-gigabyte file from exhausting memory before the JSON parser would refuse it.
  constexpr std::size_t kMaxConfigBytes = std::size_t(64) << 20;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(Error::Kind::kIo, kWhere, "config file '" + path + "' is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(Error::Kind::kIo, kWhere, "cannot read config file '" + path + "': " + std::strerror(errno));
  std::string text;
  char chunk[65536];
  while (f) {
    f.read(chunk, sizeof chunk);
    text.append(chunk, static_cast<std::size_t>(f.gcount()));
    if (text.size() > kMaxConfigBytes)
      fail(Error::Kind::kIo, kWhere, "config file '" + path + "' is larger than the " + std::to_string(kMaxConfigBytes) +
                                         "-byte limit of a config.json");
  }
  if (f.bad()) fail(Error::Kind::kIo, kWhere, "error while reading config file '" + path + "'");
  return text;
}

}  // namespace rotary::detail
