// Hostile inputs of rotary::prologue and rerotate_cache: each error names its argument and value, and nothing is written.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "prologue/prologue_testing.h"
#include "testing/errors_doc.h"
#include "testing/shared.h"

namespace rotary {
namespace {

using K = Error::Kind;
using testing::Buf;

/// A valid call (thd T=4, q [4,2,8], k/v [4,1,8] f32; paged NHD cache [4,2,1,8], i8 with scales)
/// that each case breaks in one way; every tensor is compared byte for byte afterwards.
struct Call {
  Spec spec;
  std::unique_ptr<Rope> rope, other, fixed;  // fixed: table mode, max_positions 3
  Buf q{DType::kF32, 64, 1}, k{DType::kF32, 32, 2}, v{DType::kF32, 32, 3}, qo{DType::kF32, 64, 4};
  Buf kc{DType::kI8, 64}, vc{DType::kI8, 64}, ks{DType::kF32, 8, 5}, vs{DType::kF32, 8, 6};
  Buf w{DType::kF32, 8, 7}, spare{DType::kF32, 256, 8};
  std::vector<int64_t> slots = {0, 3, -1, 6}, idx = {0, 1, 2, 3};
  std::vector<int32_t> i32 = {5, 6, 7, 8};  // rerotate's to_positions: every row moves (a zero angle writes nothing)
  float fscale = 0.5f;
  PrologueArgs a;
  RerotateArgs r;
  bool rerotate = false;

  Call() {
    spec.head_dim = 8;
    spec.max_position_embeddings = 64;
    rope = std::make_unique<Rope>(spec);
    Spec s2 = spec;
    s2.head_dim = 16;
    other = std::make_unique<Rope>(s2);
    RopeOptions o;
    o.mode = CosSinMode::kTable;
    o.table.max_positions = 3;
    fixed = std::make_unique<Rope>(spec, o);
    a.q = q.view({4, 2, 8});
    a.k = k.view({4, 1, 8});
    a.v = v.view({4, 1, 8});
    a.sources = {{rope.get(), std::nullopt}};
    a.k_cache = kc.view({4, 2, 1, 8});
    a.v_cache = vc.view({4, 2, 1, 8});
    a.k_scale = ks.view({4, 2, 1});
    a.v_scale = vs.view({4, 2, 1});
    a.slot_mapping = TensorView::contiguous(slots.data(), DType::kI64, {4});
    a.q_norm_weight = w.view({8});
    a.threads = 1;
    r.k_cache = a.k_cache;
    r.k_scale = a.k_scale;
    r.slots = TensorView::contiguous(slots.data(), DType::kI64, {4});
    r.from_positions = TensorView::contiguous(idx.data(), DType::kI64, {4});
    r.to_positions = TensorView::contiguous(i32.data(), DType::kI32, {4});
    r.from = {rope.get(), std::nullopt};
  }
  void fp8() {
    kc.dtype = vc.dtype = DType::kF8E4M3;
    a.k_cache.dtype = a.v_cache.dtype = DType::kF8E4M3;
    a.k_scale = TensorView::contiguous(&fscale, DType::kF32, {1});
    a.v_scale = a.k_scale;
  }
  void run() {
    if (rerotate) rerotate_cache(r);
    else prologue(a);
  }
  std::vector<std::vector<unsigned char>> snapshot() const {
    return {q.bytes, k.bytes, v.bytes, qo.bytes, kc.bytes, vc.bytes, ks.bytes, vs.bytes, spare.bytes};
  }
};

struct Case {
  const char* name;
  std::function<void(Call&)> setup;
  K kind;
  std::vector<std::string> needles;
};

TensorView at(Buf& b, int64_t offset, DType dt, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(b.bytes.data() + offset * static_cast<int64_t>(dtype_size(dt)), dt, shape);
}

std::vector<Case> cases() {
  return {
      {"slot out of range", [](Call& c) { c.slots[1] = 8; }, K::kOutOfRange, {"slot_mapping[1]", "num_blocks * block_size = 8", "got 8"}},
      {"slot below -1", [](Call& c) { c.slots[0] = -2; }, K::kOutOfRange, {"slot_mapping[0]", "got -2"}},
      {"slot written twice", [](Call& c) { c.slots[3] = 0; }, K::kInvalidArgument, {"slot_mapping[3] repeats slot_mapping[0] = 0", "once per call"}},
      {"slot_mapping missing", [](Call& c) { c.a.slot_mapping = {}; }, K::kInvalidArgument, {"slot_mapping must be given", "nhd"}},
      {"slot_mapping wrong length", [](Call& c) { c.a.slot_mapping.shape[0] = 3; }, K::kInvalidArgument, {"slot_mapping must have shape [T] = [4]", "[3]"}},
      {"slot_mapping f32", [](Call& c) { c.a.slot_mapping = c.w.view({4}); }, K::kInvalidArgument, {"slot_mapping dtype must be i32 or i64", "f32"}},
      {"cache_positions with a paged cache", [](Call& c) { c.a.cache_positions = TensorView::contiguous(c.idx.data(), DType::kI64, {1}); }, K::kInvalidArgument, {"cache_positions addresses contiguous caches", "nhd"}},
      {"contiguous cache past S_max", [](Call& c) { c.a.cache_layout = CacheLayout::kBSHD; c.a.slot_mapping = {}; c.a.k_cache = at(c.kc, 0, DType::kI8, {1, 6, 1, 8}); c.a.v_cache = at(c.vc, 0, DType::kI8, {1, 6, 1, 8}); c.a.k_scale = at(c.ks, 0, DType::kF32, {1, 6, 1}); c.a.v_scale = at(c.vs, 0, DType::kF32, {1, 6, 1}); c.idx[0] = 3; c.a.cache_positions = TensorView::contiguous(c.idx.data(), DType::kI64, {1}); }, K::kOutOfRange, {"cache_positions[0]", "6 - 4", "got 3"}},
      {"paged cache of block_size 0", [](Call& c) { c.a.k_cache = c.kc.view({4, 0, 1, 8}); c.a.v_cache = c.vc.view({4, 0, 1, 8}); c.a.k_scale = c.ks.view({4, 0, 1}); c.a.v_scale = c.vs.view({4, 0, 1}); }, K::kOutOfRange, {"slot_mapping[0]", "num_blocks * block_size = 0", "got 0"}},
      {"contiguous cache of S_max 0", [](Call& c) { c.a.cache_layout = CacheLayout::kBSHD; c.a.slot_mapping = {}; c.a.k_cache = c.kc.view({1, 0, 1, 8}); c.a.v_cache = c.vc.view({1, 0, 1, 8}); c.a.k_scale = c.ks.view({1, 0, 1}); c.a.v_scale = c.vs.view({1, 0, 1}); }, K::kOutOfRange, {"cache_positions[0]", "0 - 4", "got 0"}},
      {"positions.ids inside v_cache", [](Call& c) { c.a.positions = Positions::from_ids(TensorView::contiguous(c.vc.data(), DType::kI32, {4})); }, K::kInvalidArgument, {"v_cache must not share memory with positions.ids"}},
      {"positions.batch_offsets inside k_cache", [](Call& c) { c.a.positions.batch_offsets = TensorView::contiguous(c.kc.data(), DType::kI32, {1}); }, K::kInvalidArgument, {"k_cache must not share memory with positions.batch_offsets"}},
      {"k_cache dtype f64", [](Call& c) { c.a.k_cache = TensorView::contiguous(c.spare.data(), DType::kF64, {4, 2, 1, 8}); }, K::kInvalidArgument, {"k_cache dtype must be f32, f16, bf16, i8, f8e4m3 or f8e5m2", "f64"}},
      {"v_cache dtype differs", [](Call& c) { c.a.v_cache = at(c.spare, 0, DType::kF32, {4, 2, 1, 8}); c.a.v_scale = {}; }, K::kInvalidArgument, {"v_cache dtype must equal k_cache dtype i8", "f32"}},
      {"k_cache heads differ", [](Call& c) { c.a.k_cache = c.kc.view({4, 1, 2, 8}); }, K::kInvalidArgument, {"k_cache must have shape [num_blocks, block_size, Hkv, D]", "Hkv = 1", "[4,1,2,8]"}},
      {"Dv differs from v_cache last dim", [](Call& c) { c.a.v_cache = c.vc.view({4, 2, 1, 4}); c.a.v = c.v.view({4, 1, 8}); }, K::kInvalidArgument, {"v_cache must have shape", "D = 8", "[4,2,1,4]"}},
      {"k_cache rank 3", [](Call& c) { c.a.k_cache = c.kc.view({8, 1, 8}); }, K::kInvalidArgument, {"k_cache must have rank 4", "got rank 3"}},
      {"k_scale missing for i8", [](Call& c) { c.a.k_scale = {}; }, K::kInvalidArgument, {"k_scale must be given for an i8 k_cache", "got none"}},
      {"v_scale missing for fp8", [](Call& c) { c.fp8(); c.a.v_scale = {}; }, K::kInvalidArgument, {"v_scale must be given for an f8e4m3 v_cache", "got none"}},
      {"k_scale wrong shape", [](Call& c) { c.a.k_scale = c.ks.view({4, 2}); }, K::kInvalidArgument, {"k_scale must have k_cache's shape without its last axis [4,2,1]", "[4,2]"}},
      {"fp8 scale zero", [](Call& c) { c.fp8(); c.fscale = 0.0f; }, K::kInvalidArgument, {"k_scale must be finite and > 0", "got 0"}},
      {"fp8 scale two values", [](Call& c) { c.fp8(); c.a.k_scale = c.ks.view({2}); }, K::kInvalidArgument, {"k_scale must hold one value", "[2]"}},
      {"scale for an f32 cache", [](Call& c) { c.a.k_cache = at(c.spare, 0, DType::kF32, {4, 2, 1, 8}); c.a.v_cache = at(c.spare, 64, DType::kF32, {4, 2, 1, 8}); c.a.v_scale = {}; }, K::kInvalidArgument, {"k_scale is given but k_cache dtype is f32"}},
      {"norm weight wrong length", [](Call& c) { c.a.q_norm_weight = c.w.view({6}); }, K::kInvalidArgument, {"q_norm_weight must have shape [D] = [8]", "[6]"}},
      {"norm weight i64", [](Call& c) { c.a.k_norm_weight = TensorView::contiguous(c.idx.data(), DType::kI64, {4}); }, K::kInvalidArgument, {"k_norm_weight dtype must be floating", "i64"}},
      {"norm eps negative", [](Call& c) { c.a.norm_eps = -1; }, K::kInvalidArgument, {"norm_eps must be finite and >= 0", "-1"}},
      {"norm offset nan", [](Call& c) { c.a.norm_offset = NAN; }, K::kInvalidArgument, {"norm_offset must be finite", "nan"}},
      {"k_cache overlaps k", [](Call& c) { c.a.k_cache = TensorView::contiguous(c.k.data(), DType::kF32, {4, 1, 1, 8}); c.a.v_cache = at(c.spare, 0, DType::kF32, {4, 1, 1, 8}); c.a.k_scale = {}; c.a.v_scale = {}; c.slots = {0, 1, -1, 3}; }, K::kInvalidArgument, {"k_cache must not share memory with k"}},
      {"k_cache and v_cache share rows", [](Call& c) { c.a.v_cache = c.a.k_cache; }, K::kInvalidArgument, {"k_cache must not share memory with v_cache"}},
      {"k_scale inside v_scale", [](Call& c) { c.a.v_scale = c.a.k_scale; }, K::kInvalidArgument, {"k_scale must not share memory with v_scale"}},
      {"q_out overlaps v", [](Call& c) { c.a.q_out = TensorView::contiguous(c.v.data(), DType::kF32, {4, 1, 8}); c.a.q = c.q.view({4, 1, 8}); }, K::kInvalidArgument, {"q_out must not share memory with v"}},
      {"v heads differ from k", [](Call& c) { c.a.v = c.v.view({4, 2, 4}); }, K::kInvalidArgument, {"v must have k's batch, tokens and heads (1, 4, 1)", "[4,2,4]"}},
      {"v dtype differs", [](Call& c) { c.a.v = at(c.spare, 0, DType::kF16, {4, 1, 8}); }, K::kInvalidArgument, {"v dtype must equal q dtype f32", "f16"}},
      {"v without v_cache", [](Call& c) { c.a.v_cache = {}; c.a.v_scale = {}; }, K::kInvalidArgument, {"v is given but v_cache is absent"}},
      {"v_scale without caches", [](Call& c) { c.a.k_cache = c.a.v_cache = c.a.slot_mapping = c.a.k_scale = c.a.v = {}; }, K::kInvalidArgument, {"k_scale and v_scale address a cache, but k_cache is absent"}},
      {"k_out with a cache", [](Call& c) { c.a.k_out = c.spare.view({4, 1, 8}); }, K::kInvalidArgument, {"k_out is given but k goes to k_cache", "[4,1,8]"}},
      {"q rank 4 for thd", [](Call& c) { c.a.q = c.q.view({1, 4, 2, 8}); }, K::kInvalidArgument, {"[rotary_prologue] q must have rank 3", "got rank 4"}},
      {"k tokens differ", [](Call& c) { c.a.k = c.k.view({2, 2, 8}); }, K::kInvalidArgument, {"[rotary_prologue] k token count T must equal q's 4", "got 2"}},
      {"q head_dim differs from spec", [](Call& c) { c.a.sources = {{c.other.get(), std::nullopt}}; }, K::kInvalidArgument, {"[rotary_prologue] q head_dim must equal the spec's head_dim 16", "got 8"}},
      {"null source", [](Call& c) { c.a.sources = {{nullptr, std::nullopt}}; }, K::kInvalidArgument, {"sources[0].rope must not be null"}},
      {"source_index out of range", [](Call& c) { c.idx[0] = 1; c.a.source_index = TensorView::contiguous(c.idx.data(), DType::kI64, {1}); }, K::kOutOfRange, {"source_index[0] must be in [0, 1)", "got 1"}},
      {"two sources without source_index", [](Call& c) { c.a.sources.push_back({c.rope.get(), std::nullopt}); }, K::kInvalidArgument, {"source_index must be given when sources has 2 entries", "got none"}},
      {"sources disagree", [](Call& c) { c.a.sources.push_back({c.other.get(), std::nullopt}); }, K::kInvalidArgument, {"sources[1] must share head_dim 8", "got head_dim 16"}},
      {"seq_len past 2^31", [](Call& c) { c.a.sources = {{c.rope.get(), int64_t(1) << 40}}; }, K::kOutOfRange, {"sources[0].seq_len must be <= 2^31 (positions are < 2^31)", "got 1099511627776"}},
      {"second source's seq_len past 2^31", [](Call& c) { c.a.sources.push_back({c.rope.get(), (int64_t(1) << 31) + 1}); c.a.source_index = TensorView::contiguous(c.idx.data(), DType::kI64, {1}); }, K::kOutOfRange, {"sources[1].seq_len must be <= 2^31", "got 2147483649"}},
      // A table-mode rope's limit, named by the source (it was "[rotary_table] position 3 ..."); re-rotation, which
      // reads no table, ignored it.
      {"table-mode source past its limit", [](Call& c) { c.a.sources = {{c.fixed.get(), std::nullopt}}; }, K::kOutOfRange, {"[rotary_prologue] sources[0]: position 3 is beyond the table limit", "max_positions is 3"}},
      {"second source past its table limit", [](Call& c) { c.a.sources.push_back({c.fixed.get(), std::nullopt}); c.idx[0] = 1; c.a.source_index = TensorView::contiguous(c.idx.data(), DType::kI64, {1}); }, K::kOutOfRange, {"sources[1]: position 3 is beyond the table limit", "max_positions is 3"}},
      {"rerotate from a table-mode rope past its limit", [](Call& c) { c.rerotate = true; c.r.from = {c.fixed.get(), std::nullopt}; }, K::kOutOfRange, {"from (from_positions): position 3 is beyond the table limit", "max_positions is 3"}},
      {"rerotate to a table-mode rope past its limit", [](Call& c) { c.rerotate = true; c.r.to = {c.fixed.get(), std::nullopt}; }, K::kOutOfRange, {"to (to_positions): position 8 is beyond the table limit", "max_positions is 3"}},
      {"negative offset", [](Call& c) { c.a.positions = Positions::contiguous(-3); }, K::kInvalidArgument, {"[rotary_prologue] positions.offset must be >= 0", "-3"}},
      {"cache_layout out of enum", [](Call& c) { c.a.cache_layout = static_cast<CacheLayout>(9); }, K::kInvalidArgument, {"cache_layout must be nhd, hnd, bshd or bhsd", "got 9"}},
      {"backend cuda", [](Call& c) { c.a.backend = Backend::kCuda; }, K::kUnsupported, {"backend cuda", "CPU backends"}},
      {"rerotate slot written twice", [](Call& c) { c.rerotate = true; c.slots[2] = 3; }, K::kInvalidArgument, {"[rotary_rerotate_cache] slots[2] repeats slots[1] = 3"}},
      {"rerotate slot out of range", [](Call& c) { c.rerotate = true; c.slots[0] = 99; }, K::kOutOfRange, {"slots[0] must be -1 (skip) or in [0, num_blocks * block_size = 8)", "got 99"}},
      {"rerotate cache of block_size 0", [](Call& c) { c.rerotate = true; c.r.k_cache = c.kc.view({4, 0, 1, 8}); c.r.k_scale = c.ks.view({4, 0, 1}); }, K::kOutOfRange, {"slots[0] must be -1 (skip) or in [0, num_blocks * block_size = 0)", "got 0"}},
      {"rerotate positions length", [](Call& c) { c.rerotate = true; c.r.to_positions.shape[0] = 3; }, K::kInvalidArgument, {"to_positions must have shape [N] = [4]", "[3]"}},
      {"rerotate slots absent", [](Call& c) { c.rerotate = true; c.r.slots = {}; }, K::kInvalidArgument, {"[rotary_rerotate_cache] slots must be given, got none"}},
      {"rerotate from_positions absent", [](Call& c) { c.rerotate = true; c.r.from_positions = {}; }, K::kInvalidArgument, {"[rotary_rerotate_cache] from_positions must be given, got none"}},
      {"rerotate negative position", [](Call& c) { c.rerotate = true; c.idx[3] = -5; }, K::kInvalidArgument, {"from_positions[3] must be >= 0", "-5"}},
      {"rerotate specs differ", [](Call& c) { c.rerotate = true; c.r.to = {c.other.get(), std::nullopt}; }, K::kInvalidArgument, {"to's spec must share head_dim 8", "got head_dim 16"}},
      {"rerotate from.seq_len past 2^31", [](Call& c) { c.rerotate = true; c.r.from.seq_len = int64_t(1) << 40; }, K::kOutOfRange, {"[rotary_rerotate_cache] from.seq_len must be <= 2^31 (positions are < 2^31)", "got 1099511627776"}},
      {"rerotate to.seq_len past 2^31", [](Call& c) { c.rerotate = true; c.r.to = {nullptr, (int64_t(1) << 31) + 1}; }, K::kOutOfRange, {"[rotary_rerotate_cache] to.seq_len must be <= 2^31", "got 2147483649"}},
      {"rerotate scale missing", [](Call& c) { c.rerotate = true; c.r.k_scale = {}; }, K::kInvalidArgument, {"[rotary_rerotate_cache] k_scale must be given for an i8 k_cache"}},
      {"rerotate cache head_dim", [](Call& c) { c.rerotate = true; c.r.k_cache = c.kc.view({2, 2, 2, 8}); c.r.k_scale = c.ks.view({2, 2, 2}); c.r.to = {c.other.get(), std::nullopt}; c.r.from = c.r.to; }, K::kInvalidArgument, {"k_cache must have shape", "D = 16", "[2,2,2,8]"}},
  };
}

const char* kind_name(K k) {
  switch (k) {
    case K::kInvalidArgument: return "invalid argument";
    case K::kOutOfRange: return "out of range";
    case K::kUnsupported: return "unsupported";
    default: return "other";
  }
}

TEST(HostilePrologue, EveryCaseFailsWithItsKindNamesTheArgumentAndWritesNothing) {
  std::vector<std::string> messages;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    for (Backend backend : {Backend::kCpu, Backend::kReference}) {
      Call call;
      call.a.backend = call.r.backend = backend;
      c.setup(call);
      const auto before = call.snapshot();
      try {
        call.run();
        ADD_FAILURE() << "no error for " << c.name;
        continue;
      } catch (const Error& e) {
        const std::string msg = e.what();
        if (backend == Backend::kCpu) {
          testing::doc_row("C++", c.name, kind_name(e.kind()), msg);
          messages.push_back(msg);
        }
        EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(c.kind)) << msg;
        EXPECT_EQ(msg.rfind(call.rerotate ? "[rotary_rerotate_cache] " : "[rotary_prologue] ", 0), 0u) << msg;
        for (const auto& n : c.needles) EXPECT_NE(msg.find(n), std::string::npos) << "missing \"" << n << "\" in: " << msg;
      }
      EXPECT_TRUE(before == call.snapshot()) << "a tensor changed";
    }
  }
  const std::string doc = testing::read_file(std::string(ROTARY_SOURCE_DIR) + "/docs/errors.md");
  for (const auto& m : messages)
    EXPECT_NE(doc.find(testing::doc_escape(m)), std::string::npos)
        << "docs/errors.md is out of date (regenerate with python3 scripts/gen_errors_doc.py); missing: " << m;
}

TEST(HostilePrologue, TheUnbrokenCallsSucceedAndWrite) {
  for (bool rerot : {false, true}) {
    Call call;
    call.rerotate = rerot;
    const auto before = call.snapshot();
    call.run();
    EXPECT_FALSE(before == call.snapshot());
  }
}

TEST(HostilePrologue, SeqLenIsAtMost2To31ForEverySpecPathAndBackend) {
  // Was accepted by the prologue (any spec) and by re-rotation (a length-independent spec), and refused for a
  // length-dependent spec by re-rotation only, as "[rotary_freqs] seq_len ...".
  Spec dyn;
  dyn.head_dim = 8;
  dyn.max_position_embeddings = 8;
  dyn.scaling.type = RopeType::kDynamic;
  dyn.scaling.factor = 2.0;
  Rope dynamic(dyn);
  for (int with_dynamic = 0; with_dynamic < 2; ++with_dynamic)
    for (Backend backend : {Backend::kAuto, Backend::kCpu, Backend::kReference})
      for (int what = 0; what < 3; ++what)  // prologue (an f32 cache: the fast path's call), rerotate from, to
        for (int64_t len : {int64_t(1) << 31, (int64_t(1) << 31) + 1, int64_t(1) << 40}) {
          SCOPED_TRACE(std::to_string(with_dynamic) + " " + std::to_string(static_cast<int>(backend)) + " " +
                       std::to_string(what) + " " + std::to_string(len));
          Call c;
          Rope* rope = with_dynamic ? &dynamic : c.rope.get();
          c.kc.dtype = c.vc.dtype = DType::kF32;
          c.kc.bytes.resize(64 * 4);
          c.vc.bytes.resize(64 * 4);
          c.a.k_cache = c.r.k_cache = c.kc.view({4, 2, 1, 8});
          c.a.v_cache = c.vc.view({4, 2, 1, 8});
          c.a.k_scale = c.a.v_scale = c.r.k_scale = {};
          c.a.q_norm_weight = {};
          c.a.backend = c.r.backend = backend;
          c.rerotate = what > 0;
          c.a.sources = {{rope, len}};
          c.r.from = {rope, what == 1 ? std::optional<int64_t>(len) : std::nullopt};
          c.r.to = {nullptr, what == 2 ? std::optional<int64_t>(len) : std::nullopt};
          const auto before = c.snapshot();
          if (len == int64_t(1) << 31) {
            EXPECT_NO_THROW(c.run());
            continue;
          }
          try {
            c.run();
            ADD_FAILURE() << "no error";
          } catch (const Error& e) {
            const char* field = what == 0 ? "[rotary_prologue] sources[0]" : what == 1 ? "[rotary_rerotate_cache] from"
                                                                                       : "[rotary_rerotate_cache] to";
            const std::string want = field + std::string(".seq_len must be <= 2^31 (positions are < 2^31), got ") +
                                     std::to_string(len);
            EXPECT_EQ(std::string(e.what()), want);
            EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(K::kOutOfRange));
          }
          EXPECT_TRUE(before == c.snapshot()) << "a tensor changed";
        }
}

}  // namespace
}  // namespace rotary
