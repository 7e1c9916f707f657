// The CPU backend's thread count: `threads` is capped at the cores this process may run on (its affinity mask).
#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <thread>
#include <vector>

#include "cpu/thread_pool.h"
#include "rotary/rotary.h"

namespace rotary {
namespace {

int os_threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

/// One 16 MiB in-place call (large enough for every thread to get work) with `threads`.
void big_call(int threads) {
  std::vector<float> x(int64_t(1) << 22, 0.5f);
  ApplyArgs a;
  a.q = TensorView::contiguous(x.data(), DType::kF32, {1, 1 << 10, 32, 128});
  a.threads = threads;
  Spec s;
  s.head_dim = 128;
  apply_frequencies(compute_frequencies(s), a);
}

TEST(CpuThreads, UsableCoresFollowTheAffinityMask) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(detail::cpu::usable_cores(), CPU_COUNT(&set));
}

TEST(CpuThreads, HugeThreadCountsStartNoMoreThreadsThanCores) {
  const int before = os_threads();
  big_call(1000000);  // before the cap: ~1000 pool threads, parked for the life of the process
  EXPECT_LE(os_threads() - before, detail::cpu::usable_cores() - 1);
}

TEST(CpuThreads, ThreadsZeroRespectsARestrictedAffinityMask) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  if (CPU_COUNT(&all) < 2) GTEST_SKIP() << "needs at least 2 usable cores to restrict";
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &one);
      break;
    }
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  EXPECT_EQ(detail::cpu::usable_cores(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // calls follow a changed mask within 0.1 s
  EXPECT_EQ(detail::cpu::usable_cores_recent(), 1);
  const int before = os_threads();
  big_call(0);  // all usable cores = 1: the calling thread only
  const int after = os_threads();
  ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);
  EXPECT_EQ(after, before);
}

}  // namespace
}  // namespace rotary
