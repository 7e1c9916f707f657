// Context parallel: TE dual-chunk position mapping, and sharded application == unsharded application bit-exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "multimodal/mm_testing.h"
#include "rotary/context_parallel.h"
#include "rotary/rotary.h"

namespace rotary {
namespace {

// TransformerEngine fused_rope.cu, written as it reads there (s = local index, L = local length):
//   s <  L/2: s + r*L/2;   s >= L/2: L*cp - (r+1)*L/2 + s - L/2
int64_t te_formula(int64_t r, int64_t cp, int64_t s, int64_t L) {
  return s < L / 2 ? s + r * L / 2 : L * cp - (r + 1) * L / 2 + s - L / 2;
}

TEST(ContextParallel, MappingMatchesTransformerEngineAndIsABijection) {
  for (int64_t cp : {1, 2, 3, 4, 8}) {
    for (int64_t L : {2, 4, 6, 16}) {
      std::set<int64_t> seen;
      for (int64_t r = 0; r < cp; ++r) {
        const auto pos = cp_positions({r, cp}, L);
        ASSERT_EQ(static_cast<int64_t>(pos.size()), L);
        for (int64_t s = 0; s < L; ++s) {
          if (cp > 1) EXPECT_EQ(pos[s], te_formula(r, cp, s, L)) << "r " << r << " s " << s;
          EXPECT_EQ(pos[s], cp_global_position({r, cp}, s, L));
          seen.insert(pos[s]);
          const CpLocation loc = cp_locate(cp, pos[s], L * cp);
          EXPECT_EQ(loc.rank, r);
          EXPECT_EQ(loc.local_index, s);
        }
      }
      // Every global position 0..L*cp-1 lives on exactly one rank.
      EXPECT_EQ(static_cast<int64_t>(seen.size()), L * cp);
      EXPECT_EQ(*seen.begin(), 0);
      EXPECT_EQ(*seen.rbegin(), L * cp - 1);
    }
  }
  // Documented example: cp 2, L_global 8: rank 0 [0 1 6 7], rank 1 [2 3 4 5].
  EXPECT_EQ(cp_positions({0, 2}, 4), (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(cp_positions({1, 2}, 4), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(cp_positions({1, 2}, 4, 100), (std::vector<int64_t>{102, 103, 104, 105}));
}

TEST(ContextParallel, PackedShardsFollowTransformerEngine) {
  const std::vector<int64_t> cu = {0, 8, 8, 20, 24};  // lengths 8, 0, 12, 4 (each divisible by 2*2)
  const ContextParallel r0{0, 2}, r1{1, 2};
  EXPECT_EQ(cp_local_cu_seqlens(r1, cu), (std::vector<int64_t>{0, 4, 4, 10, 12}));
  EXPECT_EQ(cp_positions_packed(r0, cu), (std::vector<int64_t>{0, 1, 6, 7, 0, 1, 2, 9, 10, 11, 0, 3}));
  EXPECT_EQ(cp_positions_packed(r1, cu), (std::vector<int64_t>{2, 3, 4, 5, 3, 4, 5, 6, 7, 8, 1, 2}));
  EXPECT_THROW(cp_positions_packed({0, 4}, cu), Error);  // length 12 not divisible by 8
}

TEST(ContextParallel, RejectsBadShards) {
  auto msg = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg([] { cp_positions({2, 2}, 4); }).find("cp.rank must be in [0, cp.size = 2), got 2"), std::string::npos);
  EXPECT_NE(msg([] { cp_positions({0, 0}, 4); }).find("cp.size must be >= 1, got 0"), std::string::npos);
  EXPECT_NE(msg([] { cp_positions({0, 2}, 5); }).find("local_len must be even"), std::string::npos);
  EXPECT_NE(msg([] { cp_global_position({0, 2}, 4, 4); }).find("local_index must be in [0, local_len = 4), got 4"),
            std::string::npos);
  EXPECT_NE(msg([] { cp_locate(2, 3, 6); }).find("divisible by 2*cp.size = 4"), std::string::npos);
}

/// A [B, S, H, D] f32 tensor in bshd (or its bhsd transpose) as a plain vector.
struct Act {
  int64_t B, S, H, D;
  bool bhsd;
  std::vector<float> v;
  int64_t idx(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return bhsd ? ((b * H + h) * S + s) * D + d : ((b * S + s) * H + h) * D + d;
  }
  TensorView view() {
    return bhsd ? TensorView::contiguous(v.data(), DType::kF32, {B, H, S, D})
                : TensorView::contiguous(v.data(), DType::kF32, {B, S, H, D});
  }
};

/// The tokens of rank r (global index = cp_positions) gathered out of a global activation.
Act shard_of(const Act& g, const ContextParallel& cp) {
  const int64_t L = g.S / cp.size;
  Act a{g.B, L, g.H, g.D, g.bhsd, std::vector<float>(static_cast<std::size_t>(g.B * L * g.H * g.D))};
  const auto pos = cp_positions(cp, L);
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t s = 0; s < L; ++s)
      for (int64_t h = 0; h < g.H; ++h)
        for (int64_t d = 0; d < g.D; ++d) a.v[a.idx(b, s, h, d)] = g.v[g.idx(b, pos[s], h, d)];
  return a;
}

TEST(ContextParallel, ShardedEqualsUnshardedBitExactly) {
  struct Case { const char* name; Spec spec; CosSinMode mode; };
  std::vector<Case> cases;
  {
    Spec s; s.head_dim = 32; s.base = 10000; cases.push_back({"default table", s, CosSinMode::kAuto});
    cases.push_back({"default on the fly", s, CosSinMode::kOnTheFly});
    Spec d = s; d.scaling.type = RopeType::kDynamic; d.scaling.factor = 2.0; d.max_position_embeddings = 32;
    cases.push_back({"dynamic NTK past the context (length-dependent)", d, CosSinMode::kAuto});
    Spec p = s; p.rotary_dim = 16; p.pairing = Pairing::kInterleaved; cases.push_back({"partial interleaved", p, CosSinMode::kAuto});
  }
  for (const Case& c : cases) {
    for (bool bhsd : {false, true}) {
      for (int64_t cp : {1, 2, 4}) {
        SCOPED_TRACE(std::string(c.name) + (bhsd ? " bhsd" : " bshd") + " cp " + std::to_string(cp));
        const int64_t B = 2, S = 48, H = 3, D = 32, offset = 5;
        Act g{B, S, H, D, bhsd, testing::randn(static_cast<std::size_t>(B * S * H * D), 3)};
        Act gk{B, S, 1, D, bhsd, testing::randn(static_cast<std::size_t>(B * S * D), 4)};
        std::vector<Act> shards, kshards;
        for (int64_t r = 0; r < cp; ++r) {
          shards.push_back(shard_of(g, {r, cp}));
          kshards.push_back(shard_of(gk, {r, cp}));
        }
        RopeOptions o;
        o.mode = c.mode;
        Rope rope(c.spec, o);
        ApplyArgs a;
        a.layout = bhsd ? Layout::kBHSD : Layout::kBSHD;
        a.q = g.view();
        a.k = gk.view();
        a.positions = Positions::contiguous(offset);
        rope.apply(a);  // unsharded
        Rope rope2(c.spec, o);
        for (int64_t r = 0; r < cp; ++r) {
          ApplyArgs ar;
          ar.layout = a.layout;
          ar.q = shards[r].view();
          ar.k = kshards[r].view();
          ar.positions = Positions::contiguous(offset);
          apply_context_parallel(rope2, {r, cp}, ar);
          const Act want = shard_of(g, {r, cp}), wantk = shard_of(gk, {r, cp});
          ASSERT_EQ(0, std::memcmp(want.v.data(), shards[r].v.data(), want.v.size() * 4)) << "rank " << r;
          ASSERT_EQ(0, std::memcmp(wantk.v.data(), kshards[r].v.data(), wantk.v.size() * 4)) << "rank " << r;
        }
      }
    }
  }
}

TEST(ContextParallel, PackedShardedEqualsUnshardedBitExactly) {
  const int64_t H = 2, D = 16, cp = 2;
  const std::vector<int64_t> cu = {0, 12, 16, 40};  // global, lengths divisible by 4
  const int64_t T = cu.back();
  mmtest::Thd g(T, H, D, 9);
  Frequencies f;
  f.inv_freq = default_inv_freq(500000.0, D);
  f.attention_factor = 1.25;
  {
    ApplyArgs a;
    a.layout = Layout::kTHD;
    a.q = g.view();
    a.positions = Positions::packed(TensorView::contiguous(cu.data(), DType::kI64, {4}));
    apply_frequencies(f, a);
  }
  mmtest::Thd orig(T, H, D, 9);  // the unrotated global tensor again
  for (int64_t r = 0; r < cp; ++r) {
    const auto local_cu = cp_local_cu_seqlens({r, cp}, cu);
    const auto pos = cp_positions_packed({r, cp}, cu);
    const int64_t TL = local_cu.back();
    mmtest::Thd shard(TL, H, D, 0), want(TL, H, D, 0);
    // Gather this rank's tokens: sequence n's local token s is global token cu[n] + pos[...] .
    for (std::size_t n = 0; n + 1 < cu.size(); ++n)
      for (int64_t t = local_cu[n]; t < local_cu[n + 1]; ++t) {
        const int64_t gt = cu[n] + pos[t];
        std::memcpy(&shard.data[t * H * D], &orig.data[gt * H * D], H * D * 4);
        std::memcpy(&want.data[t * H * D], &g.data[gt * H * D], H * D * 4);
      }
    ApplyArgs a;
    a.layout = Layout::kTHD;
    a.q = shard.view();
    a.positions = Positions::packed(TensorView::contiguous(cu.data(), DType::kI64, {4}));
    apply_context_parallel(f, {r, cp}, a);
    ASSERT_EQ(0, std::memcmp(want.data.data(), shard.data.data(), want.data.size() * 4)) << "rank " << r;
  }
}

TEST(ContextParallel, PackedShardsStartEverySequenceAtTheOffset) {
  // positions.offset with thd shards: every sequence starts there (TransformerEngine's RotaryPositionEmbedding
  // offset); it was ignored. The unsharded truth: packed positions with seq_offsets = offset.
  const int64_t H = 2, D = 16, cp = 2, off = 1000;
  const std::vector<int64_t> cu = {0, 12, 16, 40}, so = {off, off, off};
  const int64_t T = cu.back();
  mmtest::Thd g(T, H, D, 9), orig(T, H, D, 9);
  Frequencies f;
  f.inv_freq = default_inv_freq(10000.0, D);
  ApplyArgs full;
  full.layout = Layout::kTHD;
  full.q = g.view();
  full.positions = Positions::packed(TensorView::contiguous(cu.data(), DType::kI64, {4}),
                                     TensorView::contiguous(so.data(), DType::kI64, {3}));
  apply_frequencies(f, full);
  for (int64_t r = 0; r < cp; ++r) {
    const auto local_cu = cp_local_cu_seqlens({r, cp}, cu);
    const auto pos = cp_positions_packed({r, cp}, cu);
    mmtest::Thd shard(local_cu.back(), H, D, 0), want(local_cu.back(), H, D, 0);
    for (std::size_t n = 0; n + 1 < cu.size(); ++n)
      for (int64_t t = local_cu[n]; t < local_cu[n + 1]; ++t) {
        std::memcpy(&shard.data[t * H * D], &orig.data[(cu[n] + pos[t]) * H * D], H * D * 4);
        std::memcpy(&want.data[t * H * D], &g.data[(cu[n] + pos[t]) * H * D], H * D * 4);
      }
    ApplyArgs a;
    a.layout = Layout::kTHD;
    a.q = shard.view();
    a.positions = Positions::packed(TensorView::contiguous(cu.data(), DType::kI64, {4}));
    a.positions.offset = off;
    apply_context_parallel(f, {r, cp}, a);
    ASSERT_EQ(0, std::memcmp(want.data.data(), shard.data.data(), want.data.size() * 4)) << "rank " << r;
  }
  ApplyArgs bad;
  bad.layout = Layout::kTHD;
  mmtest::Thd shard(20, H, D, 0);
  bad.q = shard.view();
  bad.positions = Positions::packed(TensorView::contiguous(cu.data(), DType::kI64, {4}));
  bad.positions.offset = -1;
  EXPECT_THROW(apply_context_parallel(f, {0, cp}, bad), Error);
}

}  // namespace
}  // namespace rotary
