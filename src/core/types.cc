// Names, sizes and view helpers for the vocabulary types in rotary/types.h, and the one error helper.
#include "rotary/types.h"

#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>

namespace rotary {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kI8: return "i8";
    case DType::kF8E4M3: return "f8e4m3";
    case DType::kF8E5M2: return "f8e5m2";
  }
  return "unknown";
}

const char* pairing_name(Pairing p) { return p == Pairing::kHalfSplit ? "half" : "interleaved"; }

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kBSHD: return "bshd";
    case Layout::kBHSD: return "bhsd";
    case Layout::kTHD: return "thd";
  }
  return "unknown";
}

const char* direction_name(Direction d) { return d == Direction::kForward ? "forward" : "inverse"; }

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kAuto: return "auto";
    case Backend::kCpu: return "cpu";
    case Backend::kReference: return "reference";
    case Backend::kCuda: return "cuda";
  }
  return "unknown";
}

namespace {

struct Spelling {
  std::string_view name;
  int value;
};

/// The value whose spelling is `name`, else Error of the entry point `where` naming `what` and the canonical
/// names `expected`.
int parse_name(std::string_view name, std::initializer_list<Spelling> spellings, const char* what, const char* where,
               const char* expected) {
  for (const Spelling& s : spellings)
    if (s.name == name) return s.value;
  fail(Error::Kind::kInvalidArgument, where,
       std::string(what) + " must be " + expected + ", got " + quote_value(name));
}

}  // namespace

Layout parse_layout(std::string_view name, const char* what, const char* where) {
  return static_cast<Layout>(
      parse_name(name, {{"bshd", 0}, {"bhsd", 1}, {"thd", 2}}, what, where, "bshd, bhsd or thd"));
}

Pairing parse_pairing(std::string_view name, const char* what, const char* where) {
  return static_cast<Pairing>(parse_name(
      name, {{"half", 0}, {"half_split", 0}, {"neox", 0}, {"interleaved", 1}, {"gptj", 1}}, what, where,
      "half or interleaved"));
}

Direction parse_direction(std::string_view name, const char* what, const char* where) {
  return static_cast<Direction>(parse_name(name, {{"forward", 0}, {"inverse", 1}}, what, where, "forward or inverse"));
}

Backend parse_backend(std::string_view name, const char* what, const char* where) {
  return static_cast<Backend>(parse_name(name, {{"auto", 0}, {"cpu", 1}, {"reference", 2}, {"cuda", 3}}, what, where,
                                         "auto, cpu, reference or cuda"));
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  if (v.rank > kMaxRank) fail(Error::Kind::kInvalidArgument, "rotary_tensor", "rank must be <= 4, got " + std::to_string(v.rank));
  int i = 0;
  for (int64_t s : shape) {
    if (s < 0) fail(Error::Kind::kInvalidArgument, "rotary_tensor", "shape[" + std::to_string(i) + "] must be >= 0, got " + std::to_string(s));
    v.shape[i++] = s;
  }
  int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.strides[d] = stride;
    // The last multiplication is not needed for the strides; checking it too rejects element counts
    // that do not fit int64 (their byte counts could not be addressed either).
    if (__builtin_mul_overflow(stride, v.shape[d], &stride))
      fail(Error::Kind::kInvalidArgument, "rotary_tensor", "element count of shape overflows int64 at dim " + std::to_string(d));
  }
  return v;
}

TensorView TensorView::contiguous(const void* data, DType dtype, std::initializer_list<int64_t> shape) {
  return contiguous(const_cast<void*>(data), dtype, shape);
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides) {
  if (shape.size() != strides.size())
    fail(Error::Kind::kInvalidArgument, "rotary_tensor", "shape and strides must have the same rank, got " +
         std::to_string(shape.size()) + " and " + std::to_string(strides.size()));
  TensorView v = contiguous(data, dtype, shape);
  int i = 0;
  for (int64_t s : strides) v.strides[i++] = s;
  return v;
}

void fail(Error::Kind kind, const char* where, const std::string& message) {
  throw Error(kind, std::string("[") + where + "] " + message);
}

std::string quote_value(std::string_view text, std::size_t max_chars) {
  std::string out = "\"";
  std::size_t i = 0;
  for (; i < text.size() && i < max_chars; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (i < text.size()) return out + "...\" (" + std::to_string(text.size()) + " bytes)";
  return out + "\"";
}

}  // namespace rotary
