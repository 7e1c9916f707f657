// A small persistent thread pool: one job at a time, chunks claimed with an atomic counter, caller helps.
#include "cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <pthread.h>
#include <sched.h>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#else
#include <cfenv>
#endif

namespace rotary::detail::cpu {
namespace {

/// The calling thread's floating-point control (rounding, flush-to-zero / denormals-are-zero), which workers
/// adopt for each job: a call's bytes then depend on its caller's mode, not on which thread ran a chunk or
/// on the mode a worker was started with (a caller that turns on flush-to-zero, e.g.
/// torch.set_flush_denormal, gets it on every thread of its call, and one that turns it off gets it off).
#if defined(__x86_64__) || defined(__i386__)
using FpControl = unsigned;
constexpr unsigned kMxcsrFlags = 0x3Fu;  // sticky exception flags: not control, left to each thread
FpControl fp_control() { return _mm_getcsr() & ~kMxcsrFlags; }
void adopt_fp_control(FpControl c) {
  const unsigned cur = _mm_getcsr();
  if ((cur & ~kMxcsrFlags) != c) _mm_setcsr(c | (cur & kMxcsrFlags));
}
#else
using FpControl = std::fenv_t;
FpControl fp_control() {
  std::fenv_t e;
  std::fegetenv(&e);
  return e;
}
void adopt_fp_control(const FpControl& c) { std::fesetenv(&c); }
#endif

thread_local bool t_in_region = false;

/// Marks the current thread as running pool work for the scope's lifetime.
struct RegionGuard {
  bool saved;
  RegionGuard() : saved(t_in_region) { t_in_region = true; }
  ~RegionGuard() { t_in_region = saved; }
};

class Pool {
 public:
  /// Caller holds busy_ (try-locked). Runs the job with `helpers` workers plus the caller.
  void run(int helpers, int64_t nchunks, void (*fn)(void*, int64_t), void* ctx) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      while (static_cast<int>(workers_.size()) < helpers) {
        const int index = static_cast<int>(workers_.size());
        workers_.emplace_back([this, index] { worker_loop(index); });
      }
      fn_ = fn;
      ctx_ = ctx;
      fp_ = fp_control();
      nchunks_ = nchunks;
      next_.store(0, std::memory_order_relaxed);
      helpers_ = helpers;
      pending_ = helpers;
      ++generation_;
    }
    wake_.notify_all();
    {
      RegionGuard guard;
      drain();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
  }

  std::mutex busy_;  ///< held by the one call currently using the pool

 private:
  void drain() {
    for (;;) {
      const int64_t chunk = next_.fetch_add(1, std::memory_order_relaxed);
      if (chunk >= nchunks_) return;
      fn_(ctx_, chunk);
    }
  }

  void worker_loop(int index) {
    t_in_region = true;
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen && index < helpers_; });
        seen = generation_;
        adopt_fp_control(fp_);
      }
      drain();
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  uint64_t generation_ = 0;
  int helpers_ = 0;
  int pending_ = 0;
  void (*fn_)(void*, int64_t) = nullptr;
  void* ctx_ = nullptr;
  FpControl fp_{};
  int64_t nchunks_ = 0;
  std::atomic<int64_t> next_{0};
};

std::atomic<Pool*> g_pool{nullptr};

/// A forked child has none of the parent's worker threads: it starts over with an empty pool
/// (the parent's Pool object is leaked in the child, as its mutexes may have been held at fork).
void reset_pool_in_child() { g_pool.store(new Pool, std::memory_order_release); }

/// The pool, created by the first call that needs one. Published with a compare-exchange, not
/// std::call_once or a function-local static: their "initialisation in progress" state is a lock that a
/// fork() during the first call would leave held in the child.
Pool& pool() {
  Pool* p = g_pool.load(std::memory_order_acquire);
  if (p != nullptr) return *p;
  static std::atomic<bool> registered{false};  // constant-initialised: no guard
  if (!registered.exchange(true)) pthread_atfork(nullptr, nullptr, reset_pool_in_child);  // exactly once
  Pool* made = new Pool;  // never destroyed: workers stay parked at exit
  if (g_pool.compare_exchange_strong(p, made, std::memory_order_acq_rel)) return *made;
  delete made;  // another thread won; it has no workers yet
  return *p;
}

void run_serial(int64_t nchunks, void (*fn)(void*, int64_t), void* ctx) {
  for (int64_t c = 0; c < nchunks; ++c) fn(ctx, c);
}

}  // namespace

bool in_parallel_region() { return t_in_region; }

int usable_cores() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

int usable_cores_recent() {
  static std::atomic<int> cores{0};
  static std::atomic<int64_t> read_at_ns{0};
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  int n = cores.load(std::memory_order_relaxed);
  if (n == 0 || now - read_at_ns.load(std::memory_order_relaxed) > 100'000'000) {
    n = usable_cores();
    cores.store(n, std::memory_order_relaxed);
    read_at_ns.store(now, std::memory_order_relaxed);
  }
  return n;
}

void parallel_for(int threads, int64_t nchunks, void (*fn)(void* ctx, int64_t chunk), void* ctx) {
  if (threads <= 1 || nchunks <= 1 || t_in_region) return run_serial(nchunks, fn, ctx);
  Pool& p = pool();
  std::unique_lock<std::mutex> busy(p.busy_, std::try_to_lock);
  if (!busy.owns_lock()) return run_serial(nchunks, fn, ctx);
  const int64_t helpers = std::min<int64_t>(threads - 1, nchunks - 1);
  p.run(static_cast<int>(helpers), nchunks, fn, ctx);
}

}  // namespace rotary::detail::cpu
