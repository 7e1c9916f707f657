// The shortcut planner for common calls: accepted calls plan exactly like the full validation; all others are left to it.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/build_plan.h"
#include "engine/fast_plan.h"
#include "rotary/apply.h"
#include "testing/plan_compare.h"

namespace rotary {
namespace {

using detail::Plan;
using detail::PlanRequest;
using detail::PositionRange;

void expect_same_plan(const Plan& a, const Plan& b, const PositionRange& ra, const PositionRange& rb,
                      const std::string& what) {
  testing::expect_same_rotation(a, b, what);
  EXPECT_EQ(ra.any, rb.any) << what;
  EXPECT_EQ(ra.fractional, rb.fractional) << what;
  EXPECT_EQ(ra.max_int, rb.max_int) << what;
  EXPECT_EQ(ra.max_f, rb.max_f) << what;
}

TEST(PlanFast, AcceptedCallsPlanLikeTheFullValidation) {
  std::mt19937 rng(7);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::vector<unsigned char> mem(1 << 20);
  int accepted = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const Layout layout = static_cast<Layout>(pick(3));
    const DType dt = std::vector<DType>{DType::kF32, DType::kF16, DType::kBF16, DType::kF64}[pick(4)];
    const int64_t B = 1 + pick(2), S = 1 + pick(5), Hq = 1 + pick(4), Hk = 1 + pick(3), D = 2 * (1 + pick(8));
    const bool has_k = pick(4) != 0, q_oop = pick(2) == 0, k_oop = has_k && pick(2) == 0;
    const bool q_self = !q_oop && pick(3) == 0, k_self = has_k && !k_oop && pick(3) == 0;  // out = the input's view
    const size_t es = dtype_size(dt);
    size_t at = static_cast<size_t>(pick(8)) * 64;
    auto view = [&](int64_t H) {
      void* p = mem.data() + at;
      const int64_t n = B * S * H * D;
      at += static_cast<size_t>(n) * es + 64 * static_cast<size_t>(pick(3));  // disjoint, sometimes adjacent
      TensorView v;
      switch (layout) {
        case Layout::kBSHD: v = TensorView::contiguous(p, dt, {B, S, H, D}); break;
        case Layout::kBHSD: v = TensorView::contiguous(p, dt, {B, H, S, D}); break;
        case Layout::kTHD: v = TensorView::contiguous(p, dt, {B * S, H, D}); break;
      }
      for (int i = 0; i < v.rank; ++i)  // size-1 dims may carry any stride (as torch/numpy views do)
        if (v.shape[i] == 1 && pick(2) == 0) v.strides[i] = pick(5000);
      return v;
    };
    ApplyArgs a;
    a.layout = layout;
    a.q = view(Hq);
    if (has_k) a.k = view(Hk);
    if (q_oop) a.q_out = view(Hq);
    if (k_oop) a.k_out = view(Hk);
    auto self_view = [&](const TensorView& v) {  // same data, shape, strides; any stride on size-1 dims
      TensorView o = v;
      for (int i = 0; i < o.rank; ++i)
        if (o.shape[i] == 1 && pick(2) == 0) o.strides[i] = pick(5000);
      return o;
    };
    if (q_self) a.q_out = self_view(a.q);
    if (k_self) a.k_out = self_view(a.k);
    a.positions = Positions::contiguous(pick(3) == 0 ? 0 : pick(100000));
    if (pick(2)) a.pairing = Pairing::kInterleaved;
    a.direction = pick(2) ? Direction::kInverse : Direction::kForward;
    a.threads = pick(3);
    if (pick(4) == 0) a.seq_len = 1 + pick(1000);
    PlanRequest req;
    req.rotary_dim = 2 * (1 + pick(static_cast<int>(D / 2)));
    req.default_pairing = pick(2) ? Pairing::kHalfSplit : Pairing::kInterleaved;
    const std::string what = "iter " + std::to_string(iter) + " layout " + layout_name(layout) + " dtype " +
                             dtype_name(dt);
    Plan fast;
    PositionRange rf, rs;
    ASSERT_TRUE(detail::build_plan_fast(a, req, &fast, &rf)) << what << ": a plain call must take the shortcut";
    const Plan full = detail::build_plan_full(a, req, &rs);
    expect_same_plan(fast, full, rf, rs, what);
    ++accepted;
  }
  EXPECT_EQ(accepted, 400);
}

TEST(PlanFast, EverythingElseIsLeftToTheFullValidation) {
  std::vector<float> q(2 * 3 * 4 * 8, 1.0f), k(2 * 3 * 2 * 8, 1.0f), out(1024, 0.0f);
  std::vector<int64_t> ids(6, 0);
  auto base = [&] {
    ApplyArgs a;
    a.q = TensorView::contiguous(q.data(), DType::kF32, {2, 3, 4, 8});
    a.k = TensorView::contiguous(k.data(), DType::kF32, {2, 3, 2, 8});
    return a;
  };
  PlanRequest req;
  req.rotary_dim = 8;
  {
    Plan p;
    PositionRange r;
    ASSERT_TRUE(detail::build_plan_fast(base(), req, &p, &r)) << "the base call is plain";
  }
  struct Case {
    const char* name;
    std::function<void(ApplyArgs&, PlanRequest&)> edit;
  };
  const std::vector<Case> cases = {
      {"strided q", [&](ApplyArgs& a, PlanRequest&) { a.q.strides[2] = 16; a.q.shape[2] = 2; }},
      {"q and k overlap", [&](ApplyArgs& a, PlanRequest&) { a.k.data = q.data() + 8; }},
      {"q_out is q with another dtype", [&](ApplyArgs& a, PlanRequest&) { a.q_out = a.q; a.q_out.dtype = DType::kF16; }},
      {"q_out is q with a negative size-1 stride", [&](ApplyArgs& a, PlanRequest&) {
         a.q = TensorView::contiguous(q.data(), DType::kF32, {1, 3, 4, 8});
         a.k = TensorView::contiguous(k.data(), DType::kF32, {1, 3, 2, 8});
         a.q_out = a.q; a.q_out.strides[0] = -5; }},
      {"q_out overlaps k", [&](ApplyArgs& a, PlanRequest&) { a.q_out = a.q; a.q_out.data = k.data() + 4; }},
      {"k_out without k", [&](ApplyArgs& a, PlanRequest&) { a.k_out = a.k; a.k_out.data = out.data(); a.k = {}; }},
      {"k dtype differs", [&](ApplyArgs& a, PlanRequest&) { a.k.dtype = DType::kF16; }},
      {"k head_dim differs", [&](ApplyArgs& a, PlanRequest&) { a.k.shape[3] = 4; a.k.strides[2] = 4; a.k.strides[1] = 8; a.k.strides[0] = 24; }},
      {"empty q", [&](ApplyArgs& a, PlanRequest&) { a.q.shape[1] = 0; }},
      {"null q", [&](ApplyArgs& a, PlanRequest&) { a.q.data = nullptr; }},
      {"integer q", [&](ApplyArgs& a, PlanRequest&) { a.q.dtype = DType::kI32; }},
      {"rank 3 in bshd", [&](ApplyArgs& a, PlanRequest&) { a.q.rank = 3; }},
      {"odd rotary_dim", [&](ApplyArgs&, PlanRequest& r) { r.rotary_dim = 7; }},
      {"rotary_dim > head_dim", [&](ApplyArgs&, PlanRequest& r) { r.rotary_dim = 10; }},
      {"negative offset", [&](ApplyArgs& a, PlanRequest&) { a.positions.offset = -1; }},
      {"offset near INT64_MAX", [&](ApplyArgs& a, PlanRequest&) { a.positions.offset = INT64_MAX - 1; }},
      {"position past 2^31", [&](ApplyArgs& a, PlanRequest&) { a.positions.offset = (int64_t(1) << 31) - 2; }},
      {"batch offsets", [&](ApplyArgs& a, PlanRequest&) {
         a.positions.batch_offsets = TensorView::contiguous(ids.data(), DType::kI64, {2}); }},
      {"ids", [&](ApplyArgs& a, PlanRequest&) {
         a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {2, 3})); }},
      {"cuda backend", [&](ApplyArgs& a, PlanRequest&) { a.backend = Backend::kCuda; }},
      {"bad layout enum", [&](ApplyArgs& a, PlanRequest&) { a.layout = static_cast<Layout>(9); }},
      {"negative threads", [&](ApplyArgs& a, PlanRequest&) { a.threads = -1; }},
      {"seq_len 0", [&](ApplyArgs& a, PlanRequest&) { a.seq_len = 0; }},
  };
  for (const Case& c : cases) {
    ApplyArgs a = base();
    PlanRequest r = req;
    c.edit(a, r);
    Plan p;
    PositionRange range;
    EXPECT_FALSE(detail::build_plan_fast(a, r, &p, &range)) << c.name;
    EXPECT_EQ(p.ntensors, 0) << c.name << ": a refused call must leave the plan untouched";
  }
}

}  // namespace
}  // namespace rotary
