// Strict NumPy .npy reader/writer (format 1.0/2.0/3.0, little-endian numeric dtypes, C order only).
#include "npy.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace rotary {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr int kMaxNpyRank = 8;

[[noreturn]] void io_fail(const std::string& name, const std::string& problem) {
  fail(Error::Kind::kIo, "npy", name + ": " + problem);
}

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (std::isprint(static_cast<unsigned char>(c))) out += c;
    else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    }
  }
  return out + "\"";
}

/// Parses the header dict, a Python literal such as
///   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
/// Accepts arbitrary whitespace, single or double quotes and trailing commas; nothing else.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  struct Result {
    std::string descr;
    bool fortran_order = false;
    std::vector<int64_t> shape;
  };

  Result parse() {
    Result r;
    bool have_descr = false, have_order = false, have_shape = false;
    skip_ws();
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') { ++i_; break; }
      std::string key = parse_string();
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (have_descr) bad("duplicate key 'descr'");
        r.descr = parse_string();
        have_descr = true;
      } else if (key == "fortran_order") {
        if (have_order) bad("duplicate key 'fortran_order'");
        r.fortran_order = parse_bool();
        have_order = true;
      } else if (key == "shape") {
        if (have_shape) bad("duplicate key 'shape'");
        r.shape = parse_shape();
        have_shape = true;
      } else {
        bad("unexpected key " + quoted(key) + " (expected only 'descr', 'fortran_order', 'shape')");
      }
      skip_ws();
      if (peek() == ',') { ++i_; continue; }
      if (peek() == '}') { ++i_; break; }
      bad("expected ',' or '}' after the value of '" + key + "'");
    }
    skip_ws();
    if (i_ != s_.size()) bad("unexpected text after the closing '}'");
    if (!have_descr) bad("missing key 'descr'");
    if (!have_order) bad("missing key 'fortran_order'");
    if (!have_shape) bad("missing key 'shape'");
    return r;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    io_fail(name_, "malformed header: " + what + " at offset " + std::to_string(i_) + " of " + quoted(s_));
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string parse_string() {
    char q = peek();
    if (q != '\'' && q != '"') bad("expected a quoted string");
    ++i_;
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\') bad("escape sequences are not supported");
      ++i_;
    }
    if (i_ >= s_.size()) bad("unterminated string");
    std::string out(s_.substr(start, i_ - start));
    ++i_;
    return out;
  }
  bool parse_bool() {
    if (s_.substr(i_, 4) == "True") { i_ += 4; return true; }
    if (s_.substr(i_, 5) == "False") { i_ += 5; return false; }
    bad("expected True or False");
  }
  int64_t parse_dim() {
    if (!std::isdigit(static_cast<unsigned char>(peek()))) {
      if (peek() == '-') io_fail(name_, "negative dimension in shape " + quoted(s_));
      bad("expected a non-negative integer dimension");
    }
    int64_t v = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      int d = peek() - '0';
      if (v > (std::numeric_limits<int64_t>::max() - d) / 10)
        io_fail(name_, "dimension overflows int64 in shape " + quoted(s_));
      v = v * 10 + d;
      ++i_;
    }
    // Python 2 style long suffix, written by very old numpy.
    if (peek() == 'L') ++i_;
    return v;
  }
  std::vector<int64_t> parse_shape() {
    std::vector<int64_t> shape;
    expect('(');
    skip_ws();
    if (peek() == ')') { ++i_; return shape; }
    while (true) {
      skip_ws();
      if (peek() == ')') {
        // "(3,)" and "(2, 3,)" are fine; "(3)" is an int in Python, not a tuple, but numpy never writes it.
        ++i_;
        break;
      }
      shape.push_back(parse_dim());
      if (shape.size() > static_cast<size_t>(kMaxNpyRank))
        io_fail(name_, "rank > " + std::to_string(kMaxNpyRank) + " is not supported, shape " + quoted(s_));
      skip_ws();
      if (peek() == ',') { ++i_; continue; }
      if (peek() == ')') { ++i_; break; }
      bad("expected ',' or ')' in shape");
    }
    // "(3)" (no comma) is accepted as rank 1: numpy writes "(3,)", but the meaning is unambiguous.
    return shape;
  }

  std::string_view s_;
  const std::string& name_;
  size_t i_ = 0;
};

struct DescrInfo {
  DType dtype;
  bool is_uint16;
};

DescrInfo parse_descr(const std::string& descr, const std::string& name) {
  if (descr.size() >= 2 && descr[0] == '>')
    io_fail(name, "big-endian dtype " + quoted(descr) + " is not supported (expected little-endian '<')");
  if (descr == "<f4") return {DType::kF32, false};
  if (descr == "<f2") return {DType::kF16, false};
  if (descr == "<f8") return {DType::kF64, false};
  if (descr == "<i4") return {DType::kI32, false};
  if (descr == "<i8") return {DType::kI64, false};
  if (descr == "<u2") return {DType::kBF16, true};
  io_fail(name, "unsupported dtype " + quoted(descr) +
                    " (expected one of '<f4', '<f2', '<f8', '<i4', '<i8', '<u2')");
}

const char* descr_of(const NpyArray& a) {
  switch (a.dtype) {
    case DType::kF32: return "<f4";
    case DType::kF16: return "<f2";
    case DType::kF64: return "<f8";
    case DType::kI32: return "<i4";
    case DType::kI64: return "<i8";
    case DType::kBF16: return "<u2";  // bf16 has no npy type: stored as raw uint16 bit patterns
  }
  fail(Error::Kind::kInvalidArgument, "npy", "unknown dtype " + std::to_string(static_cast<int>(a.dtype)));
}

uint32_t read_le(const unsigned char* p, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

/// numel * itemsize, or throws `fail_kind` if it overflows int64 / size_t.
int64_t checked_bytes(const std::vector<int64_t>& shape, size_t itemsize, const std::string& name,
                      Error::Kind fail_kind) {
  int64_t n = 1;
  bool zero = false;
  for (int64_t d : shape) {
    if (d < 0) fail(fail_kind, "npy", name + ": negative dimension " + std::to_string(d));
    if (d == 0) zero = true;
  }
  if (zero) return 0;
  const int64_t limit = std::numeric_limits<int64_t>::max() / static_cast<int64_t>(itemsize);
  for (int64_t d : shape) {
    if (n > limit / d) {
      std::string s = "(";
      for (int64_t x : shape) s += std::to_string(x) + ",";
      fail(fail_kind, "npy", name + ": shape " + s + ") overflows the addressable size");
    }
    n *= d;
  }
  return n * static_cast<int64_t>(itemsize);
}

}  // namespace

int64_t NpyArray::numel() const {
  // An empty array may list huge other dims (a hostile header): 0 without multiplying them.
  for (int64_t d : shape)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      fail(Error::Kind::kInvalidArgument, "npy", "element count of shape overflows int64 (dim " + std::to_string(d) + ")");
  return n;
}

TensorView NpyArray::view() {
  if (shape.size() > static_cast<size_t>(kMaxRank))
    fail(Error::Kind::kInvalidArgument, "npy", "a TensorView has rank <= 4, array has rank " +
                                                   std::to_string(shape.size()));
  TensorView v;
  v.data = data.data();
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.shape[d] = shape[d];
    v.strides[d] = stride;
    if (d > 0 && __builtin_mul_overflow(stride, shape[d], &stride))
      fail(Error::Kind::kInvalidArgument, "npy", "shape dim " + std::to_string(d) + " = " + std::to_string(shape[d]) +
                                                     " makes the strides of a tensor view overflow int64");
  }
  return v;
}

NpyArray npy_parse(std::string_view bytes, const std::string& name) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < kMagicLen + 2 || std::memcmp(p, kMagic, kMagicLen) != 0)
    io_fail(name, "not a .npy file (bad magic; expected \\x93NUMPY), " + std::to_string(bytes.size()) + " bytes");
  int major = p[6], minor = p[7];
  size_t len_bytes;
  if (major == 1 && minor == 0) len_bytes = 2;
  else if ((major == 2 || major == 3) && minor == 0) len_bytes = 4;
  else io_fail(name, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                         " (expected 1.0, 2.0 or 3.0)");
  if (bytes.size() < 8 + len_bytes) io_fail(name, "truncated header length field");
  uint64_t header_len = read_le(p + 8, static_cast<int>(len_bytes));
  uint64_t data_start = 8 + len_bytes + header_len;
  if (data_start > bytes.size())
    io_fail(name, "truncated header: needs " + std::to_string(header_len) + " bytes, file has " +
                      std::to_string(bytes.size() - 8 - len_bytes));
  std::string_view header = bytes.substr(8 + len_bytes, header_len);
  if (major < 3) {
    for (char c : header)
      if (static_cast<unsigned char>(c) >= 0x80) io_fail(name, "non-ASCII byte in a version 1/2 header");
  }
  auto parsed = HeaderParser(header, name).parse();
  DescrInfo info = parse_descr(parsed.descr, name);

  NpyArray a;
  a.dtype = info.dtype;
  a.is_uint16 = info.is_uint16;
  a.shape = parsed.shape;
  int64_t nbytes = checked_bytes(a.shape, dtype_size(a.dtype), name, Error::Kind::kIo);
  uint64_t avail = bytes.size() - data_start;
  if (avail < static_cast<uint64_t>(nbytes))
    io_fail(name, "truncated data: shape needs " + std::to_string(nbytes) + " bytes, file has " +
                      std::to_string(avail));
  if (avail > static_cast<uint64_t>(nbytes))
    io_fail(name, std::to_string(avail - static_cast<uint64_t>(nbytes)) +
                      " unexpected bytes after the data (shape needs " + std::to_string(nbytes) + ")");
  if (!parsed.fortran_order || a.shape.size() < 2) {
    a.data.assign(p + data_start, p + data_start + nbytes);
    return a;
  }
  // Fortran order (column-major): the same logical array, reordered into C order.
  a.data.resize(static_cast<size_t>(nbytes));
  const size_t es = dtype_size(a.dtype), rank = a.shape.size();
  const int64_t n = nbytes / static_cast<int64_t>(es);
  std::vector<int64_t> index(rank, 0), f_stride(rank, 1);
  for (size_t k = 1; k < rank; ++k) f_stride[k] = f_stride[k - 1] * a.shape[k - 1];
  for (int64_t c = 0; c < n; ++c) {  // c walks C order; index is its multi-index
    int64_t f = 0;
    for (size_t k = 0; k < rank; ++k) f += index[k] * f_stride[k];
    std::memcpy(a.data.data() + static_cast<size_t>(c) * es, p + data_start + static_cast<size_t>(f) * es, es);
    for (size_t k = rank; k-- > 0;) {
      if (++index[k] < a.shape[k]) break;
      index[k] = 0;
    }
  }
  return a;
}

NpyArray npy_load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) io_fail(path, "cannot open for reading");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) io_fail(path, "read error");
  std::string bytes = ss.str();
  return npy_parse(bytes, path);
}

std::string npy_serialize(const NpyArray& array) {
  const char* descr = descr_of(array);
  if (array.shape.size() > static_cast<size_t>(kMaxNpyRank))
    fail(Error::Kind::kInvalidArgument, "npy", "rank > 8 cannot be saved, got " + std::to_string(array.shape.size()));
  int64_t nbytes = checked_bytes(array.shape, dtype_size(array.dtype), "<array>", Error::Kind::kInvalidArgument);
  if (static_cast<uint64_t>(nbytes) != array.data.size())
    fail(Error::Kind::kInvalidArgument, "npy",
         "data has " + std::to_string(array.data.size()) + " bytes, shape needs " + std::to_string(nbytes));
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < array.shape.size(); ++i) {
    dict += std::to_string(array.shape[i]);
    if (array.shape.size() == 1 || i + 1 < array.shape.size()) dict += ",";
    if (i + 1 < array.shape.size()) dict += " ";
  }
  dict += "), }";
  // Pad with spaces and end with '\n' so that the data starts on a 64-byte boundary.
  size_t len_bytes = 2;
  int major = 1;
  size_t total = kMagicLen + 2 + len_bytes + dict.size() + 1;
  if (total + 63 > 65535 + kMagicLen + 2 + len_bytes) {
    len_bytes = 4;
    major = 2;
    total = kMagicLen + 2 + len_bytes + dict.size() + 1;
  }
  size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict += '\n';
  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(major);
  out += static_cast<char>(0);
  uint32_t hl = static_cast<uint32_t>(dict.size());
  for (size_t i = 0; i < len_bytes; ++i) out += static_cast<char>((hl >> (8 * i)) & 0xff);
  out += dict;
  out.append(reinterpret_cast<const char*>(array.data.data()), array.data.size());
  return out;
}

void npy_save(const std::string& path, const NpyArray& array) {
  std::string bytes = npy_serialize(array);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) io_fail(path, "cannot open for writing");
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) io_fail(path, "write failed");
}

}  // namespace rotary
