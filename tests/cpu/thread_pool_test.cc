// The CPU backend's thread pool: every chunk exactly once, nested and concurrent calls run serially
// instead of oversubscribing, and a forked child can still use threads.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "cpu/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace rotary::detail::cpu {
namespace {

struct Counting {
  std::vector<std::atomic<int>> hits;
  std::mutex m;
  std::set<std::thread::id> threads;
  explicit Counting(int64_t n) : hits(static_cast<size_t>(n)) {}
};

void count_chunk(void* ctx, int64_t chunk) {
  auto* c = static_cast<Counting*>(ctx);
  c->hits[static_cast<size_t>(chunk)].fetch_add(1);
  std::lock_guard<std::mutex> lock(c->m);
  c->threads.insert(std::this_thread::get_id());
}

TEST(ThreadPoolTest, EveryChunkRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 7}) {
    for (int64_t n : {int64_t(1), int64_t(2), int64_t(5), int64_t(64), int64_t(1000)}) {
      Counting c(n);
      parallel_for(threads, n, count_chunk, &c);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(c.hits[static_cast<size_t>(i)].load(), 1) << threads << " " << n;
      EXPECT_LE(static_cast<int>(c.threads.size()), threads);
    }
  }
  EXPECT_FALSE(in_parallel_region());  // the flag does not leak out of a call
}

TEST(ThreadPoolTest, SingleThreadRunsOnTheCaller) {
  Counting c(50);
  parallel_for(1, 50, count_chunk, &c);
  ASSERT_EQ(c.threads.size(), 1u);
  EXPECT_EQ(*c.threads.begin(), std::this_thread::get_id());
}

struct Nested {
  std::atomic<int> outer_not_in_region{0};
  std::atomic<int> inner_chunks{0};
  std::atomic<int> inner_on_other_thread{0};
};

void inner_chunk(void* ctx, int64_t) {
  auto* n = static_cast<std::pair<Nested*, std::thread::id>*>(ctx);
  n->first->inner_chunks.fetch_add(1);
  if (std::this_thread::get_id() != n->second) n->first->inner_on_other_thread.fetch_add(1);
}

void outer_chunk(void* ctx, int64_t) {
  // A call made from inside a pool job must run serially on the thread that makes it.
  std::pair<Nested*, std::thread::id> inner{static_cast<Nested*>(ctx), std::this_thread::get_id()};
  if (!in_parallel_region()) inner.first->outer_not_in_region.fetch_add(1);
  parallel_for(4, 8, inner_chunk, &inner);
}

TEST(ThreadPoolTest, NestedCallsRunSerially) {
  Nested n;
  parallel_for(2, 6, outer_chunk, &n);
  EXPECT_EQ(n.inner_chunks.load(), 6 * 8);
  EXPECT_EQ(n.inner_on_other_thread.load(), 0);
  EXPECT_EQ(n.outer_not_in_region.load(), 0);
}

TEST(ThreadPoolTest, ConcurrentCallersAllComplete) {
  // Several user threads asking for the pool at once: one gets it, the others run on their own
  // thread; every call still covers all of its chunks.
  std::vector<std::thread> callers;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 20; ++rep) {
        Counting c(37);
        parallel_for(3, 37, count_chunk, &c);
        for (auto& h : c.hits)
          if (h.load() != 1) bad.fetch_add(1);
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

#if defined(__x86_64__) || defined(__i386__)
struct DenormalProbe {
  std::vector<int> kept;  ///< per chunk: 1 if a subnormal product survived, 0 if it was flushed
  std::mutex m;
  std::set<std::thread::id> threads;
};

void probe_chunk(void* ctx, int64_t chunk) {
  auto* p = static_cast<DenormalProbe*>(ctx);
  volatile float tiny = 1e-39f, one = 1.0f;  // a subnormal: DAZ reads it as 0, FTZ flushes the product
  const float prod = tiny * one;
  p->kept[static_cast<size_t>(chunk)] = prod != 0.0f;
  std::this_thread::sleep_for(std::chrono::microseconds(200));  // let the workers take chunks too
  std::lock_guard<std::mutex> lock(p->m);
  p->threads.insert(std::this_thread::get_id());
}

/// Runs 64 chunks on 4 threads; every chunk must see the caller's mode.
void expect_every_chunk(bool kept) {
  DenormalProbe p;
  p.kept.assign(64, -1);
  parallel_for(4, 64, probe_chunk, &p);
  for (size_t i = 0; i < p.kept.size(); ++i) EXPECT_EQ(p.kept[i], kept ? 1 : 0) << "chunk " << i;
  EXPECT_GT(p.threads.size(), 1u) << "the workers took no chunk: the test checked nothing";
}

TEST(ThreadPoolTest, WorkersAdoptTheCallersFlushToZeroModeForEachCall) {
  const unsigned saved = _mm_getcsr();
  constexpr unsigned kFtzDaz = 0x8040u;
  _mm_setcsr(saved | kFtzDaz);  // workers started (or last run) in flush mode ...
  expect_every_chunk(false);
  _mm_setcsr(saved & ~kFtzDaz);  // ... then the caller turns it off: no chunk may flush
  expect_every_chunk(true);
  _mm_setcsr(saved | kFtzDaz);  // and on again
  expect_every_chunk(false);
  _mm_setcsr(saved);
}
#endif

TEST(ThreadPoolTest, ForkedChildCanUseThreads) {
  Counting warm(16);
  parallel_for(2, 16, count_chunk, &warm);  // the parent's pool now has a worker
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);  // a hang (waiting for workers that do not exist in the child) fails instead of blocking
    Counting c(16);
    parallel_for(2, 16, count_chunk, &c);
    int ok = 1;
    for (auto& h : c.hits) ok = ok && h.load() == 1;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child did not exit normally (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace rotary::detail::cpu
