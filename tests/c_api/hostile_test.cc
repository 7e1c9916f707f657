// Hostile inputs at the C API: every entry point returns a status (never aborts), names the argument and value, writes nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "rotary/rotary_c.h"
#include "testing/errors_doc.h"
#include "testing/shared.h"

namespace {

using ::rotary::testing::doc_escape;
using ::rotary::testing::doc_row;

constexpr int64_t kB = 2, kS = 3, kH = 2, kD = 8;

/// Everything one C call may touch, rebuilt for each case.
struct CCall {
  std::vector<float> q = rotary::testing::randn(kB * kS * kH * kD, 21);
  std::vector<float> k = rotary::testing::randn(kB * kS * 1 * kD, 22);
  std::vector<float> spare = std::vector<float>(kB * kS * kH * kD, 9.0f);
  std::vector<int64_t> ids = {0, 1, 2, 3, 4, 5};
  std::vector<double> fids = {0, 1, 2, 3, 4, 5};
  std::vector<int32_t> cu = {0, 2, 6};
  std::vector<float> cos = std::vector<float>(4 * 4, 0.5f), sin = std::vector<float>(4 * 4, 0.5f);
  rotary_tensor_t cos_t{}, sin_t{};
  rotary_apply_args_t a{};
  rotary_spec_t* spec = nullptr;
  rotary_rope_t* rope = nullptr;
  rotary_rope_t* fixed = nullptr;  // ROTARY_COS_SIN_TABLE, max_positions 16

  CCall() {
    rotary_spec_desc_t d;
    rotary_spec_desc_init(&d);
    d.head_dim = kD;
    d.max_position_embeddings = 64;
    EXPECT_EQ(rotary_spec_create(&d, &spec), ROTARY_OK) << rotary_last_error();
    EXPECT_EQ(rotary_rope_create(spec, nullptr, &rope), ROTARY_OK) << rotary_last_error();
    rotary_rope_options_t o;
    rotary_rope_options_init(&o);
    o.mode = ROTARY_COS_SIN_TABLE;
    o.max_positions = 16;
    EXPECT_EQ(rotary_rope_create(spec, &o, &fixed), ROTARY_OK) << rotary_last_error();
    rotary_apply_args_init(&a);
    const int64_t qs[4] = {kB, kS, kH, kD}, ks[4] = {kB, kS, 1, kD}, cs[2] = {4, 4};
    rotary_tensor_contiguous(&a.q, q.data(), ROTARY_DTYPE_F32, 4, qs);
    rotary_tensor_contiguous(&a.k, k.data(), ROTARY_DTYPE_F32, 4, ks);
    rotary_tensor_contiguous(&cos_t, cos.data(), ROTARY_DTYPE_F32, 2, cs);
    rotary_tensor_contiguous(&sin_t, sin.data(), ROTARY_DTYPE_F32, 2, cs);
    a.threads = 1;
  }
  ~CCall() {
    rotary_rope_free(fixed);
    rotary_rope_free(rope);
    rotary_spec_free(spec);
  }
  void use_ids(rotary_dtype_t dt = ROTARY_DTYPE_I64) {
    const int64_t shape[2] = {kB, kS};
    a.positions.kind = ROTARY_POSITIONS_IDS;
    rotary_tensor_contiguous(&a.positions.ids, dt == ROTARY_DTYPE_F64 ? static_cast<void*>(fids.data()) : ids.data(), dt,
                             2, shape);
  }
  void use_thd() {
    const int64_t qs[3] = {kB * kS, kH, kD};
    a.layout = ROTARY_LAYOUT_THD;
    rotary_tensor_contiguous(&a.q, q.data(), ROTARY_DTYPE_F32, 3, qs);
    a.k.data = nullptr;
    const int64_t n[1] = {static_cast<int64_t>(cu.size())};
    a.positions.kind = ROTARY_POSITIONS_PACKED;
    rotary_tensor_contiguous(&a.positions.cu_seqlens, cu.data(), ROTARY_DTYPE_I32, 1, n);
  }
};

struct CCase {
  const char* name;
  std::function<rotary_status_t(CCall&)> call;  // sets up and performs the call
  rotary_status_t status;
  std::vector<std::string> needles;
};

rotary_spec_t* g_unused = nullptr;

std::vector<CCase> c_cases() {
  const int64_t big = int64_t(1) << 31;
  return {
      // null pointers
      {"rope NULL", [](CCall& c) { return rotary_rope_apply(nullptr, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"[rotary_rope_apply]", "rope must not be NULL"}},
      {"args NULL", [](CCall& c) { return rotary_rope_apply(c.rope, nullptr); }, ROTARY_ERROR_INVALID_ARGUMENT, {"args must not be NULL"}},
      {"cos NULL", [](CCall& c) { return rotary_apply_cos_sin(nullptr, &c.sin_t, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"[rotary_apply_cos_sin]", "cos must not be NULL"}},
      {"sin data NULL", [](CCall& c) { c.sin_t.data = nullptr; return rotary_apply_cos_sin(&c.cos_t, &c.sin_t, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"sin->data must not be NULL"}},
      {"q data NULL", [](CCall& c) { c.a.q.data = nullptr; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"args->q.data must not be NULL"}},
      {"spec out NULL", [](CCall&) { return rotary_spec_from_preset("llama-3.1-8b", nullptr); }, ROTARY_ERROR_INVALID_ARGUMENT, {"out must not be NULL"}},
      {"preset name NULL", [](CCall&) { return rotary_spec_from_preset(nullptr, &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"name must not be NULL"}},
      {"config text NULL", [](CCall&) { return rotary_spec_from_config_json(nullptr, 10, &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"json_text must not be NULL"}},
      {"inv_freq count NULL", [](CCall& c) { return rotary_spec_inv_freq(c.spec, -1, nullptr, 0, nullptr); }, ROTARY_ERROR_INVALID_ARGUMENT, {"count must not be NULL"}},
      {"inv_freq out NULL with capacity", [](CCall& c) { int64_t n = 0; return rotary_spec_inv_freq(c.spec, -1, nullptr, 4, &n); }, ROTARY_ERROR_INVALID_ARGUMENT, {"out must not be NULL when capacity = 4"}},
      {"tensor_contiguous shape NULL", [](CCall& c) { rotary_tensor_t t; return rotary_tensor_contiguous(&t, c.q.data(), ROTARY_DTYPE_F32, 2, nullptr); }, ROTARY_ERROR_INVALID_ARGUMENT, {"shape must not be NULL"}},
      {"rope_create spec NULL", [](CCall& c) { return rotary_rope_create(nullptr, nullptr, &c.rope); }, ROTARY_ERROR_INVALID_ARGUMENT, {"spec must not be NULL"}},
      {"layout name unknown", [](CCall&) { rotary_layout_t l = 0; return rotary_layout_from_name("bsdh", &l); }, ROTARY_ERROR_INVALID_ARGUMENT, {"[rotary_layout_from_name] layout must be bshd, bhsd or thd, got \"bsdh\""}},
      {"backend name unknown", [](CCall&) { rotary_backend_t b = 0; return rotary_backend_from_name("gpu", &b); }, ROTARY_ERROR_INVALID_ARGUMENT, {"[rotary_backend_from_name] backend must be auto, cpu, reference or cuda, got \"gpu\""}},
      {"pairing name NULL", [](CCall&) { rotary_pairing_t p = 0; return rotary_pairing_from_name(nullptr, &p); }, ROTARY_ERROR_INVALID_ARGUMENT, {"[rotary_pairing_from_name]", "name must not be NULL"}},
      // struct sizes and enums
      {"args struct_size 0", [](CCall& c) { c.a.struct_size = 0; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"args->struct_size", "got 0"}},
      {"layout 3", [](CCall& c) { c.a.layout = 3; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"args->layout", "got 3"}},
      {"pairing -2", [](CCall& c) { c.a.pairing = -2; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"args->pairing", "got -2"}},
      {"q dtype 99", [](CCall& c) { c.a.q.dtype = 99; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"args->q.dtype", "got 99"}},
      {"k rank 9", [](CCall& c) { c.a.k.rank = 9; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"args->k.rank", "got 9"}},
      {"ids rank -1", [](CCall& c) { c.use_ids(); c.a.positions.ids.rank = -1; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"args->positions.ids.rank", "got -1"}},
      {"options mode 7", [](CCall& c) { rotary_rope_options_t o; rotary_rope_options_init(&o); o.mode = 7; rotary_rope_t* r = nullptr; return rotary_rope_create(c.spec, &o, &r); }, ROTARY_ERROR_INVALID_ARGUMENT, {"options->mode", "got 7"}},
      {"options max_positions -1", [](CCall& c) { rotary_rope_options_t o; rotary_rope_options_init(&o); o.max_positions = -1; rotary_rope_t* r = nullptr; return rotary_rope_create(c.spec, &o, &r); }, ROTARY_ERROR_INVALID_ARGUMENT, {"options->max_positions", "-1"}},
      // shapes, strides, aliasing, dtypes
      {"q rank 3 for bshd", [](CCall& c) { c.a.q.rank = 3; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"q must have rank 4", "got rank 3"}},
      {"negative q stride", [](CCall& c) { c.a.q.strides[0] = -48; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"q strides must be >= 0", "-48"}},
      {"q_out overlapping q by half", [](CCall& c) { c.a.q_out = c.a.q; c.a.q_out.data = c.q.data() + 48; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"q_out must either be q itself"}},
      // outputs over the other inputs (the setup writes nothing: the spare memory's 9.0f are valid f32 positions and cos values)
      {"q_out holding the position ids", [](CCall& c) { c.a.q_out = c.a.q; c.a.q_out.data = c.spare.data(); const int64_t shape[2] = {kB, kS}; c.a.positions.kind = ROTARY_POSITIONS_IDS; rotary_tensor_contiguous(&c.a.positions.ids, c.spare.data() + 16, ROTARY_DTYPE_F32, 2, shape); return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"q_out overlaps positions.ids", "before it is read"}},
      {"q_out holding the caller cos", [](CCall& c) { c.a.q_out = c.a.q; c.a.q_out.data = c.spare.data(); c.cos_t.data = c.spare.data() + 32; return rotary_apply_cos_sin(&c.cos_t, &c.sin_t, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"q_out overlaps cos"}},
      {"k in place holding the caller sin", [](CCall& c) { c.sin_t.data = c.k.data() + 8; return rotary_apply_cos_sin(&c.cos_t, &c.sin_t, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"k (rotated in place) overlaps sin"}},
      {"k_out zero stride", [](CCall& c) { c.a.k_out = c.a.k; c.a.k_out.data = c.spare.data(); c.a.k_out.strides[1] = 0; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"k_out stride of dim 1 is 0"}},
      {"k f64 with q f32", [](CCall& c) { c.a.k.dtype = ROTARY_DTYPE_F64; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"k dtype must equal q dtype f32", "f64"}},
      {"cos bf16 with sin f32", [](CCall& c) { c.cos_t.dtype = ROTARY_DTYPE_BF16; return rotary_apply_cos_sin(&c.cos_t, &c.sin_t, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"sin dtype must equal cos dtype bf16", "f32"}},
      {"bytes overflow", [](CCall& c) { c.a.k.data = nullptr; c.a.q.shape[0] = int64_t(1) << 62; c.a.q.strides[0] = 8; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"q", "overflows int64", "4611686018427387904"}},
      // positions
      {"ids i64 2^31", [big](CCall& c) { c.ids[5] = big; c.use_ids(); return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_OUT_OF_RANGE, {"positions.ids[1,2]", "2147483648"}},
      {"ids past a fixed table", [](CCall& c) { c.ids[2] = 16; c.use_ids(); return rotary_rope_apply(c.fixed, &c.a); }, ROTARY_ERROR_OUT_OF_RANGE, {"position 16", "max_positions is 16"}},
      {"ids past caller cos rows", [](CCall& c) { c.ids = {0, 4, 1, 2, 3, 0}; c.use_ids(); return rotary_apply_cos_sin(&c.cos_t, &c.sin_t, &c.a); }, ROTARY_ERROR_OUT_OF_RANGE, {"positions.ids[0,1] is 4,", "4 rows"}},
      {"fractional NaN", [](CCall& c) { c.fids[3] = NAN; c.use_ids(ROTARY_DTYPE_F64); return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"positions.ids[1,0]", "nan"}},
      {"cu_seqlens not matching T", [](CCall& c) { c.cu = {0, 2, 5}; c.use_thd(); return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"cu_seqlens[2]", "T = 6", "got 5"}},
      {"cu_seqlens not monotone", [](CCall& c) { c.cu = {0, 4, 3, 6}; c.use_thd(); return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"non-decreasing", "cu_seqlens[2] = 3"}},
      // ids set but kind left at its default (offset): they were ignored, q rotated at 0..S-1 (status 0)
      {"ids with kind offset", [](CCall& c) { c.use_ids(); c.a.positions.kind = ROTARY_POSITIONS_OFFSET; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"positions.ids is given but positions.kind is offset"}},
      {"offset with kind ids", [](CCall& c) { c.use_ids(); c.a.positions.offset = 7; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"positions.offset is given but positions.kind is ids"}},
      {"seq_len 0", [](CCall& c) { c.a.seq_len = 0; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_INVALID_ARGUMENT, {"args->seq_len", "got 0"}},
      // specs and configs
      {"desc mrope_section_len 1000", [](CCall&) { rotary_spec_desc_t d; rotary_spec_desc_init(&d); d.head_dim = 8; int64_t s[3] = {1, 1, 2}; d.mrope_section = s; d.mrope_section_len = 1000; return rotary_spec_create(&d, &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"desc->mrope_section_len", "1000"}},
      {"desc mrope sections sum", [](CCall&) { rotary_spec_desc_t d; rotary_spec_desc_init(&d); d.head_dim = 8; int64_t s[3] = {1, 1, 1}; d.mrope_section = s; d.mrope_section_len = 3; return rotary_spec_create(&d, &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"mrope.section must sum to rotary_dim/2 = 4", "got 3"}},
      {"desc short_factor NULL", [](CCall&) { rotary_spec_desc_t d; rotary_spec_desc_init(&d); d.head_dim = 8; d.short_factor_len = 4; return rotary_spec_create(&d, &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"desc->short_factor must not be NULL", "4"}},
      {"desc head_dim 2^40", [](CCall&) { rotary_spec_desc_t d; rotary_spec_desc_init(&d); d.head_dim = int64_t(1) << 40; return rotary_spec_create(&d, &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"head_dim must be <= 65536", "1099511627776"}},
      {"config truncated", [](CCall&) { const char t[] = R"({"head_dim": 64, "rope_theta": 5e5)"; return rotary_spec_from_config_json(t, sizeof t - 1, &g_unused); }, ROTARY_ERROR_IO, {"config.json is not valid JSON"}},
      // the parser ends its input at a NUL byte: the bytes after it were ignored (status 0)
      {"config with a NUL byte", [](CCall&) { const char t[] = "{\"head_dim\": 8}\0garbage"; return rotary_spec_from_config_json(t, sizeof t - 1, &g_unused); }, ROTARY_ERROR_IO, {"not valid JSON", "a NUL byte at offset 15 before more text"}},
      {"config not an object", [](CCall&) { const char t[] = "[1, 2]"; return rotary_spec_from_config_json(t, sizeof t - 1, &g_unused); }, ROTARY_ERROR_IO, {"must hold a JSON object", "[1,2]"}},
      {"config length cuts the text", [](CCall&) { const char t[] = R"({"head_dim": 64})"; return rotary_spec_from_config_json(t, 5, &g_unused); }, ROTARY_ERROR_IO, {"not valid JSON"}},
      {"config factor string", [](CCall&) { const char t[] = R"({"head_dim": 64, "rope_scaling": {"type": "linear", "factor": "2"}})"; return rotary_spec_from_config_json(t, sizeof t - 1, &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"rope_scaling.factor must be a number", "\"2\""}},
      {"config huge head_dim", [](CCall&) { const char t[] = R"({"head_dim": 9223372036854775807})"; return rotary_spec_from_config_json(t, sizeof t - 1, &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"head_dim must be in [1, 65536]", "9223372036854775807"}},
      {"config file missing", [](CCall&) { return rotary_spec_from_config_file("/nonexistent/rotary/config.json", &g_unused); }, ROTARY_ERROR_IO, {"/nonexistent/rotary/config.json"}},
      // an endless file: refused after a bounded read (it used to read until memory ran out)
      {"config file endless", [](CCall&) { return rotary_spec_from_config_file("/dev/zero", &g_unused); }, ROTARY_ERROR_IO, {"config file '/dev/zero' is larger than the 67108864-byte limit"}},
      {"preset unknown", [](CCall&) { return rotary_spec_from_preset("gpt-17", &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"gpt-17"}},
      // inputs whose size or depth is hostile: bounded work, short messages
      {"config 100000 arrays deep", [](CCall&) { const std::string t = "{\"head_dim\": " + std::string(100000, '[') + std::string(100000, ']') + "}"; return rotary_spec_from_config_json(t.data(), t.size(), &g_unused); }, ROTARY_ERROR_IO, {"deeper than 64 levels"}},
      {"config rope_scaling 100000 objects deep", [](CCall&) { std::string t = "{\"head_dim\": 8, \"rope_scaling\": "; for (int i = 0; i < 100000; ++i) t += "{\"a\": "; t += "1" + std::string(100000, '}') + "}"; return rotary_spec_from_config_json(t.data(), t.size(), &g_unused); }, ROTARY_ERROR_IO, {"deeper than 64 levels"}},
      {"config factor a 1 MB string", [](CCall&) { const std::string t = "{\"head_dim\": 8, \"rope_scaling\": {\"type\": \"linear\", \"factor\": \"" + std::string(1 << 20, '7') + "\"}}"; return rotary_spec_from_config_json(t.data(), t.size(), &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"rope_scaling.factor must be a number", "..."}},
      {"preset name of 1 MB", [](CCall&) { const std::string n(1 << 20, 'q'); return rotary_spec_from_preset(n.c_str(), &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"(1048576 bytes)"}},
      // checked arithmetic in the helpers
      {"cp_positions offset INT64_MAX", [](CCall&) { int64_t out[2]; return rotary_cp_positions(0, 1, 2, std::numeric_limits<int64_t>::max(), out); }, ROTARY_ERROR_OUT_OF_RANGE, {"last global position", "9223372036854775807"}},
      {"cp_positions local_len 2^62 on 2 ranks", [](CCall&) { int64_t out[2]; return rotary_cp_positions(0, 2, int64_t(1) << 62, 0, out); }, ROTARY_ERROR_INVALID_ARGUMENT, {"local_len * cp.size", "overflows int64"}},
      {"cp_positions_packed cu [0, 5, INT64_MIN]", [](CCall&) { int64_t cu[3] = {0, 5, std::numeric_limits<int64_t>::min()}, out[8], n = 0; return rotary_cp_positions_packed(0, 1, cu, 3, out, 8, &n); }, ROTARY_ERROR_INVALID_ARGUMENT, {"non-decreasing", "-9223372036854775808"}},
      {"ggml mrope sections [INT64_MAX, INT64_MAX, 0, 0]", [](CCall&) { rotary_ggml_params_t g; rotary_ggml_params_init(&g); g.n_dims = 8; g.mode = ROTARY_GGML_MROPE; g.sections[0] = g.sections[1] = std::numeric_limits<int64_t>::max(); rotary_axis_freqs_t* f = nullptr; const rotary_status_t st = rotary_ggml_frequencies(&g, &f); rotary_axis_freqs_free(f); return st; }, ROTARY_ERROR_INVALID_ARGUMENT, {"sections[0] must be <= 65536"}},
      {"permute [16, 2^60+1] f32", [](CCall& c) { rotary_tensor_t src{}, dst{}; src.data = c.spare.data(); src.dtype = ROTARY_DTYPE_F32; src.rank = 2; src.shape[0] = 16; src.shape[1] = (int64_t(1) << 60) + 1; dst = src; dst.data = c.spare.data() + 16; dst.strides[0] = dst.strides[1] = 1; return rotary_permute_qk_weight(&src, &dst, 2, 8, 0, ROTARY_PAIRING_INTERLEAVED, ROTARY_PAIRING_HALF); }, ROTARY_ERROR_INVALID_ARGUMENT, {"src byte size overflows int64", "1152921504606846977"}},
      {"permute dst rows overlapping", [](CCall& c) { rotary_tensor_t src{}, dst{}; const int64_t shape[2] = {16, 2}; rotary_tensor_contiguous(&src, c.q.data(), ROTARY_DTYPE_F32, 2, shape); dst = src; dst.data = c.spare.data(); dst.strides[0] = 1; return rotary_permute_qk_weight(&src, &dst, 2, 8, 0, ROTARY_PAIRING_INTERLEAVED, ROTARY_PAIRING_HALF); }, ROTARY_ERROR_INVALID_ARGUMENT, {"dst elements overlap in memory"}},
      // specs that would fail (or produce inf/NaN) at first use are refused when created
      {"desc yarn base 1", [](CCall&) { rotary_spec_desc_t d; rotary_spec_desc_init(&d); d.head_dim = 8; d.base = 1.0; d.rope_type = ROTARY_ROPE_YARN; d.factor = 4; d.original_max_position_embeddings = 4096; return rotary_spec_create(&d, &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"base 1 with rotary_dim 8 and rope_type yarn", "inv_freq[0]"}},
      {"desc dynamic factor 1e300", [](CCall&) { rotary_spec_desc_t d; rotary_spec_desc_init(&d); d.head_dim = 8; d.max_position_embeddings = 64; d.rope_type = ROTARY_ROPE_DYNAMIC; d.factor = 1e300; return rotary_spec_create(&d, &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"scaling.factor 1e+300 gives the dynamic NTK base"}},
      {"desc attention_factor 1e39", [](CCall&) { rotary_spec_desc_t d; rotary_spec_desc_init(&d); d.head_dim = 8; d.rope_type = ROTARY_ROPE_YARN; d.factor = 2; d.original_max_position_embeddings = 4096; d.attention_factor = 1e39; return rotary_spec_create(&d, &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"scaling.attention_factor 1e+39", "f32 maximum"}},
      {"config longrope original_max_position_embeddings 1", [](CCall&) { const char t[] = R"({"head_dim": 8, "max_position_embeddings": 2, "rope_scaling": {"type": "longrope", "short_factor": [1, 1, 1, 1], "long_factor": [1, 1, 1, 1], "original_max_position_embeddings": 1}})"; return rotary_spec_from_config_json(t, sizeof t - 1, &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"scaling.original_max_position_embeddings 1", "attention_factor inf"}},
      {"inv_freq seq_len 2^40", [](CCall& c) { int64_t n = 0; return rotary_spec_inv_freq(c.spec, int64_t(1) << 40, nullptr, 0, &n); }, ROTARY_ERROR_OUT_OF_RANGE, {"seq_len must be in [0, 2^31]", "1099511627776"}},
      {"apply seq_len 2^40", [](CCall& c) { c.a.seq_len = int64_t(1) << 40; return rotary_rope_apply(c.rope, &c.a); }, ROTARY_ERROR_OUT_OF_RANGE, {"seq_len must be <= 2^31", "1099511627776"}},
      {"desc rope_type 8", [](CCall&) { rotary_spec_desc_t d; rotary_spec_desc_init(&d); d.head_dim = 8; d.rope_type = 8; return rotary_spec_create(&d, &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"desc->rope_type", "[0, 7], got 8"}},
      {"desc ntk mixed_b -1", [](CCall&) { rotary_spec_desc_t d; rotary_spec_desc_init(&d); d.head_dim = 8; d.rope_type = ROTARY_ROPE_NTK; d.factor = 2; d.mixed_b = -1; return rotary_spec_create(&d, &g_unused); }, ROTARY_ERROR_INVALID_ARGUMENT, {"scaling.mixed_b must be > 0", "-1"}},
      {"config nested per layer type", [](CCall&) { const char t[] = R"({"head_dim": 8, "layer_types": ["a"], "rope_parameters": {"a": {"rope_theta": 5}}})"; return rotary_spec_from_config_json(t, sizeof t - 1, &g_unused); }, ROTARY_ERROR_UNSUPPORTED, {"rope_parameters is nested per layer type (a)", "rotary_layer_specs_from_config_json"}},
      {"layer specs unknown layer type", [](CCall&) {
         const char t[] = R"({"head_dim": 8, "layer_types": ["a"], "rope_parameters": {"a": {"rope_theta": 5}}})";
         rotary_layer_specs_t* l = nullptr;
         EXPECT_EQ(rotary_layer_specs_from_config_json(t, sizeof t - 1, &l), ROTARY_OK);
         const rotary_status_t st = rotary_layer_specs_get(l, "b", &g_unused);
         rotary_layer_specs_free(l);
         return st; }, ROTARY_ERROR_INVALID_ARGUMENT, {"[rotary_config] layer_type must be one of a, got \"b\""}},
      {"layer specs entry not an object", [](CCall&) { const char t[] = R"({"head_dim": 8, "layer_types": ["a"], "rope_parameters": {"a": 5}})"; rotary_layer_specs_t* l = nullptr; return rotary_layer_specs_from_config_json(t, sizeof t - 1, &l); }, ROTARY_ERROR_INVALID_ARGUMENT, {"rope_parameters.a must be an object or null, got 5"}},
      {"layer specs NULL out", [](CCall&) { return rotary_layer_specs_from_config_file("x.json", nullptr); }, ROTARY_ERROR_INVALID_ARGUMENT, {"[rotary_layer_specs_from_config_file] out must not be NULL"}},
  };
}

TEST(HostileC, EveryCaseReturnsItsStatusNamesTheArgumentAndWritesNothing) {
  const auto all = c_cases();
  EXPECT_GE(all.size(), 40u);
  std::vector<std::string> messages;
  for (const CCase& c : all) {
    SCOPED_TRACE(c.name);
    CCall call;
    const auto q0 = call.q, k0 = call.k, spare0 = call.spare;
    g_unused = nullptr;
    const rotary_status_t st = c.call(call);
    const std::string msg = rotary_last_error();
    doc_row("C", c.name, rotary_status_name(st), msg);
    messages.push_back(msg);
    EXPECT_EQ(st, c.status) << rotary_status_name(st) << ": " << msg;
    EXPECT_EQ(msg.rfind("[rotary", 0), 0u) << msg;
    for (const auto& n : c.needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    EXPECT_EQ(g_unused, nullptr) << "a failed create must not return a handle";
    rotary_spec_free(g_unused);
    EXPECT_EQ(0, std::memcmp(call.q.data(), q0.data(), q0.size() * sizeof(float))) << "q changed";
    EXPECT_EQ(0, std::memcmp(call.k.data(), k0.data(), k0.size() * sizeof(float))) << "k changed";
    EXPECT_EQ(0, std::memcmp(call.spare.data(), spare0.data(), spare0.size() * sizeof(float))) << "k_out changed";
  }
  const std::string doc = rotary::testing::read_file(std::string(ROTARY_SOURCE_DIR) + "/docs/errors.md");
  for (const auto& m : messages)
    EXPECT_NE(doc.find(doc_escape(m)), std::string::npos)
        << "docs/errors.md is out of date (regenerate with python3 scripts/gen_errors_doc.py); missing: " << m;
}

TEST(HostileC, TheUnbrokenCallsSucceed) {
  CCall c;
  EXPECT_EQ(rotary_rope_apply(c.rope, &c.a), ROTARY_OK) << rotary_last_error();
  CCall d;
  EXPECT_EQ(rotary_apply_cos_sin(&d.cos_t, &d.sin_t, &d.a), ROTARY_OK) << rotary_last_error();
  CCall e;
  e.use_thd();
  EXPECT_EQ(rotary_rope_apply(e.fixed, &e.a), ROTARY_OK) << rotary_last_error();
  // A config length counting the literal's terminator (`sizeof t`): the trailing NULs end the text.
  const char t[] = "{\"head_dim\": 8, \"rope_theta\": 500000}";
  rotary_spec_t* s = nullptr;
  EXPECT_EQ(rotary_spec_from_config_json(t, sizeof t, &s), ROTARY_OK) << rotary_last_error();
  rotary_spec_free(s);
}

// Many threads share one rope handle; failing and succeeding calls interleave: each thread sees its own
// error text, and successful results equal the single-threaded ones.
TEST(HostileC, ConcurrentCallsOnOneRopeKeepErrorsPerThread) {
  CCall base;
  constexpr int kThreads = 6, kIters = 15;
  auto work = [&](int th, int it, std::string* err) {
    std::vector<float> x = rotary::testing::randn(4 * kD, static_cast<uint64_t>(th * 50 + it));
    rotary_apply_args_t a;
    rotary_apply_args_init(&a);
    const int64_t shape[4] = {1, 4, 1, kD};
    rotary_tensor_contiguous(&a.q, x.data(), ROTARY_DTYPE_F32, 4, shape);
    a.positions.offset = (it % 3 == 2) ? -(th + 1) : 100 * it * (th + 1);
    a.threads = 1;
    const rotary_status_t st = rotary_rope_apply(base.rope, &a);
    *err = st == ROTARY_OK ? "" : rotary_last_error();
    return x;
  };
  std::vector<std::vector<float>> want(kThreads * kIters), got(kThreads * kIters);
  std::vector<std::string> want_err(kThreads * kIters), got_err(kThreads * kIters);
  for (int th = 0; th < kThreads; ++th)
    for (int it = 0; it < kIters; ++it) want[th * kIters + it] = work(th, it, &want_err[th * kIters + it]);
  CCall shared;  // a fresh rope whose table grows during the concurrent phase
  rotary_rope_t* const own = base.rope;
  base.rope = shared.rope;
  std::vector<std::thread> pool;
  for (int th = 0; th < kThreads; ++th)
    pool.emplace_back([&, th] {
      for (int it = 0; it < kIters; ++it) got[th * kIters + it] = work(th, it, &got_err[th * kIters + it]);
    });
  for (auto& t : pool) t.join();
  base.rope = own;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << "call " << i;
    EXPECT_EQ(got_err[i], want_err[i]) << "call " << i;
  }
  EXPECT_NE(want_err[2].find("-1"), std::string::npos) << want_err[2];
}

}  // namespace
