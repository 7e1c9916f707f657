// The prologue's shortcut planner: every call it accepts plans exactly like the full validation, its errors are the full validation's, and it declines everything else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/prologue_build.h"
#include "rotary/prologue.h"
#include "rotary/rotary.h"
#include "testing/plan_compare.h"

namespace rotary {
namespace {

using detail::ProloguePlan;
using detail::PlanRows;

void expect_same_rows(const PlanRows& x, const PlanRows& y, const std::string& what) {
  EXPECT_EQ(x.data, y.data) << what;
  EXPECT_EQ(x.dtype, y.dtype) << what;
  EXPECT_EQ(x.heads, y.heads) << what;
  EXPECT_EQ(x.dim, y.dim) << what;
  EXPECT_EQ(x.minor_count, y.minor_count) << what;
  const int64_t xs[7] = {x.s_major, x.s_minor, x.s_head, x.s_d, x.sc_major, x.sc_minor, x.sc_head};
  const int64_t ys[7] = {y.s_major, y.s_minor, y.s_head, y.s_d, y.sc_major, y.sc_minor, y.sc_head};
  for (int j = 0; j < 7; ++j) EXPECT_EQ(xs[j], ys[j]) << what << " stride " << j;
  EXPECT_EQ(x.scales, y.scales) << what;
  EXPECT_EQ(x.tensor_scale, y.tensor_scale) << what;
}

/// Weight values (the pointers differ when one plan converted into its own storage).
void expect_same_weight(const float* x, const float* y, int64_t D, const std::string& what) {
  ASSERT_EQ(x == nullptr, y == nullptr) << what;
  for (int64_t i = 0; x != nullptr && i < D; ++i) EXPECT_EQ(x[i], y[i]) << what << " [" << i << "]";
}

void expect_same_plan(const ProloguePlan& a, const ProloguePlan& b, const std::string& what) {
  const auto &x = a.rope, &y = b.rope;
  testing::expect_same_rotation(x, y, what + " rope");
  EXPECT_EQ(a.q_index, b.q_index) << what;
  EXPECT_EQ(a.k_index, b.k_index) << what;
  EXPECT_EQ(a.hkv, b.hkv) << what;
  EXPECT_EQ(a.rotate, b.rotate) << what;
  auto same_source = [&](const detail::PlanCosSin& s, const detail::PlanCosSin& t, const std::string& which) {
    EXPECT_EQ(s.kind, t.kind) << which;
    EXPECT_EQ(s.table, t.table) << which;
    EXPECT_EQ(s.table_size, t.table_size) << which;
    EXPECT_EQ(s.attention_factor, t.attention_factor) << which;
    EXPECT_EQ(s.inv_freq == nullptr, t.inv_freq == nullptr) << which;
    for (int64_t j = 0; s.inv_freq != nullptr && t.inv_freq != nullptr && j < x.half; ++j)
      EXPECT_EQ(s.inv_freq[j], t.inv_freq[j]) << which << " inv_freq " << j;
    EXPECT_EQ(s.axis_of_freq, t.axis_of_freq) << which;
  };
  same_source(x.cs, y.cs, what + " rope.cs");  // a one-source call's source
  ASSERT_EQ(a.sources.size(), b.sources.size()) << what;
  for (size_t i = 0; i < a.sources.size(); ++i) same_source(a.sources[i], b.sources[i], what + " source " + std::to_string(i));
  EXPECT_EQ(a.token_source, b.token_source) << what;
  EXPECT_EQ(a.has_v, b.has_v) << what;
  EXPECT_EQ(a.v_dim, b.v_dim) << what;
  testing::expect_same_tensor(a.v, b.v, what + " v");
  expect_same_rows(a.k_cache, b.k_cache, what + " k_cache");
  expect_same_rows(a.v_cache, b.v_cache, what + " v_cache");
  // The caller's slot_mapping (the same pointer), or slots computed into each plan's own storage (the same values).
  ASSERT_EQ(a.slots == nullptr, b.slots == nullptr) << what;
  if (a.slot_storage.empty() && b.slot_storage.empty()) EXPECT_EQ(a.slots, b.slots) << what;
  for (int64_t g = 0; a.slots != nullptr && !(a.slot_storage.empty() && b.slot_storage.empty()) && g < x.B * x.S; ++g)
    EXPECT_EQ(a.slots[g], b.slots[g]) << what << " slot of token " << g;
  expect_same_weight(a.q_norm, b.q_norm, x.head_dim, what + " q_norm");
  expect_same_weight(a.k_norm, b.k_norm, x.head_dim, what + " k_norm");
  EXPECT_EQ(a.eps, b.eps) << what;
  EXPECT_EQ(a.threads, b.threads) << what;
}

/// Storage for one randomly drawn call: every tensor in one arena, apart unless the draw overlaps two.
struct Call {
  std::vector<unsigned char> arena = std::vector<unsigned char>(size_t(1) << 20);
  size_t at = 0;
  std::vector<int64_t> slots;
  void* take(int64_t bytes, std::mt19937& rng) {
    at = (at + 63) / 64 * 64 + 64 * (rng() % 2);  // sometimes adjacent, never overlapping
    void* p = arena.data() + at;
    at += static_cast<size_t>(bytes);
    return p;
  }
};

TEST(ProloguePlanFast, AcceptedCallsPlanLikeTheFullValidationAndTheRestAreDeclined) {
  std::mt19937 rng(11);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::map<std::tuple<int64_t, int64_t, int, int>, std::unique_ptr<Rope>> ropes;
  auto rope_for = [&](int64_t D, int64_t R, Pairing pairing, int scaling) -> Rope& {
    auto& r = ropes[{D, R, static_cast<int>(pairing), scaling}];
    if (!r) {
      Spec s;
      s.head_dim = D;
      s.rotary_dim = R;
      s.pairing = pairing;
      s.base = 10000.0;
      if (scaling == 1) {  // length-dependent: the frequencies depend on the call's positions
        s.scaling.type = RopeType::kDynamic;
        s.scaling.factor = 2.0;
        s.max_position_embeddings = 64;
      }
      r = std::make_unique<Rope>(s);
    }
    return *r;
  };
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  const DType caches[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI8, DType::kF8E4M3, DType::kF8E5M2};
  int accepted = 0, declined = 0, accepted_contiguous = 0, errors = 0;
  float fp8_scale = 0.05f;
  for (int iter = 0; iter < 1000; ++iter) {
    Call c;
    const DType dt = dtypes[pick(3)], cd = caches[pick(6)];
    const Layout lay = static_cast<Layout>(pick(3));  // bshd, bhsd or thd
    const int64_t B = lay == Layout::kTHD ? 1 : 1 + pick(3), S = 1 + pick(lay == Layout::kTHD ? 5 : 3), T = B * S;
    const int64_t Hq = 1 + pick(4), Hkv = 1 + pick(3), D = 2 * (1 + pick(8));
    const int64_t R = pick(3) == 0 ? 2 * (1 + pick(static_cast<int>(D / 2))) : D;
    const int64_t Dv = pick(3) == 0 ? 1 + pick(20) : D;
    // Paged caches mostly with thd tokens (the shortcut takes no others); contiguous ones with any layout.
    const CacheLayout cl = static_cast<CacheLayout>(lay == Layout::kTHD ? pick(4) : pick(8) == 0 ? pick(2) : 2 + pick(2));
    const bool paged = is_paged(cl);
    const int64_t N = lay == Layout::kTHD ? 1 : B;  // sequences (contiguous caches: one row of the cache each)
    // Contiguous: now and then an S_max below the sequence's length (an error whatever the cache positions).
    const int64_t NB = paged ? 1 + pick(4) : N + pick(2);
    const int64_t BS = paged ? 1 + pick(8) : pick(10) == 0 ? std::max<int64_t>(1, S - 1) : S + pick(6);
    const int64_t es = static_cast<int64_t>(dtype_size(dt)), ces = static_cast<int64_t>(dtype_size(cd));
    Rope& rope = rope_for(D, R, pick(2) == 0 ? Pairing::kHalfSplit : Pairing::kInterleaved, R > 2 && pick(4) == 0 ? 1 : 0);
    auto act = [&](int64_t H, int64_t dim) {  // q, k or v in the draw's layout
      const int64_t bytes = T * H * dim * es;
      if (lay == Layout::kTHD) return TensorView::contiguous(c.take(bytes, rng), dt, {T, H, dim});
      if (lay == Layout::kBSHD) return TensorView::contiguous(c.take(bytes, rng), dt, {B, S, H, dim});
      return TensorView::contiguous(c.take(bytes, rng), dt, {B, H, S, dim});
    };
    PrologueArgs a;
    a.layout = lay;
    a.q = act(Hq, D);
    a.k = act(Hkv, D);
    a.v = act(Hkv, Dv);
    a.positions = Positions::contiguous(pick(3) == 0 ? 0 : pick(100000));
    a.sources = {{&rope, pick(4) == 0 ? std::optional<int64_t>(1 + pick(500)) : std::nullopt}};
    a.cache_layout = cl;
    const int64_t rows = NB * BS;
    // nhd / bshd: [NB, BS, Hkv, dim]; hnd / bhsd: [NB, Hkv, BS, dim] (NB = B rows and BS = S_max when contiguous).
    const bool heads_third = cl == CacheLayout::kNHD || cl == CacheLayout::kBSHD;
    auto cache = [&](int64_t dim) {
      const std::initializer_list<int64_t> nhd = {NB, BS, Hkv, dim}, hnd = {NB, Hkv, BS, dim};
      return TensorView::contiguous(c.take(rows * Hkv * dim * ces, rng), cd, heads_third ? nhd : hnd);
    };
    a.k_cache = cache(D);
    a.v_cache = cache(Dv);
    if (cd == DType::kI8) {
      const std::initializer_list<int64_t> nhd = {NB, BS, Hkv}, hnd = {NB, Hkv, BS};
      a.k_scale = TensorView::contiguous(c.take(rows * Hkv * 4, rng), DType::kF32, heads_third ? nhd : hnd);
      a.v_scale = TensorView::contiguous(c.take(rows * Hkv * 4, rng), DType::kF32, heads_third ? nhd : hnd);
    } else if (is_fp8(cd)) {
      a.k_scale = a.v_scale = TensorView::contiguous(&fp8_scale, DType::kF32, {1});
    }
    if (paged) {
      // Distinct slots (some -1) within the pool, or, rarely, one out of range / repeated (an error).
      std::vector<int64_t> pool(static_cast<size_t>(rows));
      for (int64_t i = 0; i < rows; ++i) pool[static_cast<size_t>(i)] = i;
      std::shuffle(pool.begin(), pool.end(), rng);
      c.slots.resize(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t)
        c.slots[static_cast<size_t>(t)] = (t >= rows || pick(5) == 0) ? -1 : pool[static_cast<size_t>(t)];
      a.slot_mapping = TensorView::contiguous(c.slots.data(), DType::kI64, {T});
    } else if (pick(4) != 0) {  // the start row of each sequence (absent: 0)
      c.slots.resize(static_cast<size_t>(N));
      for (int64_t n = 0; n < N; ++n) c.slots[static_cast<size_t>(n)] = pick(static_cast<int>(std::max<int64_t>(1, BS - S + 1)));
      a.cache_positions = TensorView::contiguous(c.slots.data(), DType::kI64, {N});
    }
    const DType wdt = pick(2) == 0 ? DType::kF32 : DType::kBF16;
    for (TensorView* w : {&a.q_norm_weight, &a.k_norm_weight})
      if (pick(2) == 0) {
        *w = TensorView::contiguous(c.take(D * static_cast<int64_t>(dtype_size(wdt)), rng), wdt, {D});
        for (int64_t i = 0; i < D; ++i)
          std::memcpy(static_cast<unsigned char*>(w->data) + i * static_cast<int64_t>(dtype_size(wdt)),
                      wdt == DType::kF32 ? static_cast<const void*>(&fp8_scale) : static_cast<const void*>("\x80\x3f"),
                      dtype_size(wdt));
      }
    a.norm_eps = pick(2) == 0 ? 1e-6 : 1e-5;
    a.norm_offset = pick(3) == 0 ? 1.0 : 0.0;
    a.threads = pick(3);
    a.backend = pick(4) == 0 ? Backend::kCpu : Backend::kAuto;
    // Departures from the common call that the shortcut must decline (or errors it must raise as the full path does).
    bool expect_declined = paged && lay != Layout::kTHD;
    TensorView& addr = paged ? a.slot_mapping : a.cache_positions;
    switch (pick(16)) {
      case 0: a.q_out = a.q; a.q_out.data = c.take(T * Hq * D * es, rng); expect_declined = true; break;
      case 1: a.k.strides[0] += 2 * (a.k.shape[0] > 1); expect_declined |= a.k.shape[0] > 1; break;  // rows apart
      case 2: a.v.data = a.k.data; expect_declined = true; break;  // v over k
      case 3: a.backend = Backend::kReference; expect_declined = true; break;
      case 4: a.positions = Positions::from_ids(TensorView::contiguous(c.take(T * 8, rng), DType::kI64, {T}));
              expect_declined = true; break;
      case 5: if (!c.slots.empty()) c.slots[0] = (paged ? rows : BS) + pick(3); break;  // out of range: the same error
      case 6: if (paged && T > 1 && c.slots[0] >= 0) c.slots[T - 1] = c.slots[0];     // repeated: the same error
              if (!paged && N > 1) {  // a row short: the same error
                a.k_cache.shape[0] = a.v_cache.shape[0] = N - 1;
                if (cd == DType::kI8) a.k_scale.shape[0] = a.v_scale.shape[0] = N - 1;
              }
              break;
      case 7: a.q_norm_weight = TensorView::contiguous(c.take((D + 2) * 4, rng), DType::kF32, {D + 2}); break;  // wrong length
      case 8: if (addr.data != nullptr) { addr.dtype = DType::kI32; expect_declined = true; } break;
      case 9: a.k_cache.data = a.q.data; expect_declined = true; break;  // the cache over q
      case 10: if (!paged) { a.slot_mapping = TensorView::contiguous(c.take(T * 8, rng), DType::kI64, {T});
                             expect_declined = true; } break;  // a slot mapping with a contiguous cache
      case 11: if (!paged && !c.slots.empty()) c.slots[0] = -1 - pick(3); break;  // a negative start: the same error
      case 12: if (!paged && !c.slots.empty()) { ++addr.shape[0]; c.slots.push_back(0); addr.data = c.slots.data();
                                                 expect_declined = true; } break;  // one start too many
      case 13: if (!paged && N > 1 && !c.slots.empty()) {  // strided starts (every other element of a buffer)
                 std::vector<int64_t> wide(static_cast<size_t>(2 * N), 0);
                 for (int64_t n = 0; n < N; ++n) wide[static_cast<size_t>(2 * n)] = c.slots[static_cast<size_t>(n)];
                 c.slots = wide;
                 addr.data = c.slots.data();
                 addr.strides[0] = 2;
                 expect_declined = true;
               }
               break;
      default: break;
    }
    const std::string what = "iter " + std::to_string(iter) + " (" + dtype_name(dt) + " " + layout_name(lay) + " cache " +
                             dtype_name(cd) + " " + cache_layout_name(cl) + " T " + std::to_string(T) + " D " +
                             std::to_string(D) + " Dv " + std::to_string(Dv) + ")";
    ProloguePlan fast;
    std::string fast_error, full_error;
    bool took = false;
    try {
      took = detail::build_prologue_plan_fast(a, &fast);
    } catch (const Error& e) {
      took = true;
      fast_error = e.what();
    }
    if (expect_declined) EXPECT_FALSE(took) << what;
    if (!took) {
      ++declined;
      continue;
    }
    ProloguePlan full;
    try {
      full = detail::build_prologue_plan_full(a);
    } catch (const Error& e) {
      full_error = e.what();
    }
    EXPECT_EQ(fast_error, full_error) << what;
    errors += !fast_error.empty();
    if (fast_error.empty() && full_error.empty()) {
      ++accepted;
      accepted_contiguous += !paged;
      expect_same_plan(fast, full, what);
    }
    if (HasFailure()) break;
  }
  EXPECT_GT(accepted, 200);  // the draw must exercise the shortcut, and the departures its refusals
  EXPECT_GT(declined, 100);
  EXPECT_GT(accepted_contiguous, 100);  // bshd / bhsd caches (HF StaticCache), cache_positions given or not
  EXPECT_GT(errors, 40);                // errors raised by the shortcut, each the full validation's
}

}  // namespace
}  // namespace rotary
