// The one cos/sin-source decision (table or on the fly, capped in bytes) and Rope::cos_sin, which shares it.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/cos_sin_source.h"
#include "engine/test_tensors.h"
#include "rotary/rotary.h"

namespace rotary {
namespace {

using detail::PositionRange;
using enginetest::TestTensor;

Spec spec_of(int64_t head_dim) {
  Spec s;
  s.head_dim = head_dim;
  return s;
}

PositionRange range_to(int64_t max_pos) {
  PositionRange r;
  r.any = true;
  r.max_int = max_pos;
  r.max_f = static_cast<double>(max_pos);
  return r;
}

TEST(CosSinSource, AutoTablesAreCappedInBytesNotRows) {
  // rotary_dim 65536: a row is 256 KiB. Nothing is allocated: use_table only looks at sizes.
  const CosSinTable wide(compute_frequencies(spec_of(65536).normalized()));
  EXPECT_TRUE(detail::use_table(&wide, CosSinMode::kAuto, range_to(15), 1));     // 4 MiB of new rows: always allowed
  EXPECT_FALSE(detail::use_table(&wide, CosSinMode::kAuto, range_to(8000), 1));  // one token at 8000: 2 GiB, on the fly
  EXPECT_TRUE(detail::use_table(&wide, CosSinMode::kAuto, range_to(1000), 1000));   // paid by its tokens, 250 MiB
  EXPECT_FALSE(detail::use_table(&wide, CosSinMode::kAuto, range_to(3000), 3000));  // 750 MiB > kAutoTableBytes
  EXPECT_TRUE(detail::use_table(&wide, CosSinMode::kTable, range_to(3000), 1));     // kTable: the caller's choice
  // rotary_dim 128 (512-byte rows): the row rules of before, unchanged.
  const CosSinTable llama(compute_frequencies(spec_of(128).normalized()));
  EXPECT_TRUE(detail::use_table(&llama, CosSinMode::kAuto, range_to(8191), 1));
  EXPECT_FALSE(detail::use_table(&llama, CosSinMode::kAuto, range_to(8192), 1));
  EXPECT_TRUE(detail::use_table(&llama, CosSinMode::kAuto, range_to(16 * 1000 - 1), 1000));
  EXPECT_TRUE(detail::use_table(&llama, CosSinMode::kAuto, range_to((int64_t(1) << 20) - 1), int64_t(1) << 20));
  EXPECT_FALSE(detail::use_table(&llama, CosSinMode::kAuto, range_to(int64_t(1) << 20), int64_t(1) << 20));
  PositionRange frac = range_to(3);
  frac.fractional = true;
  EXPECT_FALSE(detail::use_table(&llama, CosSinMode::kAuto, frac, 4));
  EXPECT_FALSE(detail::use_table(&llama, CosSinMode::kOnTheFly, range_to(3), 4));
  EXPECT_FALSE(detail::use_table(nullptr, CosSinMode::kTable, range_to(3), 4));
}

// Positions on the device: the engine cannot read them, so seq_len sizes the table; kAuto keeps the same
// byte cap as for host positions (the device computes rows past it), kTable grows as asked.
TEST(CosSinSource, DevicePositionsGrowAnAutoTableOnlyToTheByteCap) {
  const int64_t cap_rows_128 = int64_t(1) << 20;  // 512 MiB of 512-byte rows (rotary_dim 128)
  EXPECT_EQ(detail::device_positions_rows(64, int64_t(1200000), true), cap_rows_128);
  EXPECT_EQ(detail::device_positions_rows(64, int64_t(1200000), false), 1200000);
  EXPECT_EQ(detail::device_positions_rows(64, int64_t(131072), true), 131072);
  EXPECT_EQ(detail::device_positions_rows(64, std::nullopt, true), 0);
  EXPECT_EQ(detail::device_positions_rows(32768, int64_t(4096), true), 2048);  // 256 KiB rows
}

TEST(CosSinSource, OneWideTokenFarOutBuildsNoTable) {
  // head_dim 8192 (32 KiB rows), one token at position 8000: before the byte cap this built a 256 MiB table.
  Rope rope(spec_of(8192));
  TestTensor a(DType::kF32, Layout::kBSHD, 1, 1, 1, 8192), b(DType::kF32, Layout::kBSHD, 1, 1, 1, 8192);
  a.fill_randn(3);
  b.fill_randn(3);
  ApplyArgs x;
  x.positions = Positions::contiguous(8000);
  x.threads = 1;
  x.q = a.view();
  rope.apply(x);
  EXPECT_EQ(rope.table().size(), 0);
  x.q = b.view();
  apply_frequencies(rope.frequencies(), x);
  EXPECT_EQ(a.bytes(), b.bytes());  // the same rows either way
}

TEST(CosSinSource, RopeCosSinComputesFarRowsOnTheFly) {
  Rope rope(spec_of(128));
  const std::vector<int64_t> ids = {4000000, 7, 4000000};
  std::vector<float> c(3 * 64), s(3 * 64);
  rope.cos_sin(TensorView::contiguous(ids.data(), DType::kI64, {3}), std::nullopt, c.data(), s.data());
  EXPECT_EQ(rope.table().size(), 0);  // before: a table of 4e6 rows (2 GB)
  std::vector<float> want_c(64), want_s(64);
  for (int i = 0; i < 3; ++i) {
    compute_cos_sin_row(rope.frequencies(), static_cast<double>(ids[static_cast<size_t>(i)]), want_c.data(), want_s.data());
    EXPECT_EQ(std::vector<float>(c.begin() + i * 64, c.begin() + (i + 1) * 64), want_c) << i;
    EXPECT_EQ(std::vector<float>(s.begin() + i * 64, s.begin() + (i + 1) * 64), want_s) << i;
  }
  // Many near positions: from the table, the same values.
  std::vector<int32_t> near(100);
  for (int i = 0; i < 100; ++i) near[static_cast<size_t>(i)] = 99 - i;
  std::vector<float> c2(100 * 64), s2(100 * 64);
  rope.cos_sin(TensorView::contiguous(near.data(), DType::kI32, {100}), std::nullopt, c2.data(), s2.data());
  EXPECT_GE(rope.table().size(), 100);
  compute_cos_sin_row(rope.frequencies(), 99.0, want_c.data(), want_s.data());
  EXPECT_EQ(std::vector<float>(c2.begin(), c2.begin() + 64), want_c);
  EXPECT_EQ(std::vector<float>(s2.begin(), s2.begin() + 64), want_s);
}

TEST(CosSinSource, RopeCosSinValidatesLikeApply) {
  Rope rope(spec_of(8));
  std::vector<float> c(8), s(8);
  auto message = [&](const TensorView& p) {
    try {
      rope.cos_sin(p, std::nullopt, c.data(), s.data());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::vector<double> bad = {1.0, -2.5};
  EXPECT_EQ(message(TensorView::contiguous(bad.data(), DType::kF64, {2})),
            "[rotary_cos_sin] positions[1] must be >= 0 (negative positions are invalid), got -2.5");
  const std::vector<int64_t> far = {int64_t(1) << 31};
  EXPECT_EQ(message(TensorView::contiguous(far.data(), DType::kI64, {1})),
            "[rotary_cos_sin] positions[0] must be < 2^31, got 2147483648");
  const std::vector<float> two_d(4, 0.f);
  EXPECT_NE(message(TensorView::contiguous(two_d.data(), DType::kF32, {2, 2})).find("positions must be 1-D [N], got rank 2"),
            std::string::npos);
  try {
    rope.cos_sin(TensorView::contiguous(two_d.data(), DType::kF16, {4}), std::nullopt, c.data(), s.data());
    ADD_FAILURE() << "f16 positions accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.cause(), Error::Cause::kType) << e.what();
  }
}

}  // namespace
}  // namespace rotary
