// CUDA backend behaviour on the host grid emulator: streams, errors, NaN rows, accuracy (table copies: emulator_table_copies_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/emulator.h"
#include "cuda/matrix.h"
#include "cuda/prefill.h"
#include "cuda/simple_call.h"
#include "rotary/rotary_c.h"

namespace rotary {
namespace {

using namespace rotary::testing;  // NOLINT: the matrix vocabulary

TEST(CudaEmulator, TheCallersStreamReachesTheLaunchThroughTheCApi) {
  EmulatedCuda cuda;
  rotary_spec_t* spec = nullptr;
  rotary_rope_t* rope = nullptr;
  ASSERT_EQ(rotary_spec_from_preset("llama-3.1-8b", &spec), ROTARY_OK);
  ASSERT_EQ(rotary_rope_create(spec, nullptr, &rope), ROTARY_OK);
  std::vector<float> q(32 * 128, 0.5f);
  const int64_t shape[4] = {1, 1, 32, 128};
  rotary_apply_args_t args;
  rotary_apply_args_init(&args);
  ASSERT_EQ(rotary_tensor_contiguous(&args.q, q.data(), ROTARY_DTYPE_F32, 4, shape), ROTARY_OK);
  args.backend = ROTARY_BACKEND_CUDA;
  args.stream = reinterpret_cast<void*>(0xC0FFEE);
  ASSERT_EQ(rotary_rope_apply(rope, &args), ROTARY_OK) << rotary_last_error();
  EXPECT_EQ(cuda.rt.launches, 1);
  EXPECT_EQ(cuda.rt.last_stream, reinterpret_cast<void*>(0xC0FFEE));
  args.struct_size = offsetof(rotary_apply_args_t, stream);  // 0.1.0 callers: the default stream
  ASSERT_EQ(rotary_rope_apply(rope, &args), ROTARY_OK) << rotary_last_error();
  EXPECT_EQ(cuda.rt.launches, 2);
  EXPECT_EQ(cuda.rt.last_stream, nullptr);
  rotary_rope_free(rope);
  rotary_spec_free(spec);
}

TEST(CudaEmulator, HostMemoryAndASecondDeviceAreRejectedBeforeAnyLaunch) {
  EmulatedCuda cuda;
  Frequencies f = freqs_for(64);
  Simple s(2, 2, 64, 0);
  std::vector<float> k(2 * 1 * 64, 1.0f);
  s.a.k = TensorView::contiguous(k.data(), DType::kF32, {1, 2, 1, 64});
  cuda.rt.ranges.push_back({k.data(), k.size() * 4, -1});
  try {
    apply_frequencies(f, s.a);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()).rfind("[rotary_apply] k must be device memory for backend cuda", 0), 0u) << e.what();
  }
  cuda.rt.ranges.back().device = 1;
  try {
    apply_frequencies(f, s.a);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[rotary_apply] k must be on q's device 0, got device 1");
  }
  EXPECT_EQ(cuda.rt.launches, 0);
}

// A stream of another device than the tensors' is the caller's mistake, named before any copy or launch (a
// kernel launched into it fails with cudaErrorInvalidResourceHandle, which read as an internal error).
TEST(CudaEmulator, AStreamOfAnotherDeviceIsRejectedBeforeAnyLaunch) {
  EmulatedCuda cuda;
  Frequencies f = freqs_for(64);
  Simple s(2, 2, 64, 0);
  int stream_tag = 0;
  s.a.stream = &stream_tag;
  cuda.rt.stream_devices.push_back({&stream_tag, 1});
  try {
    apply_frequencies(f, s.a);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
    EXPECT_STREQ(e.what(), "[rotary_apply] stream must belong to q's device 0, got a stream of device 1");
  }
  EXPECT_EQ(cuda.rt.launches, 0);
  EXPECT_EQ(cuda.rt.copies, 0);
  cuda.rt.stream_devices.back().second = 0;  // its own device's stream: launched
  EXPECT_NO_THROW(apply_frequencies(f, s.a));
  EXPECT_EQ(cuda.rt.launches, 1);
  EXPECT_EQ(cuda.rt.last_stream, s.a.stream);
}

TEST(CudaEmulator, WhatTheDeviceDoesNotDoIsReportedAsUnsupported) {
  EmulatedCuda cuda;
  std::vector<double> q(2 * 64);
  ApplyArgs a;
  a.q = TensorView::contiguous(q.data(), DType::kF64, {1, 2, 1, 64});
  a.backend = Backend::kCuda;
  try {
    apply_frequencies(freqs_for(64), a);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kUnsupported);
    EXPECT_STREQ(e.what(), "[rotary_apply] backend cuda rotates f32, f16 and bf16 tensors, got f64");
  }
  Simple big(1, 1, 1026, 0);
  try {
    apply_frequencies(freqs_for(1026), big.a);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("rotary_dim <= 512, got rotary_dim 1026"), std::string::npos) << e.what();
  }
  // The same head through a table works (rows are device memory, not parameters).
  CosSinTable table(freqs_for(1026));
  EXPECT_NO_THROW(apply_table(table, big.a));
  EXPECT_EQ(cuda.rt.launches, 1);
}

TEST(CudaEmulator, ALengthDependentSpecNeedsSeqLenWithDevicePositions) {
  EmulatedCuda cuda;
  Spec spec;
  spec.head_dim = 64;
  spec.scaling.type = RopeType::kDynamic;
  spec.scaling.factor = 2.0;
  spec.max_position_embeddings = 16;
  Rope rope(spec);
  Simple s(3, 1, 64, 0);
  std::vector<int64_t> ids = {0, 20, 40};
  s.a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {3}));
  try {
    rope.apply(s.a);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[rotary_apply] seq_len must be given for a dynamic spec when positions are device memory (backend "
                 "cuda does not read them on the host), got none");
  }
  s.a.seq_len = 41;
  EXPECT_NO_THROW(rope.apply(s.a));
  EXPECT_EQ(cuda.rt.launches, 1);
}

/// Caller cos/sin [rows, R/2] with device positions: the host cannot check them; the device writes NaN to
/// the rotated channels of a token whose position has no row (never an identity rotation), and still copies
/// its pass-through channels.
TEST(CudaEmulator, CallerRowsMissingForADevicePositionGiveNaN) {
  EmulatedCuda cuda;
  const int64_t D = 16, R = 8, h = R / 2;
  std::vector<float> q = randn(3 * D, 3), out(3 * D, 0.0f), cs(5 * h, 0.5f);
  std::vector<int64_t> ids = {1, 5, 4};  // row 5 does not exist
  ApplyArgs a;
  a.q = TensorView::contiguous(q.data(), DType::kF32, {1, 3, 1, D});
  a.q_out = TensorView::contiguous(out.data(), DType::kF32, {1, 3, 1, D});
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {1, 3}));
  a.backend = Backend::kCuda;
  const TensorView cos = TensorView::contiguous(cs.data(), DType::kF32, {5, h});
  apply_cos_sin(cos, cos, a);
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t d = 0; d < D; ++d) {
      const float y = out[static_cast<std::size_t>(t * D + d)], x = q[static_cast<std::size_t>(t * D + d)];
      if (d >= R) EXPECT_EQ(y, x) << t << "," << d;
      else if (t == 1) EXPECT_TRUE(std::isnan(y)) << d;
      else EXPECT_FALSE(std::isnan(y)) << t << "," << d;
    }
}

/// Positions just below, at and past the rows of the device copy: rows read, then computed on the device.
TEST(CudaEmulator, PositionsAroundTheEndOfTheDeviceRowsMatchTheReference) {
  const Frequencies f = freqs_for(64);
  CosSinTable host(f);
  EmulatedCuda cuda;
  CosSinTable table(f);
  const int64_t n = table.view_for(300).size;  // rows the device copy will hold
  std::vector<int64_t> ids = {n - 2, n - 1, n, n + 1, 3 * n};
  std::vector<float> q = randn(ids.size() * 2 * 64, 11), ref = q;
  ApplyArgs a;
  a.q = TensorView::contiguous(q.data(), DType::kF32, {1, static_cast<int64_t>(ids.size()), 2, 64});
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {static_cast<int64_t>(ids.size())}));
  a.backend = Backend::kCuda;
  apply_table(table, a);  // no seq_len: the copy holds exactly the table's n rows
  EXPECT_EQ(cuda.rt.last_job.cs.table_rows, n);
  ApplyArgs r = a;
  r.q.data = ref.data();
  r.backend = Backend::kReference;
  apply_table(host, r);
  for (std::size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(q[i], ref[i], output_abs_tol(DType::kF32)) << i;
}

/// Auto mode with rotary_dim > 512, which the device cannot compute on the fly (at most 256 pairs): the Rope
/// reads its table as it is and the device computes the rows past it, so the call that runs at a small
/// position runs far out too, equal to the CPU within the f32 tolerance.
TEST(CudaEmulator, AutoModeRunsWideHeadsAtEveryPosition) {
  EmulatedCuda cuda;
  Spec spec;
  spec.head_dim = 640;
  spec.rotary_dim = 640;
  Rope rope(spec), cpu(spec);
  for (int64_t pos : {int64_t(100), int64_t(100000), int64_t(3000000)}) {
    for (int64_t S : {int64_t(1), int64_t(3)}) {
      std::vector<float> q = randn(static_cast<std::size_t>(S * 2 * 640), 17), ref = q;
      ApplyArgs a;
      a.q = TensorView::contiguous(q.data(), DType::kF32, {1, S, 2, 640});
      a.positions = Positions::contiguous(pos);
      a.backend = Backend::kCuda;
      ASSERT_NO_THROW(rope.apply(a)) << "position " << pos;
      ApplyArgs r = a;
      r.q.data = ref.data();
      r.backend = Backend::kCpu;
      cpu.apply(r);
      for (std::size_t i = 0; i < q.size(); ++i)
        ASSERT_NEAR(q[i], ref[i], output_abs_tol(DType::kF32)) << "position " << pos << ", element " << i;
    }
  }
  EXPECT_EQ(cuda.rt.launches, 6);
  RopeOptions otf;
  otf.mode = CosSinMode::kOnTheFly;  // asked for explicitly, on the fly stays what the device does not do
  Rope wide(spec, otf);
  std::vector<float> q(640, 0.5f);
  ApplyArgs a;
  a.q = TensorView::contiguous(q.data(), DType::kF32, {1, 1, 1, 640});
  a.backend = Backend::kCuda;
  try {
    wide.apply(a);
    ADD_FAILURE() << "expected kUnsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kUnsupported) << e.what();
  }
}

/// The hardware test's long prefill (prefill.h) with an H100/H200's limits: the launch is token-parallel with
/// three rows per thread on the 16-byte path (rotate_rows_vec's two-rows loop and its tail), equal to the CPU.
TEST(CudaEmulator, ALongPrefillRunsTokenParallelAndEqualsTheCpu) {
  for (DType dt : {DType::kF32, DType::kBF16})
    for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved}) {
      EmulatedCuda cuda;  // default limits: 132 SMs, 2048 threads each
      const PrefillCase pc(dt, pairing, cuda.rt.device_limits.sm_count);
      std::vector<unsigned char> want_q, want_k, q = pc.q, k = pc.k;
      pc.cpu_result(&want_q, &want_k);
      {
        CosSinTable table(pc.freqs);
        apply_table(table, pc.args(q.data(), k.data(), Backend::kCuda));
      }
      ASSERT_EQ(cuda.rt.launches, 1);
      EXPECT_FALSE(cuda.rt.last_job.geo.head_parallel) << "T " << pc.T;
      EXPECT_EQ(cuda.rt.last_job.rows_per_token, 3);
      EXPECT_NE(cuda.rt.last_job.vec, 0);
      EXPECT_EQ(pc.compare(q, want_q, "q") + pc.compare(k, want_k, "k"), 0);
    }
}

/// The accuracy contract (docs/accuracy.md) on the device's own cos/sin: rows computed on the device past
/// its copy, and on-the-fly calls, against fp64 truth at positions up to 2^24 - 1.
TEST(CudaEmulator, DeviceComputedAnglesKeepTheAccuracyContract) {
  EmulatedCuda cuda;
  for (double base : {10000.0, 500000.0}) {
    Frequencies f;
    for (int j = 0; j < 64; ++j) f.inv_freq.push_back(std::pow(base, -2.0 * j / 128));
    const std::vector<int64_t> ids = {100000, 1000000, 4000000, (int64_t(1) << 24) - 1};
    for (int mode = 0; mode < 2; ++mode) {
      std::vector<float> q = randn(ids.size() * 128, 21), x = q;
      ApplyArgs a;
      a.q = TensorView::contiguous(q.data(), DType::kF32, {1, static_cast<int64_t>(ids.size()), 1, 128});
      a.positions = Positions::from_ids(TensorView::contiguous(const_cast<int64_t*>(ids.data()), DType::kI64,
                                                               {static_cast<int64_t>(ids.size())}));
      a.backend = Backend::kCuda;
      CosSinTable table(f);  // empty: every row is computed on the device
      if (mode == 0) apply_table(table, a);
      else apply_frequencies(f, a);
      double worst = 0;
      for (std::size_t t = 0; t < ids.size(); ++t)
        for (int j = 0; j < 64; ++j) {
          const long double ang = static_cast<long double>(ids[t]) * static_cast<long double>(f.inv_freq[static_cast<std::size_t>(j)]);
          const long double c = std::cos(ang), s = std::sin(ang);
          const long double x0 = x[t * 128 + static_cast<std::size_t>(j)], x1 = x[t * 128 + static_cast<std::size_t>(j) + 64];
          worst = std::max<double>(worst, std::fabs(static_cast<double>(x0 * c - x1 * s) - q[t * 128 + static_cast<std::size_t>(j)]));
          worst = std::max<double>(worst, std::fabs(static_cast<double>(x0 * s + x1 * c) - q[t * 128 + static_cast<std::size_t>(j) + 64]));
        }
      EXPECT_LE(worst, kAccuracyContractF32) << "base " << base << " mode " << mode;
    }
  }
}

/// The emulator's f16/bf16 conversions (the host side of compat.cuh) are IEEE round-to-nearest-even: equal
/// to the compiler's _Float16 and to the tests' bf16 rounding on every half and on boundary and random floats.
TEST(CudaEmulator, HostConversionsRoundLikeTheDevice) {
  using namespace detail::cuda;
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float x = f16_to_f32(h), y = f16_bits_to_f32(h);
    if (std::isnan(y)) {
      EXPECT_TRUE(std::isnan(x));
      continue;
    }
    ASSERT_EQ(f32_bits(x), f32_bits(y)) << b;
    ASSERT_EQ(bf16_to_f32(h), bf16_bits_to_f32(h)) << b;
  }
  std::vector<float> probes = randn(200000, 8);
  for (float& v : probes) v = std::ldexp(v, static_cast<int>(std::fabs(v) * 13) % 40 - 26);
  for (float v : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e10f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f, 1.0f + 1.0f / 2048})
    probes.push_back(v);
  for (float v : probes) {
    ASSERT_EQ(f32_to_f16(v), f32_to_f16_bits(v)) << v;
    ASSERT_EQ(f32_to_bf16(v), f32_to_bf16_bits(v)) << v;
  }
}

}  // namespace
}  // namespace rotary
