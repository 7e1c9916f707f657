// .safetensors reader/writer: round trips, the format's layout byte for byte, and every malformed file rejected by name.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "npy.h"
#include "rotary/safetensors.h"

namespace rotary {
namespace {

NpyArray filled(DType dt, std::vector<int64_t> shape, unsigned char seed) {
  NpyArray a;
  a.dtype = dt;
  a.shape = std::move(shape);
  a.data.resize(static_cast<size_t>(a.numel()) * dtype_size(dt));
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<unsigned char>(seed + 7 * i);
  return a;
}

/// A file from a literal JSON header and `data` bytes.
std::string raw(const std::string& header, size_t data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(data, '\x01');
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  TensorFile f;
  f.tensors = {{"cos", filled(DType::kF32, {3, 4}, 1)}, {"sin", filled(DType::kBF16, {3, 4}, 2)},
               {"h", filled(DType::kF16, {5}, 3)}, {"d", filled(DType::kF64, {2, 1, 2}, 4)},
               {"i", filled(DType::kI64, {2}, 5)}, {"j", filled(DType::kI32, {0, 3}, 6)}};
  f.metadata = {{"mode", "neox"}, {"n_dims", "128"}};
  const std::string bytes = safetensors_serialize(f);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "header padded to 8 bytes";
  EXPECT_EQ(bytes[8], '{');
  const TensorFile g = safetensors_parse(bytes, "t");
  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const NpyArray* a = g.find(f.tensors[i].first);
    ASSERT_NE(a, nullptr) << f.tensors[i].first;
    EXPECT_EQ(a->dtype, f.tensors[i].second.dtype);
    EXPECT_EQ(a->shape, f.tensors[i].second.shape);
    EXPECT_EQ(a->data, f.tensors[i].second.data);
  }
  EXPECT_EQ(g.metadata, f.metadata);
  EXPECT_NE(g.find_like("cos"), nullptr);
}

TEST(Safetensors, FindLikeMatchesStateDictKeys) {
  TensorFile f;
  f.tensors = {{"model.layers.0.rotary_emb.inv_freq", filled(DType::kF32, {4}, 1)}, {"other", filled(DType::kF32, {1}, 1)}};
  EXPECT_NE(f.find_like("inv_freq"), nullptr);
  EXPECT_EQ(f.find_like("freq"), nullptr);
  f.tensors.emplace_back("model.layers.1.rotary_emb.inv_freq", filled(DType::kF32, {4}, 1));
  EXPECT_EQ(f.find_like("inv_freq"), nullptr) << "ambiguous";
}

TEST(Safetensors, MalformedFilesAreNamedErrors) {
  const std::string t = R"("t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  struct Case { std::string bytes, needle; };
  std::string huge(8, '\xff');
  const std::vector<Case> cases = {
      {"", "truncated"},
      {std::string("\x10\0\0\0\0\0\0\0{}", 10), "truncated header"},
      {huge + "{}", "exceeds the 100000000-byte limit"},
      {raw("{" + t + "}", 7), "reach past the data buffer"},
      {raw("{" + t + "}", 9), "1 unexpected bytes"},
      {raw("[1, 2]", 0), "must be a JSON object"},
      {raw("{\"t\": ", 0), "malformed JSON"},
      {raw("{" + t + ", " + t + "}", 8), "duplicate key \"t\""},
      {raw(R"({"t": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})", 2), "unsupported dtype \"U8\""},
      {raw(R"({"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8), "not a non-negative integer"},
      {raw(R"({"t": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})", 8), "overflows"},
      {raw(R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8), "spans 8 bytes, its dtype and shape need 12"},
      {raw(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8), "reversed"},
      {raw(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1}})", 8), "unexpected key \"x\""},
      {raw(R"({"t": {"dtype": "F32", "shape": [2]}})", 8), "data_offsets"},
      {raw(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12), "overlaps"},
      {raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8), "hole"},
      {raw(R"({"__metadata__": {"n": 1}, )" + t + "}", 8), "must be a string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.needle);
    try {
      safetensors_parse(c.bytes, "bad.safetensors");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::kIo);
      const std::string m = e.what();
      EXPECT_NE(m.find("[safetensors] bad.safetensors: "), std::string::npos) << m;
      EXPECT_NE(m.find(c.needle), std::string::npos) << m;
    }
  }
}

TEST(Safetensors, WriterRejectsBadTensors) {
  TensorFile f;
  f.tensors = {{"a", filled(DType::kF32, {2}, 1)}, {"a", filled(DType::kF32, {2}, 1)}};
  EXPECT_THROW(safetensors_serialize(f), Error);
  f.tensors = {{"__metadata__", filled(DType::kF32, {2}, 1)}};
  EXPECT_THROW(safetensors_serialize(f), Error);
  NpyArray short_data = filled(DType::kF32, {2}, 1);
  short_data.data.pop_back();
  f.tensors = {{"a", short_data}};
  EXPECT_THROW(safetensors_serialize(f), Error);
  // A name or metadata that is not UTF-8: rotary's error, not the JSON library's.
  // (Reading: a long tensor name or value is quoted cut short.)
  {
    const std::string header = "{\"" + std::string(100000, 'w') + "\": {\"dtype\": \"" + std::string(100000, 'x') +
                               "\", \"shape\": [], \"data_offsets\": [0, 0]}}";
    std::string file(8, '\0');
    for (int b = 0; b < 8; ++b) file[b] = static_cast<char>((header.size() >> (8 * b)) & 0xff);
    try {
      safetensors_parse(file + header, "long.safetensors");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_LT(std::string(e.what()).size(), 400u) << std::string(e.what()).substr(0, 500);
      EXPECT_NE(std::string(e.what()).find("unsupported dtype \"xxx"), std::string::npos) << e.what();
    }
    // A long name in the check of the data buffer's spans (a hole before the tensor).
    const std::string holed = "{\"" + std::string(100000, 'w') + "\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}";
    for (int b = 0; b < 8; ++b) file[b] = static_cast<char>((holed.size() >> (8 * b)) & 0xff);
    try {
      safetensors_parse(file + holed + std::string(8, '\0'), "holed.safetensors");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_LT(std::string(e.what()).size(), 400u) << std::string(e.what()).substr(0, 500);
      EXPECT_NE(std::string(e.what()).find("hole before tensor \"wwww"), std::string::npos) << e.what();
    }
  }
  for (const bool in_metadata : {false, true}) {
    TensorFile g;
    g.tensors = {{in_metadata ? "a" : "w\xc3", filled(DType::kF32, {2}, 1)}};
    if (in_metadata) g.metadata["note"] = "\xff";
    try {
      safetensors_serialize(g);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("must be UTF-8"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace rotary
