// Planning a device call reads no value behind a position pointer: they are device memory (here: unreadable pages).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/build_plan.h"
#include "engine/cos_sin_source.h"
#include "rotary/apply.h"
#include "rotary/rotary_c.h"

namespace rotary {
namespace {

using detail::Plan;
using detail::PlanPositions;
using detail::PlanRequest;
using detail::PositionRange;

/// Pages the process cannot read or write: a stand-in for device memory. Any host read of a position
/// value behind them ends the test with SIGSEGV.
class NoAccess {
 public:
  NoAccess() {
    size_ = static_cast<size_t>(sysconf(_SC_PAGESIZE)) * 4;
    p_ = mmap(nullptr, size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p_ == MAP_FAILED) p_ = nullptr;
  }
  ~NoAccess() {
    if (p_) munmap(p_, size_);
  }
  void* at(size_t byte) const { return static_cast<char*>(p_) + byte; }
  bool ok() const { return p_ != nullptr; }

 private:
  void* p_ = nullptr;
  size_t size_ = 0;
};

struct Call {
  std::vector<float> q = std::vector<float>(2 * 5 * 4 * 16, 1.0f), k = std::vector<float>(2 * 5 * 2 * 16, 1.0f);
  ApplyArgs a;
  Call() {
    a.q = TensorView::contiguous(q.data(), DType::kF32, {2, 5, 4, 16});
    a.k = TensorView::contiguous(k.data(), DType::kF32, {2, 5, 2, 16});
  }
};

PlanRequest device_request(int64_t R = 16) {
  PlanRequest r;
  r.rotary_dim = R;
  r.device = true;
  r.allow_fractional = true;
  return r;
}

TEST(DevicePlan, IdsAreNotReadAndTheRangeIsUnknown) {
  NoAccess dev;
  ASSERT_TRUE(dev.ok());
  for (DType dt : {DType::kI32, DType::kI64, DType::kF32, DType::kF64}) {
    Call c;
    c.a.positions = Positions::from_ids(TensorView::contiguous(dev.at(64), dt, {2, 5}));
    c.a.stream = reinterpret_cast<void*>(0x1234);
    PositionRange range;
    const Plan plan = detail::build_plan(c.a, device_request(), &range);
    EXPECT_TRUE(plan.device);
    EXPECT_EQ(plan.stream, reinterpret_cast<void*>(0x1234));
    EXPECT_EQ(plan.pos.kind, PlanPositions::Kind::kIds);
    EXPECT_EQ(plan.pos.ids, dev.at(64));
    EXPECT_EQ(plan.pos.ids_ss, 1);
    EXPECT_EQ(plan.pos.ids_sb, 5);
    EXPECT_TRUE(range.unknown);
    EXPECT_EQ(range.fractional, dt == DType::kF32 || dt == DType::kF64);
  }
}

TEST(DevicePlan, BatchOffsetsAreNotRead) {
  NoAccess dev;
  ASSERT_TRUE(dev.ok());
  Call c;
  c.a.positions = Positions::contiguous(7);
  c.a.positions.batch_offsets = TensorView::contiguous(dev.at(0), DType::kI64, {2});
  PositionRange range;
  const Plan plan = detail::build_plan(c.a, device_request(), &range);
  EXPECT_EQ(plan.pos.kind, PlanPositions::Kind::kOffset);
  EXPECT_EQ(plan.pos.offset, 7);
  EXPECT_EQ(plan.pos.batch_offsets, dev.at(0));
  EXPECT_TRUE(range.unknown);
  EXPECT_EQ(range.max_int, 7 + 4);  // a lower bound: offset + S - 1
}

TEST(DevicePlan, PackedBatchesKeepTheirDevicePointers) {
  NoAccess dev;
  ASSERT_TRUE(dev.ok());
  std::vector<float> q(10 * 4 * 16);
  ApplyArgs a;
  a.layout = Layout::kTHD;
  a.q = TensorView::contiguous(q.data(), DType::kF32, {10, 4, 16});
  a.positions = Positions::packed(TensorView::contiguous(dev.at(0), DType::kI32, {4}),
                                  TensorView::contiguous(dev.at(128), DType::kI64, {3}));
  PositionRange range;
  const Plan plan = detail::build_plan(a, device_request(), &range);
  EXPECT_EQ(plan.pos.kind, PlanPositions::Kind::kPacked);
  EXPECT_EQ(plan.pos.cu_seqlens, dev.at(0));
  EXPECT_EQ(plan.pos.cu_seqlens_dtype, DType::kI32);
  EXPECT_EQ(plan.pos.n_seq, 3);
  EXPECT_EQ(plan.pos.seq_offsets, dev.at(128));
  EXPECT_EQ(plan.pos.seq_offsets_dtype, DType::kI64);
  EXPECT_TRUE(plan.pos.per_token.empty());
  EXPECT_TRUE(range.unknown);
  // Shapes are still checked on the host.
  a.positions.seq_offsets = TensorView::contiguous(dev.at(128), DType::kI64, {2});
  EXPECT_THROW(detail::build_plan(a, device_request(), &range), Error);
}

TEST(DevicePlan, MropeIdsAreNotRead) {
  NoAccess dev;
  ASSERT_TRUE(dev.ok());
  Call c;
  c.a.positions = Positions::from_ids(TensorView::contiguous(dev.at(0), DType::kI64, {3, 2, 5}));
  PlanRequest req = device_request();
  req.n_axes = 3;
  PositionRange range;
  const Plan plan = detail::build_plan(c.a, req, &range);
  EXPECT_EQ(plan.pos.n_axes, 3);
  EXPECT_EQ(plan.pos.ids_sa, 10);
  EXPECT_TRUE(range.unknown);
}

TEST(DevicePlan, CallerCosSinRowsAreNotCheckedAgainstDevicePositions) {
  NoAccess dev;
  ASSERT_TRUE(dev.ok());
  Call c;
  c.a.positions = Positions::from_ids(TensorView::contiguous(dev.at(0), DType::kI64, {2, 5}));
  std::vector<float> cs(3 * 8);
  const TensorView cos = TensorView::contiguous(cs.data(), DType::kF32, {3, 8});
  PositionRange range;
  Plan plan = detail::build_plan(c.a, device_request(), &range);
  detail::attach_caller_cos_sin(plan, cos, cos, c.a, range);  // rows past 3 are the kernel's concern (NaN)
  EXPECT_EQ(plan.cs.kind, detail::PlanCosSin::Kind::kCaller);
  // A known position past the rows is still reported on the host.
  Call d;
  d.a.positions = Positions::contiguous(1);
  plan = detail::build_plan(d.a, device_request(), &range);
  EXPECT_FALSE(range.unknown);
  EXPECT_THROW(detail::attach_caller_cos_sin(plan, cos, cos, d.a, range), Error);
}

TEST(DevicePlan, DeviceTableRowsGrowToTheHintOnlyAndNameTheirOwner) {
  Frequencies f;
  f.inv_freq = {1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125};
  TableOptions o;
  o.max_positions = 1000;
  CosSinTable table(f, o);
  Call c;
  PositionRange range;
  Plan plan = detail::build_plan(c.a, device_request(), &range);
  detail::attach_device_table(plan, table, 0);
  EXPECT_EQ(plan.cs.table_owner, &table);
  EXPECT_EQ(plan.cs.table_pin.data, plan.cs.table) << "the plan pins the rows it reads";
  EXPECT_EQ(plan.cs.table_size, table.size());
  EXPECT_EQ(plan.cs.inv_freq, table.frequencies().inv_freq.data());
  detail::attach_device_table(plan, table, 300);
  EXPECT_GE(plan.cs.table_size, 300);
  detail::attach_device_table(plan, table, 5000);  // capped at max_positions, no error
  EXPECT_EQ(plan.cs.table_size, 1000);
}

TEST(DevicePlan, TheCApiAcceptsTheArgsLayoutWithoutTheStreamField) {
  rotary_spec_t* spec = nullptr;
  rotary_rope_t* rope = nullptr;
  ASSERT_EQ(rotary_spec_from_preset("llama-3.1-8b", &spec), ROTARY_OK);
  ASSERT_EQ(rotary_rope_create(spec, nullptr, &rope), ROTARY_OK);
  std::vector<float> q(32 * 128, 0.5f);
  const int64_t shape[4] = {1, 1, 32, 128};
  rotary_apply_args_t args;
  rotary_apply_args_init(&args);
  ASSERT_EQ(rotary_tensor_contiguous(&args.q, q.data(), ROTARY_DTYPE_F32, 4, shape), ROTARY_OK);
  args.positions.offset = 3;
  args.struct_size = offsetof(rotary_apply_args_t, stream);  // a caller compiled against 0.1.0
  EXPECT_EQ(rotary_rope_apply(rope, &args), ROTARY_OK) << rotary_last_error();
  args.struct_size = offsetof(rotary_apply_args_t, stream) - 8;
  EXPECT_EQ(rotary_rope_apply(rope, &args), ROTARY_ERROR_INVALID_ARGUMENT);
  rotary_rope_free(rope);
  rotary_spec_free(spec);
}

}  // namespace
}  // namespace rotary
