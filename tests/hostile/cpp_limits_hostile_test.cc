// Hostile numbers and texts at the C++ helpers: deep/huge config.json, overflowing cp/grid/ggml/permute arithmetic, late-failing specs, long .npy headers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../../fuzz/fuzz_targets.h"
#include "npy.h"
#include "rotary/rotary.h"
#include "testing/errors_doc.h"
#include "testing/shared.h"

namespace rotary {
namespace {

using K = Error::Kind;
using ::rotary::testing::doc_escape;
using ::rotary::testing::doc_row;

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
// Every message quotes user input cut short: no case may produce a longer one, whatever the input size.
constexpr size_t kMaxMessage = 400;

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

/// {"<key>": <depth x '['> <depth x ']'> ...rest}
std::string deep_array(const std::string& key, size_t depth, const std::string& rest = "") {
  return "{\"" + key + "\": " + std::string(depth, '[') + std::string(depth, ']') + rest + "}";
}

/// {"rope_scaling": {"a": {"a": ... }}} nested `depth` objects deep.
std::string deep_object(size_t depth) {
  return "{\"head_dim\": 8, \"rope_scaling\": " + repeat("{\"a\": ", depth) + "1" + std::string(depth, '}') + "}";
}

Spec spec8() {
  Spec s;
  s.head_dim = 8;
  return s;
}

void permute(int64_t rows, int64_t cols, int64_t s_row, int64_t s_col, int64_t d_row, int64_t d_col, int64_t dst_shift) {
  static float w[64];
  QkPermutation p;
  p.n_heads = 2;
  p.head_dim = 8;
  p.from = Pairing::kInterleaved;
  p.to = Pairing::kHalfSplit;
  TensorView src, dst;
  src.data = w;
  src.dtype = DType::kF32;
  src.rank = 2;
  src.shape[0] = rows;
  src.shape[1] = cols;
  src.strides[0] = s_row;
  src.strides[1] = s_col;
  dst = src;
  dst.data = w + dst_shift;
  dst.strides[0] = d_row;
  dst.strides[1] = d_col;
  permute_qk_weight(src, dst, p);
}

std::string npy_with_header(const std::string& dict, int major = 3) {
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  const uint32_t len = static_cast<uint32_t>(dict.size());
  for (int i = 0; i < 4; ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  return out + dict;
}

struct Case {
  const char* name;
  std::function<void()> call;
  K kind;
  std::vector<std::string> needles;
};

std::vector<Case> cases() {
  const std::string hd = R"(, "hidden_size": 64, "num_attention_heads": 8)";
  return {
      // ---- config.json: nesting depth is bounded before parsing, in every field and at every level
      {"config head_dim nested 100000 arrays deep", [] { spec_from_hf_config_json(deep_array("head_dim", 100000), "deep.json"); }, K::kIo, {"deep.json nests arrays/objects deeper than 64 levels"}},
      {"config rope_theta nested 100000 arrays deep", [hd] { spec_from_hf_config_json(deep_array("rope_theta", 100000, hd), "deep.json"); }, K::kIo, {"deeper than 64 levels"}},
      {"config rope_scaling nested 100000 objects deep", [] { spec_from_hf_config_json(deep_object(100000), "deep.json"); }, K::kIo, {"deeper than 64 levels"}},
      {"config unknown key nested 65 arrays deep", [] { spec_from_hf_config_json(deep_array("unused", 65, R"(, "head_dim": 8)"), "deep.json"); }, K::kIo, {"deeper than 64 levels", "at byte 74"}},
      // A quoted value is cut at a byte count: inside a 2-byte character here (the fuzzer's find).
      {"config.json that is a string of 40 two-byte characters", [] { spec_from_hf_config_json("\"" + repeat("\xc3\xa9", 40) + "\"", "s.json"); }, K::kIo, {"s.json must hold a JSON object, got \"\\u00e9\\u00e9", "..."}},
      {"config head_dim an object with a key of 40 two-byte characters", [] { spec_from_hf_config_json("{\"head_dim\": {\"" + repeat("\xc3\xa9", 40) + "\": 1}}", "k.json"); }, K::kInvalidArgument, {"head_dim must be an integer, got {\"\\u00e9"}},
      {"config.json with a raw 0xff byte in a string", [] { spec_from_hf_config_json("{\"a\": \"\xff\"}", "x.json"); }, K::kIo, {"x.json is not valid JSON", "\\xff"}},
      {"config rope_scaling nested per layer type under 5 keys of 300 characters", [] { std::string d; for (char c : std::string("abcde")) d += std::string(d.empty() ? "" : ", ") + "\"" + std::string(300, c) + "\": {}"; spec_from_hf_config_json("{\"head_dim\": 8, \"rope_scaling\": {" + d + "}}", "l.json"); }, K::kUnsupported, {"is nested per layer type (\"aaaaaaaaaaaaaaaa...\" (300 bytes), \"bbbb", ", ... (5 in all)"}},
      {"layer types: a key of 5000 characters with a bad rope_type", [] { layer_type_specs_from_hf_config_json("{\"head_dim\": 8, \"rope_parameters\": {\"" + std::string(5000, 'k') + "\": {\"rope_type\": \"x\"}}}", "n.json"); }, K::kInvalidArgument, {"rope_parameters.\"kkkkkkkkkkkkkkkk...\" (5000 bytes)"}},
      {"layer types: spec_for a type not among 6 of 3000 characters", [] { std::string d; for (char c : std::string("abcdef")) d += std::string(d.empty() ? "" : ", ") + "\"" + std::string(3000, c) + "\": {}"; layer_type_specs_from_hf_config_json("{\"head_dim\": 8, \"rope_parameters\": {" + d + "}}", "t.json").spec_for("full_attention"); }, K::kInvalidArgument, {"layer_type must be one of \"aaaa", ", ... (6 in all), got \"full_attention\""}},
      {"config head_dim nested 63 arrays deep (parsed, value refused)", [] { spec_from_hf_config_json(deep_array("head_dim", 63), "c.json"); }, K::kInvalidArgument, {"head_dim must be an integer, got [[[[", "..."}},
      // ---- config.json: bad values are quoted cut short, whatever their size
      {"config head_dim a 1e6-element array", [] { spec_from_hf_config_json("{\"head_dim\": [" + repeat("1,", 999999) + "1]}", "c.json"); }, K::kInvalidArgument, {"head_dim must be an integer, got [1,1,1", "..."}},
      {"config head_dim a 1 MB string of brackets", [] { spec_from_hf_config_json("{\"head_dim\": \"" + std::string(1 << 20, '[') + "\"}", "c.json"); }, K::kInvalidArgument, {"head_dim must be an integer, got \"[[[", "..."}},
      {"config rope_type a 1 MB name", [] { spec_from_hf_config_json("{\"head_dim\": 8, \"rope_scaling\": {\"rope_type\": \"" + std::string(1 << 20, 'x') + "\"}}", "c.json"); }, K::kInvalidArgument, {"rope_scaling.rope_type must be one of", "(1048576 bytes)"}},
      {"config rope_scaling an object with a 1 MB key", [] { spec_from_hf_config_json("{\"head_dim\": 8, \"rope_scaling\": {\"full_attention\": {}, \"" + std::string(1 << 20, 'k') + "\": 1}}", "c.json"); }, K::kUnsupported, {"is nested per layer type (full_attention):"}},
      {"config unterminated 1 MB string", [] { spec_from_hf_config_json("{\"head_dim\": \"" + std::string(1 << 20, 'a'), "c.json"); }, K::kIo, {"c.json is not valid JSON", "last read: \"\"aaaa", "bytes)"}},
      {"preset name of 1 MB", [] { preset(std::string(1 << 20, 'p')); }, K::kInvalidArgument, {"preset must be one of", "\"pppp", "(1048576 bytes)"}},
      {"rope_type name with control bytes", [] { parse_rope_type(std::string("ya\x01rn\n"), "rope_type"); }, K::kInvalidArgument, {"got \"ya\\x01rn\\x0a\""}},
      {"ggml mode name of 1 MB", [] { parse_ggml_rope_mode(std::string(1 << 20, 'm'), "mode"); }, K::kInvalidArgument, {"mode must be one of", "(1048576 bytes)"}},
      {"vision convention name of 1 MB", [] { parse_vision_convention(std::string(1 << 20, 'v'), "convention"); }, K::kInvalidArgument, {"convention must be one of", "(1048576 bytes)"}},
      // ---- context parallel: checked arithmetic, positions < 2^31
      {"cp_positions offset INT64_MAX", [] { cp_positions({0, 1}, 2, kI64Max); }, K::kOutOfRange, {"the last global position", "9223372036854775807", "overflows int64"}},
      {"cp_positions offset 2^31 - 1 with 2 tokens", [] { cp_positions({0, 1}, 2, (int64_t(1) << 31) - 1); }, K::kOutOfRange, {"must be < 2^31", "last position 2147483648"}},
      {"cp_positions local_len 2^62 on 2 ranks", [] { cp_positions({0, 2}, int64_t(1) << 62, 0); }, K::kInvalidArgument, {"local_len * cp.size", "overflows int64", "4611686018427387904"}},
      {"cp_positions cp.size 2^62", [] { cp_positions({0, int64_t(1) << 62}, 2, 0); }, K::kInvalidArgument, {"local_len * cp.size", "4611686018427387904"}},
      {"cp_global_position local_len 2^62 on 4 ranks", [] { cp_global_position({3, 4}, 1, int64_t(1) << 62); }, K::kInvalidArgument, {"local_len * cp.size", "overflows int64"}},
      {"cp_positions_packed cu [0, 5, INT64_MIN]", [] { cp_positions_packed({0, 1}, {0, 5, kI64Min}); }, K::kInvalidArgument, {"non-decreasing", "-9223372036854775808"}},
      {"cp_positions_packed cu [0, INT64_MAX]", [] { cp_positions_packed({0, 1}, {0, kI64Max}); }, K::kOutOfRange, {"global sequence length must be <= 2^31", "9223372036854775807"}},
      {"cp_local_cu_seqlens cp.size INT64_MAX", [] { cp_local_cu_seqlens({0, kI64Max}, {0, 4}); }, K::kInvalidArgument, {"cp.size must be < 2^62", "9223372036854775807"}},
      {"cp_locate cp.size 2^62", [] { cp_locate(int64_t(1) << 62, 0, 8); }, K::kInvalidArgument, {"cp.size must be < 2^62", "4611686018427387904"}},
      // ---- grid positions
      {"grid_positions 2^62 x 4", [] { grid_positions(int64_t(1) << 62, 4); }, K::kOutOfRange, {"height * width", "4611686018427387904 x 4"}},
      {"grid_positions 2^32 x 2^32", [] { grid_positions(int64_t(1) << 32, int64_t(1) << 32); }, K::kOutOfRange, {"must be < 2^31", "4294967296 x 4294967296"}},
      {"grid_positions 65536 x 32768 (2^31 patches)", [] { grid_positions(65536, 32768); }, K::kOutOfRange, {"must be < 2^31"}},
      // ---- ggml / M-RoPE sections and sizes
      {"ggml mrope sections [INT64_MAX, INT64_MAX, 0, 0]", [] { GgmlRopeParams g; g.mode = GgmlRopeMode::kMrope; g.n_dims = 8; g.sections = {kI64Max, kI64Max, 0, 0}; ggml_frequencies(g); }, K::kInvalidArgument, {"sections[0] must be <= 65536", "9223372036854775807"}},
      {"ggml imrope section 2^62 (3 * section overflows)", [] { GgmlRopeParams g; g.mode = GgmlRopeMode::kImrope; g.n_dims = 8; g.sections = {1, int64_t(1) << 62, 0, 0}; ggml_frequencies(g); }, K::kInvalidArgument, {"sections[1] must be <= 65536", "4611686018427387904"}},
      {"ggml n_dims 2^40", [] { GgmlRopeParams g; g.n_dims = int64_t(1) << 40; ggml_frequencies(g); }, K::kInvalidArgument, {"n_dims must be <= 65536", "1099511627776"}},
      {"ggml vision n_dims 2^62 (2 * n_dims overflows)", [] { GgmlRopeParams g; g.mode = GgmlRopeMode::kVision; g.n_dims = int64_t(1) << 62; g.sections = {1, 1, 0, 0}; ggml_frequencies(g); }, K::kInvalidArgument, {"n_dims must be <= 65536"}},
      {"ggml vision sections {5, 4, 3, 2} (ggml's CPU and GPU ropes disagree)", [] { GgmlRopeParams g; g.mode = GgmlRopeMode::kVision; g.n_dims = 24; g.sections = {5, 4, 3, 2}; ggml_frequencies(g); }, K::kInvalidArgument, {"must give the same rotation on ggml's CPU and GPU backends", "pair 9"}},
      {"ggml apply_axes id -2^31", [] { GgmlRopeParams g; g.mode = GgmlRopeMode::kNeox; g.n_dims = 8; std::vector<float> x(8, 1.0f); std::vector<int64_t> ids = {-(int64_t(1) << 31)}; ApplyArgs a; a.layout = Layout::kTHD; a.q = TensorView::contiguous(x.data(), DType::kF32, {1, 1, 8}); a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {1})); apply_axes(ggml_frequencies(g), a); }, K::kOutOfRange, {"positions.ids[0] must be > -2^31", "-2147483648"}},
      {"mrope_axis_map sections [INT64_MAX, INT64_MAX, 2]", [] { MRope m; m.section = {kI64Max, kI64Max, 2}; mrope_axis_map(m, 4); }, K::kInvalidArgument, {"mrope.section[0] must be <= rotary_dim/2 = 4", "9223372036854775807"}},
      {"mrope_axis_map half 2^62", [] { MRope m; m.section = {1, 1, 2}; mrope_axis_map(m, int64_t(1) << 62); }, K::kInvalidArgument, {"rotary_dim/2 must be in [1, 32768]", "4611686018427387904"}},
      {"vision head_dim 2^40", [] { VisionSpec v; v.head_dim = int64_t(1) << 40; vision_frequencies(v); }, K::kInvalidArgument, {"head_dim must be <= 65536", "1099511627776"}},
      // ---- weight permutation: the byte-count checks of an apply call
      {"permute [16, 2^60+1] f32 (bytes wrap to 64)", [] { permute(16, (int64_t(1) << 60) + 1, 0, 0, 1, 1, 16); }, K::kInvalidArgument, {"src byte size overflows int64", "1152921504606846977"}},
      {"permute src stride INT64_MAX", [] { permute(16, 2, kI64Max, 1, 2, 1, 32); }, K::kInvalidArgument, {"src memory extent overflows int64", "9223372036854775807"}},
      {"permute dst stride 2^62 (extent * 4 bytes overflows)", [] { permute(16, 2, 2, 1, int64_t(1) << 62, 1, 32); }, K::kInvalidArgument, {"dst memory extent overflows int64"}},
      {"permute dst rows overlapping (strides [1, 1])", [] { permute(16, 2, 2, 1, 1, 1, 32); }, K::kInvalidArgument, {"dst elements overlap in memory", "strides [1,1]"}},
      {"permute dst zero column stride", [] { permute(16, 2, 2, 1, 2, 0, 32); }, K::kInvalidArgument, {"dst elements overlap in memory", "strides [2,0]"}},
      {"qk_row_permutation n_heads 2^62", [] { QkPermutation p; p.n_heads = int64_t(1) << 62; p.head_dim = 8; qk_row_permutation(p); }, K::kInvalidArgument, {"n_heads * head_dim overflows int64", "4611686018427387904"}},
      {"qk_row_permutation head_dim 2^40", [] { QkPermutation p; p.n_heads = 2; p.head_dim = int64_t(1) << 40; qk_row_permutation(p); }, K::kInvalidArgument, {"head_dim must be <= 65536", "1099511627776"}},
      // ---- .npy headers: bounded length, quoted cut short
      {"npy header length 2^31", [] { npy_parse(std::string("\x93NUMPY\x03\x00\x00\x00\x00\x80", 12) + std::string(64, ' '), "h.npy"); }, K::kIo, {"truncated header", "2147483648"}},
      {"npy header of 2 MB (beyond the limit)", [] { npy_parse(npy_with_header("{" + std::string(2 << 20, '\x01') + "}"), "h.npy"); }, K::kIo, {"header length 2097154 is beyond rotary's limit of 1048576 bytes"}},
      {"npy malformed header of 500 kB", [] { npy_parse(npy_with_header("{" + std::string(500000, '\x01') + "}"), "h.npy"); }, K::kIo, {"malformed header", "the 500002-byte header, at byte 0: \"{\\x01\\x01", "\"..."}},
      {"npy shape of 1000 dims (rank > 8)", [] { npy_parse(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (" + repeat("1, ", 1000) + ")}"), "h.npy"); }, K::kIo, {"rank > 8 is not supported", "the 3053-byte header, at byte 44"}},
      {"npy descr of 100 kB", [] { npy_parse(npy_with_header("{'descr': '" + std::string(100000, 'f') + "', 'fortran_order': False, 'shape': (1,), }"), "h.npy"); }, K::kIo, {"unsupported dtype", "(100000 bytes)"}},
      // ---- specs that validate must not fail (or give inf/NaN) at first use: refused up front, naming the field
      {"spec yarn with base 1", [] { Spec s = spec8(); s.base = 1.0; s.scaling.type = RopeType::kYarn; s.scaling.factor = 4.0; s.scaling.original_max_position_embeddings = 4096; s.validate(); }, K::kInvalidArgument, {"base 1 with rotary_dim 8 and rope_type yarn", "inv_freq[0] = ", "nan"}},
      {"spec base 1e-300 with rotary_dim 128", [] { Spec s; s.head_dim = 128; s.base = 1e-300; s.validate(); }, K::kInvalidArgument, {"base 1e-300 with rotary_dim 128", "inv_freq[9] = ", "f32 maximum"}},
      {"spec base 1e-320 (subnormal) with rotary_dim 128", [] { Spec s; s.head_dim = 128; s.base = 1e-320; s.validate(); }, K::kInvalidArgument, {"base 1e-320 with rotary_dim 128", "inv_freq[8] = "}},
      {"spec base 1e-60 with rotary_dim 8 (inv_freq past the f32 maximum)", [] { Spec s = spec8(); s.base = 1e-60; s.validate(); }, K::kInvalidArgument, {"base 1e-60 with rotary_dim 8", "inv_freq[3] = 1", "e+45", "f32 maximum"}},
      {"spec longrope with original_max_position_embeddings 1", [] { Spec s = spec8(); s.max_position_embeddings = 2; s.scaling.type = RopeType::kLongRope; s.scaling.original_max_position_embeddings = 1; s.scaling.short_factor = {1, 1, 1, 1}; s.scaling.long_factor = {1, 1, 1, 1}; s.validate(); }, K::kInvalidArgument, {"scaling.original_max_position_embeddings 1", "attention_factor inf"}},
      {"spec longrope long_factor 1e-320", [] { Spec s = spec8(); s.max_position_embeddings = 8192; s.scaling.type = RopeType::kLongRope; s.scaling.original_max_position_embeddings = 4096; s.scaling.short_factor = {1, 1, 1, 1}; s.scaling.long_factor = {1e-320, 1, 1, 1}; s.validate(); }, K::kInvalidArgument, {"scaling.long_factor[0] 1e-320", "inv_freq[0] = inf"}},
      {"spec dynamic with factor 1e300", [] { Spec s = spec8(); s.max_position_embeddings = 64; s.scaling.type = RopeType::kDynamic; s.scaling.factor = 1e300; s.validate(); }, K::kInvalidArgument, {"scaling.factor 1e+300 gives the dynamic NTK base 0 at seq_len max_position_embeddings", "finite and > 0"}},
      {"spec dynamic base 1e280 factor 1e15 (base overflows at seq_len 2^31)", [] { Spec s = spec8(); s.max_position_embeddings = 64; s.scaling.type = RopeType::kDynamic; s.scaling.factor = 1e15; s.base = 1e280; s.validate(); }, K::kInvalidArgument, {"scaling.factor 1000000000000000 gives the dynamic NTK base inf at seq_len 2147483648"}},
      {"spec ntk base 1e300 factor 1e15 (base * factor overflows)", [] { Spec s = spec8(); s.scaling.type = RopeType::kNtk; s.scaling.factor = 1e15; s.base = 1e300; s.validate(); }, K::kInvalidArgument, {"scaling.factor 1000000000000000 gives the NTK base inf", "base 1e+300"}},
      {"spec ntk mixed_b 600 ((R/2)^b overflows)", [] { Spec s = spec8(); s.scaling.type = RopeType::kNtk; s.scaling.factor = 2.0; s.scaling.mixed_b = 600.0; s.validate(); }, K::kInvalidArgument, {"scaling.mixed_b must keep (rotary_dim/2)^mixed_b finite (rotary_dim 8), got 600"}},
      {"spec yarn mscale_all_dim making the denominator 0", [] { Spec s = spec8(); s.scaling.type = RopeType::kYarn; s.scaling.factor = std::exp(1.0); s.scaling.original_max_position_embeddings = 4096; s.scaling.mscale = 1.0; s.scaling.mscale_all_dim = -10.0; s.validate(); }, K::kInvalidArgument, {"scaling.mscale 1 and scaling.mscale_all_dim -10", "attention_factor"}},
      {"spec yarn mscale giving a negative attention factor", [] { Spec s = spec8(); s.scaling.type = RopeType::kYarn; s.scaling.factor = std::exp(1.0); s.scaling.original_max_position_embeddings = 4096; s.scaling.mscale = -20.0; s.scaling.mscale_all_dim = 1.0; s.validate(); }, K::kInvalidArgument, {"scaling.mscale -20", "gives attention_factor -", "> 0"}},
      {"spec attention_factor 1e39 (above the f32 maximum)", [] { Spec s = spec8(); s.scaling.type = RopeType::kYarn; s.scaling.factor = 2.0; s.scaling.original_max_position_embeddings = 4096; s.scaling.attention_factor = 1e39; s.validate(); }, K::kInvalidArgument, {"scaling.attention_factor 1e+39 gives attention_factor 1e+39", "f32 maximum"}},
      {"compute_frequencies seq_len 2^31 + 1", [] { compute_frequencies(spec8(), (int64_t(1) << 31) + 1); }, K::kOutOfRange, {"seq_len must be in [0, 2^31]", "2147483649"}},
      {"apply seq_len 2^40", [] { float x[8] = {1, 1, 1, 1, 1, 1, 1, 1}; Rope r(spec8()); ApplyArgs a; a.q = TensorView::contiguous(x, DType::kF32, {1, 1, 1, 8}); a.seq_len = int64_t(1) << 40; r.apply(a); }, K::kOutOfRange, {"seq_len must be <= 2^31", "1099511627776"}},
  };
}

const char* kind_name(K k) {
  switch (k) {
    case K::kInvalidArgument: return "invalid argument";
    case K::kOutOfRange: return "out of range";
    case K::kUnsupported: return "unsupported";
    case K::kIo: return "io";
    case K::kInternal: return "internal";
  }
  return "?";
}

TEST(HostileCpp, EveryCaseOfTheLimitsFailsWithItsKindAndAShortMessageNamingTheField) {
  const auto all = cases();
  std::vector<std::string> messages;
  for (const Case& c : all) {
    SCOPED_TRACE(c.name);
    try {
      c.call();
      ADD_FAILURE() << "no error for " << c.name;
    } catch (const Error& e) {
      const std::string msg = e.what();
      doc_row("C++", c.name, kind_name(e.kind()), msg);
      messages.push_back(msg);
      EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(c.kind)) << msg;
      EXPECT_EQ(msg.rfind("[rotary_", 0) == 0 || msg.rfind("[npy]", 0) == 0, true) << msg;
      EXPECT_LE(msg.size(), kMaxMessage) << msg.substr(0, 600);
      EXPECT_TRUE(fuzz::valid_utf8(msg)) << msg;  // Python and terminals decode every message
      for (const auto& n : c.needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-rotary exception: " << std::string(e.what()).substr(0, 300);
    }
  }
  const std::string doc = testing::read_file(std::string(ROTARY_SOURCE_DIR) + "/docs/errors.md");
  for (const auto& m : messages)
    EXPECT_NE(doc.find(doc_escape(m)), std::string::npos)
        << "docs/errors.md is out of date (regenerate with python3 scripts/gen_errors_doc.py); missing: " << m;
}

// The neighbours of every refused case work: the limits are where the documentation puts them.
TEST(HostileCpp, TheLimitsThemselvesAreAccepted) {
  // 64 levels of nesting parse (the value is then refused for its type, not for its depth).
  try {
    spec_from_hf_config_json(deep_array("unused", 63, R"(, "head_dim": 8)"), "ok.json");
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
  }
  EXPECT_EQ(spec_from_hf_config_json(R"({"head_dim": 8, "x": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})").head_dim, 8)
      << "brackets inside strings are not nesting";
  EXPECT_EQ(cp_positions({0, 1}, 2, (int64_t(1) << 31) - 2), (std::vector<int64_t>{2147483646, 2147483647}));
  EXPECT_EQ(cp_positions({1, 2}, 4, 100), (std::vector<int64_t>{102, 103, 104, 105}));
  EXPECT_EQ(cp_positions_packed({0, 1}, {0, 3, 8}), (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 3, 4}));
  EXPECT_EQ(grid_positions(0, int64_t(1) << 62).size(), 0u);
  EXPECT_EQ(grid_positions(3, 4).size(), 24u);
  {
    GgmlRopeParams g;
    g.mode = GgmlRopeMode::kMrope;
    g.n_dims = 8;
    g.sections = {2, 1, 1, 0};
    EXPECT_EQ(ggml_frequencies(g).freqs.inv_freq.size(), 4u);
  }
  // A dynamic spec with an ordinary factor validates and stays finite at seq_len 2^31.
  Spec d = spec8();
  d.max_position_embeddings = 64;
  d.scaling.type = RopeType::kDynamic;
  d.scaling.factor = 4.0;
  for (double v : compute_frequencies(d, int64_t(1) << 31).inv_freq) EXPECT_TRUE(std::isfinite(v));
  // The largest attention factor that fits f32 is accepted.
  Spec y = spec8();
  y.scaling.type = RopeType::kYarn;
  y.scaling.factor = 2.0;
  y.scaling.original_max_position_embeddings = 4096;
  y.scaling.attention_factor = static_cast<double>(std::numeric_limits<float>::max());
  EXPECT_NO_THROW(y.validate());
}

}  // namespace
}  // namespace rotary
