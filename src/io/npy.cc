// Strict NumPy .npy reader/writer (format 1.0/2.0/3.0, little-endian numeric dtypes, C order only).
#include "npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>

#include "io/atomic_file.h"

namespace rotary {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr int kMaxNpyRank = 8;

[[noreturn]] void io_fail(const std::string& name, const std::string& problem) {
  fail(Error::Kind::kIo, "npy", name + ": " + problem);
}

// Longest header rotary reads. numpy writes ~128 bytes (its own reader refuses more than 10000 by default);
// the bound keeps a hostile length field from costing memory or time before anything is checked.
constexpr uint64_t kMaxHeaderLen = uint64_t(1) << 20;
// Headers up to this size are quoted whole in messages; longer ones as a window around the problem.
constexpr size_t kQuoteWhole = 128;
constexpr size_t kQuoteWindow = 64;

std::string quoted(std::string_view s) { return quote_value(s, kQuoteWhole); }

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
        bad("unexpected key " + quote_value(key) + " (expected only 'descr', 'fortran_order', 'shape')");
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
    io_fail(name_, "malformed header: " + what + " at offset " + std::to_string(i_) + " of " + excerpt());
  }
  /// The header quoted when short and printable (escapes take 4 chars), else the bytes around the offset.
  std::string excerpt() const {
    if (s_.size() <= kQuoteWhole && std::all_of(s_.begin(), s_.end(), [](char c) { return c >= 0x20 && c < 0x7f; }))
      return quoted(s_);
    const size_t start = i_ > kQuoteWindow / 2 ? std::min(i_ - kQuoteWindow / 2, s_.size()) : 0;
    return "the " + std::to_string(s_.size()) + "-byte header, at byte " + std::to_string(start) + ": " +
           quote_value(s_.substr(start, kQuoteWindow), kQuoteWindow) + (start + kQuoteWindow < s_.size() ? "..." : "");
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
      if (peek() == '-') io_fail(name_, "negative dimension in the shape of " + excerpt());
      bad("expected a non-negative integer dimension");
    }
    int64_t v = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      int d = peek() - '0';
      if (v > (std::numeric_limits<int64_t>::max() - d) / 10)
        io_fail(name_, "dimension overflows int64 in the shape of " + excerpt());
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
        io_fail(name_, "rank > " + std::to_string(kMaxNpyRank) + " is not supported, in " + excerpt());
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
    io_fail(name, "big-endian dtype " + quote_value(descr) + " is not supported (expected little-endian '<')");
  if (descr == "<f4") return {DType::kF32, false};
  if (descr == "<f2") return {DType::kF16, false};
  if (descr == "<f8") return {DType::kF64, false};
  if (descr == "<i4") return {DType::kI32, false};
  if (descr == "<i8") return {DType::kI64, false};
  if (descr == "<u2") return {DType::kBF16, true};
  io_fail(name, "unsupported dtype " + quote_value(descr) +
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
    case DType::kI8: case DType::kF8E4M3: case DType::kF8E5M2: break;  // quantised storage: not a tensor file type
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

namespace {

/// What the first bytes of a .npy file say: format version and where the data starts.
struct Preamble {
  size_t len_bytes = 0;      // 2 (v1) or 4 (v2, v3)
  int major = 0;
  uint64_t header_len = 0;
  uint64_t data_start = 0;   // 8 + len_bytes + header_len
};

/// Checks magic, version and header length from the first `n` bytes (n may be short); `total` is the
/// file size (UINT64_MAX: unknown, a pipe or device). Never looks past p[n).
Preamble parse_preamble(const unsigned char* p, size_t n, uint64_t total, const std::string& name) {
  const bool sized = total != std::numeric_limits<uint64_t>::max();
  if (n < kMagicLen + 2 || std::memcmp(p, kMagic, kMagicLen) != 0)
    io_fail(name, "not a .npy file (bad magic; expected \\x93NUMPY), " +
                      (sized ? std::to_string(total) + " bytes" : "starts with " + quote_value({reinterpret_cast<const char*>(p), std::min<size_t>(n, 8)})));
  Preamble pre;
  pre.major = p[6];
  const int minor = p[7];
  if (pre.major == 1 && minor == 0) pre.len_bytes = 2;
  else if ((pre.major == 2 || pre.major == 3) && minor == 0) pre.len_bytes = 4;
  else io_fail(name, "unsupported .npy format version " + std::to_string(pre.major) + "." + std::to_string(minor) +
                         " (expected 1.0, 2.0 or 3.0)");
  if (n < 8 + pre.len_bytes) io_fail(name, "truncated header length field");
  pre.header_len = read_le(p + 8, static_cast<int>(pre.len_bytes));
  pre.data_start = 8 + pre.len_bytes + pre.header_len;
  if (sized && pre.data_start > total)
    io_fail(name, "truncated header: needs " + std::to_string(pre.header_len) + " bytes, file has " +
                      std::to_string(total - 8 - pre.len_bytes));
  if (pre.header_len > kMaxHeaderLen)
    io_fail(name, "header length " + std::to_string(pre.header_len) + " is beyond rotary's limit of " +
                      std::to_string(kMaxHeaderLen) + " bytes (numpy writes about 128)");
  return pre;
}

/// Parses the header dict into an array with dtype and shape (no data yet); returns the data byte count.
/// `*fortran`: the data is in Fortran (column-major) order and must be reordered (fortran_to_c).
int64_t parse_header(std::string_view header, int major, const std::string& name, NpyArray* a, bool* fortran) {
  if (major < 3) {
    for (char c : header)
      if (static_cast<unsigned char>(c) >= 0x80) io_fail(name, "non-ASCII byte in a version 1/2 header");
  }
  auto parsed = HeaderParser(header, name).parse();
  DescrInfo info = parse_descr(parsed.descr, name);
  if (fortran) *fortran = parsed.fortran_order && parsed.shape.size() >= 2;
  a->dtype = info.dtype;
  a->is_uint16 = info.is_uint16;
  a->shape = parsed.shape;
  return checked_bytes(a->shape, dtype_size(a->dtype), name, Error::Kind::kIo);
}

void check_data_size(uint64_t avail, int64_t nbytes, const std::string& name) {
  if (avail < static_cast<uint64_t>(nbytes))
    io_fail(name, "truncated data: shape needs " + std::to_string(nbytes) + " bytes, file has " + std::to_string(avail));
  if (avail > static_cast<uint64_t>(nbytes))
    io_fail(name, std::to_string(avail - static_cast<uint64_t>(nbytes)) +
                      " unexpected bytes after the data (shape needs " + std::to_string(nbytes) + ")");
}

/// Reorders a.data from Fortran (column-major) to C order (the same logical array) through a second buffer.
void fortran_to_c(NpyArray& a) {
  const size_t es = dtype_size(a.dtype), rank = a.shape.size();
  const int64_t n = static_cast<int64_t>(a.data.size() / es);
  if (n == 0) return;  // nothing to move (and with a zero dim the other dims' strides could overflow int64)
  std::vector<unsigned char> c_order(a.data.size());
  std::vector<int64_t> index(rank, 0), f_stride(rank, 1);
  for (size_t k = 1; k < rank; ++k) f_stride[k] = f_stride[k - 1] * a.shape[k - 1];
  for (int64_t c = 0; c < n; ++c) {  // c walks C order; index is its multi-index
    int64_t f = 0;
    for (size_t k = 0; k < rank; ++k) f += index[k] * f_stride[k];
    std::memcpy(c_order.data() + static_cast<size_t>(c) * es, a.data.data() + static_cast<size_t>(f) * es, es);
    for (size_t k = rank; k-- > 0;) {
      if (++index[k] < a.shape[k]) break;
      index[k] = 0;
    }
  }
  a.data.swap(c_order);
}

/// An open file descriptor, closed on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

/// Reads up to n bytes (fewer only at end of file). Throws on a read error.
size_t read_some(int fd, void* buf, size_t n, const std::string& name) {
  size_t got = 0;
  auto* p = static_cast<unsigned char*>(buf);
  while (got < n) {
    const ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      io_fail(name, std::string("read error: ") + std::strerror(errno));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

}  // namespace

NpyArray npy_parse(std::string_view bytes, const std::string& name) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const Preamble pre = parse_preamble(p, bytes.size(), bytes.size(), name);
  NpyArray a;
  bool fortran = false;
  const int64_t nbytes = parse_header(bytes.substr(8 + pre.len_bytes, pre.header_len), pre.major, name, &a, &fortran);
  check_data_size(bytes.size() - pre.data_start, nbytes, name);
  a.data.assign(p + pre.data_start, p + pre.data_start + nbytes);
  if (fortran) fortran_to_c(a);
  return a;
}

NpyArray npy_load(const std::string& path) {
  // Streamed: the magic and header are checked before anything else is read, and the payload goes
  // straight into the array's buffer, sized from the header (and, for a regular file, checked against
  // the file size first). Memory is the array itself; a junk file or /dev/zero costs a few bytes.
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) io_fail(path, std::string("cannot open for reading: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) io_fail(path, std::string("cannot stat: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) io_fail(path, "is a directory");
  const bool sized = S_ISREG(st.st_mode);
  const uint64_t file_size = sized ? static_cast<uint64_t>(st.st_size) : std::numeric_limits<uint64_t>::max();

  unsigned char head[12];
  const size_t got = read_some(f.fd, head, sizeof head, path);
  const Preamble pre = parse_preamble(head, got, file_size, path);
  // The header: whatever of it is already in `head`, then the rest.
  std::string header(static_cast<size_t>(pre.header_len), '\0');
  const size_t in_head = std::min<size_t>(got - (8 + pre.len_bytes), header.size());
  std::memcpy(header.data(), head + 8 + pre.len_bytes, in_head);
  const size_t rest = read_some(f.fd, header.data() + in_head, header.size() - in_head, path);
  if (in_head + rest < header.size())
    io_fail(path, "truncated header: needs " + std::to_string(pre.header_len) + " bytes, file has " +
                      std::to_string(in_head + rest));
  // Bytes of `head` past the header belong to the data (a header shorter than 2 bytes).
  const size_t data_in_head = got - (8 + pre.len_bytes) - in_head;

  NpyArray a;
  bool fortran = false;
  const int64_t nbytes = parse_header(header, pre.major, path, &a, &fortran);
  if (sized) {
    check_data_size(file_size - pre.data_start, nbytes, path);
    a.data.resize(static_cast<size_t>(nbytes));
    if (data_in_head > 0) std::memcpy(a.data.data(), head + got - data_in_head, data_in_head);  // data() may be null
    const size_t n = read_some(f.fd, a.data.data() + data_in_head, a.data.size() - data_in_head, path);
    if (data_in_head + n < a.data.size())  // the file shrank while being read
      io_fail(path, "truncated data: shape needs " + std::to_string(nbytes) + " bytes, file has " +
                        std::to_string(data_in_head + n));
    if (fortran) fortran_to_c(a);
    return a;
  }
  // A pipe or device: grow the buffer as bytes arrive, never beyond what the header announced.
  a.data.assign(head + got - data_in_head, head + got);
  while (a.data.size() < static_cast<size_t>(nbytes)) {
    const size_t have = a.data.size();
    const size_t want = std::min<size_t>(static_cast<size_t>(nbytes) - have, std::max<size_t>(have, size_t(1) << 20));
    a.data.resize(have + want);
    const size_t n = read_some(f.fd, a.data.data() + have, want, path);
    a.data.resize(have + n);
    if (n < want) check_data_size(a.data.size(), nbytes, path);  // end of file: truncated
  }
  unsigned char extra[4096];
  const size_t more = read_some(f.fd, extra, sizeof extra, path);
  if (more > 0)
    io_fail(path, (more == sizeof extra ? "at least " : "") + std::to_string(more) +
                      " unexpected bytes after the data (shape needs " + std::to_string(nbytes) + ")");
  if (fortran) fortran_to_c(a);
  return a;
}

namespace {

/// The header block (magic, version, length, padded dict) that precedes the data.
std::string npy_header(const NpyArray& array) {
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
  return out;
}

}  // namespace

std::string npy_serialize(const NpyArray& array) {
  std::string out = npy_header(array);
  out.append(reinterpret_cast<const char*>(array.data.data()), array.data.size());
  return out;
}

void npy_save(const std::string& path, const NpyArray& array) {
  // Header then data straight from the array (no serialized copy), through a temporary file renamed
  // over `path` only once complete: on any error the old file is intact (io/atomic_file.h).
  const std::string header = npy_header(array);
  io::AtomicFile f(path);
  f.write(header);
  f.write(array.data.data(), array.data.size());
  f.commit();
}

}  // namespace rotary
