// Internal: the one set of helpers that format "[where] what, got value" messages (core, engine, C API).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "rotary/types.h"

namespace rotary::detail {

/// An integer as it appears in messages.
inline std::string str(int64_t v) { return std::to_string(v); }

/// A double as it appears in messages: whole numbers below 2^53 as integers ("3000000000"), others as the
/// shortest text that reads back as the same double ("0.1", "1e+300"), and "nan", "inf", "-inf".
inline std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0 && !(v == 0 && std::signbit(v)))
    return std::to_string(static_cast<int64_t>(v));
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

/// A name taken from the input (a key, a layer type, a tensor name) as messages show it: as it is when it is
/// printable ASCII of at most 32 characters, else quoted and cut short by quote_value.
inline std::string shown_name(const std::string& name) {
  bool plain = !name.empty() && name.size() <= 32;
  for (const char c : name) plain = plain && c >= 0x20 && c <= 0x7e;
  return plain ? name : quote_value(name, 16);
}

/// The first `count` of `names` (shown_name each), then ", ... (N in all)": short however many there are.
inline std::string shown_names(const std::vector<std::string>& names, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < count; ++i) out += (i ? ", " : "") + shown_name(names[i]);
  if (names.size() > count) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

/// Dims shown for a view: its rank clamped to [0, kMaxRank] (messages may describe a view with a bad rank).
inline int shown_rank(const TensorView& v) { return v.rank < 0 ? 0 : (v.rank > kMaxRank ? kMaxRank : v.rank); }

/// "[2,3,4,8]": a view's shape.
inline std::string shape_str(const TensorView& v) {
  std::string s = "[";
  for (int i = 0; i < shown_rank(v); ++i) s += (i ? "," : "") + str(v.shape[i]);
  return s + "]";
}

/// "[96,32,8,1]": a view's strides (in elements).
inline std::string strides_str(const TensorView& v) {
  std::string s = "[";
  for (int i = 0; i < shown_rank(v); ++i) s += (i ? "," : "") + str(v.strides[i]);
  return s + "]";
}

/// Throws Error(kInvalidArgument): a wrong value, shape or stride.
[[noreturn]] inline void invalid(const char* where, const std::string& message) {
  fail(Error::Kind::kInvalidArgument, where, message);
}

/// Throws Error(kInvalidArgument) marked as a wrong element type (Python raises TypeError for it).
[[noreturn]] inline void invalid_dtype(const char* where, const std::string& message) {
  throw Error(Error::Kind::kInvalidArgument, std::string("[") + where + "] " + message, Error::Cause::kType);
}

/// Throws Error(kOutOfRange): a position or size beyond a documented limit.
[[noreturn]] inline void out_of_range(const char* where, const std::string& message) {
  fail(Error::Kind::kOutOfRange, where, message);
}

}  // namespace rotary::detail
