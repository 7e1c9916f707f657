// C API hostile-input battery (status, message naming the argument, in-place tensors untouched) and handle semantics.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "c_api/boundary.h"
#include "rotary/rotary_c.h"
#include "testing/shared.h"

namespace {

struct SpecDeleter { void operator()(rotary_spec_t* s) const { rotary_spec_free(s); } };
struct RopeDeleter { void operator()(rotary_rope_t* r) const { rotary_rope_free(r); } };
using SpecPtr = std::unique_ptr<rotary_spec_t, SpecDeleter>;
using RopePtr = std::unique_ptr<rotary_rope_t, RopeDeleter>;

SpecPtr make_spec(int64_t head_dim) {
  rotary_spec_desc_t d;
  rotary_spec_desc_init(&d);
  d.head_dim = head_dim;
  rotary_spec_t* s = nullptr;
  EXPECT_EQ(rotary_spec_create(&d, &s), ROTARY_OK) << rotary_last_error();
  return SpecPtr(s);
}

RopePtr make_rope(const rotary_spec_t* spec, rotary_cos_sin_mode_t mode = ROTARY_COS_SIN_AUTO,
                  int64_t max_positions = 0) {
  rotary_rope_options_t o;
  rotary_rope_options_init(&o);
  o.mode = mode;
  o.max_positions = max_positions;
  rotary_rope_t* r = nullptr;
  EXPECT_EQ(rotary_rope_create(spec, &o, &r), ROTARY_OK) << rotary_last_error();
  return RopePtr(r);
}

TEST(CApiErrors, HostileApplyArgumentsLeaveTensorsUntouched) {
  const int64_t B = 2, S = 3, H = 2, D = 8;
  SpecPtr spec = make_spec(D);
  RopePtr rope = make_rope(spec.get());
  RopePtr small_table = make_rope(spec.get(), ROTARY_COS_SIN_TABLE, 16);

  std::vector<float> q = rotary::testing::randn(B * S * H * D, 1), q_copy = q;
  std::vector<float> k = rotary::testing::randn(B * S * 1 * D, 2), k_copy = k;
  std::vector<float> other(q.size(), 0.f);
  std::vector<int64_t> ids = {0, 1, 2, 3, 4, 5};
  std::vector<float> fids = {0.f, 1.f, NAN, 3.f, 4.f, 5.f};
  std::vector<int32_t> cu = {0, 4, 2, 6};
  const int64_t qshape[4] = {B, S, H, D}, kshape[4] = {B, S, 1, D}, idshape[2] = {B, S};

  auto base = [&] {
    rotary_apply_args_t a;
    rotary_apply_args_init(&a);
    rotary_tensor_contiguous(&a.q, q.data(), ROTARY_DTYPE_F32, 4, qshape);
    rotary_tensor_contiguous(&a.k, k.data(), ROTARY_DTYPE_F32, 4, kshape);
    return a;
  };
  struct Case {
    const char* what;
    std::function<void(rotary_apply_args_t&)> mutate;
    rotary_status_t status;
    const char* needle;
    rotary_rope_t* rope = nullptr;  // default: `rope`
  };
  const int64_t thd_shape[3] = {S * B, H, D};
  std::vector<Case> cases = {
      {"negative stride", [](rotary_apply_args_t& a) { a.q.strides[1] = -16; }, ROTARY_ERROR_INVALID_ARGUMENT, "stride"},
      {"zero head stride", [](rotary_apply_args_t& a) { a.q.strides[2] = 0; }, ROTARY_ERROR_INVALID_ARGUMENT, "stride"},
      {"partially overlapping q_out", [&](rotary_apply_args_t& a) {
         a.q_out = a.q;
         a.q_out.data = q.data() + 1;
       }, ROTARY_ERROR_INVALID_ARGUMENT, "q_out"},
      {"q_out dtype mismatch", [&](rotary_apply_args_t& a) {
         rotary_tensor_contiguous(&a.q_out, other.data(), ROTARY_DTYPE_F16, 4, qshape);
       }, ROTARY_ERROR_INVALID_ARGUMENT, "q_out"},
      {"q_out shape mismatch", [&](rotary_apply_args_t& a) {
         rotary_tensor_contiguous(&a.q_out, other.data(), ROTARY_DTYPE_F32, 4, kshape);
       }, ROTARY_ERROR_INVALID_ARGUMENT, "q_out"},
      {"k dtype differs from q", [](rotary_apply_args_t& a) { a.k.dtype = ROTARY_DTYPE_BF16; }, ROTARY_ERROR_INVALID_ARGUMENT, "k"},
      {"k head_dim differs", [](rotary_apply_args_t& a) { a.k.shape[3] = 4; }, ROTARY_ERROR_INVALID_ARGUMENT, "k"},
      {"k batch differs", [](rotary_apply_args_t& a) { a.k.shape[0] = 1; }, ROTARY_ERROR_INVALID_ARGUMENT, "k"},
      {"k_out without k", [&](rotary_apply_args_t& a) {
         a.k_out = a.k;
         a.k.data = nullptr;
       }, ROTARY_ERROR_INVALID_ARGUMENT, "k_out"},
      {"q rank 3 for bshd", [](rotary_apply_args_t& a) { a.q.rank = 3; }, ROTARY_ERROR_INVALID_ARGUMENT, "q"},
      {"q rank 0", [](rotary_apply_args_t& a) { a.q.rank = 0; }, ROTARY_ERROR_INVALID_ARGUMENT, "args->q.rank"},
      {"negative dimension", [](rotary_apply_args_t& a) { a.q.shape[1] = -3; }, ROTARY_ERROR_INVALID_ARGUMENT, "q"},
      {"huge shape overflowing bytes", [](rotary_apply_args_t& a) {
         a.q.shape[0] = int64_t(1) << 40;
         a.q.shape[1] = int64_t(1) << 40;
       }, ROTARY_ERROR_INVALID_ARGUMENT, "q"},
      {"negative ids", [&](rotary_apply_args_t& a) {
         ids[4] = -9;
         a.positions.kind = ROTARY_POSITIONS_IDS;
         rotary_tensor_contiguous(&a.positions.ids, ids.data(), ROTARY_DTYPE_I64, 2, idshape);
       }, ROTARY_ERROR_INVALID_ARGUMENT, "-9"},
      {"ids beyond 2^31", [&](rotary_apply_args_t& a) {
         ids[4] = int64_t(1) << 40;
         a.positions.kind = ROTARY_POSITIONS_IDS;
         rotary_tensor_contiguous(&a.positions.ids, ids.data(), ROTARY_DTYPE_I64, 2, idshape);
       }, ROTARY_ERROR_OUT_OF_RANGE, "1099511627776"},
      {"ids shape mismatch", [&](rotary_apply_args_t& a) {
         const int64_t bad[2] = {B, S - 1};
         a.positions.kind = ROTARY_POSITIONS_IDS;
         rotary_tensor_contiguous(&a.positions.ids, ids.data(), ROTARY_DTYPE_I64, 2, bad);
       }, ROTARY_ERROR_INVALID_ARGUMENT, "ids"},
      {"NaN fractional id", [&](rotary_apply_args_t& a) {
         a.positions.kind = ROTARY_POSITIONS_IDS;
         rotary_tensor_contiguous(&a.positions.ids, fids.data(), ROTARY_DTYPE_F32, 2, idshape);
       }, ROTARY_ERROR_INVALID_ARGUMENT, "ids"},
      {"ids kind with float q dtype ids", [&](rotary_apply_args_t& a) {
         a.positions.kind = ROTARY_POSITIONS_IDS;
         rotary_tensor_contiguous(&a.positions.ids, q.data(), ROTARY_DTYPE_F16, 2, idshape);
       }, ROTARY_ERROR_INVALID_ARGUMENT, "ids"},
      {"bad positions kind", [](rotary_apply_args_t& a) { a.positions.kind = (rotary_positions_kind_t)7; },
       ROTARY_ERROR_INVALID_ARGUMENT, "args->positions.kind"},
      {"packed with bshd", [&](rotary_apply_args_t& a) {
         const int64_t cs[1] = {4};
         a.positions.kind = ROTARY_POSITIONS_PACKED;
         rotary_tensor_contiguous(&a.positions.cu_seqlens, cu.data(), ROTARY_DTYPE_I32, 1, cs);
       }, ROTARY_ERROR_INVALID_ARGUMENT, "packed"},
      {"cu_seqlens not monotone", [&](rotary_apply_args_t& a) {
         const int64_t cs[1] = {4};
         a.layout = ROTARY_LAYOUT_THD;
         rotary_tensor_contiguous(&a.q, q.data(), ROTARY_DTYPE_F32, 3, thd_shape);
         a.k.data = nullptr;
         a.positions.kind = ROTARY_POSITIONS_PACKED;
         rotary_tensor_contiguous(&a.positions.cu_seqlens, cu.data(), ROTARY_DTYPE_I32, 1, cs);
       }, ROTARY_ERROR_INVALID_ARGUMENT, "cu_seqlens"},
      {"negative offset", [](rotary_apply_args_t& a) { a.positions.offset = -1; }, ROTARY_ERROR_INVALID_ARGUMENT, "offset"},
      {"offset overflow", [](rotary_apply_args_t& a) { a.positions.offset = std::numeric_limits<int64_t>::max() - 1; },
       ROTARY_ERROR_OUT_OF_RANGE, "offset"},
      {"position past fixed table", [](rotary_apply_args_t& a) { a.positions.offset = 20; }, ROTARY_ERROR_OUT_OF_RANGE,
       "16", small_table.get()},
      {"bad direction", [](rotary_apply_args_t& a) { a.direction = (rotary_direction_t)2; }, ROTARY_ERROR_INVALID_ARGUMENT,
       "args->direction"},
      {"bad backend", [](rotary_apply_args_t& a) { a.backend = (rotary_backend_t)-1; }, ROTARY_ERROR_INVALID_ARGUMENT,
       "args->backend"},
      {"negative threads", [](rotary_apply_args_t& a) { a.threads = -2; }, ROTARY_ERROR_INVALID_ARGUMENT, "args->threads"},
      {"seq_len -7", [](rotary_apply_args_t& a) { a.seq_len = -7; }, ROTARY_ERROR_INVALID_ARGUMENT, "args->seq_len"},
      {"struct_size too large", [](rotary_apply_args_t& a) { a.struct_size += 8; }, ROTARY_ERROR_INVALID_ARGUMENT,
       "struct_size"},
  };
  for (auto& c : cases) {
    SCOPED_TRACE(c.what);
    ids = {0, 1, 2, 3, 4, 5};
    rotary_apply_args_t a = base();
    c.mutate(a);
    rotary_status_t st = rotary_rope_apply(c.rope ? c.rope : rope.get(), &a);
    std::string msg = rotary_last_error();
    if (std::getenv("ROTARY_TEST_VERBOSE")) std::printf("  %-32s -> %s\n", c.what, msg.c_str());
    EXPECT_EQ(st, c.status) << rotary_status_name(st) << ": " << msg;
    EXPECT_NE(msg.find(c.needle), std::string::npos) << "message: " << msg << "\nexpected to mention: " << c.needle;
    EXPECT_EQ(0, std::memcmp(q.data(), q_copy.data(), q.size() * sizeof(float))) << "q modified";
    EXPECT_EQ(0, std::memcmp(k.data(), k_copy.data(), k.size() * sizeof(float))) << "k modified";
  }
  // And the unmodified arguments work (the battery's failures are due to the mutations alone).
  rotary_apply_args_t a = base();
  EXPECT_EQ(rotary_rope_apply(rope.get(), &a), ROTARY_OK) << rotary_last_error();
}

TEST(CApiErrors, CudaBackendWithoutCudaIsUnsupported) {
  SpecPtr spec = make_spec(8);
  RopePtr rope = make_rope(spec.get());
  std::vector<float> q(8, 1.f);
  const int64_t shape[4] = {1, 1, 1, 8};
  rotary_apply_args_t a;
  rotary_apply_args_init(&a);
  rotary_tensor_contiguous(&a.q, q.data(), ROTARY_DTYPE_F32, 4, shape);
  a.backend = ROTARY_BACKEND_CUDA;
  rotary_status_t st = rotary_rope_apply(rope.get(), &a);
  if (st == ROTARY_OK) GTEST_SKIP() << "built with CUDA";
  EXPECT_EQ(st, ROTARY_ERROR_UNSUPPORTED) << rotary_last_error();
  EXPECT_NE(std::string(rotary_last_error()).find("CUDA"), std::string::npos) << rotary_last_error();
}

TEST(CApiErrors, LastErrorIsPerThread) {
  rotary_spec_t* s = nullptr;
  ASSERT_NE(rotary_spec_from_preset("first-unknown-name", &s), ROTARY_OK);
  std::string other;
  std::thread t([&] {
    rotary_spec_t* s2 = nullptr;
    rotary_spec_from_preset("second-unknown-name", &s2);
    other = rotary_last_error();
  });
  t.join();
  EXPECT_NE(std::string(rotary_last_error()).find("first-unknown-name"), std::string::npos) << rotary_last_error();
  EXPECT_NE(other.find("second-unknown-name"), std::string::npos) << other;
  // A successful call does not clear it.
  SpecPtr ok = make_spec(8);
  EXPECT_NE(std::string(rotary_last_error()).find("first-unknown-name"), std::string::npos);
}

// Failures that are no rotary::Error (out of memory, another exception) said "[rotary] ..." where every other
// message names the entry point: now theirs too.
TEST(CApiErrors, InternalFailuresNameTheEntryPoint) {
  using rotary::c_api::guarded;
  EXPECT_EQ(guarded("rotary_rope_apply", [] { throw std::bad_alloc(); }), ROTARY_ERROR_INTERNAL);
  EXPECT_STREQ(rotary_last_error(), "[rotary_rope_apply] out of memory");
  EXPECT_EQ(guarded("rotary_prologue", [] { throw 7; }), ROTARY_ERROR_INTERNAL);
  EXPECT_STREQ(rotary_last_error(), "[rotary_prologue] internal error (unknown exception)");
  EXPECT_EQ(guarded("rotary_spec_create", [] { throw std::logic_error("bad state"); }), ROTARY_ERROR_INTERNAL);
  EXPECT_STREQ(rotary_last_error(), "[rotary_spec_create] internal error: bad state");
}

TEST(CApiErrors, SpecDescriptionRoundTripsThroughCreate) {
  for (int64_t i = 0; i < rotary_preset_count(); ++i) {
    const char* name = rotary_preset_name(i);
    SCOPED_TRACE(name);
    rotary_spec_t* raw = nullptr;
    ASSERT_EQ(rotary_spec_from_preset(name, &raw), ROTARY_OK) << rotary_last_error();
    SpecPtr a(raw);
    rotary_spec_desc_t d;
    rotary_spec_desc_init(&d);
    ASSERT_EQ(rotary_spec_describe(a.get(), &d), ROTARY_OK);
    ASSERT_EQ(rotary_spec_create(&d, &raw), ROTARY_OK) << rotary_last_error();
    SpecPtr b(raw);
    for (int64_t seq_len : {int64_t(-1), int64_t(1) << 20}) {
      int64_t na = 0, nb = 0;
      std::vector<double> fa(512), fb(512);
      ASSERT_EQ(rotary_spec_inv_freq(a.get(), seq_len, fa.data(), 512, &na), ROTARY_OK);
      ASSERT_EQ(rotary_spec_inv_freq(b.get(), seq_len, fb.data(), 512, &nb), ROTARY_OK);
      ASSERT_EQ(na, nb);
      for (int64_t j = 0; j < na; ++j) EXPECT_EQ(fa[j], fb[j]) << j;
      double afa = 0, afb = 0;
      ASSERT_EQ(rotary_spec_attention_factor(a.get(), seq_len, &afa), ROTARY_OK);
      ASSERT_EQ(rotary_spec_attention_factor(b.get(), seq_len, &afb), ROTARY_OK);
      EXPECT_EQ(afa, afb);
    }
  }
}

TEST(CApiErrors, SpecDescriptionErrorsNameTheField) {
  struct Case {
    const char* what;
    std::function<void(rotary_spec_desc_t&)> mutate;
    const char* needle;
  };
  static const double factors[2] = {1.0, 1.0};
  const std::vector<Case> cases = {
      {"head_dim 0", [](rotary_spec_desc_t& d) { d.head_dim = 0; }, "head_dim"},
      {"rotary_dim > head_dim", [](rotary_spec_desc_t& d) { d.rotary_dim = 16; }, "rotary_dim"},
      {"base 0", [](rotary_spec_desc_t& d) { d.base = 0; }, "base"},
      {"base NaN", [](rotary_spec_desc_t& d) { d.base = NAN; }, "base"},
      {"pairing -1", [](rotary_spec_desc_t& d) { d.pairing = ROTARY_PAIRING_DEFAULT; }, "desc->pairing"},
      {"rope_type 99", [](rotary_spec_desc_t& d) { d.rope_type = (rotary_rope_type_t)99; }, "desc->rope_type"},
      {"linear factor 0.5", [](rotary_spec_desc_t& d) { d.rope_type = ROTARY_ROPE_LINEAR; d.factor = 0.5; }, "factor"},
      {"short_factor NULL", [](rotary_spec_desc_t& d) { d.short_factor_len = 4; }, "desc->short_factor"},
      {"long_factor len -1", [](rotary_spec_desc_t& d) { d.long_factor_len = -1; }, "desc->long_factor_len"},
      {"longrope wrong length", [](rotary_spec_desc_t& d) {
         d.rope_type = ROTARY_ROPE_LONGROPE;
         d.max_position_embeddings = 4096;
         d.original_max_position_embeddings = 2048;
         d.short_factor = factors;
         d.short_factor_len = 2;
         d.long_factor = factors;
         d.long_factor_len = 2;
       }, "short_factor"},
      {"mrope sections sum", [](rotary_spec_desc_t& d) {
         static const int64_t sec[3] = {1, 1, 1};
         d.mrope_section = sec;
         d.mrope_section_len = 3;
       }, "mrope"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    rotary_spec_desc_t d;
    rotary_spec_desc_init(&d);
    d.head_dim = 8;
    c.mutate(d);
    rotary_spec_t* s = nullptr;
    EXPECT_EQ(rotary_spec_create(&d, &s), ROTARY_ERROR_INVALID_ARGUMENT) << rotary_last_error();
    EXPECT_EQ(s, nullptr);
    EXPECT_NE(std::string(rotary_last_error()).find(c.needle), std::string::npos) << rotary_last_error();
  }
}

TEST(CApiErrors, RopeOptionsValidated) {
  SpecPtr spec = make_spec(8);
  rotary_rope_options_t o;
  rotary_rope_options_init(&o);
  rotary_rope_t* r = nullptr;
  o.mode = (rotary_cos_sin_mode_t)5;
  EXPECT_EQ(rotary_rope_create(spec.get(), &o, &r), ROTARY_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(rotary_last_error()).find("options->mode"), std::string::npos);
  rotary_rope_options_init(&o);
  o.max_positions = -4;
  EXPECT_EQ(rotary_rope_create(spec.get(), &o, &r), ROTARY_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(rotary_last_error()).find("options->max_positions"), std::string::npos);
  rotary_rope_options_init(&o);
  o.struct_size = 1;
  EXPECT_EQ(rotary_rope_create(spec.get(), &o, &r), ROTARY_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(rotary_last_error()).find("options->struct_size"), std::string::npos);
  EXPECT_EQ(r, nullptr);
  EXPECT_EQ(rotary_rope_create(spec.get(), nullptr, nullptr), ROTARY_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(rotary_last_error()).find("out"), std::string::npos);
}

TEST(CApiErrors, ConfigJsonFromCMatchesPreset) {
  const char* json = R"({"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 131072,
    "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"}})";
  rotary_spec_t* raw = nullptr;
  ASSERT_EQ(rotary_spec_from_config_json(json, std::strlen(json), &raw), ROTARY_OK) << rotary_last_error();
  SpecPtr a(raw);
  ASSERT_EQ(rotary_spec_from_preset("llama-3.1-8b", &raw), ROTARY_OK) << rotary_last_error();
  SpecPtr b(raw);
  std::vector<double> fa(64), fb(64);
  int64_t n = 0;
  ASSERT_EQ(rotary_spec_inv_freq(a.get(), -1, fa.data(), 64, &n), ROTARY_OK);
  ASSERT_EQ(n, 64);
  ASSERT_EQ(rotary_spec_inv_freq(b.get(), -1, fb.data(), 64, &n), ROTARY_OK);
  EXPECT_EQ(fa, fb);
  // A short buffer receives a prefix; count is the full size.
  std::vector<double> few(3, -1.0);
  ASSERT_EQ(rotary_spec_inv_freq(a.get(), -1, few.data(), 3, &n), ROTARY_OK);
  EXPECT_EQ(n, 64);
  EXPECT_EQ(few[2], fa[2]);
  // Not NUL-terminated: only `length` bytes are read.
  std::string padded = std::string(json) + "garbage";
  ASSERT_EQ(rotary_spec_from_config_json(padded.data(), std::strlen(json), &raw), ROTARY_OK) << rotary_last_error();
  rotary_spec_free(raw);
}

TEST(CApiErrors, PrologueWithSeveralSourcesNeedsSourceIndex) {
  // Two sources and no source_index used to rotate every sequence with sources[0], silently.
  const int64_t T = 2, D = 8;
  SpecPtr spec = make_spec(D);
  RopePtr ra = make_rope(spec.get()), rb = make_rope(spec.get());
  std::vector<float> q = rotary::testing::randn(T * D, 1), k = rotary::testing::randn(T * D, 2);
  std::vector<float> v = rotary::testing::randn(T * D, 3), kc(T * D, 0.5f), vc(T * D, 0.5f);
  const std::vector<float> q0 = q, kc0 = kc, vc0 = vc;
  std::vector<int64_t> slots = {0, 1}, index = {1};
  const int64_t shape[3] = {T, 1, D}, cshape[4] = {T, 1, 1, D}, sshape[1] = {T}, ishape[1] = {1};
  const rotary_frequency_source_t sources[2] = {{ra.get(), -1}, {rb.get(), -1}};
  rotary_prologue_args_t a;
  rotary_prologue_args_init(&a);
  rotary_tensor_contiguous(&a.q, q.data(), ROTARY_DTYPE_F32, 3, shape);
  rotary_tensor_contiguous(&a.k, k.data(), ROTARY_DTYPE_F32, 3, shape);
  rotary_tensor_contiguous(&a.v, v.data(), ROTARY_DTYPE_F32, 3, shape);
  rotary_tensor_contiguous(&a.k_cache, kc.data(), ROTARY_DTYPE_F32, 4, cshape);
  rotary_tensor_contiguous(&a.v_cache, vc.data(), ROTARY_DTYPE_F32, 4, cshape);
  rotary_tensor_contiguous(&a.slot_mapping, slots.data(), ROTARY_DTYPE_I64, 1, sshape);
  a.positions.offset = 3;
  a.sources = sources;
  a.n_sources = 2;
  a.threads = 1;
  EXPECT_EQ(rotary_prologue(&a), ROTARY_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(rotary_last_error(),
               "[rotary_prologue] source_index must be given when sources has 2 entries (the source of each "
               "sequence), got none");
  EXPECT_EQ(q, q0);
  EXPECT_EQ(kc, kc0);
  EXPECT_EQ(vc, vc0);
  // With the index (thd without cu_seqlens: one sequence), the call goes through.
  rotary_tensor_contiguous(&a.source_index, index.data(), ROTARY_DTYPE_I64, 1, ishape);
  EXPECT_EQ(rotary_prologue(&a), ROTARY_OK) << rotary_last_error();
  EXPECT_NE(kc, kc0);
}

TEST(CApiErrors, PrologueAndRerotationRefuseSeqLenPast2To31NamingTheField) {
  // Was accepted (the C++ layer checked only > 0) and nothing told the caller its length was not used as given.
  const int64_t T = 2, D = 8, big = (int64_t(1) << 31) + 1;
  SpecPtr spec = make_spec(D);
  RopePtr rope = make_rope(spec.get());
  std::vector<float> q = rotary::testing::randn(T * D, 1), k = rotary::testing::randn(T * D, 2), kc(T * D, 0.5f);
  const std::vector<float> q0 = q, kc0 = kc;
  std::vector<int64_t> slots = {0, 1}, from = {0, 0}, to = {3, 4};
  const int64_t shape[3] = {T, 1, D}, cshape[4] = {T, 1, 1, D}, sshape[1] = {T};
  rotary_frequency_source_t source = {rope.get(), big};
  rotary_prologue_args_t a;
  rotary_prologue_args_init(&a);
  rotary_tensor_contiguous(&a.q, q.data(), ROTARY_DTYPE_F32, 3, shape);
  rotary_tensor_contiguous(&a.k, k.data(), ROTARY_DTYPE_F32, 3, shape);
  rotary_tensor_contiguous(&a.k_cache, kc.data(), ROTARY_DTYPE_F32, 4, cshape);
  rotary_tensor_contiguous(&a.slot_mapping, slots.data(), ROTARY_DTYPE_I64, 1, sshape);
  a.sources = &source;
  a.n_sources = 1;
  EXPECT_EQ(rotary_prologue(&a), ROTARY_ERROR_OUT_OF_RANGE);
  EXPECT_STREQ(rotary_last_error(),
               "[rotary_prologue] args->sources[0].seq_len must be <= 2^31 (positions are < 2^31), got 2147483649");
  EXPECT_EQ(q, q0);
  EXPECT_EQ(kc, kc0);
  rotary_rerotate_args_t r;
  rotary_rerotate_args_init(&r);
  rotary_tensor_contiguous(&r.k_cache, kc.data(), ROTARY_DTYPE_F32, 4, cshape);
  rotary_tensor_contiguous(&r.slots, slots.data(), ROTARY_DTYPE_I64, 1, sshape);
  rotary_tensor_contiguous(&r.from_positions, from.data(), ROTARY_DTYPE_I64, 1, sshape);
  rotary_tensor_contiguous(&r.to_positions, to.data(), ROTARY_DTYPE_I64, 1, sshape);
  r.from.rope = rope.get();
  for (int end = 0; end < 2; ++end) {
    r.from.seq_len = end == 0 ? big : -1;
    r.to.seq_len = end == 1 ? big : -1;
    EXPECT_EQ(rotary_rerotate_cache(&r), ROTARY_ERROR_OUT_OF_RANGE);
    EXPECT_STREQ(rotary_last_error(), end == 0 ? "[rotary_rerotate_cache] args->from.seq_len must be <= 2^31 (positions "
                                                 "are < 2^31), got 2147483649"
                                               : "[rotary_rerotate_cache] args->to.seq_len must be <= 2^31 (positions "
                                                 "are < 2^31), got 2147483649");
    EXPECT_EQ(kc, kc0);
  }
  // 2^31 itself is a valid length.
  source.seq_len = r.to.seq_len = int64_t(1) << 31;
  r.from.seq_len = -1;
  EXPECT_EQ(rotary_prologue(&a), ROTARY_OK) << rotary_last_error();
  EXPECT_EQ(rotary_rerotate_cache(&r), ROTARY_OK) << rotary_last_error();
}

}  // namespace
