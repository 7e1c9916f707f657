// Internal: the CUDA backend's host half (device checks, per-device table copies, the Job, the launch) over a device runtime.
//
// DeviceRuntime is what the backend needs from a GPU: the CUDA runtime in CUDA builds (cuda_apply.cu), or
// the host grid emulator in tests (tests/cuda/emulator.h), which keeps "device" memory on the host and runs
// the kernel body over the launch grid on the CPU. Everything in device_apply runs unchanged on both.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/job.h"
#include "plan/plan.h"

namespace rotary::detail::cuda {

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  /// Ordinal of the device whose memory `p` is (device or managed memory, or host memory the device maps
  /// at the same address). Throws Error(kInvalidArgument) naming `what` for host-only memory.
  virtual int device_of(const void* p, const char* what) = 0;
  virtual DeviceLimits limits(int device) = 0;
  virtual void* allocate(int device, std::size_t bytes) = 0;
  virtual void release(int device, void* p) noexcept = 0;
  /// Copies host memory to the device and waits for the copy (table growth only, never during capture).
  virtual void copy_to_device(int device, void* dst, const void* src, std::size_t bytes, void* stream) = 0;
  /// The device `stream` belongs to, or -1 when not known (the default streams, which follow the current
  /// device, or a runtime that cannot tell).
  virtual int stream_device(void* stream) = 0;
  /// Whether `stream` is being captured into a CUDA graph.
  virtual bool capturing(void* stream) = 0;
  /// Enqueues the kernel for `job` (geometry set) on `stream` of `device`; `freqs` for on-the-fly jobs.
  virtual void launch(int device, const Job& job, const ParamFreqs* freqs, void* stream) = 0;
};

/// Per-device copies of one CosSinTable's rows and frequencies, attached to the table (TableAttachment)
/// and released with it. Each device's copy is made on first use and replaced by a larger one when a call
/// needs rows the copy lacks (the host table has grown): once per growth per device. Replaced copies are
/// kept until the table is destroyed, since kernels on other streams may still read them.
class DeviceTables {
 public:
  /// Rows a device copy holds at least (when the host table has them): 64 MiB, a Llama-3.1 table's 131 072
  /// positions at rotary_dim 128.
  static constexpr int64_t kDeviceCopyFloorBytes = int64_t(64) << 20;
  /// `floor_bytes`: kDeviceCopyFloorBytes (tests give a smaller one to reach the rule with small tables).
  explicit DeviceTables(DeviceRuntime* runtime, int64_t floor_bytes = kDeviceCopyFloorBytes)
      : runtime_(runtime), floor_bytes_(floor_bytes) {}
  ~DeviceTables();
  DeviceTables(const DeviceTables&) = delete;
  DeviceTables& operator=(const DeviceTables&) = delete;

  /// Device rows covering at least the first `needed` rows on `device` (`runtime` must be the one the copies
  /// were made with). An existing copy holding `needed` rows is returned as it is, however much the host
  /// table (`host_rows`, `available` >= `needed` rows of 2*half floats) has grown since; otherwise (and on
  /// the first call on the device, which also copies the frequencies) the first min(available, max(needed,
  /// twice the previous copy, kDeviceCopyFloorBytes of rows)) rows are copied: not the whole host table when
  /// CPU calls grew it far past what device calls read (positions past the copy are computed on the device).
  /// Copying while `stream` is being captured is an error (make one call on the device before capture).
  DeviceRows rows_for(DeviceRuntime* runtime, int device, const float* host_rows, int64_t available, int64_t needed,
                      const double* host_inv_freq, int64_t half, void* stream);
  /// Copies made so far (tests: once per growth per device).
  int copies() const;

 private:
  struct Entry {
    int device = 0;
    float* rows = nullptr;
    int64_t n = 0;
    double* inv_freq = nullptr;
  };
  struct Block {
    int device;
    void* p;
  };
  DeviceRuntime* runtime_;
  int64_t floor_bytes_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  std::vector<Block> blocks_;  // every allocation, released by the destructor
  int copies_ = 0;
};

/// The whole backend for one validated device plan on `runtime`: checks what only the backend knows
/// (dtype, parameter limits, every pointer on the same device), brings table rows to the device, builds
/// the Job and its geometry, and launches on plan.stream. Never synchronises except to copy a grown table.
void device_apply(const Plan& plan, DeviceRuntime& runtime);

/// Tests: route cuda_apply/cuda_available through `runtime` (e.g. the host grid emulator) in any build;
/// nullptr restores the default (the CUDA runtime, or no CUDA). Not thread-safe against running calls.
void set_runtime_override(DeviceRuntime* runtime);
DeviceRuntime* runtime_override();

}  // namespace rotary::detail::cuda
