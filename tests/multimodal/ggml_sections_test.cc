// ggml multi-rope sections: sums past n_dims (partial rotation) map pairs as ggml; VISION sections that split ggml's backends are refused.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "rotary/ggml.h"
#include "rotary/multimodal.h"

namespace rotary {
namespace {

std::string error_of(const GgmlRopeParams& p) {
  try {
    (void)ggml_frequencies(p);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
    return e.what();
  }
  return "no error";
}

// ggml asserts sum(sections) <= ne0, the head size, which exceeds n_dims when only part of the head rotates
// (e.g. n_dims 16 of a head of 32). The pair map is ggml_mrope_cache_init's for any sum: sector = j % sum,
// here j itself, so MROPE gives t to every pair below sections[0], IMROPE cycles t h w while j < 3 * section.
TEST(GgmlSections, SumsPastNDimsMapPairsAsGgml) {
  GgmlRopeParams p;
  p.mode = GgmlRopeMode::kMrope;
  p.n_dims = 16;  // 8 pairs
  p.sections = {10, 10, 4, 0};  // sum 24 > n_dims: ggml accepts it for heads >= 24
  AxisFrequencies af = ggml_frequencies(p);
  ASSERT_EQ(af.axis_of_freq.size(), 8u);
  for (std::size_t j = 0; j < 8; ++j) {
    EXPECT_EQ(af.axis_of_freq[j], 0) << j;
    EXPECT_DOUBLE_EQ(af.freqs.inv_freq[j], std::pow(10000.0, -2.0 * double(j) / 16.0)) << j;
  }
  p.sections = {4, 30, 0, 0};  // sum 34: pairs 4..7 on h
  af = ggml_frequencies(p);
  for (std::size_t j = 0; j < 8; ++j) EXPECT_EQ(af.axis_of_freq[j], j < 4 ? 0 : 1) << j;

  p.mode = GgmlRopeMode::kImrope;
  p.sections = {12, 2, 12, 0};  // sum 26: h only while j < 6
  af = ggml_frequencies(p);
  const std::vector<int> want = {0, 1, 2, 0, 1, 2, 0, 3};  // j = 7: 7 % 3 == 1, 7 >= 3 * 2 -> e
  for (std::size_t j = 0; j < 8; ++j) EXPECT_EQ(af.axis_of_freq[j], want[j]) << j;

  p.sections = {40000, 30000, 0, 0};
  EXPECT_NE(error_of(p).find("[rotary_ggml] sum(sections) must be <= 65536 (rotary's largest head), got 70000"),
            std::string::npos)
      << error_of(p);
}

// VISION: ggml's CPU rope uses four sections (theta index restarting in each, rows t h w e); its GPU ropes (CUDA,
// Metal, Vulkan, SYCL, OpenCL) use sections[0..1] only, wrapping every s0 + s1 pairs. Where the two differ,
// ggml's result depends on the backend: refused, naming the first pair that differs. Where they agree
// (clip's {D/4 x4}, or two sections that wrap), accepted.
TEST(GgmlSections, VisionSectionsWhereGgmlBackendsDisagreeAreRefused) {
  GgmlRopeParams p;
  p.mode = GgmlRopeMode::kVision;
  p.n_dims = 24;
  p.sections = {5, 4, 3, 2};
  const std::string e = error_of(p);
  EXPECT_NE(e.find("[rotary_ggml] sections for mode vision must give the same rotation on ggml's CPU and GPU backends"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("got {5, 4, 3, 2} (pair 9: CPU row 2 theta index 0, GPU row 0 theta index 0)"), std::string::npos) << e;

  p.sections = {0, 12, 0, 0};  // CPU never restarts h (its else-if resets t at sector 0): pair 12 differs
  EXPECT_NE(error_of(p).find("(pair 12: CPU row 1 theta index 12, GPU row 1 theta index 0)"), std::string::npos)
      << error_of(p);

  p.sections = {5, 4, 0, 0};  // both wrap every 9 pairs
  const AxisFrequencies two = ggml_frequencies(p);
  for (std::size_t j = 0; j < 24; ++j) {
    const int64_t sector = static_cast<int64_t>(j) % 9;
    EXPECT_EQ(two.axis_of_freq[j], sector < 5 ? 0 : 1) << j;
    const double k = static_cast<double>(sector < 5 ? sector : sector - 5);
    EXPECT_DOUBLE_EQ(two.freqs.inv_freq[j], std::pow(10000.0, -2.0 * k / 24.0)) << j;
  }
  p.n_dims = 12;
  p.sections = {6, 6, 6, 6};  // llama.cpp clip: {D/4 x4} with n_dims = D/2
  EXPECT_EQ(error_of(p), "no error");
  p.sections = {8, 8, 4, 4};  // s0 + s1 >= n_dims: the last two are never reached on either backend
  EXPECT_EQ(error_of(p), "no error");
}

}  // namespace
}  // namespace rotary
