// Test helpers: field-by-field comparison of two rotation plans (the shortcut planners' tests against the full validation).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "plan/plan.h"

namespace rotary::testing {

/// One planned tensor: pointers, heads and the eight canonical strides.
inline void expect_same_tensor(const detail::PlanTensor& x, const detail::PlanTensor& y, const std::string& what) {
  EXPECT_EQ(x.in, y.in) << what;
  EXPECT_EQ(x.out, y.out) << what;
  EXPECT_EQ(x.heads, y.heads) << what;
  const int64_t xs[8] = {x.in_sb, x.in_ss, x.in_sh, x.in_sd, x.out_sb, x.out_ss, x.out_sh, x.out_sd};
  const int64_t ys[8] = {y.in_sb, y.in_ss, y.in_sh, y.in_sd, y.out_sb, y.out_ss, y.out_sh, y.out_sd};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(xs[j], ys[j]) << what << " stride " << j;
}

/// A rotation plan's geometry, tensors and positions (not its cos/sin source).
inline void expect_same_rotation(const detail::Plan& a, const detail::Plan& b, const std::string& what) {
  EXPECT_EQ(a.dtype, b.dtype) << what;
  EXPECT_EQ(a.pairing, b.pairing) << what;
  EXPECT_EQ(a.direction, b.direction) << what;
  EXPECT_EQ(a.head_dim, b.head_dim) << what;
  EXPECT_EQ(a.rotary_dim, b.rotary_dim) << what;
  EXPECT_EQ(a.half, b.half) << what;
  EXPECT_EQ(a.B, b.B) << what;
  EXPECT_EQ(a.S, b.S) << what;
  EXPECT_EQ(a.threads, b.threads) << what;
  EXPECT_EQ(a.device, b.device) << what;
  EXPECT_EQ(a.ntensors, b.ntensors) << what;
  if (a.ntensors != b.ntensors) return;  // (an ASSERT here would return from this helper only)
  for (int i = 0; i < a.ntensors; ++i) expect_same_tensor(a.t[i], b.t[i], what + " tensor " + std::to_string(i));
  EXPECT_EQ(a.pos.kind, b.pos.kind) << what;
  EXPECT_EQ(a.pos.offset, b.pos.offset) << what;
  EXPECT_EQ(a.pos.batch_offsets, b.pos.batch_offsets) << what;
  EXPECT_EQ(a.pos.n_axes, b.pos.n_axes) << what;
}

}  // namespace rotary::testing
