// The timing harness shared by `rotary bench` and `rotary report` (definition in timing.h and docs/performance.md).
#include "timing.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ROTARY_TIMING_X86 1
#else
#define ROTARY_TIMING_X86 0
#endif

namespace rotary::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#if ROTARY_TIMING_X86
// The limits prefetch 4 KiB ahead into L2 like the kernels do (src/cpu/prefetch.h), so that they are the best
// loops we know, not plain ones (a plain loop, or one prefetching into L1, is slower on this machine class; see
// docs/performance.md).
constexpr size_t kAheadFloats = 1024;

__attribute__((target("avx512f"))) void rmw_avx512(float* x, size_t n) {
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(x + i + kAheadFloats), _MM_HINT_T2);
    _mm512_storeu_ps(x + i, _mm512_fmadd_ps(_mm512_loadu_ps(x + i), a, b));
  }
  for (; i < n; ++i) x[i] = x[i] * 0.999f + 1e-3f;
}
__attribute__((target("avx2,fma"))) void rmw_avx2(float* x, size_t n) {
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_prefetch(reinterpret_cast<const char*>(x + i + kAheadFloats), _MM_HINT_T2);
    _mm256_storeu_ps(x + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), a, b));
  }
  for (; i < n; ++i) x[i] = x[i] * 0.999f + 1e-3f;
}
__attribute__((target("avx512f"))) void nt_copy_avx512(float* dst, const float* src, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(src + i + kAheadFloats), _MM_HINT_T2);
    _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
  }
  for (; i < n; ++i) dst[i] = src[i];
  _mm_sfence();
}
__attribute__((target("avx2"))) void nt_copy_avx2(float* dst, const float* src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_prefetch(reinterpret_cast<const char*>(src + i + kAheadFloats), _MM_HINT_T2);
    _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
  }
  for (; i < n; ++i) dst[i] = src[i];
  _mm_sfence();
}
#endif

/// In-place streaming read-modify-write x = x*a + b with the widest vectors the CPU has.
void rmw_widest(float* x, size_t n) {
#if ROTARY_TIMING_X86
  if (__builtin_cpu_supports("avx512f")) return rmw_avx512(x, n);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return rmw_avx2(x, n);
#endif
  for (size_t i = 0; i < n; ++i) x[i] = x[i] * 0.999f + 1e-3f;
}

/// Copy with non-temporal (cache-bypassing) stores; dst must be 64-byte aligned.
void nt_copy_widest(float* dst, const float* src, size_t n) {
#if ROTARY_TIMING_X86
  if (__builtin_cpu_supports("avx512f")) return nt_copy_avx512(dst, src, n);
  if (__builtin_cpu_supports("avx2")) return nt_copy_avx2(dst, src, n);
#endif
  std::memcpy(dst, src, n * sizeof(float));
}

}  // namespace

bool transparent_huge_pages_available() {
#if defined(__linux__)
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(f, mode);
  return mode.find("[always]") != std::string::npos || mode.find("[madvise]") != std::string::npos;
#else
  return false;
#endif
}

Buffer::Buffer(size_t bytes, bool huge_pages) : bytes_(bytes) {
  const size_t align = huge_pages ? size_t{2} << 20 : 4096;
  const size_t size = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  p_ = static_cast<unsigned char*>(std::aligned_alloc(align, size));
  if (p_ == nullptr) throw std::bad_alloc();
#if defined(__linux__)
  // Before the first touch: pages faulted in afterwards are 2 MiB where the kernel has them.
  if (huge_pages) madvise(p_, size, MADV_HUGEPAGE);
#endif
  std::memset(p_, 0, bytes);
}

Buffer::~Buffer() { std::free(p_); }

Timing prefill_timing(bool quick) { return quick ? Timing{0.05, 3, 1} : Timing{0.6, 9, 1}; }

Timing decode_timing(bool quick) { return quick ? Timing{0.02, 5, 200} : Timing{0.2, 15, 1000}; }

std::pair<double, double> time_pair(const std::function<void()>& a, const std::function<void()>& b,
                                    const Timing& t) {
  for (int i = 0; i < t.batch; ++i) a();  // warm-up
  for (int i = 0; i < t.batch; ++i) b();
  std::vector<double> va, vb;
  const auto start = Clock::now();
  while (static_cast<int>(va.size()) < t.min_reps || seconds_since(start) < t.min_time_s) {
    auto t0 = Clock::now();
    for (int i = 0; i < t.batch; ++i) a();
    va.push_back(seconds_since(t0) / t.batch);
    t0 = Clock::now();
    for (int i = 0; i < t.batch; ++i) b();
    vb.push_back(seconds_since(t0) / t.batch);
    if (va.size() >= 100000) break;
  }
  return {median(va), median(vb)};
}

/// Helper threads for the limits, parked between runs so that no run pays thread start-up.
class Limits::Team {
 public:
  ~Team() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
      ++gen_;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  /// Runs fn(i) for i in [0, n) on n threads (the caller runs i = 0).
  void run(int n, const std::function<void(int)>& fn) {
    while (static_cast<int>(threads_.size()) < n - 1) {
      const int index = static_cast<int>(threads_.size()) + 1;
      threads_.emplace_back([this, index] { loop(index); });
    }
    {
      std::lock_guard<std::mutex> lock(m_);
      fn_ = &fn;
      n_ = n;
      pending_ = n - 1;
      ++gen_;
    }
    cv_.notify_all();
    fn(0);
    std::unique_lock<std::mutex> lock(m_);
    done_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  void loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* fn;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return gen_ != seen && (stop_ || index < n_); });
        seen = gen_;
        if (stop_) return;
        fn = fn_;
      }
      (*fn)(index);
      std::lock_guard<std::mutex> lock(m_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
  std::mutex m_;
  std::condition_variable cv_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* fn_ = nullptr;
  int n_ = 0, pending_ = 0;
  uint64_t gen_ = 0;
  bool stop_ = false;
};

Limits::Limits(size_t max_bytes, bool huge_pages)
    : team_(std::make_unique<Team>()), src_(max_bytes, huge_pages), dst_(max_bytes, huge_pages) {
  float* x = reinterpret_cast<float*>(src_.data());
  std::fill(x, x + max_bytes / sizeof(float), 1.0f);
}

Limits::~Limits() = default;

void Limits::split(size_t n, int threads, const std::function<void(float*, float*, size_t)>& body,
                   size_t src_offset_floats) {
  float* src = reinterpret_cast<float*>(src_.data()) + src_offset_floats;
  float* dst = reinterpret_cast<float*>(dst_.data());
  if (threads == 1) return body(src, dst, n);
  team_->run(threads, [&](int i) {
    const size_t per = (n / threads + 15) / 16 * 16;  // whole 64-byte lines per thread
    const size_t lo = std::min(n, per * i), hi = i == threads - 1 ? n : std::min(n, per * (i + 1));
    body(src + lo, dst + lo, hi - lo);
  });
}

void Limits::inplace_stream(size_t bytes, int threads) {
  split(bytes / sizeof(float), threads, [](float* x, float*, size_t n) { rmw_widest(x, n); });
}

void Limits::nt_copy(size_t bytes, int threads, size_t src_offset) {
  if (src_offset % 64 != 0 || src_offset + bytes > src_.bytes())
    throw std::logic_error("Limits::nt_copy: source range past the buffer or not line-aligned");
  split(bytes / sizeof(float), threads, [](float* src, float* dst, size_t n) { nt_copy_widest(dst, src, n); },
        src_offset / sizeof(float));
}

void Limits::memcpy(size_t bytes, int threads) {
  split(bytes / sizeof(float), threads,
        [](float* src, float* dst, size_t n) { std::memcpy(dst, src, n * sizeof(float)); });
}

}  // namespace rotary::cli
