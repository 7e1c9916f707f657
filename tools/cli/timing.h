// The timing harness shared by `rotary bench` and `rotary report`: memory-speed limits and alternating medians.
//
// Definition (docs/performance.md, "Method"): a kernel and its limit are timed alternately, one sample each
// in turn (a sample = one call, or a batch of calls for decode), until both have at least `min_reps` samples
// and `min_time_s` has passed; the median seconds per call of each is kept. The limits run on one buffer of
// the kernel's total bytes with the same thread count: an in-place streaming read-modify-write
// (x = x*a + b), a copy with non-temporal stores, and glibc memcpy, the first two with the widest vectors
// the CPU has and a software prefetch into L2 4 KiB ahead, as the kernels do.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>

namespace rotary::cli {

/// Whether this machine can back advised memory with transparent huge pages: Linux with
/// /sys/kernel/mm/transparent_hugepage/enabled set to `always` or `madvise`.
bool transparent_huge_pages_available();

/// Page-aligned, pre-touched storage (page faults are not part of any measurement). With `huge_pages` (where
/// transparent_huge_pages_available()), it is 2 MiB-aligned and advised MADV_HUGEPAGE before it is touched, so that
/// the kernel may back it with 2 MiB pages (docs/performance.md, "Huge pages").
class Buffer {
 public:
  explicit Buffer(size_t bytes, bool huge_pages = false);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  unsigned char* data() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  unsigned char* p_ = nullptr;
  size_t bytes_ = 0;
};

/// How long one measurement repeats: samples of `batch` back-to-back calls, at least `min_reps` samples of
/// each side and at least `min_time_s` seconds in all.
struct Timing {
  double min_time_s;
  int min_reps;
  int batch;
};
/// Prefill-sized calls: one call per sample, 0.6 s and 9 samples (`--quick`: 0.05 s, 3).
Timing prefill_timing(bool quick);
/// Decode-sized calls (microseconds): batches of 1000 calls, 0.2 s and 15 samples (`--quick`: 200, 0.02 s, 5).
Timing decode_timing(bool quick);

/// Times `a` and `b` alternately as described above; returns the median seconds per call of each.
std::pair<double, double> time_pair(const std::function<void()>& a, const std::function<void()>& b,
                                    const Timing& t);

/// The limits, on buffers of up to `max_bytes` bytes, split over parked helper threads (no run pays thread
/// start-up). Each call processes the first `bytes` bytes (a multiple of 4) on `threads` threads.
class Limits {
 public:
  explicit Limits(size_t max_bytes, bool huge_pages = false);
  ~Limits();
  /// In place: x = x*0.999 + 0.001 over the f32 values.
  void inplace_stream(size_t bytes, int threads);
  /// Copy with non-temporal (cache-bypassing) stores, reading from `src_offset` bytes into the source (a multiple
  /// of 64; `src_offset + bytes` at most max_bytes): a copy after inplace_stream(n) reads bytes the stream did not
  /// just touch when src_offset >= n, as a call whose copied rows are other tensors than its in-place ones.
  void nt_copy(size_t bytes, int threads, size_t src_offset = 0);
  /// glibc memcpy.
  void memcpy(size_t bytes, int threads);

 private:
  class Team;
  void split(size_t n_floats, int threads, const std::function<void(float*, float*, size_t)>& body,
             size_t src_offset_floats = 0);
  std::unique_ptr<Team> team_;
  Buffer src_, dst_;
};

}  // namespace rotary::cli
