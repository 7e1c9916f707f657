// config.json's first check: the nesting depth of its text is bounded before the JSON parser builds anything.
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

}  // namespace rotary::detail
