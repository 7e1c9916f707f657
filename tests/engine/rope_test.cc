// rotary::Rope: table/on-the-fly modes, fractional positions, dynamic NTK, LongRoPE switch, M-RoPE, concurrency.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "engine/test_tensors.h"
#include "rotary/rotary.h"
#include "testing/tolerances.h"

namespace rotary {
namespace {

using enginetest::TestTensor;

Spec llama_like(int64_t D = 64, int64_t max_pos = 4096) {
  Spec s;
  s.head_dim = D;
  s.base = 10000.0;
  s.max_position_embeddings = max_pos;
  return s;
}

/// Applies through Rope and through apply_frequencies(freqs) on copies of the same input: must be bitwise equal.
void expect_rope_equals_frequencies(Rope& rope, const Frequencies& freqs, const std::vector<int64_t>& ids,
                                    std::optional<int64_t> seq_len = std::nullopt, Backend be = Backend::kReference) {
  const int64_t D = rope.spec().head_dim, S = static_cast<int64_t>(ids.size());
  TestTensor a(DType::kF32, Layout::kBSHD, 1, S, 2, D), b(DType::kF32, Layout::kBSHD, 1, S, 2, D);
  a.fill_randn(5);
  b.fill_randn(5);
  ApplyArgs x;
  x.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {S}));
  x.seq_len = seq_len;
  x.backend = be;
  x.q = a.view();
  rope.apply(x);
  x.q = b.view();
  x.pairing = rope.spec().pairing;
  apply_frequencies(freqs, x);
  EXPECT_EQ(a.bytes(), b.bytes());
}

TEST(Rope, DefaultSpecUsesTheTableAndMatchesOnTheFly) {
  Rope rope(llama_like());
  const Frequencies f = rope.frequencies();
  const auto theta = enginetest::truth_theta(10000.0L, 64);
  for (std::size_t j = 0; j < theta.size(); ++j) EXPECT_NEAR(f.inv_freq[j], static_cast<double>(theta[j]), 1e-15);
  expect_rope_equals_frequencies(rope, f, {0, 5, 1000, 3});
  EXPECT_GE(rope.table().size(), 1001);
}

TEST(Rope, AutoModeSwitchesToOnTheFlyBeyondTheTableLimit) {
  RopeOptions o;
  o.table.max_positions = 64;
  Rope rope(llama_like(), o);
  expect_rope_equals_frequencies(rope, rope.frequencies(), {1, 63, 64, 5000, 100000});
  EXPECT_LE(rope.table().size(), 64);
  RopeOptions fly;
  fly.mode = CosSinMode::kOnTheFly;
  Rope r2(llama_like(), fly);
  expect_rope_equals_frequencies(r2, r2.frequencies(), {7, 8, 9});
  EXPECT_EQ(r2.table().size(), 0);
}

TEST(Rope, FractionalPositionsOnTheFly) {
  Rope rope(llama_like(32));
  std::vector<double> ids = {0.5, 2.25, 1e6 + 0.75};
  TestTensor q(DType::kF64, Layout::kTHD, 1, 3, 1, 32);
  q.fill_randn(3);
  const TestTensor q0 = q;
  ApplyArgs a;
  a.layout = Layout::kTHD;
  a.q = q.view();
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kF64, {3}));
  rope.apply(a);
  const auto theta = enginetest::truth_theta(10000.0L, 32);
  for (int64_t t = 0; t < 3; ++t) {
    const long double p = ids[t];
    const auto want = enginetest::truth_rotate(q0.head(0, t, 0), 32, Pairing::kHalfSplit, Direction::kForward, theta,
                                               1.0L, [&](int64_t) { return p; });
    for (int64_t d = 0; d < 32; ++d) EXPECT_NEAR(q.get(0, t, 0, d), want[d], 4e-7) << "t " << t;
  }
}

TEST(Rope, PairingDefaultsToTheSpecAndArgsOverride) {
  Spec s = llama_like(16);
  s.pairing = Pairing::kInterleaved;
  Rope rope(s);
  std::vector<float> a = testing::randn(16, 1), b = a, c = a;
  ApplyArgs x;
  x.positions = Positions::contiguous(9);
  x.q = TensorView::contiguous(a.data(), DType::kF32, {1, 1, 1, 16});
  rope.apply(x);  // interleaved from the spec
  const Frequencies f = rope.frequencies();
  x.q = TensorView::contiguous(b.data(), DType::kF32, {1, 1, 1, 16});
  x.pairing = Pairing::kInterleaved;
  apply_frequencies(f, x);
  EXPECT_EQ(a, b);
  x.q = TensorView::contiguous(c.data(), DType::kF32, {1, 1, 1, 16});
  x.pairing = Pairing::kHalfSplit;
  rope.apply(x);  // explicit override
  EXPECT_NE(a, c);
}

TEST(Rope, DynamicNtkUsesFrequenciesOfTheSequenceLength) {
  Spec s = llama_like(32, 64);
  s.scaling.type = RopeType::kDynamic;
  s.scaling.factor = 2.0;
  Rope rope(s);
  // Within the context: the base frequencies (table).
  expect_rope_equals_frequencies(rope, compute_frequencies(rope.spec()), {0, 10, 63});
  EXPECT_GE(rope.table().size(), 64);
  // Beyond: HF's forward uses seq_len = max(position_ids) + 1 -> new base, on the fly.
  const Frequencies longer = compute_frequencies(rope.spec(), 101);
  EXPECT_NE(longer.inv_freq, compute_frequencies(rope.spec()).inv_freq);
  expect_rope_equals_frequencies(rope, longer, {0, 100, 7});
  // An explicit seq_len wins over max(position)+1.
  expect_rope_equals_frequencies(rope, compute_frequencies(rope.spec(), 500), {0, 100, 7}, int64_t(500));
  expect_rope_equals_frequencies(rope, compute_frequencies(rope.spec()), {0, 100, 7}, int64_t(10));
}

Spec longrope_spec() {
  Spec s = llama_like(16, 128);
  s.scaling.type = RopeType::kLongRope;
  s.scaling.original_max_position_embeddings = 32;
  s.scaling.short_factor = {1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7};
  s.scaling.long_factor = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0};
  return s;
}

TEST(Rope, LongRopeSwitchesShortAndLongFactorsLikeHf) {
  Rope rope(longrope_spec());
  const Frequencies short_f = compute_frequencies(rope.spec(), 32), long_f = compute_frequencies(rope.spec(), 33);
  ASSERT_NE(short_f.inv_freq, long_f.inv_freq);
  EXPECT_NE(short_f.attention_factor, 1.0);  // factor 128/32 = 4 -> sqrt(1 + ln 4 / ln 32)
  expect_rope_equals_frequencies(rope, short_f, {0, 31, 5});
  expect_rope_equals_frequencies(rope, long_f, {0, 32, 5});
  expect_rope_equals_frequencies(rope, long_f, {0, 3, 5}, int64_t(1000));
  expect_rope_equals_frequencies(rope, short_f, {0, 3, 5}, int64_t(32));
}

TEST(Rope, ConcurrentAppliesWithLazyLongTableMatchSingleThreaded) {
  Rope rope(longrope_spec());
  Rope single(longrope_spec());
  constexpr int kThreads = 8, kIters = 10;
  auto ids_for = [](int th, int it) { return std::vector<int64_t>{0, static_cast<int64_t>(th * 7 + it * 5), (th % 2) ? 40 : 20}; };
  auto run = [&](Rope& r, int th, int it) {
    const auto ids = ids_for(th, it);
    std::vector<float> x = testing::randn(3 * 2 * 16, static_cast<uint64_t>(th * 100 + it));
    ApplyArgs a;
    a.q = TensorView::contiguous(x.data(), DType::kF32, {1, 3, 2, 16});
    a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {3}));
    a.threads = 1;
    r.apply(a);
    return x;
  };
  std::vector<std::vector<float>> want(kThreads * kIters), got(kThreads * kIters);
  for (int th = 0; th < kThreads; ++th)
    for (int it = 0; it < kIters; ++it) want[th * kIters + it] = run(single, th, it);
  std::atomic<int> go{0};
  std::vector<std::thread> pool;
  for (int th = 0; th < kThreads; ++th)
    pool.emplace_back([&, th] {
      while (!go.load()) {
      }
      for (int it = 0; it < kIters; ++it) got[th * kIters + it] = run(rope, th, it);
    });
  go = 1;
  for (auto& t : pool) t.join();
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;
}

/// Independent M-RoPE axis rule (Qwen2-VL sectioned / Qwen3-VL interleaved).
int axis_of(int64_t j, const std::vector<int64_t>& sec, bool interleaved) {
  if (!interleaved) return j < sec[0] ? 0 : (j < sec[0] + sec[1] ? 1 : 2);
  if (j % 3 == 1 && j < 3 * sec[1]) return 1;
  if (j % 3 == 2 && j < 3 * sec[2]) return 2;
  return 0;
}

TEST(Rope, MRopeSectionsTakeTheirAxisPosition) {
  for (bool interleaved : {false, true}) {
    for (CosSinMode mode : {CosSinMode::kAuto, CosSinMode::kOnTheFly}) {
      SCOPED_TRACE(std::string(interleaved ? "interleaved" : "sectioned") + (mode == CosSinMode::kAuto ? " table" : " on the fly"));
      Spec s = llama_like(32);
      s.mrope.section = {6, 5, 5};
      s.mrope.interleaved = interleaved;
      RopeOptions o;
      o.mode = mode;
      Rope rope(s, o);
      const int64_t B = 2, S = 3;
      std::vector<int64_t> ids(3 * B * S);  // [3, B, S]: t, h, w
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 13 + 1) % 29);
      TestTensor q(DType::kF64, Layout::kBHSD, B, S, 2, 32);
      q.fill_randn(8);
      const TestTensor q0 = q;
      ApplyArgs a;
      a.layout = Layout::kBHSD;
      a.q = q.view();
      a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {3, B, S}));
      rope.apply(a);
      const auto theta = enginetest::truth_theta(10000.0L, 32);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < S; ++t)
          for (int64_t h = 0; h < 2; ++h) {
            const auto want = enginetest::truth_rotate(
                q0.head(b, t, h), 32, Pairing::kHalfSplit, Direction::kForward, theta, 1.0L, [&](int64_t j) {
                  return static_cast<long double>(ids[static_cast<std::size_t>(axis_of(j, s.mrope.section, interleaved) * B * S + b * S + t)]);
                });
            for (int64_t d = 0; d < 32; ++d) ASSERT_NEAR(q.get(b, t, h, d), want[d], 4e-7) << "b" << b << " t" << t << " d" << d;
          }
    }
  }
}

TEST(Rope, MRopeWithOffsetOrPackedPositionsGivesEveryAxisTheTokenPosition) {
  // Text tokens (HF get_rope_index: t = h = w) as plain offset or packed positions: the same as the
  // spec without sections. Before, the h and w axes read position 0.
  Spec s = llama_like(32);
  Spec m = s;
  m.mrope.section = {6, 5, 5};
  for (CosSinMode mode : {CosSinMode::kAuto, CosSinMode::kOnTheFly}) {
    RopeOptions o;
    o.mode = mode;
    Rope plain(s, o), mrope(m, o);
    TestTensor a(DType::kF32, Layout::kBSHD, 2, 5, 2, 32), b(DType::kF32, Layout::kBSHD, 2, 5, 2, 32);
    a.fill_randn(4);
    b.fill_randn(4);
    ApplyArgs x;
    x.positions = Positions::contiguous(17);
    x.q = a.view();
    plain.apply(x);
    x.q = b.view();
    mrope.apply(x);
    EXPECT_EQ(a.bytes(), b.bytes()) << "offset";
    TestTensor c(DType::kF32, Layout::kTHD, 1, 6, 2, 32), d(DType::kF32, Layout::kTHD, 1, 6, 2, 32);
    c.fill_randn(5);
    d.fill_randn(5);
    const std::vector<int64_t> cu = {0, 2, 6};
    ApplyArgs y;
    y.layout = Layout::kTHD;
    y.positions = Positions::packed(TensorView::contiguous(cu.data(), DType::kI64, {3}));
    y.q = c.view();
    plain.apply(y);
    y.q = d.view();
    mrope.apply(y);
    EXPECT_EQ(c.bytes(), d.bytes()) << "packed";
  }
}

// HF passes position_ids [1, S] (and M-RoPE [3, 1, S]) for a batch sharing its positions: the size-1 batch
// axis broadcasts, giving exactly the result of the ids repeated per batch row. Before, [1, S] was refused.
TEST(Rope, SizeOneBatchIdsBroadcastOverTheBatch) {
  const int64_t B = 3, S = 5;
  for (bool mrope : {false, true}) {
    for (CosSinMode mode : {CosSinMode::kAuto, CosSinMode::kOnTheFly}) {
      SCOPED_TRACE(std::string(mrope ? "mrope [3,1,S]" : "[1,S]") + (mode == CosSinMode::kAuto ? " table" : " on the fly"));
      Spec s = llama_like(32);
      if (mrope) s.mrope.section = {6, 5, 5};
      RopeOptions o;
      o.mode = mode;
      Rope rope(s, o);
      const int64_t axes = mrope ? 3 : 1;
      std::vector<int64_t> one(static_cast<std::size_t>(axes * S)), tiled(static_cast<std::size_t>(axes * B * S));
      for (int64_t a = 0; a < axes; ++a)
        for (int64_t t = 0; t < S; ++t) {
          const int64_t v = (a * 7 + t * 3 + 2) % 23;
          one[static_cast<std::size_t>(a * S + t)] = v;
          for (int64_t b = 0; b < B; ++b) tiled[static_cast<std::size_t>((a * B + b) * S + t)] = v;
        }
      TestTensor x(DType::kF32, Layout::kBSHD, B, S, 2, 32), y(DType::kF32, Layout::kBSHD, B, S, 2, 32);
      x.fill_randn(6);
      y.fill_randn(6);
      ApplyArgs a;
      a.q = x.view();
      a.positions = Positions::from_ids(mrope ? TensorView::contiguous(one.data(), DType::kI64, {3, 1, S})
                                              : TensorView::contiguous(one.data(), DType::kI64, {1, S}));
      ASSERT_NO_THROW(rope.apply(a));
      a.q = y.view();
      a.positions = Positions::from_ids(mrope ? TensorView::contiguous(tiled.data(), DType::kI64, {3, B, S})
                                              : TensorView::contiguous(tiled.data(), DType::kI64, {B, S}));
      rope.apply(a);
      EXPECT_EQ(x.bytes(), y.bytes());
    }
  }
  // A batch other than 1 or B is still refused, naming the grid.
  Rope rope(llama_like(32));
  TestTensor x(DType::kF32, Layout::kBSHD, B, S, 2, 32);
  std::vector<int64_t> ids(2 * S, 0);
  ApplyArgs a;
  a.q = x.view();
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {2, S}));
  try {
    rope.apply(a);
    ADD_FAILURE() << "[2,S] ids for B = 3 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match the token grid [3,5]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rotary
