// CUDA kernel body run by the host grid emulator vs the reference kernel on the whole feature matrix, both launch modes.
//
// Every call goes through the public entry points with backend cuda, so it also exercises the engine's
// device planning (no position read on the host), the backend's device tables, Job and geometry. Each case
// runs three times from identical buffers: reference backend; emulator with token-parallel geometry; emulator
// with head-parallel geometry and blocks in shuffled order. Rotated elements must agree within the dtype's
// tolerance, every other byte (pass-through channels, padding, canaries, inputs of out-of-place calls) exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda/emulator.h"
#include "cuda/matrix.h"

namespace rotary {
namespace {

using namespace rotary::testing;  // NOLINT: the matrix vocabulary

class EmulatorMatrix : public ::testing::TestWithParam<int> {};

TEST_P(EmulatorMatrix, EqualsTheReference) {
  const Scenario sc = scenarios()[static_cast<std::size_t>(GetParam())];
  const Frequencies f = freqs_for(sc.R);
  int cases = 0;
  bool saw_token_parallel = false, saw_head_parallel = false;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved})
      for (Direction dir : {Direction::kForward, Direction::kInverse})
        for (Out out : {Out::kInPlace, Out::kOutOfPlace, Out::kQInPlaceKOut}) {
          if (sc.hk == 0 && out == Out::kQInPlaceKOut) continue;
          const std::string what = sc.name + " " + dtype_name(dt) + " " + pairing_name(pairing) + " " +
                                   direction_name(dir) + " out=" + std::to_string(static_cast<int>(out));
          Built ref = build(sc, dt, out, f);
          ref.args.pairing = pairing;
          ref.args.direction = dir;
          ref.args.backend = Backend::kReference;
          {
            CosSinTable table(f);
            run(sc, ref, f, table);
          }
          for (int mode = 0; mode < 2; ++mode) {
            testing::EmulatedCuda cuda;  // outlives the table below (its device copy lives in the emulator)
            if (mode == 0) cuda.rt.device_limits = {1, 1};            // room for one block: token-parallel
            else cuda.rt.device_limits = {100000, 2048};              // huge device: head-parallel
            cuda.rt.shuffle_blocks = mode == 1;
            Built dev = build(sc, dt, out, f);
            dev.args.pairing = pairing;
            dev.args.direction = dir;
            dev.args.backend = Backend::kCuda;
            dev.args.stream = reinterpret_cast<void*>(0x5EED0 + mode);
            {
              CosSinTable table(f);
              ASSERT_NO_THROW(run(sc, dev, f, table)) << what;
            }
            ASSERT_EQ(cuda.rt.launches, 1) << what;
            EXPECT_EQ(cuda.rt.last_stream, dev.args.stream) << what;
            (cuda.rt.last_job.geo.head_parallel ? saw_head_parallel : saw_token_parallel) = true;
            int bad = 0;
            for (std::size_t i = 0; i < ref.st.size(); ++i)
              bad += testing::compare_storage(*dev.st[i], *ref.st[i], ref.mask[i], dt, testing::output_abs_tol(dt),
                                              what + " mode " + std::to_string(mode) + " storage " + std::to_string(i));
            ASSERT_EQ(bad, 0) << what;
          }
          ++cases;
        }
  EXPECT_GT(cases, 0);
  EXPECT_TRUE(saw_token_parallel);
  if (sc.B * sc.S > 0 && sc.hq + sc.hk > 1) EXPECT_TRUE(saw_head_parallel);
}

INSTANTIATE_TEST_SUITE_P(Scenarios, EmulatorMatrix, ::testing::Range(0, static_cast<int>(scenarios().size())),
                         [](const ::testing::TestParamInfo<int>& info) {
                           std::string n = scenarios()[static_cast<std::size_t>(info.param)].name;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace rotary
