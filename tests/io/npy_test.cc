// Tests of the .npy reader/writer: round trips, real numpy-written files, and malformed/truncated inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "npy.h"
#include "testing/shared.h"

namespace rotary {
namespace {

/// Builds .npy bytes by hand (independently of npy_serialize): magic, version, header length, header, data.
std::string make_npy(int major, int minor, const std::string& header, const std::string& data) {
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += static_cast<char>(minor);
  uint32_t len = static_cast<uint32_t>(header.size());
  int nlen = major == 1 ? 2 : 4;
  for (int i = 0; i < nlen; ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string f32_bytes(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

/// Expects npy_parse to throw Error(kIo) whose message contains `name` and `needle`.
void expect_io_error(const std::string& bytes, const std::string& needle) {
  try {
    npy_parse(bytes, "case.npy");
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kIo) << e.what();
    std::string msg = e.what();
    EXPECT_NE(msg.find("case.npy"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg << "\nexpected to contain: " << needle;
  }
}

TEST(Npy, RoundTripEveryDtypeAndRank) {
  struct Case { DType dtype; bool u16; std::vector<int64_t> shape; };
  std::vector<Case> cases = {
      {DType::kF32, false, {}},          {DType::kF32, false, {5}},       {DType::kF16, false, {2, 3}},
      {DType::kF64, false, {2, 1, 3}},   {DType::kI32, false, {4, 3, 2, 1}}, {DType::kI64, false, {7}},
      {DType::kBF16, true, {3, 5}},      {DType::kF32, false, {0, 4}},    {DType::kF32, false, {1, 2, 1, 2, 1, 2}},
  };
  for (const auto& c : cases) {
    NpyArray a;
    a.dtype = c.dtype;
    a.is_uint16 = c.u16;
    a.shape = c.shape;
    a.data.resize(static_cast<size_t>(a.numel()) * dtype_size(a.dtype));
    for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<unsigned char>(i * 37 + 11);
    std::string bytes = npy_serialize(a);
    // Data must start on a 64-byte boundary, header must end with '\n'.
    ASSERT_EQ((bytes.size() - a.data.size()) % 64, 0u);
    EXPECT_EQ(bytes[bytes.size() - a.data.size() - 1], '\n');
    NpyArray b = npy_parse(bytes, "rt.npy");
    EXPECT_EQ(b.dtype, a.dtype);
    EXPECT_EQ(b.is_uint16, a.is_uint16);
    EXPECT_EQ(b.shape, a.shape);
    EXPECT_EQ(b.data, a.data);
  }
}

TEST(Npy, SerializedHeaderIsWhatNumpyWrites) {
  NpyArray a;
  a.shape = {3};
  a.data.resize(12);
  std::string bytes = npy_serialize(a);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_NE(bytes.find("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"), std::string::npos);
  a.shape = {2, 1, 2};
  a.data.resize(16);
  EXPECT_NE(npy_serialize(a).find("'shape': (2, 1, 2), }"), std::string::npos);
}

TEST(Npy, SaveAndLoadFile) {
  auto path = (std::filesystem::temp_directory_path() / "rotary_npy_test_save.npy").string();
  NpyArray a;
  a.dtype = DType::kI64;
  a.shape = {2, 2};
  int64_t vals[4] = {1, -2, int64_t(1) << 40, 7};
  a.data.assign(reinterpret_cast<unsigned char*>(vals), reinterpret_cast<unsigned char*>(vals) + 32);
  npy_save(path, a);
  NpyArray b = npy_load(path);
  ASSERT_EQ(b.shape, a.shape);
  EXPECT_EQ(b.as<int64_t>()[2], int64_t(1) << 40);
  EXPECT_EQ(b.as<int64_t>()[1], -2);
  std::filesystem::remove(path);
}

TEST(Npy, ViewIsContiguous) {
  NpyArray a;
  a.shape = {2, 3, 4};
  a.data.resize(2 * 3 * 4 * 4);
  TensorView v = a.view();
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.strides[0], 12);
  EXPECT_EQ(v.strides[1], 4);
  EXPECT_EQ(v.strides[2], 1);
  EXPECT_EQ(v.data, a.data.data());
  a.shape = {1, 1, 1, 1, 1};
  a.data.resize(4);
  EXPECT_THROW(a.view(), Error);
}

TEST(Npy, SerializeRejectsWrongDataSize) {
  NpyArray a;
  a.shape = {3};
  a.data.resize(11);
  EXPECT_THROW(npy_serialize(a), Error);
}

TEST(Npy, HeaderVariantsAccepted) {
  std::string data = f32_bytes({1.f, 2.f, 3.f, 4.f, 5.f, 6.f});
  const char* headers[] = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
      "{'descr':'<f4','fortran_order':False,'shape':(2,3)}",
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3,)}\n",
      "  { 'shape' : ( 2 , 3 ) , 'fortran_order' : False , 'descr' : '<f4' , }      \n",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",
  };
  for (const char* h : headers) {
    for (int major : {1, 2, 3}) {
      NpyArray a = npy_parse(make_npy(major, 0, h, data), "variant.npy");
      ASSERT_EQ(a.shape, (std::vector<int64_t>{2, 3})) << h;
      EXPECT_EQ(a.as<float>()[5], 6.f);
    }
  }
  NpyArray scalar = npy_parse(make_npy(1, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': ()}",
                                       std::string(8, '\0')), "s.npy");
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(scalar.numel(), 1);
}

TEST(Npy, MalformedInputsRejected) {
  const std::string ok_header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::string d8 = f32_bytes({1.f, 2.f});
  auto hdr = [](const std::string& descr, const std::string& order, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': " + shape + ", }";
  };
  struct Case { std::string bytes; std::string needle; };
  std::vector<Case> cases = {
      {"", "bad magic"},
      {"\x93NUMP", "bad magic"},
      {"PK\x03\x04 this is a zip", "bad magic"},
      {std::string("\x93NUMPY\x04\x00", 8) + "\x10\x00" + ok_header, "version 4.0"},
      {std::string("\x93NUMPY\x01\x01", 8) + "\x10\x00" + ok_header, "version 1.1"},
      {std::string("\x93NUMPY\x01\x00", 8) + "\x10", "truncated header length"},
      {std::string("\x93NUMPY\x02\x00", 8) + "\x10\x00", "truncated header length"},
      {std::string("\x93NUMPY\x01\x00", 8) + "\xff\x00{'descr'", "truncated header"},
      {make_npy(1, 0, hdr(">f4", "False", "(2,)"), d8), "big-endian"},
      {make_npy(1, 0, hdr("|u1", "False", "(8,)"), d8), "unsupported dtype"},
      {make_npy(1, 0, hdr("|b1", "False", "(8,)"), d8), "unsupported dtype"},
      {make_npy(1, 0, hdr("<c8", "False", "(1,)"), d8), "unsupported dtype"},
      {make_npy(1, 0, hdr("<U4", "False", "(1,)"), std::string(16, 'a')), "unsupported dtype"},
      {make_npy(1, 0, hdr("O", "False", "(1,)"), d8), "unsupported dtype"},
      {make_npy(1, 0, hdr("<f4", "Maybe", "(2,)"), d8), "expected True or False"},
      {make_npy(1, 0, hdr("<f4", "False", "(-2,)"), d8), "negative dimension"},
      {make_npy(1, 0, hdr("<f4", "False", "(99999999999999999999,)"), d8), "overflows int64"},
      {make_npy(1, 0, hdr("<f4", "False", "(4294967296, 4294967296)"), d8), "overflows"},
      {make_npy(1, 0, hdr("<f8", "False", "(1152921504606846976,)"), d8), "overflows"},
      {make_npy(1, 0, hdr("<f4", "False", "(1,1,1,1,1,1,1,1,1)"), d8), "rank > 8"},
      {make_npy(1, 0, hdr("<f4", "False", "(3,)"), d8), "truncated data"},
      {make_npy(1, 0, hdr("<f4", "False", "(1,)"), d8), "unexpected bytes after the data"},
      {make_npy(1, 0, hdr("<f4", "False", "(2.5,)"), d8), "expected ',' or ')'"},
      {make_npy(1, 0, hdr("<f4", "False", "[2]"), d8), "expected '('"},
      {make_npy(1, 0, hdr("<f4", "False", "(,)"), d8), "non-negative integer"},
      {make_npy(1, 0, hdr("<f4", "False", "(2,,)"), d8), "non-negative integer"},
      {make_npy(1, 0, "{'descr': '<f4', 'shape': (2,), }", d8), "missing key 'fortran_order'"},
      {make_npy(1, 0, "{'descr': '<f4', 'fortran_order': False}", d8), "missing key 'shape'"},
      {make_npy(1, 0, "{'fortran_order': False, 'shape': (2,)}", d8), "missing key 'descr'"},
      {make_npy(1, 0, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", d8),
       "duplicate key"},
      {make_npy(1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", d8),
       "unexpected key"},
      {make_npy(1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", d8), "expected ',' or '}'"},
      {make_npy(1, 0, "{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", d8), "expected ',' or '}'"},
      {make_npy(1, 0, "{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", d8), "after the value of 'descr'"},
      {make_npy(1, 0, "{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", d8), "expected ':'"},
      {make_npy(1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2", d8), "expected ',' or ')'"},
      {make_npy(1, 0, "{'descr': '<f4", d8), "unterminated string"},
      {make_npy(1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk", d8), "after the closing"},
      {make_npy(1, 0, "'descr': '<f4'", d8), "expected '{'"},
      {make_npy(1, 0, "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}", d8), "escape"},
      {make_npy(1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}\xc3\xa9", d8), "non-ASCII"},
      {make_npy(1, 0, "", d8), "expected '{'"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": expecting '" + cases[i].needle + "'");
    expect_io_error(cases[i].bytes, cases[i].needle);
  }
}

TEST(Npy, EveryTruncationOfAValidFileIsRejected) {
  NpyArray a;
  a.dtype = DType::kF16;
  a.shape = {3, 5};
  a.data.resize(30, 0x3c);
  std::string bytes = npy_serialize(a);
  for (size_t n = 0; n < bytes.size(); ++n) {
    try {
      npy_parse(std::string_view(bytes).substr(0, n), "cut.npy");
      ADD_FAILURE() << "truncation to " << n << " bytes accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::kIo);
      EXPECT_NE(std::string(e.what()).find("cut.npy"), std::string::npos);
    }
  }
}

TEST(Npy, MissingFileNamesThePath) {
  try {
    npy_load("/nonexistent/dir/x.npy");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kIo);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/x.npy"), std::string::npos);
  }
}

// Real files written by numpy (HF reference data). Their contents are documented in the
// reference manifest, which gives independent truth for a few values.
TEST(Npy, ReadsRealNumpyFiles) {
  ROTARY_TEST_DATA(data_dir);
  const std::string dir = data_dir + "/hf/apply/llama2_7b_default/";
  ASSERT_TRUE(std::filesystem::exists(dir + "position_ids.npy")) << "missing " << dir;

  // "batch0 = 0..15 then 1000..1016, batch1 = 131055..131071 then 1000000..1000015"
  NpyArray pos = npy_load(dir + "position_ids.npy");
  ASSERT_EQ(pos.dtype, DType::kI64);
  ASSERT_EQ(pos.shape, (std::vector<int64_t>{2, 33}));
  const int64_t* p = pos.as<int64_t>();
  for (int s = 0; s < 16; ++s) EXPECT_EQ(p[s], s);
  for (int s = 16; s < 33; ++s) EXPECT_EQ(p[s], 1000 + (s - 16));
  for (int s = 0; s < 17; ++s) EXPECT_EQ(p[33 + s], 131055 + s);
  for (int s = 17; s < 33; ++s) EXPECT_EQ(p[33 + s], 1000000 + (s - 17));

  // cos/sin at position 0 (llama2 default, attention factor 1) are exactly 1 and 0.
  NpyArray cos = npy_load(dir + "cos_f32.npy"), sin = npy_load(dir + "sin_f32.npy");
  ASSERT_EQ(cos.dtype, DType::kF32);
  ASSERT_EQ(cos.shape, (std::vector<int64_t>{2, 33, 128}));
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(cos.as<float>()[i], 1.f);
    EXPECT_EQ(sin.as<float>()[i], 0.f);
  }
  // Position 1, channel 0: theta_0 = 1, so cos(1), sin(1) (f32-rounded by HF).
  EXPECT_NEAR(cos.as<float>()[128], std::cos(1.0), 1e-7);
  EXPECT_NEAR(sin.as<float>()[128], std::sin(1.0), 1e-7);

  // The bf16 bit files are the f32 tensors rounded to bf16: the two readers must agree.
  NpyArray q = npy_load(dir + "q_f32.npy"), qb = npy_load(dir + "q_bf16_bits.npy");
  ASSERT_EQ(qb.dtype, DType::kBF16);
  ASSERT_TRUE(qb.is_uint16);
  ASSERT_EQ(q.shape, qb.shape);
  ASSERT_EQ(q.shape, (std::vector<int64_t>{2, 4, 33, 128}));
  for (int64_t i = 0; i < q.numel(); ++i)
    ASSERT_EQ(qb.as<uint16_t>()[i], testing::f32_to_bf16_bits(q.as<float>()[i])) << i;

  // Re-serialising a real file reproduces its bytes exactly (same header layout as numpy).
  std::string original = testing::read_file(dir + "position_ids.npy");
  EXPECT_EQ(npy_serialize(pos), original);
}

/// A Fortran-order file (column-major data) reads as the same logical array in C order.
TEST(Npy, FortranOrderIsReadInCOrder) {
  // np.asfortranarray(np.arange(6, dtype='<f4').reshape(2, 3)): memory holds columns 0 3 1 4 2 5.
  const std::string data = f32_bytes({0, 3, 1, 4, 2, 5});
  NpyArray a = npy_parse(make_npy(1, 0, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", data), "f.npy");
  ASSERT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a.as<float>()[i], static_cast<float>(i)) << i;
  // Rank 3: element (i, j, k) of shape (2, 3, 4) at Fortran offset i + 2j + 6k holds the C index 12i + 4j + k.
  std::vector<float> f(24);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) f[i + 2 * j + 6 * k] = static_cast<float>(12 * i + 4 * j + k);
  std::string bytes(96, '\0');
  std::memcpy(bytes.data(), f.data(), 96);
  NpyArray b = npy_parse(make_npy(1, 0, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3, 4), }", bytes), "f3.npy");
  for (int c = 0; c < 24; ++c) EXPECT_EQ(b.as<float>()[c], static_cast<float>(c)) << c;
  // No elements: a zero dim after dims whose product overflows int64 (found by fuzz/npy_fuzzer.cc under UBSan).
  NpyArray e = npy_parse(make_npy(1, 0, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 444, 44444444444, 4244, "
                                        "444444, 4, 0), }",
                                  ""),
                         "empty.npy");
  EXPECT_EQ(e.shape, (std::vector<int64_t>{2, 444, 44444444444, 4244, 444444, 4, 0}));
  EXPECT_TRUE(e.data.empty());
}

TEST(Npy, ReadsEveryReferenceFile) {
  ROTARY_TEST_DATA(data_dir);
  int n = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(data_dir + "/hf/apply")) {
    if (entry.path().extension() != ".npy") continue;
    NpyArray a = npy_load(entry.path().string());
    EXPECT_GT(a.numel(), 0) << entry.path();
    ++n;
  }
  EXPECT_GT(n, 20);
}

}  // namespace
}  // namespace rotary
