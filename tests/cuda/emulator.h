// The host grid emulator: a DeviceRuntime whose "device" is host memory and whose launch runs the CUDA kernel body over the grid.
//
// The body (src/cuda/rope_kernel.cuh) is compiled here by the ordinary C++ compiler; the Job and its
// geometry come from the backend's own host code (device_apply -> make_job -> launch_geometry), so tiling,
// indexing, vector width and tails run exactly as the device would run them. The launch checks the CUDA
// limits a real launch would enforce, and 16-byte accesses throw where the device would fault.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda/device.h"
#include "cuda/rope_kernel.cuh"

namespace rotary::testing {

class EmulatorRuntime final : public detail::cuda::DeviceRuntime {
 public:
  using Job = detail::cuda::Job;

  /// Device properties the geometry sees (defaults: an H100/H200).
  detail::cuda::DeviceLimits device_limits;
  /// Run the blocks in a shuffled order (threads must not depend on each other).
  bool shuffle_blocks = false;
  /// Calls whose stream equals this one are "being captured".
  void* capturing_stream = reinterpret_cast<void*>(-1);
  /// Memory on another device (device >= 1), or host memory the device cannot see (device -1); any
  /// other pointer is on device 0.
  struct Range {
    const void* p;
    std::size_t bytes;
    int device;
  };
  std::vector<Range> ranges;

  /// Streams of a device other than 0 (any other stream is on device 0, or unknown for null).
  std::vector<std::pair<void*, int>> stream_devices;

  /// Failure injection: with k > 0, the k-th allocation from now throws as cudaMalloc out of memory does
  /// (kOutOfRange), and the k-th copy from now as a failed cudaMemcpyAsync does (kInternal); 0: none.
  int fail_allocation_in = 0, fail_copy_in = 0;

  int launches = 0, allocations = 0, releases = 0, copies = 0;
  void* last_stream = nullptr;
  Job last_job{};

  int device_of(const void* p, const char* what) override {
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (const Range& r : ranges) {
      const auto b = reinterpret_cast<uintptr_t>(r.p);
      if (a < b || a >= b + r.bytes) continue;
      if (r.device < 0)
        fail(Error::Kind::kInvalidArgument, "rotary_apply",
             std::string(what) + " must be device memory for backend cuda (cudaMalloc, managed, or mapped pinned host "
                                 "memory), got host memory");
      return r.device;
    }
    return 0;
  }
  detail::cuda::DeviceLimits limits(int) override { return device_limits; }
  void* allocate(int device, std::size_t bytes) override {
    if (fail_allocation_in > 0 && --fail_allocation_in == 0)
      fail(Error::Kind::kOutOfRange, "rotary_apply",
           "the device copy of the cos/sin table needs " + std::to_string(bytes) + " bytes on device " +
               std::to_string(device) + ", got CUDA error cudaErrorMemoryAllocation (out of memory)");
    ++allocations;
    return ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t(256));  // cudaMalloc alignment
  }
  void release(int, void* p) noexcept override {
    ++releases;
    ::operator delete(p, std::align_val_t(256));
  }
  void copy_to_device(int, void* dst, const void* src, std::size_t bytes, void*) override {
    if (fail_copy_in > 0 && --fail_copy_in == 0)
      fail(Error::Kind::kInternal, "rotary_apply",
           "cudaMemcpyAsync (cos/sin table) failed, got CUDA error cudaErrorLaunchFailure (unspecified launch failure)");
    ++copies;
    std::memcpy(dst, src, bytes);
  }
  int stream_device(void* stream) override {
    for (const auto& [st, d] : stream_devices)
      if (st == stream) return d;
    return stream == nullptr ? -1 : 0;
  }
  bool capturing(void* stream) override { return stream == capturing_stream; }

  void launch(int, const Job& job, const detail::cuda::ParamFreqs* freqs, void* stream) override {
    const auto& g = job.geo;
    if (g.block_x == 0 || g.block_y == 0 || g.grid_x == 0 || g.grid_y == 0 || g.block_x * g.block_y > 1024 ||
        g.grid_y > 65535 || g.grid_x > 0x7FFFFFFFu)
      throw std::logic_error("launch geometry outside CUDA's limits");
    ++launches;
    last_stream = stream;
    last_job = job;
    Run run{job, freqs ? freqs->inv_freq : nullptr, block_order(g)};
    detail::cuda::dispatch(job, run);
  }

 private:
  struct Run {
    const Job& job;
    const double* freqs;
    std::vector<std::pair<uint32_t, uint32_t>> blocks;
    template <detail::cuda::ElemType E, bool kInter, bool kVec>
    void run() {
      for (const auto& [bx, by] : blocks)
        for (uint32_t ty = 0; ty < job.geo.block_y; ++ty)
          for (uint32_t tx = 0; tx < job.geo.block_x; ++tx)
            detail::cuda::rope_thread<E, kInter, kVec>(job, freqs, bx, by, tx, ty);
    }
  };

  std::vector<std::pair<uint32_t, uint32_t>> block_order(const detail::cuda::Geometry& g) {
    std::vector<std::pair<uint32_t, uint32_t>> v;
    for (uint32_t by = 0; by < g.grid_y; ++by)
      for (uint32_t bx = 0; bx < g.grid_x; ++bx) v.emplace_back(bx, by);
    if (shuffle_blocks) std::shuffle(v.begin(), v.end(), rng_);
    return v;
  }
  std::mt19937 rng_{12345};
};

/// Installs an emulator as the CUDA backend for a scope (cuda_available() is true inside it).
class EmulatedCuda {
 public:
  EmulatedCuda() { detail::cuda::set_runtime_override(&rt); }
  ~EmulatedCuda() { detail::cuda::set_runtime_override(nullptr); }
  EmulatedCuda(const EmulatedCuda&) = delete;
  EmulatedCuda& operator=(const EmulatedCuda&) = delete;
  EmulatorRuntime rt;
};

}  // namespace rotary::testing
