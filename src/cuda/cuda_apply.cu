// CUDA backend entry points: the kernels (the rope_kernel.cuh body per thread) and the CUDA runtime behind device_apply.
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cuda/device.h"
#include "cuda/rope_kernel.cuh"
#include "plan/plan.h"

namespace rotary::detail {
namespace cuda {
namespace {

constexpr const char* kWhere = "rotary_apply";

template <ElemType E, bool kInter, bool kVec>
__global__ void __launch_bounds__(kTargetBlockThreads) rope_kernel(const __grid_constant__ Job job) {
  rope_thread<E, kInter, kVec>(job, nullptr, blockIdx.x, blockIdx.y, threadIdx.x, threadIdx.y);
}

template <ElemType E, bool kInter, bool kVec>
__global__ void __launch_bounds__(kTargetBlockThreads) rope_kernel_otf(const __grid_constant__ Job job,
                                                        const __grid_constant__ ParamFreqs freqs) {
  rope_thread<E, kInter, kVec>(job, freqs.inv_freq, blockIdx.x, blockIdx.y, threadIdx.x, threadIdx.y);
}

[[noreturn]] void cuda_fail(cudaError_t err, const std::string& what) {
  fail(Error::Kind::kInternal, kWhere, what + " failed, got CUDA error " + cudaGetErrorName(err) + " (" +
                                           cudaGetErrorString(err) + ")");
}

/// Throws for a failed runtime call. The error it reports is also the runtime's "last error": it is reset
/// here (a non-sticky error would otherwise be returned by the caller's next cudaGetLastError, or taken for
/// a later call's own failure).
void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  cuda_fail(err, what);
}

/// Makes `device` current for the scope (the caller's stream belongs to it).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
    changed_ = previous_ != device;
  }
  ~DeviceScope() {
    // A failure here is not reported (a destructor), and not left for the caller's next cudaGetLastError either.
    if (changed_ && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
  }

 private:
  int previous_ = 0;
  bool changed_ = false;
};

/// One kernel launch through cudaLaunchKernel, whose return value is this launch's own error (the runtime's
/// last error may hold an earlier, unrelated one: the caller's, which is not rotary's to clear or report).
struct Launch {
  const Job& job;
  const ParamFreqs* freqs;
  cudaStream_t stream;
  cudaError_t err = cudaSuccess;
  template <ElemType E, bool kInter, bool kVec>
  void run() {
    const dim3 grid(job.geo.grid_x, job.geo.grid_y), block(job.geo.block_x, job.geo.block_y);
    void* args[2] = {const_cast<Job*>(&job), const_cast<ParamFreqs*>(freqs)};
    err = freqs ? cudaLaunchKernel(reinterpret_cast<const void*>(&rope_kernel_otf<E, kInter, kVec>), grid, block, args, 0, stream)
                : cudaLaunchKernel(reinterpret_cast<const void*>(&rope_kernel<E, kInter, kVec>), grid, block, args, 0, stream);
  }
};

class CudaRuntime final : public DeviceRuntime {
 public:
  int device_of(const void* p, const char* what) override {
    cudaPointerAttributes a{};
    const cudaError_t err = cudaPointerGetAttributes(&a, p);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it
      cuda_fail(err, std::string("cudaPointerGetAttributes(") + what + ")");
    }
    const bool device_visible = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ||
                                (a.type == cudaMemoryTypeHost && a.devicePointer == p);
    if (!device_visible)
      fail(Error::Kind::kInvalidArgument, kWhere,
           std::string(what) + " must be device memory for backend cuda (cudaMalloc, managed, or mapped pinned host "
                               "memory), got host memory");
    return a.device;
  }

  DeviceLimits limits(int device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [d, l] : limits_)
      if (d == device) return l;
    DeviceLimits l;
    check(cudaDeviceGetAttribute(&l.sm_count, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&l.max_threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device),
          "cudaDeviceGetAttribute");
    // What is resident is bounded by registers too: ask for a full block of the common kernel (all instances
    // use the same register count, nvcc -Xptxas -v: docs/performance.md).
    DeviceScope scope(device);
    int blocks = 0;
    const cudaError_t occ = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks, rope_kernel<ElemType::kBF16, false, true>, static_cast<int>(kTargetBlockThreads), 0);
    if (occ != cudaSuccess) (void)cudaGetLastError();  // its own error only: the bound is optional
    else if (blocks > 0)
      l.max_threads_per_sm = std::min(l.max_threads_per_sm, blocks * static_cast<int>(kTargetBlockThreads));
    limits_.emplace_back(device, l);
    return l;
  }

  void* allocate(int device, std::size_t bytes) override {
    DeviceScope scope(device);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      const std::string size = std::to_string(bytes) + " bytes on device " + std::to_string(device);
      if (err == cudaErrorMemoryAllocation)  // out of device memory: the one failure a smaller table avoids
        fail(Error::Kind::kOutOfRange, kWhere,
             "the device copy of the cos/sin table needs " + size + ", got CUDA error " + cudaGetErrorName(err) +
                 " (" + cudaGetErrorString(err) + ")");
      cuda_fail(err, "cudaMalloc of " + size + " (the device copy of the cos/sin table)");  // kInternal
    }
    return p;
  }

  void release(int device, void* p) noexcept override {
    // Failures are cleared, not left for the caller's next cudaGetLastError (docs/cuda.md).
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) {  // at process exit the runtime may be gone
      (void)cudaGetLastError();
      return;
    }
    bool failed = cudaSetDevice(device) != cudaSuccess;
    failed = cudaFree(p) != cudaSuccess || failed;
    failed = cudaSetDevice(previous) != cudaSuccess || failed;
    if (failed) (void)cudaGetLastError();
  }

  void copy_to_device(int device, void* dst, const void* src, std::size_t bytes, void* stream) override {
    DeviceScope scope(device);
    const auto s = static_cast<cudaStream_t>(stream);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (cos/sin table)");
    // Other streams may read the copy as soon as this call returns: wait for it (once per growth).
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize (cos/sin table)");
  }

  int stream_device(void* stream) override {
    const auto s = static_cast<cudaStream_t>(stream);
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return -1;  // the current device's
#if CUDART_VERSION >= 12080
    int d = -1;
    const cudaError_t err = cudaStreamGetDevice(s, &d);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // its own error only: a bad handle is then reported by the launch
      return -1;
    }
    return d;
#else
    return -1;  // no cudaStreamGetDevice before CUDA 12.8: the launch reports a foreign stream
#endif
  }

  bool capturing(void* stream) override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status), "cudaStreamIsCapturing");
    return status != cudaStreamCaptureStatusNone;
  }

  void launch(int device, const Job& job, const ParamFreqs* freqs, void* stream) override {
    DeviceScope scope(device);
    Launch l{job, freqs, static_cast<cudaStream_t>(stream)};
    dispatch(job, l);
    check(l.err, "the rotary kernel launch");
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<int, DeviceLimits>> limits_;  // queried once per device
};

CudaRuntime& real_runtime() {
  static CudaRuntime* rt = new CudaRuntime();  // never destroyed: tables may release memory at exit
  return *rt;
}

}  // namespace
}  // namespace cuda

void cuda_apply(const Plan& plan) {
  if (cuda::DeviceRuntime* rt = cuda::runtime_override()) return cuda::device_apply(plan, *rt);
  if (!cuda_available()) fail(Error::Kind::kUnsupported, "rotary_apply", "backend cuda was requested, got no CUDA device");
  cuda::device_apply(plan, cuda::real_runtime());
}

bool cuda_available() {
  if (cuda::runtime_override() != nullptr) return true;
  static const bool available = [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) (void)cudaGetLastError();  // no driver / no device: not an error of the caller's
    return err == cudaSuccess && n > 0;
  }();
  return available;
}

}  // namespace rotary::detail
