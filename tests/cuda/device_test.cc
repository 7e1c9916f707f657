// The CUDA backend on a real GPU: the whole matrix vs the reference and bit for bit vs the emulator, graph capture, accuracy.
//
// Built with -DROTARY_BUILD_CUDA=ON; every test skips with a message when no GPU is present (CI), and fails
// instead with ROTARY_REQUIRE_GPU=1 (scripts/device_check.sh). The emulator comparison is what makes the
// CPU-only CI runs meaningful: where cos/sin are read from the device copy of a table or from the caller,
// the device must produce the emulator's bytes exactly (same IEEE roundings, same FMAs; the inputs are
// finite: NaN bits differ, docs/cuda.md); where the device computes angles itself, CUDA's sincos may differ
// from glibc's in the last double bit, so those compare within the dtype tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/emulator.h"
#include "cuda/matrix.h"
#include "cuda/prefill.h"
#include "plan/plan.h"

#if ROTARY_TEST_CUDA
#include <cuda_runtime.h>
#endif

namespace rotary {
namespace {

using namespace rotary::testing;  // NOLINT: the matrix vocabulary

/// ROTARY_REQUIRE_GPU=1 (scripts/device_check.sh sets it): a GPU is expected, so a test that cannot run on
/// one fails instead of skipping, and a device check on a machine rotary cannot use does not pass.
bool gpu_required() {
  const char* v = std::getenv("ROTARY_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

#if ROTARY_TEST_CUDA

#define REQUIRE_GPU()                                                                                          \
  if (!detail::cuda_available()) {                                                                            \
    if (gpu_required()) FAIL() << "ROTARY_REQUIRE_GPU=1, got no usable CUDA device (cuda_available() is false)"; \
    GTEST_SKIP() << "no CUDA device (cuda_available() is false): the kernels ran only in the emulator "        \
                    "tests this time";                                                                        \
  }

void ok(cudaError_t e, const char* what) { ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e); }

/// Device copies of every storage of a Built call, and the call's views moved onto them.
struct OnDevice {
  std::vector<void*> mem;
  Built& bt;
  explicit OnDevice(Built& b) : bt(b) {
    for (const auto& s : bt.st) {
      void* d = nullptr;
      ok(cudaMalloc(&d, s->bytes), "cudaMalloc");
      ok(cudaMemcpy(d, s->p, s->bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
      mem.push_back(d);
    }
    for (TensorView* v : {&bt.args.q, &bt.args.q_out, &bt.args.k, &bt.args.k_out, &bt.args.positions.batch_offsets,
                          &bt.args.positions.ids, &bt.args.positions.cu_seqlens, &bt.args.positions.seq_offsets,
                          &bt.cos, &bt.sin})
      v->data = moved(v->data);
  }
  void* moved(void* p) const {
    if (p == nullptr) return p;
    for (std::size_t i = 0; i < bt.st.size(); ++i) {
      const auto* base = bt.st[i]->p;
      if (static_cast<unsigned char*>(p) >= base && static_cast<unsigned char*>(p) < base + bt.st[i]->bytes)
        return static_cast<unsigned char*>(mem[i]) + (static_cast<unsigned char*>(p) - base);
    }
    ADD_FAILURE() << "a view outside the call's storages";
    return p;
  }
  void fetch() {
    for (std::size_t i = 0; i < mem.size(); ++i)
      ok(cudaMemcpy(bt.st[i]->p, mem[i], bt.st[i]->bytes, cudaMemcpyDeviceToHost), "cudaMemcpy back");
  }
  ~OnDevice() {
    for (void* d : mem) cudaFree(d);
  }
};

bool device_computes_angles(const Scenario& sc) {
  return sc.src == Src::kOnTheFly || sc.src == Src::kAxes || sc.src == Src::kTableShort;
}

class DeviceMatrix : public ::testing::TestWithParam<int> {};

TEST_P(DeviceMatrix, EqualsTheReferenceAndTheEmulator) {
  REQUIRE_GPU();
  const Scenario sc = scenarios()[static_cast<std::size_t>(GetParam())];
  const Frequencies f = freqs_for(sc.R);
  cudaStream_t stream;
  ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved})
      for (Direction dir : {Direction::kForward, Direction::kInverse})
        for (Out out : {Out::kInPlace, Out::kOutOfPlace, Out::kQInPlaceKOut}) {
          if (sc.hk == 0 && out == Out::kQInPlaceKOut) continue;
          const std::string what = sc.name + " " + dtype_name(dt) + " " + pairing_name(pairing) + " " +
                                   direction_name(dir) + " out=" + std::to_string(static_cast<int>(out));
          auto prepared = [&](Backend be) {
            Built b = build(sc, dt, out, f);
            b.args.pairing = pairing;
            b.args.direction = dir;
            b.args.backend = be;
            return b;
          };
          Built ref = prepared(Backend::kReference);
          {
            CosSinTable table(f);
            run(sc, ref, f, table);
          }
          Built emu = prepared(Backend::kCuda);
          {
            EmulatedCuda cuda;
            CosSinTable table(f);
            run(sc, emu, f, table);
          }
          Built dev = prepared(Backend::kCuda);
          {
            OnDevice d(dev);
            dev.args.stream = stream;
            CosSinTable table(f);
            ASSERT_NO_THROW(run(sc, dev, f, table)) << what;
            ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            d.fetch();
          }
          int bad = 0;
          const bool exact = !device_computes_angles(sc);
          for (std::size_t i = 0; i < ref.st.size(); ++i) {
            bad += compare_storage(*dev.st[i], *ref.st[i], ref.mask[i], dt, output_abs_tol(dt), what + " vs reference");
            bad += compare_storage(*dev.st[i], *emu.st[i], exact ? std::vector<unsigned char>() : ref.mask[i], dt,
                                   output_abs_tol(dt), what + (exact ? " vs emulator (bit for bit)" : " vs emulator"));
          }
          ASSERT_EQ(bad, 0) << what;
        }
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Scenarios, DeviceMatrix, ::testing::Range(0, static_cast<int>(scenarios().size())),
                         [](const ::testing::TestParamInfo<int>& info) {
                           std::string n = scenarios()[static_cast<std::size_t>(info.param)].name;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

/// A decode step captured into a CUDA graph and replayed with a new position written to device memory:
/// the table's device copy is made before capture, the captured call reads the position when it runs.
TEST(CudaDevice, ADecodeStepReplaysFromACudaGraphWithDevicePositions) {
  REQUIRE_GPU();
  const int64_t H = 8, D = 128;
  const Frequencies f = freqs_for(D);
  CosSinTable table(f);
  std::vector<float> host = randn(static_cast<std::size_t>(H * D), 17), out(host.size());
  float *q = nullptr, *q_out = nullptr;
  int64_t* pos = nullptr;
  ok(cudaMalloc(&q, host.size() * 4), "cudaMalloc");
  ok(cudaMalloc(&q_out, host.size() * 4), "cudaMalloc");
  ok(cudaMalloc(&pos, 8), "cudaMalloc");
  ok(cudaMemcpy(q, host.data(), host.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  cudaStream_t stream;
  ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  ApplyArgs a;
  a.q = TensorView::contiguous(q, DType::kF32, {1, 1, H, D});
  a.q_out = TensorView::contiguous(q_out, DType::kF32, {1, 1, H, D});
  a.positions = Positions::from_ids(TensorView::contiguous(pos, DType::kI64, {1, 1}));
  a.backend = Backend::kCuda;
  a.stream = stream;
  a.seq_len = 4096;  // before capture: the device copy holds rows [0, 4096)
  int64_t p0 = 0;
  ok(cudaMemcpy(pos, &p0, 8, cudaMemcpyHostToDevice), "cudaMemcpy");
  apply_table(table, a);
  ok(cudaStreamSynchronize(stream), "sync");
  cudaGraph_t graph;
  ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  apply_table(table, a);
  ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec;
  ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int64_t p : {5, 4095, 100000}) {  // 100000: past the copy, computed on the device
    ok(cudaMemcpyAsync(pos, &p, 8, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    ok(cudaStreamSynchronize(stream), "sync");
    ok(cudaMemcpy(out.data(), q_out, out.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    std::vector<float> ref(host.size());
    ApplyArgs r;
    r.q = TensorView::contiguous(host.data(), DType::kF32, {1, 1, H, D});
    r.q_out = TensorView::contiguous(ref.data(), DType::kF32, {1, 1, H, D});
    r.positions = Positions::contiguous(p);
    r.backend = Backend::kReference;
    apply_frequencies(f, r);
    for (std::size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(out[i], ref[i], output_abs_tol(DType::kF32)) << p << " " << i;
  }
  // Growing the device copy inside a capture is refused before anything is enqueued.
  a.seq_len = 1 << 14;
  ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  EXPECT_THROW(apply_table(table, a), Error);
  cudaGraph_t empty;
  ok(cudaStreamEndCapture(stream, &empty), "cudaStreamEndCapture");
  cudaGraphDestroy(empty);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(q);
  cudaFree(q_out);
  cudaFree(pos);
}

TEST(CudaDevice, HostMemoryIsRejectedWithTheArgumentsName) {
  REQUIRE_GPU();
  std::vector<float> q(128);
  ApplyArgs a;
  a.q = TensorView::contiguous(q.data(), DType::kF32, {1, 1, 1, 128});
  a.backend = Backend::kCuda;
  try {
    apply_frequencies(freqs_for(128), a);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[rotary_apply] q must be device memory for backend cuda", 0), 0u) << e.what();
  }
}

/// docs/accuracy.md's contract with CUDA's own double sincos: rows computed on the device and on-the-fly calls.
TEST(CudaDevice, DeviceComputedAnglesKeepTheAccuracyContract) {
  REQUIRE_GPU();
  const std::vector<int64_t> ids = {100000, 1000000, 4000000, (int64_t(1) << 24) - 1};
  const int64_t T = static_cast<int64_t>(ids.size());
  for (double base : {10000.0, 500000.0}) {
    Frequencies f;
    for (int j = 0; j < 64; ++j) f.inv_freq.push_back(std::pow(base, -2.0 * j / 128));
    for (int mode = 0; mode < 2; ++mode) {
      std::vector<float> x = randn(static_cast<std::size_t>(T * 128), 21), y(x.size());
      float* q = nullptr;
      int64_t* pos = nullptr;
      ok(cudaMalloc(&q, x.size() * 4), "cudaMalloc");
      ok(cudaMalloc(&pos, ids.size() * 8), "cudaMalloc");
      ok(cudaMemcpy(q, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
      ok(cudaMemcpy(pos, ids.data(), ids.size() * 8, cudaMemcpyHostToDevice), "cudaMemcpy");
      ApplyArgs a;
      a.q = TensorView::contiguous(q, DType::kF32, {1, T, 1, 128});
      a.positions = Positions::from_ids(TensorView::contiguous(pos, DType::kI64, {T}));
      a.backend = Backend::kCuda;
      CosSinTable table(f);
      if (mode == 0) apply_table(table, a);  // empty table: every row computed on the device
      else apply_frequencies(f, a);
      ok(cudaDeviceSynchronize(), "sync");
      ok(cudaMemcpy(y.data(), q, y.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
      double worst = 0;
      for (std::size_t t = 0; t < ids.size(); ++t)
        for (std::size_t j = 0; j < 64; ++j) {
          const long double ang = static_cast<long double>(ids[t]) * static_cast<long double>(f.inv_freq[j]);
          const long double c = std::cos(ang), s = std::sin(ang), x0 = x[t * 128 + j], x1 = x[t * 128 + j + 64];
          worst = std::max<double>(worst, std::fabs(static_cast<double>(x0 * c - x1 * s) - y[t * 128 + j]));
          worst = std::max<double>(worst, std::fabs(static_cast<double>(x0 * s + x1 * c) - y[t * 128 + j + 64]));
        }
      EXPECT_LE(worst, kAccuracyContractF32) << "base " << base << " mode " << mode;
      cudaFree(q);
      cudaFree(pos);
    }
  }
}

/// A long prefill (prefill.h): tokens enough to fill every SM, so the launch is token-parallel and each
/// thread rotates its token's three rows with rotate_rows_vec's two-rows loop and tail; equal to the CPU.
TEST(CudaDevice, ALongPrefillRunsTokenParallelAndEqualsTheCpu) {
  REQUIRE_GPU();
  int device = 0, sms = 0;
  ok(cudaGetDevice(&device), "cudaGetDevice");
  ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved}) {
      const PrefillCase pc(dt, pairing, sms);
      std::vector<unsigned char> want_q, want_k, q(pc.q.size()), k(pc.k.size());
      pc.cpu_result(&want_q, &want_k);
      void *dq = nullptr, *dk = nullptr;
      ok(cudaMalloc(&dq, q.size()), "cudaMalloc");
      ok(cudaMalloc(&dk, k.size()), "cudaMalloc");
      ok(cudaMemcpy(dq, pc.q.data(), q.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
      ok(cudaMemcpy(dk, pc.k.data(), k.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
      {
        CosSinTable table(pc.freqs);
        ASSERT_NO_THROW(apply_table(table, pc.args(dq, dk, Backend::kCuda)));
        ok(cudaDeviceSynchronize(), "sync");
      }
      ok(cudaMemcpy(q.data(), dq, q.size(), cudaMemcpyDeviceToHost), "cudaMemcpy back");
      ok(cudaMemcpy(k.data(), dk, k.size(), cudaMemcpyDeviceToHost), "cudaMemcpy back");
      cudaFree(dq);
      cudaFree(dk);
      EXPECT_EQ(pc.compare(q, want_q, "q") + pc.compare(k, want_k, "k"), 0) << "T " << pc.T << ", " << sms << " SMs";
    }
}

#else

TEST(CudaDevice, Skipped) {
  if (gpu_required()) FAIL() << "ROTARY_REQUIRE_GPU=1, got a build without CUDA (configure with -DROTARY_BUILD_CUDA=ON)";
  GTEST_SKIP() << "rotary was built without CUDA: the kernels ran only in the emulator tests";
}

#endif

}  // namespace
}  // namespace rotary
