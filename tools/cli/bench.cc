// `rotary bench`: times the public apply path on Llama-3-8B prefill/decode shapes against memory-speed limits.
//
// Method (docs/performance.md): every configuration is timed call by call (prefill) or in batches of
// calls (decode) until a minimum time has passed, and the median is reported. In the same process, on
// buffers of the same size and with the same thread count, three limits are measured: an in-place
// streaming read-modify-write (x = x*a + b), a non-temporal copy and glibc memcpy. Bytes = input read +
// output written; ratio = gbps / limit_gbps with the in-place stream for in-place cases and the
// non-temporal copy for out-of-place ones.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ROTARY_BENCH_X86 1
#else
#define ROTARY_BENCH_X86 0
#endif

#include <nlohmann/json.hpp>

#include "cli.h"
#include "rotary/apply.h"
#include "rotary/config.h"
#include "rotary/freqs.h"
#include "rotary/table.h"

namespace rotary::cli {
namespace {

constexpr const char* kUsage = "rotary bench [--json] [--quick] [--case P1|P2] [--threads N]";

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Page-aligned, pre-touched storage (page faults are not part of any measurement).
struct Buffer {
  unsigned char* p = nullptr;
  size_t bytes = 0;
  explicit Buffer(size_t n) : bytes(n) {
    p = static_cast<unsigned char*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096));
    std::memset(p, 0, n);
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// ------------------------------------------------------------------ limits

#if ROTARY_BENCH_X86
// The limits prefetch 4 KiB ahead like the kernels do, so that they are the best loops we know, not
// plain ones (a plain loop is slower on this machine class; see docs/performance.md).
constexpr size_t kAheadFloats = 1024;

__attribute__((target("avx512f"))) void rmw_avx512(float* x, size_t n) {
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(x + i + kAheadFloats), _MM_HINT_T0);
    _mm512_storeu_ps(x + i, _mm512_fmadd_ps(_mm512_loadu_ps(x + i), a, b));
  }
  for (; i < n; ++i) x[i] = x[i] * 0.999f + 1e-3f;
}
__attribute__((target("avx2,fma"))) void rmw_avx2(float* x, size_t n) {
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_prefetch(reinterpret_cast<const char*>(x + i + kAheadFloats), _MM_HINT_T0);
    _mm256_storeu_ps(x + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), a, b));
  }
  for (; i < n; ++i) x[i] = x[i] * 0.999f + 1e-3f;
}
__attribute__((target("avx512f"))) void nt_copy_avx512(float* dst, const float* src, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(src + i + kAheadFloats), _MM_HINT_T0);
    _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
  }
  for (; i < n; ++i) dst[i] = src[i];
  _mm_sfence();
}
__attribute__((target("avx2"))) void nt_copy_avx2(float* dst, const float* src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_prefetch(reinterpret_cast<const char*>(src + i + kAheadFloats), _MM_HINT_T0);
    _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
  }
  for (; i < n; ++i) dst[i] = src[i];
  _mm_sfence();
}
#endif

/// In-place streaming read-modify-write x = x*a + b with the widest vectors the CPU has.
void limit_rmw(float* x, size_t n) {
#if ROTARY_BENCH_X86
  if (__builtin_cpu_supports("avx512f")) return rmw_avx512(x, n);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return rmw_avx2(x, n);
#endif
  for (size_t i = 0; i < n; ++i) x[i] = x[i] * 0.999f + 1e-3f;
}

/// Copy with non-temporal (cache-bypassing) stores; dst must be 64-byte aligned.
void limit_nt_copy(float* dst, const float* src, size_t n) {
#if ROTARY_BENCH_X86
  if (__builtin_cpu_supports("avx512f")) return nt_copy_avx512(dst, src, n);
  if (__builtin_cpu_supports("avx2")) return nt_copy_avx2(dst, src, n);
#endif
  std::memcpy(dst, src, n * sizeof(float));
}

/// Helper threads for the limits, parked between runs so that no run pays thread start-up.
class Team {
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

// ------------------------------------------------------------------ timing

struct Timing {
  double min_time_s;   ///< keep repeating at least this long
  int min_reps;
};

/// Times `a` and `b` alternately (batches of `batch` back-to-back calls each, one call per batch for
/// prefill) until both have at least min_reps samples and min_time_s has passed; returns the median
/// seconds per call of each. Alternating makes both see the same machine: on a shared machine, a
/// limit measured a minute earlier than the kernel would compare different conditions.
std::pair<double, double> time_pair(const std::function<void()>& a, const std::function<void()>& b, int batch,
                                    const Timing& t) {
  for (int i = 0; i < batch; ++i) a();  // warm-up
  for (int i = 0; i < batch; ++i) b();
  std::vector<double> va, vb;
  const auto start = Clock::now();
  while (static_cast<int>(va.size()) < t.min_reps || seconds_since(start) < t.min_time_s) {
    auto t0 = Clock::now();
    for (int i = 0; i < batch; ++i) a();
    va.push_back(seconds_since(t0) / batch);
    t0 = Clock::now();
    for (int i = 0; i < batch; ++i) b();
    vb.push_back(seconds_since(t0) / batch);
    if (va.size() >= 100000) break;
  }
  return {median(va), median(vb)};
}

// ------------------------------------------------------------------ cases

struct BenchCase {
  std::string name;      ///< "P1" / "P2"
  int64_t tokens;        ///< T (thd layout)
  int64_t position;      ///< first position
  bool decode;           ///< time in batches and report microseconds
};

constexpr int64_t kHeadsQ = 32, kHeadsK = 8, kHeadDim = 128;

/// Fills `bytes` with small normal values of `dtype` (no denormals, no overflow under rotation).
void fill_values(unsigned char* p, size_t bytes, DType dtype) {
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return state;
  };
  if (dtype == DType::kF32) {
    float* f = reinterpret_cast<float*>(p);
    for (size_t i = 0; i < bytes / 4; ++i) f[i] = static_cast<float>(next() >> 8) * (2.0f / 16777216.0f) - 1.0f;
  } else {
    uint16_t* h = reinterpret_cast<uint16_t*>(p);
    for (size_t i = 0; i < bytes / 2; ++i) {
      const uint32_t r = next();
      // sign | exponent for [0.25, 2) | random mantissa
      h[i] = dtype == DType::kBF16 ? static_cast<uint16_t>(((r >> 31) << 15) | ((125u + (r >> 29 & 1u)) << 7) | (r & 0x7Fu))
                                   : static_cast<uint16_t>(((r >> 31) << 15) | ((13u + (r >> 29 & 1u)) << 10) | (r & 0x3FFu));
    }
  }
}

struct Row {
  std::string case_name, dtype, pairing, direction, limit;
  bool inplace;
  int threads;
  double sec, bytes, limit_gbps, memcpy_gbps;
  bool decode;
};

int run_bench(const std::vector<std::string>& args) {
  Flags flags(args, {"case", "threads"}, {"json", "quick"});
  const bool json = flags.has("json");
  const bool quick = flags.has("quick");
  std::vector<BenchCase> cases = {{"P1", 4096, 0, false}, {"P2", 1, 12345, true}};
  if (auto c = flags.get("case")) {
    if (*c != "P1" && *c != "P2") throw UsageError("--case must be P1 or P2, got " + *c);
    cases.erase(std::remove_if(cases.begin(), cases.end(), [&](const BenchCase& b) { return b.name != *c; }),
                cases.end());
  }
  std::vector<int> thread_counts = {1, 2};
  if (auto n = flags.get_int("threads")) {
    if (*n < 1 || *n > 1024) throw UsageError("--threads must be in [1, 1024], got " + std::to_string(*n));
    thread_counts = {static_cast<int>(*n)};
  }
  const Timing prefill_timing = quick ? Timing{0.05, 3} : Timing{0.6, 9};
  const Timing decode_timing = quick ? Timing{0.02, 5} : Timing{0.2, 15};
  const int decode_batch = quick ? 200 : 1000;

  // Llama-3-8B rotary: head 128, theta 5e5, llama3 scaling (the values do not change the timing).
  Spec spec;
  spec.head_dim = kHeadDim;
  spec.rotary_dim = kHeadDim;
  spec.base = 500000.0;
  spec.max_position_embeddings = 131072;
  spec.scaling.type = RopeType::kLlama3;
  spec.scaling.factor = 8.0;
  spec.scaling.original_max_position_embeddings = 8192;
  CosSinTable table(compute_frequencies(spec.normalized()));
  int64_t max_pos = 0;
  for (const auto& c : cases) max_pos = std::max(max_pos, c.position + c.tokens);
  table.ensure(max_pos);

  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  const Pairing pairings[] = {Pairing::kHalfSplit, Pairing::kInterleaved};
  const Direction directions[] = {Direction::kForward, Direction::kInverse};
  const long long total = static_cast<long long>(cases.size() * 3 * 2 * 2 * 2 * thread_counts.size());
  Progress progress("rotary bench", total);
  long long done = 0;

  Team team;
  float* lim_src = nullptr;  // the limits' buffers of the case being measured
  float* lim_dst = nullptr;
  /// Runs body(lo, hi) over [0, n) floats split across `threads` threads.
  auto split = [&](size_t n, int threads, const std::function<void(size_t, size_t)>& body) {
    if (threads == 1) return body(0, n);
    team.run(threads, [&](int i) {
      const size_t per = (n / threads + 15) / 16 * 16;
      const size_t lo = std::min(n, per * i), hi = i == threads - 1 ? n : std::min(n, per * (i + 1));
      body(lo, hi);
    });
  };
  // glibc memcpy of the same bytes, for reference only: (bytes, threads) -> GB/s
  std::map<std::pair<size_t, int>, double> memcpy_gbps;
  auto get_memcpy = [&](size_t bytes, int threads, bool decode) {
    auto key = std::make_pair(bytes, threads);
    if (auto it = memcpy_gbps.find(key); it != memcpy_gbps.end()) return it->second;
    auto mc = [&] { split(bytes / 4, threads, [&](size_t lo, size_t hi) { std::memcpy(lim_dst + lo, lim_src + lo, (hi - lo) * 4); }); };
    const auto [sec, unused] = time_pair(mc, mc, decode ? decode_batch : 1, decode ? decode_timing : prefill_timing);
    (void)unused;
    return memcpy_gbps[key] = 2.0 * bytes / sec / 1e9;
  };

  std::vector<Row> rows;
  for (const BenchCase& bc : cases) {
    // Buffers of this case's size (f32 bytes, the largest dtype), allocated per case: a decode step's
    // q and k are small tensors of their own, not the first rows of prefill-sized buffers.
    const size_t q_bytes_max = static_cast<size_t>(bc.tokens * kHeadsQ * kHeadDim * 4);
    const size_t k_bytes_max = static_cast<size_t>(bc.tokens * kHeadsK * kHeadDim * 4);
    Buffer q(q_bytes_max), k(k_bytes_max), q_out(q_bytes_max), k_out(k_bytes_max);
    // Limits run on one contiguous buffer of the same total size (and a second one to copy into).
    Buffer lim_a(q_bytes_max + k_bytes_max), lim_b(q_bytes_max + k_bytes_max);
    fill_values(lim_a.p, lim_a.bytes, DType::kF32);
    lim_src = reinterpret_cast<float*>(lim_a.p);
    lim_dst = reinterpret_cast<float*>(lim_b.p);
    for (DType dtype : dtypes) {
      const size_t es = dtype_size(dtype);
      const size_t qb = static_cast<size_t>(bc.tokens * kHeadsQ * kHeadDim) * es;
      const size_t kb = static_cast<size_t>(bc.tokens * kHeadsK * kHeadDim) * es;
      fill_values(q.p, qb, dtype);
      fill_values(k.p, kb, dtype);
      for (Pairing pairing : pairings)
        for (bool inplace : {true, false})
          for (Direction direction : directions)
            for (int threads : thread_counts) {
              ApplyArgs a;
              a.layout = Layout::kTHD;
              a.q = TensorView::contiguous(q.p, dtype, {bc.tokens, kHeadsQ, kHeadDim});
              a.k = TensorView::contiguous(k.p, dtype, {bc.tokens, kHeadsK, kHeadDim});
              if (!inplace) {
                a.q_out = TensorView::contiguous(q_out.p, dtype, {bc.tokens, kHeadsQ, kHeadDim});
                a.k_out = TensorView::contiguous(k_out.p, dtype, {bc.tokens, kHeadsK, kHeadDim});
              }
              a.positions = Positions::contiguous(bc.position);
              a.pairing = pairing;
              a.direction = direction;
              a.threads = threads;
              auto call = [&] { apply_table(table, a); };
              // The kernel runs a decode token on the calling thread whatever `threads` says;
              // so is its limit measured.
              const int limit_threads = bc.decode ? 1 : threads;
              const size_t n = (qb + kb) / 4;
              // Out of place: a non-temporal copy for prefill; a decode token's 40 KiB stay in cache,
              // where cache-bypassing stores are the wrong tool, so its limit is memcpy.
              const std::string limit = inplace ? "inplace-stream" : bc.decode ? "memcpy" : "nt-copy";
              auto limit_fn = [&] {
                split(n, limit_threads, [&](size_t lo, size_t hi) {
                  if (inplace) limit_rmw(lim_src + lo, hi - lo);
                  else if (bc.decode) std::memcpy(lim_dst + lo, lim_src + lo, (hi - lo) * 4);
                  else limit_nt_copy(lim_dst + lo, lim_src + lo, hi - lo);
                });
              };
              const auto [sec, limit_sec] =
                  time_pair(call, limit_fn, bc.decode ? decode_batch : 1, bc.decode ? decode_timing : prefill_timing);
              Row r;
              r.case_name = bc.name;
              r.dtype = dtype_name(dtype);
              r.pairing = pairing_name(pairing);
              r.direction = direction_name(direction);
              r.inplace = inplace;
              r.threads = threads;
              r.decode = bc.decode;
              r.sec = sec;
              r.bytes = 2.0 * static_cast<double>(qb + kb);
              // Out of place: a non-temporal copy for prefill; a decode token's 40 KiB stay in cache,
              // where cache-bypassing stores are the wrong tool, so its limit is memcpy.
              r.limit = limit;
              r.limit_gbps = 2.0 * static_cast<double>(qb + kb) / limit_sec / 1e9;
              r.memcpy_gbps = get_memcpy(qb + kb, limit_threads, bc.decode);
              rows.push_back(r);
              progress.step(++done);
              if (json) {
                const double gbps = r.bytes / r.sec / 1e9;
                nlohmann::ordered_json j;
                j["case"] = r.case_name;
                j["dtype"] = r.dtype;
                j["pairing"] = r.pairing;
                j["inplace"] = r.inplace;
                j["direction"] = r.direction;
                j["threads"] = r.threads;
                j["ms"] = r.sec * 1e3;
                if (r.decode) j["us"] = r.sec * 1e6;
                j["gbps"] = gbps;
                j["limit"] = r.limit;
                j["limit_gbps"] = r.limit_gbps;
                j["ratio"] = gbps / r.limit_gbps;
                j["memcpy_gbps"] = r.memcpy_gbps;
                j["bytes"] = r.bytes;
                std::printf("%s\n", j.dump().c_str());
                std::fflush(stdout);
              }
            }
    }
  }
  progress.done();
  if (!json) {
    std::printf("%-4s %-5s %-12s %-8s %-9s %3s %10s %9s %-15s %9s %6s\n", "case", "dtype", "pairing", "inplace",
                "direction", "thr", "time", "GB/s", "limit", "limitGB/s", "ratio");
    for (const Row& r : rows) {
      const double gbps = r.bytes / r.sec / 1e9;
      char t[32];
      if (r.decode) std::snprintf(t, sizeof t, "%.3f us", r.sec * 1e6);
      else std::snprintf(t, sizeof t, "%.3f ms", r.sec * 1e3);
      std::printf("%-4s %-5s %-12s %-8s %-9s %3d %10s %9.2f %-15s %9.2f %6.3f\n", r.case_name.c_str(), r.dtype.c_str(),
                  r.pairing.c_str(), r.inplace ? "yes" : "no", r.direction.c_str(), r.threads, t, gbps,
                  r.limit.c_str(), r.limit_gbps, gbps / r.limit_gbps);
    }
  }
  return 0;
}

}  // namespace

ROTARY_CLI_COMMAND("bench", kUsage,
                   "time the CPU kernels on Llama-3-8B prefill (P1) and decode (P2) against memory-speed limits",
                   run_bench);

}  // namespace rotary::cli
