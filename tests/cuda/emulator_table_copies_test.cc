// CUDA backend on the host grid emulator: device copies of a cos/sin table (once per growth and device, their size,
// failures that leave them as they were) and CUDA graph capture around them.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/emulator.h"
#include "cuda/matrix.h"
#include "cuda/simple_call.h"
#include "plan/table_attachment.h"

namespace rotary {
namespace {

using namespace rotary::testing;  // NOLINT: the matrix vocabulary
using detail::cuda::DeviceTables;

int row_copies(const CosSinTable& t) {
  return detail::TableAttachment::get<DeviceTables>(t, [] { return std::shared_ptr<DeviceTables>(); }).copies();
}

TEST(CudaEmulator, TableRowsAreCopiedOncePerGrowthPerDeviceAndNothingIsAllocatedAfterwards) {
  EmulatedCuda cuda;
  {
    CosSinTable table(freqs_for(64));
    Simple s(4, 2, 64, 0);
    apply_table(table, s.a);  // first use on device 0: frequencies + rows
    EXPECT_EQ(row_copies(table), 1);
    const int allocs = cuda.rt.allocations, copies = cuda.rt.copies;
    for (int64_t off = 1; off < 200; off += 7) {  // within the rows the table holds (it grew to >= 256)
      s.a.positions = Positions::contiguous(off);
      apply_table(table, s.a);
    }
    EXPECT_EQ(cuda.rt.allocations, allocs) << "no allocation once the device copy covers the positions";
    EXPECT_EQ(cuda.rt.copies, copies);
    EXPECT_EQ(row_copies(table), 1);
    s.a.positions = Positions::contiguous(table.size() + 10);  // the host table grows: one more copy
    apply_table(table, s.a);
    EXPECT_EQ(row_copies(table), 2);
    // Another device: its own copy, once.
    Simple t(4, 2, 64, 3);
    cuda.rt.ranges.push_back({t.q.data(), t.q.size() * 4, 1});
    apply_table(table, t.a);
    apply_table(table, t.a);
    EXPECT_EQ(row_copies(table), 3);
    EXPECT_EQ(cuda.rt.last_job.cs.table_rows, table.size());
  }
  EXPECT_EQ(cuda.rt.releases, cuda.rt.allocations) << "the device copies die with the table";
}

/// A device call copies the rows it needs (at least a floor, growing geometrically), not the whole host table:
/// a CPU call at offset 10^6 had grown that to 512 MB (R = 128), which a device call at position 5 then copied.
TEST(CudaEmulator, ADeviceCallCopiesTheRowsItNeedsNotAHostTableThatCpuCallsGrew) {
  EmulatedCuda cuda;
  {
    const Frequencies f = freqs_for(64);
    CosSinTable table(f), host(f);
    // A floor of 1 MiB (4096 rows of R = 64) instead of 64 MiB, so that a small table reaches the rule.
    detail::TableAttachment::get<DeviceTables>(table, [&] { return std::make_shared<DeviceTables>(&cuda.rt, int64_t(1) << 20); });
    Simple grown(2, 2, 64, 50000);
    grown.a.backend = Backend::kCpu;
    apply_table(table, grown.a);
    ASSERT_GE(table.size(), 50002);
    for (auto [offset, rows] : {std::pair<int64_t, int64_t>{5, 4096}, {4091, 8192}, {9000, 16384}, {30000, 32768}}) {
      SCOPED_TRACE("offset " + std::to_string(offset));
      Simple s(6, 2, 64, offset);
      std::vector<float> ref = s.q;
      apply_table(table, s.a);
      EXPECT_EQ(cuda.rt.last_job.cs.table_rows, rows) << "the floor, then max(needed, twice the copy)";
      ApplyArgs r = s.a;
      r.q.data = ref.data();
      r.backend = Backend::kReference;
      apply_table(host, r);
      for (std::size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(s.q[i], ref[i], output_abs_tol(DType::kF32)) << i;
    }
    EXPECT_EQ(row_copies(table), 4);
  }
  EXPECT_EQ(cuda.rt.releases, cuda.rt.allocations) << "the device copies die with the table";
}

/// A failed allocation or copy while making or growing a device copy (out of device memory, say) leaves the
/// table's copies as they were: the call throws before any launch, keeps no memory, and a retry makes the
/// copy and matches the reference, positions past the copied rows (which read the frequencies) included.
TEST(CudaEmulator, AFailedTableCopyLeavesTheCopiesAsTheyWereAndARetryWorks) {
  struct Case {
    int allocation_in, copy_in;
  };
  for (bool grow : {false, true})
    for (Case c : {Case{1, 0}, Case{2, 0}, Case{0, 1}, Case{0, 2}}) {
      if (grow && (c.allocation_in == 2 || c.copy_in == 2)) continue;  // a growth allocates and copies once
      SCOPED_TRACE("grow " + std::to_string(grow) + ", allocation " + std::to_string(c.allocation_in) +
                   ", copy " + std::to_string(c.copy_in));
      const Frequencies f = freqs_for(64);
      EmulatedCuda cuda;
      {
        CosSinTable table(f), host(f);
        if (grow) {
          Simple first(2, 2, 64, 0);
          apply_table(table, first.a);
          ASSERT_EQ(row_copies(table), 1);
        }
        const int64_t n = table.view_for(64).size;
        std::vector<int64_t> ids = {0, 1, grow ? n + 5 : 7, 20 * n};  // 20 n: past every copied row
        std::vector<float> q = randn(ids.size() * 2 * 64, 13), ref = q;
        ApplyArgs a;
        a.q = TensorView::contiguous(q.data(), DType::kF32, {1, static_cast<int64_t>(ids.size()), 2, 64});
        a.positions =
            Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {static_cast<int64_t>(ids.size())}));
        a.seq_len = grow ? 2 * n : 64;  // the device copy must hold (grow to) this many rows
        a.backend = Backend::kCuda;
        const int launches = cuda.rt.launches, held = cuda.rt.allocations - cuda.rt.releases;
        const int copies_before = grow ? row_copies(table) : 0;  // (no attachment before the first device call)
        cuda.rt.fail_allocation_in = c.allocation_in;
        cuda.rt.fail_copy_in = c.copy_in;
        EXPECT_THROW(apply_table(table, a), Error);
        EXPECT_EQ(cuda.rt.launches, launches);
        EXPECT_EQ(cuda.rt.allocations - cuda.rt.releases, held) << "the failed call keeps no device memory";
        EXPECT_EQ(row_copies(table), copies_before);
        EXPECT_EQ(q, ref) << "nothing was rotated";
        cuda.rt.fail_allocation_in = cuda.rt.fail_copy_in = 0;
        apply_table(table, a);  // the retry: memory is available again
        EXPECT_EQ(row_copies(table), copies_before + 1);
        ASSERT_NE(cuda.rt.last_job.cs.inv_freq, nullptr);
        EXPECT_GE(cuda.rt.last_job.cs.table_rows, a.seq_len);
        ApplyArgs r = a;
        r.q.data = ref.data();
        r.backend = Backend::kReference;
        apply_table(host, r);
        for (std::size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(q[i], ref[i], output_abs_tol(DType::kF32)) << i;
      }
      EXPECT_EQ(cuda.rt.releases, cuda.rt.allocations) << "the device copies die with the table";
    }
}

TEST(CudaEmulator, GrowingTheDeviceCopyDuringCaptureIsAnErrorAndCapturedCallsOtherwiseRun) {
  EmulatedCuda cuda;
  CosSinTable table(freqs_for(64));
  Simple s(2, 2, 64, 0);
  s.a.stream = reinterpret_cast<void*>(0x1);
  cuda.rt.capturing_stream = s.a.stream;
  try {
    apply_table(table, s.a);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("before CUDA graph capture"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cuda.rt.launches, 0);
  cuda.rt.capturing_stream = nullptr;  // grow outside the capture, then capture again
  s.a.positions = Positions::contiguous(100);
  apply_table(table, s.a);
  cuda.rt.capturing_stream = s.a.stream;
  const int copies = cuda.rt.copies;
  s.a.positions = Positions::contiguous(50);
  EXPECT_NO_THROW(apply_table(table, s.a));
  EXPECT_EQ(cuda.rt.copies, copies);
  EXPECT_EQ(cuda.rt.launches, 2);
}

/// Growing the host table for other reasons (a CPU call at a far position, Rope::cos_sin, another device)
/// neither re-copies a device copy that already covers a call nor makes its capture fail.
TEST(CudaEmulator, HostTableGrowthElsewhereNeitherRecopiesNorBreaksCapture) {
  EmulatedCuda cuda;
  CosSinTable table(freqs_for(64));
  std::vector<float> q = randn(4 * 2 * 64, 3);
  std::vector<int64_t> ids = {1, 2, 3, 60};
  ApplyArgs a;
  a.q = TensorView::contiguous(q.data(), DType::kF32, {1, 4, 2, 64});
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {4}));
  a.backend = Backend::kCuda;
  a.seq_len = 64;
  a.stream = reinterpret_cast<void*>(0x77);
  apply_table(table, a);  // the device copy covers seq_len = 64
  const int copies = cuda.rt.copies;
  std::vector<float> h = randn(2 * 64, 4);
  ApplyArgs c;  // a CPU call on the same table grows the host table far past the device copy
  c.q = TensorView::contiguous(h.data(), DType::kF32, {1, 1, 2, 64});
  c.positions = Positions::contiguous(5000);
  apply_table(table, c);
  ASSERT_GT(table.size(), 5000);
  cuda.rt.capturing_stream = a.stream;
  EXPECT_NO_THROW(apply_table(table, a)) << "a captured call that needs no new row";
  cuda.rt.capturing_stream = nullptr;
  Simple s(2, 2, 64, 10);  // host-known positions below the copy's rows
  s.a.stream = a.stream;
  apply_table(table, s.a);
  apply_table(table, a);
  EXPECT_EQ(cuda.rt.copies, copies) << "calls needing rows the device copy holds copied again";
  s.a.positions = Positions::contiguous(4000);  // a call that does need more rows copies once
  apply_table(table, s.a);
  EXPECT_EQ(cuda.rt.copies, copies + 1);
}

/// Before the first call on a device the table has no device copy at all (not even its frequencies): a
/// captured call is refused with a message that says so, and nothing is launched.
TEST(CudaEmulator, CaptureBeforeAnyCopyIsRefusedNamingTheMissingCopy) {
  EmulatedCuda cuda;
  CosSinTable table(freqs_for(64));
  std::vector<float> q = randn(2 * 64, 3);
  std::vector<int64_t> ids = {1000, 2000};
  ApplyArgs a;
  a.q = TensorView::contiguous(q.data(), DType::kF32, {1, 2, 1, 64});
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {2}));
  a.backend = Backend::kCuda;
  a.stream = reinterpret_cast<void*>(0x78);
  cuda.rt.capturing_stream = a.stream;
  try {
    apply_table(table, a);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("has no copy yet"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cuda.rt.launches, 0);
  cuda.rt.capturing_stream = nullptr;
  apply_table(table, a);  // one call outside the capture, then the capture runs
  cuda.rt.capturing_stream = a.stream;
  EXPECT_NO_THROW(apply_table(table, a));
  EXPECT_EQ(cuda.rt.launches, 2);
}

}  // namespace
}  // namespace rotary
