// Strict .safetensors reader/writer, the .npy/.safetensors loader and atomic file writes.
#include "rotary/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/npy.h"

namespace rotary {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100000000;  // the safetensors format's own limit

[[noreturn]] void io_fail(const std::string& name, const std::string& problem) {
  fail(Error::Kind::kIo, "safetensors", name + ": " + problem);
}

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypes[] = {{"F64", DType::kF64}, {"F32", DType::kF32}, {"F16", DType::kF16},
                                 {"BF16", DType::kBF16}, {"I64", DType::kI64}, {"I32", DType::kI32}};

const char* safetensors_dtype(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e.name;
  fail(Error::Kind::kInvalidArgument, "safetensors", "unknown dtype " + std::to_string(static_cast<int>(d)));
}

std::string read_all(const std::string& path, const char* where) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(Error::Kind::kIo, where, path + ": is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(Error::Kind::kIo, where, path + ": cannot open for reading");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail(Error::Kind::kIo, where, path + ": read error");
  return ss.str();
}

/// A header value as a message shows it: JSON in ASCII, cut short (a shape entry may be a long string).
std::string shown(const nlohmann::json& v) {
  const std::string s = v.dump(-1, ' ', /*ensure_ascii=*/true);
  return s.size() <= 48 ? s : s.substr(0, 45) + "...";
}

/// Parses JSON, rejecting duplicate keys in any object (nlohmann would keep the last one silently).
nlohmann::json parse_json_strict(std::string_view text, const std::string& name) {
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  auto cb = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) keys.emplace_back();
    else if (ev == E::object_end && !keys.empty()) keys.pop_back();
    else if (ev == E::key && !keys.empty()) {
      const std::string k = parsed.get<std::string>();
      if (!keys.back().insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), cb);
  } catch (const nlohmann::json::exception& e) {
    io_fail(name, "malformed JSON header: " + quote_value(e.what(), 200));  // the parser quotes the input's bytes
  }
  if (!duplicate.empty()) io_fail(name, "duplicate key " + quote_value(duplicate) + " in the header");
  return j;
}

}  // namespace

const NpyArray* TensorFile::find(std::string_view name) const {
  for (const auto& [n, a] : tensors)
    if (n == name) return &a;
  return nullptr;
}

const NpyArray* TensorFile::find_like(std::string_view name) const {
  if (const NpyArray* a = find(name)) return a;
  const NpyArray* hit = nullptr;
  int count = 0;
  const std::string tail = "." + std::string(name);
  for (const auto& [n, a] : tensors)
    if (n.size() > tail.size() && n.compare(n.size() - tail.size(), tail.size(), tail) == 0) hit = &a, ++count;
  return count == 1 ? hit : nullptr;
}

TensorFile safetensors_parse(std::string_view bytes, const std::string& name) {
  if (bytes.size() < 8) io_fail(name, "truncated: " + std::to_string(bytes.size()) + " bytes, the header size alone is 8");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  if (n > kMaxHeaderBytes) io_fail(name, "header size " + std::to_string(n) + " exceeds the 100000000-byte limit");
  if (n > bytes.size() - 8)
    io_fail(name, "truncated header: needs " + std::to_string(n) + " bytes, file has " + std::to_string(bytes.size() - 8));
  const std::string_view header = bytes.substr(8, n);
  const nlohmann::json j = parse_json_strict(header, name);
  if (!j.is_object()) io_fail(name, "the header must be a JSON object, got " + std::string(j.type_name()));
  const uint64_t buffer = bytes.size() - 8 - n;
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data()) + 8 + n;

  TensorFile out;
  struct Span { uint64_t begin, end; std::string name; };
  std::vector<Span> spans;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) io_fail(name, "__metadata__ must be an object of strings, got " + std::string(v.type_name()));
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          io_fail(name, "__metadata__[" + quote_value(m.key()) + "] must be a string, got " + std::string(m.value().type_name()));
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor " + quote_value(key);
    if (key.empty()) io_fail(name, "a tensor has an empty name");
    if (!v.is_object()) io_fail(name, what + " must be an object, got " + std::string(v.type_name()));
    for (auto f = v.begin(); f != v.end(); ++f)
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
        io_fail(name, what + " has unexpected key " + quote_value(f.key()) + " (expected dtype, shape, data_offsets)");
    if (!v.contains("dtype") || !v["dtype"].is_string()) io_fail(name, what + " needs a string \"dtype\"");
    if (!v.contains("shape") || !v["shape"].is_array()) io_fail(name, what + " needs a \"shape\" array");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      io_fail(name, what + " needs \"data_offsets\" [begin, end]");
    NpyArray a;
    const std::string dt = v["dtype"].get<std::string>();
    bool known = false;
    for (const auto& e : kDTypes)
      if (dt == e.name) { a.dtype = e.dtype; known = true; }
    if (!known) io_fail(name, what + " has unsupported dtype " + quote_value(dt) + " (expected F64, F32, F16, BF16, I64 or I32)");
    if (v["shape"].size() > 8) io_fail(name, what + " has rank " + std::to_string(v["shape"].size()) + " > 8");
    bool zero = false;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        io_fail(name, what + " has a shape entry that is not a non-negative integer: " + shown(d));
      a.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
      zero = zero || a.shape.back() == 0;
    }
    uint64_t nbytes = dtype_size(a.dtype);
    for (int64_t d : a.shape)
      if (!zero && __builtin_mul_overflow(nbytes, static_cast<uint64_t>(d), &nbytes))
        io_fail(name, what + " has a shape that overflows: " + shown(v["shape"]));
    if (zero) nbytes = 0;
    const auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      io_fail(name, what + " data_offsets must be non-negative integers, got " + shown(off));
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e) io_fail(name, what + " data_offsets are reversed: " + off.dump());
    if (e > buffer)
      io_fail(name, what + " data_offsets " + off.dump() + " reach past the data buffer (" + std::to_string(buffer) +
                        " bytes; the file may be truncated)");
    if (e - b != nbytes)
      io_fail(name, what + " spans " + std::to_string(e - b) + " bytes, its dtype and shape need " + std::to_string(nbytes));
    spans.push_back({b, e, key});
    a.data.assign(data + b, data + e);
    out.tensors.emplace_back(key, std::move(a));
  }
  std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.begin < y.begin || (x.begin == y.begin && x.end < y.end); });
  uint64_t at = 0;
  for (const auto& s : spans) {
    if (s.begin < at) io_fail(name, "tensor " + quote_value(s.name) + " overlaps the tensor before it");
    if (s.begin > at) io_fail(name, "the data buffer has a hole before tensor " + quote_value(s.name) + " (bytes " +
                                        std::to_string(at) + ".." + std::to_string(s.begin) + ")");
    at = s.end;
  }
  if (at != buffer)
    io_fail(name, std::to_string(buffer - at) + " unexpected bytes after the last tensor's data");
  return out;
}

TensorFile safetensors_load(const std::string& path) { return safetensors_parse(read_all(path, "safetensors"), path); }

std::string safetensors_serialize(const TensorFile& file) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : file.metadata) m[k] = v;
    j["__metadata__"] = m;
  }
  uint64_t at = 0;
  std::set<std::string> names;
  for (const auto& [n, a] : file.tensors) {
    if (n.empty() || n == "__metadata__" || !names.insert(n).second)
      fail(Error::Kind::kInvalidArgument, "safetensors", "tensor name " + quote_value(n) + " is empty, reserved or repeated");
    const uint64_t nbytes = static_cast<uint64_t>(a.numel()) * dtype_size(a.dtype);
    if (nbytes != a.data.size())
      fail(Error::Kind::kInvalidArgument, "safetensors", "tensor " + quote_value(n) + " has " + std::to_string(a.data.size()) +
                                                            " bytes, its shape needs " + std::to_string(nbytes));
    j[n] = {{"dtype", safetensors_dtype(a.dtype)}, {"shape", a.shape}, {"data_offsets", {at, at + nbytes}}};
    at += nbytes;
  }
  std::string header;
  try {
    header = j.dump();
  } catch (const nlohmann::json::type_error&) {  // nlohmann refuses to write text that is not UTF-8
    fail(Error::Kind::kInvalidArgument, "safetensors", "tensor names and metadata must be UTF-8 text");
  }
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  for (const auto& [nm, a] : file.tensors) out.append(reinterpret_cast<const char*>(a.data.data()), a.data.size());
  return out;
}

TensorFile load_tensor_file(const std::string& path, const std::string& npy_name) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".safetensors") return safetensors_load(path);
  if (ext == ".npy") {
    TensorFile f;
    f.tensors.emplace_back(npy_name, npy_load(path));
    return f;
  }
  fail(Error::Kind::kInvalidArgument, "tensor_file",
       path + ": unsupported file type \"" + ext + "\" (expected .npy or .safetensors; .pt files are read by "
                                                  "rotary.check in Python)");
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  io::write_file_atomic(path, bytes);  // the one crash-safe writer (temporary file, fsync, rename, folder fsync)
}

}  // namespace rotary
