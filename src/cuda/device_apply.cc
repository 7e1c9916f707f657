// The CUDA backend's host half: device checks, per-device table copies, Job and geometry, launch (CUDA-free C++).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "cuda/device.h"
#include "engine/cos_sin_source.h"
#include "plan/table_attachment.h"

namespace rotary::detail::cuda {
namespace {

constexpr const char* kWhere = "rotary_apply";
static_assert(kMaxParamFreqs == kDeviceOnTheFlyMaxPairs, "the engine's auto mode must know the on-the-fly limit");

std::atomic<DeviceRuntime*> g_override{nullptr};

/// Every pointer of the call on q's device, and aligned to its element size: the kernels' scalar loads and
/// stores of 2, 4 and 8 bytes fault on a GPU at a misaligned address (cudaErrorMisalignedAddress, which
/// ends the CUDA context), where the CPU backends read any address. Strides count elements, so the base
/// address decides.
int check_devices(const Plan& plan, DeviceRuntime& rt) {
  static const char* const kIn[2] = {"q", "k"};
  static const char* const kOut[2] = {"q_out", "k_out"};
  auto in_name = [&](int i) { return kIn[plan.t[i].is_k ? 1 : 0]; };  // t[0] is k when q has no heads
  auto out_name = [&](int i) { return kOut[plan.t[i].is_k ? 1 : 0]; };
  auto aligned = [](const void* p, DType dt, const char* what) {
    const auto es = static_cast<uintptr_t>(dtype_size(dt)), a = reinterpret_cast<uintptr_t>(p);
    if (p != nullptr && a % es != 0)
      fail(Error::Kind::kInvalidArgument, kWhere,
           std::string(what) + " must be aligned to its element size (" + std::to_string(es) + " bytes, " +
               dtype_name(dt) + ") for backend cuda, got an address " + std::to_string(a % es) + " bytes past a multiple of " +
               std::to_string(es));
  };
  for (int i = 0; i < plan.ntensors; ++i) {
    aligned(plan.t[i].in, plan.dtype, in_name(i));
    if (!plan.t[i].inplace()) aligned(plan.t[i].out, plan.dtype, out_name(i));
  }
  const PlanPositions& pp = plan.pos;
  aligned(pp.batch_offsets, pp.batch_offsets_dtype, "positions.batch_offsets");
  aligned(pp.ids, pp.ids_dtype, "positions.ids");
  aligned(pp.cu_seqlens, pp.cu_seqlens_dtype, "positions.cu_seqlens");
  aligned(pp.seq_offsets, pp.seq_offsets_dtype, "positions.seq_offsets");
  if (plan.cs.kind == PlanCosSin::Kind::kCaller) {
    aligned(plan.cs.cos.data, plan.cs.cos.dtype, "cos");
    aligned(plan.cs.sin.data, plan.cs.sin.dtype, "sin");
  }
  const char* const first = in_name(0);
  const int device = rt.device_of(plan.t[0].in, first);
  auto same = [&](const void* p, const char* what) {
    if (p == nullptr) return;
    const int d = rt.device_of(p, what);
    if (d != device)
      fail(Error::Kind::kInvalidArgument, kWhere,
           std::string(what) + " must be on " + first + "'s device " + std::to_string(device) + ", got device " +
               std::to_string(d));
  };
  for (int i = 0; i < plan.ntensors; ++i) {
    if (i > 0) same(plan.t[i].in, in_name(i));
    if (!plan.t[i].inplace()) same(plan.t[i].out, out_name(i));
  }
  const PlanPositions& p = plan.pos;
  same(p.batch_offsets, "positions.batch_offsets");
  same(p.ids, "positions.ids");
  same(p.cu_seqlens, "positions.cu_seqlens");
  same(p.seq_offsets, "positions.seq_offsets");
  if (plan.cs.kind == PlanCosSin::Kind::kCaller) {
    same(plan.cs.cos.data, "cos");
    same(plan.cs.sin.data, "sin");
  }
  // A kernel launched into another device's stream fails (cudaErrorInvalidResourceHandle): the caller's
  // mistake, named here rather than reported as a failed launch.
  const int sd = rt.stream_device(plan.stream);
  if (sd >= 0 && sd != device)
    fail(Error::Kind::kInvalidArgument, kWhere,
         std::string("stream must belong to ") + first + "'s device " + std::to_string(device) +
             ", got a stream of device " + std::to_string(sd));
  return device;
}

}  // namespace

DeviceTables::~DeviceTables() {
  for (const Block& b : blocks_) runtime_->release(b.device, b.p);
}

int DeviceTables::copies() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return copies_;
}

DeviceRows DeviceTables::rows_for(DeviceRuntime* runtime, int device, const float* host_rows, int64_t available,
                                  int64_t needed, const double* host_inv_freq, int64_t half, void* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (runtime != runtime_)
    fail(Error::Kind::kInternal, kWhere, "a cos/sin table used on two device runtimes, got a second one");
  const Entry* e = nullptr;
  for (const Entry& x : entries_)
    if (x.device == device) e = &x;
  if (e != nullptr && e->n >= needed) return {e->rows, e->n, e->inv_freq};
  if (runtime_->capturing(stream)) {
    if (e == nullptr)
      fail(Error::Kind::kUnsupported, kWhere,
           "the cos/sin table must have its device copy (frequencies and rows) before CUDA graph capture (make "
           "one call on this device with the largest positions before capturing), got a capture on device " +
               std::to_string(device) + ", where the table has no copy yet");
    fail(Error::Kind::kUnsupported, kWhere,
         "the device copy of the cos/sin table must hold " + std::to_string(needed) + " rows before CUDA graph "
         "capture (make one call with the largest positions, or seq_len, before capturing), got a capture on "
         "device " + std::to_string(device) + " whose copy holds " + std::to_string(e->n) + " rows");
  }
  // The new copy is built aside and published only once every allocation and copy has succeeded: a call
  // that fails (out of device memory, a failed copy) releases what it allocated and leaves the entries as
  // they were, so no later call sees a device without frequencies or rows, and a retry starts afresh.
  const bool first = e == nullptr;
  Entry next = first ? Entry{device, nullptr, 0, nullptr} : *e;
  const std::size_t index = first ? entries_.size() : static_cast<std::size_t>(e - entries_.data());
  entries_.reserve(entries_.size() + 1);  // the commit below must not throw (e is not used after this)
  blocks_.reserve(blocks_.size() + 2);
  struct Pending {  // this call's allocations until they are published
    DeviceRuntime* rt;
    int device;
    void* p[2] = {nullptr, nullptr};
    int count = 0;
    ~Pending() {
      for (int i = 0; i < count; ++i) rt->release(device, p[i]);
    }
  } pending{runtime_, device};
  auto allocate = [&](std::size_t bytes) {
    void* p = runtime_->allocate(device, bytes);
    pending.p[pending.count++] = p;
    return p;
  };
  if (first) {
    const std::size_t fb = static_cast<std::size_t>(half) * sizeof(double);
    next.inv_freq = static_cast<double*>(allocate(fb));
    runtime_->copy_to_device(device, next.inv_freq, host_inv_freq, fb, stream);
  }
  // Not all `available` rows: a CPU call at offset 10^6 grew the host table to 512 MB (R = 128), which a device
  // call at position 5 then copied whole.
  const int64_t floor_rows = floor_bytes_ / (2 * half * static_cast<int64_t>(sizeof(float)));
  const int64_t n = std::min(available, std::max({needed, 2 * next.n, floor_rows}));
  const bool grow = n > next.n;
  if (grow) {
    const std::size_t rb = static_cast<std::size_t>(n) * static_cast<std::size_t>(2 * half) * sizeof(float);
    float* rows = static_cast<float*>(allocate(rb));
    runtime_->copy_to_device(device, rows, host_rows, rb, stream);
    next.rows = rows;
    next.n = n;
  }
  // Publish (nothing below throws: the capacity is reserved above).
  for (int i = 0; i < pending.count; ++i) blocks_.push_back({device, pending.p[i]});
  pending.count = 0;
  if (first) entries_.push_back(next);
  else entries_[index] = next;
  if (grow) ++copies_;
  return {next.rows, next.n, next.inv_freq};
}

void device_apply(const Plan& plan, DeviceRuntime& rt) {
  if (plan.dtype != DType::kF32 && plan.dtype != DType::kF16 && plan.dtype != DType::kBF16)
    fail(Error::Kind::kUnsupported, kWhere,
         std::string("backend cuda rotates f32, f16 and bf16 tensors, got ") + dtype_name(plan.dtype));
  const bool on_the_fly = plan.cs.kind == PlanCosSin::Kind::kOnTheFly;
  if ((on_the_fly || !plan.cs.axis_of_freq.empty()) && plan.half > kMaxParamFreqs)
    fail(Error::Kind::kUnsupported, kWhere,
         "backend cuda computes cos/sin on the fly, and maps multi-axis frequencies, for rotary_dim <= " +
             std::to_string(2 * kMaxParamFreqs) + ", got rotary_dim " + std::to_string(plan.rotary_dim));
  const int device = check_devices(plan, rt);

  DeviceRows rows;
  if (plan.cs.kind == PlanCosSin::Kind::kTable) {
    if (plan.cs.table_owner == nullptr || plan.cs.inv_freq == nullptr)
      fail(Error::Kind::kInternal, kWhere, "a device plan with table rows but no table owner, got none");
    DeviceRuntime* owner_rt = &rt;
    DeviceTables& tables = TableAttachment::get<DeviceTables>(
        *plan.cs.table_owner, [&] { return std::make_shared<DeviceTables>(owner_rt); });
    rows = tables.rows_for(&rt, device, plan.cs.table, plan.cs.table_size, plan.cs.device_rows, plan.cs.inv_freq,
                           plan.half, plan.stream);
  }

  Job job = make_job(plan, rows);
  job.geo = launch_geometry(job, rt.limits(device));
  if ((job.tokens + job.geo.block_y - 1) / job.geo.block_y > 0x7FFFFFFF)
    fail(Error::Kind::kUnsupported, kWhere, "backend cuda launches at most 2^31 - 1 token blocks, got " +
                                                std::to_string(job.tokens) + " tokens");
  if (on_the_fly) {
    ParamFreqs freqs;
    param_freqs(plan, &freqs);
    rt.launch(device, job, &freqs, plan.stream);
  } else {
    rt.launch(device, job, nullptr, plan.stream);
  }
}

void set_runtime_override(DeviceRuntime* runtime) { g_override.store(runtime, std::memory_order_release); }

DeviceRuntime* runtime_override() { return g_override.load(std::memory_order_acquire); }

}  // namespace rotary::detail::cuda
