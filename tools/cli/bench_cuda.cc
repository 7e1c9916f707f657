// `rotary bench --backend cuda`: the CUDA kernels on Llama-3-8B shapes against a device-to-device copy and a one-thread-per-pair peer.
//
// Method (docs/performance.md, "The CUDA bench"): per configuration, rotary's call, a cudaMemcpyAsync
// device-to-device copy of the same bytes (the limit) and, in place, the one-thread-per-pair peer
// (cuda/naive_rope.cu) are timed alternately on one stream with CUDA events, samples of `batch` calls each,
// and the medians kept. Bytes = q and k read + written. Decode lines (one token) also report the host wall
// time per call of back-to-back calls, which includes validation and the launch.
#include "bench_cuda.h"

#include <cstdio>
#include <string>

#if ROTARY_CLI_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/naive_rope.h"
#include "rotary/apply.h"
#include "rotary/table.h"
#endif

namespace rotary::cli {

#if !ROTARY_CLI_CUDA

int run_bench_cuda(const Flags&) {
  std::fprintf(stderr, "rotary bench: --backend cuda needs a build with -DROTARY_BUILD_CUDA=ON, got a build without CUDA\n");
  return 2;
}

#else

namespace {

constexpr int kHeadsQ = 32, kHeadsK = 8, kHeadDim = 128;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { check(cudaMalloc(&p, bytes == 0 ? 16 : bytes), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/// Median seconds per call of each function, timed alternately with events (`batch` calls per sample).
std::vector<double> time_alternating(const std::vector<std::function<void()>>& fns, cudaStream_t s, int batch,
                                     int samples) {
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  for (const auto& f : fns) f();  // warm up (first calls copy the table to the device)
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  std::vector<std::vector<double>> t(fns.size());
  for (int i = 0; i < samples; ++i)
    for (std::size_t k = 0; k < fns.size(); ++k) {
      check(cudaEventRecord(e0, s), "cudaEventRecord");
      for (int b = 0; b < batch; ++b) fns[k]();
      check(cudaEventRecord(e1, s), "cudaEventRecord");
      check(cudaEventSynchronize(e1), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
      t[k].push_back(ms * 1e-3 / batch);
    }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::vector<double> out;
  for (auto& v : t) out.push_back(median(v));
  return out;
}

/// Host wall seconds per call of `calls` back-to-back calls followed by one synchronisation (median of 5).
double wall_per_call(const std::function<void()>& f, cudaStream_t s, int calls) {
  std::vector<double> v;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    v.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
  }
  return median(v);
}

/// Values of `dtype` with |x| in [0.25, 2) and random signs (no denormals, no overflow), copied to `dev`.
void fill(void* dev, size_t bytes, DType dtype) {
  std::vector<unsigned char> h(bytes);
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return state;
  };
  if (dtype == DType::kF32) {
    for (size_t i = 0; i + 4 <= bytes; i += 4) {
      const uint32_t r = next();
      const uint32_t u = ((r >> 31) << 31) | ((125u + (r >> 29 & 1u)) << 23) | (r & 0x7FFFFFu);
      std::memcpy(&h[i], &u, 4);
    }
  } else {
    for (size_t i = 0; i + 2 <= bytes; i += 2) {
      const uint32_t r = next();
      const uint16_t v = dtype == DType::kBF16
                             ? static_cast<uint16_t>(((r >> 31) << 15) | ((125u + (r >> 29 & 1u)) << 7) | (r & 0x7Fu))
                             : static_cast<uint16_t>(((r >> 31) << 15) | ((13u + (r >> 29 & 1u)) << 10) | (r & 0x3FFu));
      std::memcpy(&h[i], &v, 2);
    }
  }
  check(cudaMemcpy(dev, h.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
}

float host_value(const unsigned char* p, DType dtype) {
  if (dtype == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, p, 2);
  if (dtype == DType::kBF16) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int e = (b >> 10) & 0x1F, m = b & 0x3FF;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -24) : std::ldexp(static_cast<float>(m + 1024), e - 25);
  return (b & 0x8000) ? -v : v;
}

/// The peer must rotate like rotary: `a` out of place vs the peer in place on copies of q and k, the first
/// `bytes` of each compared within two output ulps at |x| < 4 (both compute in f32 from the same rows).
bool peer_agrees(const ApplyArgs& a, const NaiveRopeArgs& n, void* scratch, size_t qb, size_t kb, DType dtype,
                 CosSinTable& table, cudaStream_t s) {
  apply_table(table, a);
  NaiveRopeArgs m = n;
  m.q = scratch;
  m.k = static_cast<unsigned char*>(scratch) + qb;
  check(cudaMemcpyAsync(m.q, a.q.data, qb, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
  check(cudaMemcpyAsync(m.k, a.k.data, kb, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
  naive_rope(m);
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const double tol = dtype == DType::kF32 ? 1e-5 : dtype == DType::kF16 ? 4e-3 : 3.2e-2;
  for (int which = 0; which < 2; ++which) {
    const size_t nb = std::min<size_t>(which == 0 ? qb : kb, size_t(1) << 20);
    std::vector<unsigned char> x(nb), y(nb);
    check(cudaMemcpy(x.data(), which == 0 ? a.q_out.data : a.k_out.data, nb, cudaMemcpyDeviceToHost), "cudaMemcpy");
    check(cudaMemcpy(y.data(), which == 0 ? m.q : m.k, nb, cudaMemcpyDeviceToHost), "cudaMemcpy");
    const size_t es = dtype_size(dtype);
    for (size_t i = 0; i + es <= nb; i += es)
      if (!(std::fabs(host_value(&x[i], dtype) - host_value(&y[i], dtype)) <= tol)) return false;
  }
  return true;
}

struct Case {
  std::string name;
  int64_t tokens, position;
};

}  // namespace

int run_bench_cuda(const Flags& flags) {
  const bool json = flags.has("json"), quick = flags.has("quick");
  if (flags.get("threads")) throw UsageError("--threads does not apply to --backend cuda");
  std::vector<Case> cases = {{"T1", 1, 12345}, {"T4096", 4096, 0}, {"T32768", 32768, 0}, {"T131072", 131072, 0}};
  if (auto c = flags.get("case")) {
    std::vector<Case> keep;
    for (const Case& k : cases)
      if (k.name == *c) keep.push_back(k);
    if (keep.empty()) throw UsageError("--case must be T1, T4096, T32768 or T131072 with --backend cuda, got " + *c);
    cases = keep;
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::fprintf(stderr, "rotary bench: --backend cuda found no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  // Llama-3-8B: theta 5e5 (the values do not change the timing); a table covering every case.
  Frequencies freqs;
  for (int j = 0; j < kHeadDim / 2; ++j) freqs.inv_freq.push_back(std::pow(500000.0, -2.0 * j / kHeadDim));
  CosSinTable table(freqs);
  int64_t max_pos = 0;
  for (const Case& c : cases) max_pos = std::max(max_pos, c.position + c.tokens);
  const CosSinTable::View view = table.view_for(max_pos);
  DeviceBuffer cache(static_cast<size_t>(view.size * kHeadDim) * 4);  // the peer's cos|sin cache
  check(cudaMemcpy(cache.p, view.data, static_cast<size_t>(view.size * kHeadDim) * 4, cudaMemcpyHostToDevice), "cudaMemcpy");

  const int samples = quick ? 5 : 15;
  for (const Case& c : cases) {
    const bool decode = c.tokens == 1;
    const size_t qmax = static_cast<size_t>(c.tokens) * kHeadsQ * kHeadDim * 4, kmax = static_cast<size_t>(c.tokens) * kHeadsK * kHeadDim * 4;
    DeviceBuffer q(qmax), k(kmax), qo(qmax), ko(kmax), copy_src(qmax + kmax), copy_dst(qmax + kmax), pos(static_cast<size_t>(c.tokens) * 8);
    std::vector<int64_t> hp(static_cast<size_t>(c.tokens));
    for (int64_t t = 0; t < c.tokens; ++t) hp[static_cast<size_t>(t)] = c.position + t;
    check(cudaMemcpy(pos.p, hp.data(), hp.size() * 8, cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemset(copy_src.p, 0, qmax + kmax), "cudaMemset");
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      const size_t es = dtype_size(dtype), qb = qmax / 4 * es, kb = kmax / 4 * es;
      fill(q.p, qb, dtype);
      fill(k.p, kb, dtype);
      for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved})
        for (bool inplace : {true, false}) {
          ApplyArgs a;
          a.layout = Layout::kTHD;
          a.q = TensorView::contiguous(q.p, dtype, {c.tokens, kHeadsQ, kHeadDim});
          a.k = TensorView::contiguous(k.p, dtype, {c.tokens, kHeadsK, kHeadDim});
          if (!inplace) {
            a.q_out = TensorView::contiguous(qo.p, dtype, {c.tokens, kHeadsQ, kHeadDim});
            a.k_out = TensorView::contiguous(ko.p, dtype, {c.tokens, kHeadsK, kHeadDim});
          }
          a.positions = Positions::contiguous(c.position);
          a.pairing = pairing;
          a.backend = Backend::kCuda;
          a.stream = stream;
          NaiveRopeArgs n;
          n.elem_bytes_kind = dtype == DType::kF32 ? 0 : dtype == DType::kF16 ? 1 : 2;
          n.neox = pairing == Pairing::kHalfSplit;
          n.positions = static_cast<const int64_t*>(pos.p);
          n.q = q.p;
          n.k = k.p;
          n.cache = static_cast<const float*>(cache.p);
          n.tokens = c.tokens;
          n.hq = kHeadsQ;
          n.hk = kHeadsK;
          n.head_size = kHeadDim;
          n.rot_dim = kHeadDim;
          n.stream = stream;
          std::vector<std::function<void()>> fns = {
              [&] { apply_table(table, a); },
              [&] { check(cudaMemcpyAsync(copy_dst.p, copy_src.p, qb + kb, cudaMemcpyDeviceToDevice, stream), "copy"); }};
          if (inplace) fns.push_back([&] { naive_rope(n); });
          bool peer_ok = true;
          if (!inplace) {  // before timing: rotary's outputs against the peer's on the same inputs
            peer_ok = peer_agrees(a, n, copy_dst.p, qb, kb, dtype, table, stream);
            if (!peer_ok) std::fprintf(stderr, "rotary bench: the peer disagrees with rotary (%s %s %s)\n", c.name.c_str(),
                                       dtype_name(dtype), pairing_name(pairing));
          }
          const int batch = decode ? 200 : c.tokens <= 4096 ? 20 : 3;
          const std::vector<double> t = time_alternating(fns, stream, batch, samples);
          const double bytes = 2.0 * static_cast<double>(qb + kb);
          nlohmann::ordered_json j;
          j["case"] = c.name;
          j["backend"] = "cuda";
          j["device"] = prop.name;
          j["tokens"] = c.tokens;
          j["dtype"] = dtype_name(dtype);
          j["pairing"] = pairing_name(pairing);
          j["inplace"] = inplace;
          j["direction"] = "forward";
          j["ms"] = t[0] * 1e3;
          if (decode) {
            j["us"] = t[0] * 1e6;
            j["wall_us"] = wall_per_call([&] { apply_table(table, a); }, stream, 2000) * 1e6;
          }
          j["bytes"] = bytes;
          j["gbps"] = bytes / t[0] / 1e9;
          j["limit"] = "d2d-copy";
          j["limit_gbps"] = bytes / t[1] / 1e9;
          j["ratio"] = t[1] / t[0];
          if (!inplace) j["peer_checked"] = peer_ok;
          if (inplace) {
            j["peer"] = "one-thread-per-pair";
            j["peer_ms"] = t[2] * 1e3;
            j["speedup_vs_peer"] = t[2] / t[0];
          }
          if (json) {
            std::printf("%s\n", j.dump().c_str());
          } else {
            std::printf("%-8s %-5s %-12s %-8s %11.4f ms %9.1f GB/s  copy %9.1f GB/s  ratio %.3f", c.name.c_str(),
                        dtype_name(dtype), pairing_name(pairing), inplace ? "inplace" : "out", t[0] * 1e3,
                        bytes / t[0] / 1e9, bytes / t[1] / 1e9, t[1] / t[0]);
            if (inplace) std::printf("  peer x%.2f", t[2] / t[0]);
            if (decode) std::printf("  wall %.2f us", j["wall_us"].get<double>());
            std::printf("\n");
          }
          std::fflush(stdout);
        }
    }
  }
  cudaStreamDestroy(stream);
  return 0;
}

#endif

}  // namespace rotary::cli
