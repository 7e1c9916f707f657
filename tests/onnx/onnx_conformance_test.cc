// ONNX RotaryEmbedding-23 conformance: every tests/data/onnx/test_*/ case through onnx_rotary_embedding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rotary/onnx.h"
#include "testing/shared.h"
#include "testing/tolerances.h"

namespace rotary {
namespace {

namespace fs = std::filesystem;

// ----------------------------------------------------------------------------------------------
// A tiny protobuf wire-format reader: just enough for TensorProto and the attributes in ModelProto.

class Wire {
 public:
  explicit Wire(std::string_view bytes) : s_(bytes) {}
  bool done() const { return i_ >= s_.size(); }

  struct Field {
    uint32_t number = 0;
    int wire_type = 0;
    uint64_t varint = 0;      // wire type 0
    uint64_t fixed = 0;       // wire types 1 and 5 (raw bits)
    std::string_view bytes;   // wire type 2
  };

  /// Reads the next field; throws std::runtime_error on malformed input.
  Field next() {
    Field f;
    uint64_t key = varint();
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire_type = static_cast<int>(key & 7);
    switch (f.wire_type) {
      case 0: f.varint = varint(); break;
      case 1: f.fixed = fixed(8); break;
      case 5: f.fixed = fixed(4); break;
      case 2: {
        uint64_t n = varint();
        if (n > s_.size() - i_) throw std::runtime_error("protobuf: length-delimited field past the end");
        f.bytes = s_.substr(i_, n);
        i_ += n;
        break;
      }
      default: throw std::runtime_error("protobuf: unsupported wire type " + std::to_string(f.wire_type));
    }
    return f;
  }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (i_ >= s_.size()) throw std::runtime_error("protobuf: truncated varint");
      auto b = static_cast<unsigned char>(s_[i_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error("protobuf: varint too long");
  }

 private:
  uint64_t fixed(int n) {
    if (s_.size() - i_ < static_cast<size_t>(n)) throw std::runtime_error("protobuf: truncated fixed field");
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(s_[i_ + k]);
    i_ += n;
    return v;
  }

  std::string_view s_;
  size_t i_ = 0;
};

// onnx.TensorProto.DataType values used here.
enum OnnxType { kFloat = 1, kInt32 = 6, kInt64 = 7, kFloat16 = 10, kDouble = 11, kBFloat16 = 16 };

/// A decoded TensorProto, values widened to double (floats) or int64 (integers).
struct OnnxTensor {
  std::string name;
  int data_type = 0;
  std::vector<int64_t> dims;
  std::vector<double> f;   // float types
  std::vector<int64_t> i;  // integer types
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

float half_bits_to_float(uint16_t h, bool bf16) {
  return bf16 ? testing::bf16_bits_to_f32(h) : testing::f16_bits_to_f32(h);
}

OnnxTensor parse_tensor(std::string_view bytes) {
  OnnxTensor t;
  std::string_view raw;
  std::vector<uint64_t> int32_data;  // also holds f16/bf16 bit patterns
  Wire w(bytes);
  while (!w.done()) {
    Wire::Field f = w.next();
    auto each_packed_varint = [&](auto&& fn) {
      if (f.wire_type == 0) fn(f.varint);
      else if (f.wire_type == 2) {
        Wire p(f.bytes);
        while (!p.done()) fn(p.varint());
      }
    };
    switch (f.number) {
      case 1: each_packed_varint([&](uint64_t v) { t.dims.push_back(static_cast<int64_t>(v)); }); break;
      case 2: t.data_type = static_cast<int>(f.varint); break;
      case 4:  // float_data
        if (f.wire_type == 5) {
          uint32_t u = static_cast<uint32_t>(f.fixed);
          float x;
          std::memcpy(&x, &u, 4);
          t.f.push_back(x);
        } else {
          for (size_t k = 0; k + 4 <= f.bytes.size(); k += 4) {
            float x;
            std::memcpy(&x, f.bytes.data() + k, 4);
            t.f.push_back(x);
          }
        }
        break;
      case 5: each_packed_varint([&](uint64_t v) { int32_data.push_back(v); }); break;
      case 7: each_packed_varint([&](uint64_t v) { t.i.push_back(static_cast<int64_t>(v)); }); break;
      case 8: t.name = std::string(f.bytes); break;
      case 9: raw = f.bytes; break;
      case 10:  // double_data
        if (f.wire_type == 1) {
          double x;
          std::memcpy(&x, &f.fixed, 8);
          t.f.push_back(x);
        } else {
          for (size_t k = 0; k + 8 <= f.bytes.size(); k += 8) {
            double x;
            std::memcpy(&x, f.bytes.data() + k, 8);
            t.f.push_back(x);
          }
        }
        break;
      default: break;  // segment, doc_string, external data, ...: not used by these cases
    }
  }
  const int64_t n = t.numel();
  auto from_raw = [&](size_t itemsize, auto&& fn) {
    if (raw.size() != static_cast<size_t>(n) * itemsize)
      throw std::runtime_error("TensorProto " + t.name + ": raw_data has " + std::to_string(raw.size()) +
                               " bytes, expected " + std::to_string(n * static_cast<int64_t>(itemsize)));
    for (int64_t k = 0; k < n; ++k) fn(raw.data() + k * itemsize);
  };
  if (!raw.empty() || n == 0) {
    switch (t.data_type) {
      case kFloat: from_raw(4, [&](const char* p) { float x; std::memcpy(&x, p, 4); t.f.push_back(x); }); break;
      case kDouble: from_raw(8, [&](const char* p) { double x; std::memcpy(&x, p, 8); t.f.push_back(x); }); break;
      case kFloat16:
      case kBFloat16:
        from_raw(2, [&](const char* p) {
          uint16_t h;
          std::memcpy(&h, p, 2);
          t.f.push_back(half_bits_to_float(h, t.data_type == kBFloat16));
        });
        break;
      case kInt32: from_raw(4, [&](const char* p) { int32_t x; std::memcpy(&x, p, 4); t.i.push_back(x); }); break;
      case kInt64: from_raw(8, [&](const char* p) { int64_t x; std::memcpy(&x, p, 8); t.i.push_back(x); }); break;
      default: throw std::runtime_error("TensorProto " + t.name + ": unsupported data_type " + std::to_string(t.data_type));
    }
  } else if (t.data_type == kInt32) {
    for (uint64_t v : int32_data) t.i.push_back(static_cast<int32_t>(static_cast<uint32_t>(v)));
  } else if (t.data_type == kFloat16 || t.data_type == kBFloat16) {
    for (uint64_t v : int32_data) t.f.push_back(half_bits_to_float(static_cast<uint16_t>(v), t.data_type == kBFloat16));
  }
  const size_t got = (t.data_type == kInt32 || t.data_type == kInt64) ? t.i.size() : t.f.size();
  if (got != static_cast<size_t>(n))
    throw std::runtime_error("TensorProto " + t.name + ": " + std::to_string(got) + " values for dims of " +
                             std::to_string(n) + " elements");
  return t;
}

/// Integer attributes of the first node with `op_type` in a ModelProto (graph=7 -> node=1 -> attribute=5).
std::optional<std::map<std::string, int64_t>> node_int_attributes(std::string_view model, const std::string& op_type) {
  Wire m(model);
  while (!m.done()) {
    Wire::Field g = m.next();
    if (g.number != 7 || g.wire_type != 2) continue;
    Wire graph(g.bytes);
    while (!graph.done()) {
      Wire::Field n = graph.next();
      if (n.number != 1 || n.wire_type != 2) continue;
      Wire node(n.bytes);
      std::string op;
      std::map<std::string, int64_t> attrs;
      while (!node.done()) {
        Wire::Field f = node.next();
        if (f.number == 4 && f.wire_type == 2) op = std::string(f.bytes);
        if (f.number == 5 && f.wire_type == 2) {
          Wire a(f.bytes);
          std::string name;
          int64_t value = 0;
          int64_t type = 0;
          while (!a.done()) {
            Wire::Field af = a.next();
            if (af.number == 1 && af.wire_type == 2) name = std::string(af.bytes);
            if (af.number == 3 && af.wire_type == 0) value = static_cast<int64_t>(af.varint);
            if (af.number == 20 && af.wire_type == 0) type = static_cast<int64_t>(af.varint);
          }
          if (type == 2 /* INT */ || type == 0) attrs[name] = value;
        }
      }
      if (op == op_type) return attrs;
    }
  }
  return std::nullopt;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ----------------------------------------------------------------------------------------------
// Running one case.

struct CaseResult {
  double max_abs_err = 0;
  int64_t n = 0;
  DType dtype = DType::kF32;
};

/// Builds a contiguous buffer of `t` in `dtype` and returns a view of it.
TensorView make_buffer(const OnnxTensor& t, std::vector<unsigned char>& storage) {
  TensorView v;
  v.rank = static_cast<int>(t.dims.size());
  if (v.rank < 1 || v.rank > 4) throw std::runtime_error("tensor " + t.name + " has unsupported rank");
  int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.shape[d] = t.dims[d];
    v.strides[d] = stride;
    stride *= t.dims[d];
  }
  const int64_t n = t.numel();
  switch (t.data_type) {
    case kFloat: v.dtype = DType::kF32; break;
    case kDouble: v.dtype = DType::kF64; break;
    case kFloat16: v.dtype = DType::kF16; break;
    case kBFloat16: v.dtype = DType::kBF16; break;
    case kInt32: v.dtype = DType::kI32; break;
    case kInt64: v.dtype = DType::kI64; break;
    default: throw std::runtime_error("unsupported data_type");
  }
  storage.assign(static_cast<size_t>(n) * dtype_size(v.dtype), 0);
  for (int64_t k = 0; k < n; ++k) {
    unsigned char* p = storage.data() + k * dtype_size(v.dtype);
    switch (v.dtype) {
      case DType::kF32: { float x = static_cast<float>(t.f[k]); std::memcpy(p, &x, 4); break; }
      case DType::kF64: std::memcpy(p, &t.f[k], 8); break;
      case DType::kF16: { uint16_t h = testing::f32_to_f16_bits(static_cast<float>(t.f[k])); std::memcpy(p, &h, 2); break; }
      case DType::kBF16: { uint16_t h = testing::f32_to_bf16_bits(static_cast<float>(t.f[k])); std::memcpy(p, &h, 2); break; }
      case DType::kI32: { int32_t x = static_cast<int32_t>(t.i[k]); std::memcpy(p, &x, 4); break; }
      case DType::kI64: std::memcpy(p, &t.i[k], 8); break;
    }
  }
  v.data = storage.data();
  return v;
}

double load_value(const TensorView& v, int64_t k) {
  const auto* p = static_cast<const unsigned char*>(v.data) + k * dtype_size(v.dtype);
  switch (v.dtype) {
    case DType::kF32: { float x; std::memcpy(&x, p, 4); return x; }
    case DType::kF64: { double x; std::memcpy(&x, p, 8); return x; }
    case DType::kF16: { uint16_t h; std::memcpy(&h, p, 2); return testing::f16_bits_to_f32(h); }
    case DType::kBF16: { uint16_t h; std::memcpy(&h, p, 2); return testing::bf16_bits_to_f32(h); }
    default: return 0;
  }
}

/// Attributes of a case: from its model's RotaryEmbedding node; for *_expanded models (whose graph is
/// the function body) from the non-expanded sibling's model; else from the manifest.
std::map<std::string, int64_t> case_attributes(const fs::path& dir, const nlohmann::json* manifest) {
  if (auto a = node_int_attributes(read_bytes(dir / "model.onnx"), "RotaryEmbedding")) return *a;
  std::string name = dir.filename().string();
  const std::string suffix = "_expanded";
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    fs::path sibling = dir.parent_path() / name.substr(0, name.size() - suffix.size()) / "model.onnx";
    if (fs::exists(sibling))
      if (auto a = node_int_attributes(read_bytes(sibling), "RotaryEmbedding")) return *a;
  }
  std::map<std::string, int64_t> out;
  if (manifest)
    for (const auto& t : (*manifest)["tests"])
      if (t["dir"] == name)
        for (auto& [k, v] : t["attributes"].items())
          if (v.is_number_integer()) out[k] = v.get<int64_t>();
  return out;
}

CaseResult run_case(const fs::path& dir, const nlohmann::json* manifest) {
  const fs::path data = dir / "test_data_set_0";
  std::vector<OnnxTensor> inputs;
  for (int k = 0;; ++k) {
    fs::path p = data / ("input_" + std::to_string(k) + ".pb");
    if (!fs::exists(p)) break;
    inputs.push_back(parse_tensor(read_bytes(p)));
  }
  if (inputs.size() < 3) throw std::runtime_error("expected at least 3 inputs, found " + std::to_string(inputs.size()));
  OnnxTensor expected = parse_tensor(read_bytes(data / "output_0.pb"));
  auto attrs = case_attributes(dir, manifest);

  // Inputs are in graph order: X, cos_cache, sin_cache[, position_ids].
  std::vector<unsigned char> xs, cs, ss, ps, ys;
  OnnxRotaryArgs a;
  a.x = make_buffer(inputs[0], xs);
  a.cos_cache = make_buffer(inputs[1], cs);
  a.sin_cache = make_buffer(inputs[2], ss);
  if (inputs.size() > 3) a.position_ids = make_buffer(inputs[3], ps);
  ys.assign(xs.size(), 0xAB);
  a.y = a.x;
  a.y.data = ys.data();
  a.interleaved = attrs.count("interleaved") ? attrs["interleaved"] : 0;
  a.rotary_embedding_dim = attrs.count("rotary_embedding_dim") ? attrs["rotary_embedding_dim"] : 0;
  a.num_heads = attrs.count("num_heads") ? attrs["num_heads"] : 0;
  onnx_rotary_embedding(a);

  if (expected.dims != inputs[0].dims) throw std::runtime_error("output dims differ from X dims");
  CaseResult r;
  r.dtype = a.y.dtype;
  r.n = expected.numel();
  for (int64_t k = 0; k < r.n; ++k)
    r.max_abs_err = std::max(r.max_abs_err, std::fabs(load_value(a.y, k) - expected.f[k]));
  return r;
}

TEST(OnnxConformance, SharedCases) {
  ROTARY_TEST_DATA(data_dir);
  const fs::path root = fs::path(data_dir) / "onnx";
  ASSERT_TRUE(fs::is_directory(root)) << "no ONNX conformance data at " << root;
  std::optional<nlohmann::json> manifest;
  if (fs::exists(root / "manifest.json")) manifest = nlohmann::json::parse(read_bytes(root / "manifest.json"));

  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && e.path().filename().string().rfind("test_", 0) == 0) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  ASSERT_FALSE(dirs.empty()) << "no test_* directories in " << root;

  for (const auto& dir : dirs) {
    SCOPED_TRACE(dir.filename().string());
    try {
      CaseResult r = run_case(dir, manifest ? &*manifest : nullptr);
      const double tol = r.dtype == DType::kF32 || r.dtype == DType::kF64 ? testing::kOnnxAbsTol
                                                                          : testing::output_abs_tol(r.dtype);
      EXPECT_LE(r.max_abs_err, tol) << dir.filename() << " (" << r.n << " values, " << dtype_name(r.dtype) << ")";
      std::printf("  %-60s max abs err %.3g over %lld values\n", dir.filename().string().c_str(), r.max_abs_err,
                  static_cast<long long>(r.n));
    } catch (const std::exception& e) {
      ADD_FAILURE() << dir.filename() << ": " << e.what();
    }
  }
}

TEST(OnnxConformance, AttributesReadFromModelMatchManifest) {
  ROTARY_TEST_DATA(data_dir);
  const fs::path root = fs::path(data_dir) / "onnx";
  ASSERT_TRUE(fs::exists(root / "manifest.json")) << "no manifest at " << root;
  auto manifest = nlohmann::json::parse(read_bytes(root / "manifest.json"));
  int checked = 0;
  for (const auto& t : manifest["tests"]) {
    if (t["expanded"].get<bool>()) continue;
    auto attrs = node_int_attributes(read_bytes(root / t["dir"].get<std::string>() / "model.onnx"), "RotaryEmbedding");
    ASSERT_TRUE(attrs.has_value()) << t["dir"];
    for (auto& [k, v] : t["attributes"].items()) {
      if (!v.is_number_integer()) continue;
      EXPECT_EQ((*attrs)[k], v.get<int64_t>()) << t["dir"] << " " << k;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

// ----------------------------------------------------------------------------------------------
// The 3-D input form and the error paths, against an fp64 statement of the ONNX formula.

/// fp64 ONNX semantics on X given as [B, S, H, D] (b, s, h, d) indexing.
std::vector<double> onnx_formula(const std::vector<float>& x, int64_t B, int64_t S, int64_t H, int64_t D,
                                 const std::vector<float>& cache_cos, const std::vector<float>& cache_sin,
                                 const std::vector<int64_t>& pos, int64_t R, bool interleaved, int64_t cache_w) {
  std::vector<double> y(x.begin(), x.end());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = ((b * S + s) * H + h) * D;
        const int64_t p = pos[b * S + s];
        for (int64_t i = 0; i < R / 2; ++i) {
          const double c = cache_cos[p * cache_w + i], sn = cache_sin[p * cache_w + i];
          const int64_t j1 = interleaved ? 2 * i : i, j2 = interleaved ? 2 * i + 1 : i + R / 2;
          y[base + j1] = c * x[base + j1] - sn * x[base + j2];
          y[base + j2] = sn * x[base + j1] + c * x[base + j2];
        }
      }
  return y;
}

TEST(OnnxRotaryEmbedding, ThreeDimensionalInputWithNumHeads) {
  const int64_t B = 2, S = 5, H = 3, D = 10, max_pos = 17;
  for (int64_t R : {0, 6}) {
    for (int interleaved : {0, 1}) {
      const int64_t Reff = R ? R : D, cache_w = D / 2;  // a wider cache than R/2: sliced
      auto x = testing::randn(B * S * H * D, 1 + R + interleaved);
      auto cos_c = testing::randn(max_pos * cache_w, 2), sin_c = testing::randn(max_pos * cache_w, 3);
      std::vector<int64_t> pos = {3, 16, 0, 7, 7, 1, 2, 4, 8, 15};
      std::vector<float> y(x.size());
      OnnxRotaryArgs a;
      a.x = TensorView::contiguous(x.data(), DType::kF32, {B, S, H * D});
      a.y = TensorView::contiguous(y.data(), DType::kF32, {B, S, H * D});
      a.cos_cache = TensorView::contiguous(cos_c.data(), DType::kF32, {max_pos, cache_w});
      a.sin_cache = TensorView::contiguous(sin_c.data(), DType::kF32, {max_pos, cache_w});
      a.position_ids = TensorView::contiguous(pos.data(), DType::kI64, {B, S});
      a.num_heads = H;
      a.rotary_embedding_dim = R;
      a.interleaved = interleaved;
      onnx_rotary_embedding(a);
      auto ref = onnx_formula(x, B, S, H, D, cos_c, sin_c, pos, Reff, interleaved, cache_w);
      double err = 0;
      for (size_t k = 0; k < y.size(); ++k) err = std::max(err, std::fabs(ref[k] - y[k]));
      // |c|,|s|,|x| ~ N(0,1): products up to ~20, two f32 roundings.
      EXPECT_LE(err, 1e-5) << "R=" << R << " interleaved=" << interleaved;
      // In place gives the same bits.
      std::vector<float> inplace = x;
      a.x = TensorView::contiguous(inplace.data(), DType::kF32, {B, S, H * D});
      a.y = a.x;
      onnx_rotary_embedding(a);
      EXPECT_EQ(inplace, y);
    }
  }
}

TEST(OnnxRotaryEmbedding, ErrorsNameTheInputOrAttribute) {
  std::vector<float> x(2 * 3 * 8, 0.5f), y(x.size()), cache(4 * 4, 0.25f);
  std::vector<int64_t> pos = {0, 1, 2, 3, 0, 4};
  auto base = [&] {
    OnnxRotaryArgs a;
    a.x = TensorView::contiguous(x.data(), DType::kF32, {2, 3, 8});
    a.y = TensorView::contiguous(y.data(), DType::kF32, {2, 3, 8});
    a.cos_cache = TensorView::contiguous(cache.data(), DType::kF32, {4, 4});
    a.sin_cache = TensorView::contiguous(cache.data(), DType::kF32, {4, 4});
    a.position_ids = TensorView::contiguous(pos.data(), DType::kI64, {2, 3});
    a.num_heads = 1;
    return a;
  };
  struct Case {
    const char* what;
    std::function<void(OnnxRotaryArgs&)> mutate;
    const char* needle;
    Error::Kind kind;
  };
  std::vector<Case> cases = {
      {"num_heads 0", [](OnnxRotaryArgs& a) { a.num_heads = 0; }, "num_heads", Error::Kind::kInvalidArgument},
      {"num_heads 3", [](OnnxRotaryArgs& a) { a.num_heads = 3; }, "num_heads 3", Error::Kind::kInvalidArgument},
      {"odd rotary dim", [](OnnxRotaryArgs& a) { a.rotary_embedding_dim = 3; }, "rotary_embedding_dim",
       Error::Kind::kInvalidArgument},
      {"rotary dim > head", [](OnnxRotaryArgs& a) { a.rotary_embedding_dim = 10; }, "rotary_embedding_dim",
       Error::Kind::kInvalidArgument},
      {"interleaved 2", [](OnnxRotaryArgs& a) { a.interleaved = 2; }, "interleaved", Error::Kind::kInvalidArgument},
      // an empty hidden axis: it blamed "cos_cache last dim ... got 0" although the cache has 4 columns
      {"hidden size 0", [&](OnnxRotaryArgs& a) {
         a.x = TensorView::contiguous(x.data(), DType::kF32, {2, 3, 0});
         a.y = TensorView::contiguous(y.data(), DType::kF32, {2, 3, 0});
       }, "head_size must be > 0, got 0 (X shape [2,3,0], num_heads 1)", Error::Kind::kInvalidArgument},
      {"cache too narrow", [&](OnnxRotaryArgs& a) {
         a.cos_cache = TensorView::contiguous(cache.data(), DType::kF32, {8, 2});
         a.sin_cache = a.cos_cache;
       }, "cos_cache", Error::Kind::kInvalidArgument},
      {"3-D cache with ids", [&](OnnxRotaryArgs& a) {
         a.cos_cache = TensorView::contiguous(cache.data(), DType::kF32, {1, 4, 4});
         a.sin_cache = a.cos_cache;
       }, "cos_cache", Error::Kind::kInvalidArgument},
      {"sin shape differs", [&](OnnxRotaryArgs& a) {
         a.sin_cache = TensorView::contiguous(cache.data(), DType::kF32, {2, 4});
       }, "sin_cache", Error::Kind::kInvalidArgument},
      // the id named by its index (it said "position 4 is out of range ...", not where)
      {"position past cache", [&](OnnxRotaryArgs& a) { (void)a; pos[4] = 4; },
       "[onnx_rotary_embedding] position_ids[1,1] is 4, out of range for cos_cache/sin_cache with 4 rows",
       Error::Kind::kOutOfRange},
      {"negative position", [&](OnnxRotaryArgs& a) { (void)a; pos[4] = -1; }, "-1", Error::Kind::kInvalidArgument},
      {"y shape", [&](OnnxRotaryArgs& a) { a.y = TensorView::contiguous(y.data(), DType::kF32, {2, 3, 4}); }, "Y",
       Error::Kind::kInvalidArgument},
      {"x rank 2", [&](OnnxRotaryArgs& a) {
         a.x = TensorView::contiguous(x.data(), DType::kF32, {6, 8});
         a.y = TensorView::contiguous(y.data(), DType::kF32, {6, 8});
       }, "X must have rank 3 [batch, seq, hidden] (with num_heads) or 4 [batch, num_heads, seq, head_size], got rank 2",
       Error::Kind::kInvalidArgument},
      {"missing cos", [](OnnxRotaryArgs& a) { a.cos_cache = {}; }, "cos_cache", Error::Kind::kInvalidArgument},
  };
  for (auto& c : cases) {
    SCOPED_TRACE(c.what);
    pos = {0, 1, 2, 3, 0, 3};
    OnnxRotaryArgs a = base();
    c.mutate(a);
    std::fill(y.begin(), y.end(), -7.f);
    try {
      onnx_rotary_embedding(a);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), c.kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
      EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return v == -7.f; })) << "output written on error";
    }
  }
}

}  // namespace
}  // namespace rotary
