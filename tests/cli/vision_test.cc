// `rotary apply --vision`: 2-D vision RoPE from the CLI vs the Qwen2-VL / Pixtral fp64 formulas, and its usage errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "multimodal/mm_testing.h"
#include "npy.h"
#include "rotary/rotary.h"
#include "testing/tolerances.h"

namespace rotary {
namespace {

class CliVision : public ::testing::Test {
 protected:
  void SetUp() override {
    cli_ = testing::cli_path();
    if (cli_.empty()) GTEST_SKIP() << "rotary CLI not built";
    dir_ = std::filesystem::temp_directory_path() / ("rotary_mm_vision_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  int apply(const std::string& args, std::string* out) const {
    return testing::run_command("'" + cli_ + "' apply " + args, out, true);
  }
  std::string cli_;
  std::filesystem::path dir_;
};

TEST_F(CliVision, RotatesWithEachConvention) {
  const int64_t Hg = 3, Wg = 5, T = Hg * Wg, H = 2, D = 16;
  const auto x = testing::randn(static_cast<std::size_t>(T * H * D), 9);
  NpyArray xa;
  xa.dtype = DType::kF32;
  xa.shape = {T, H, D};
  xa.data.resize(x.size() * 4);
  std::memcpy(xa.data.data(), x.data(), xa.data.size());
  npy_save(path("x.npy"), xa);
  const std::vector<int64_t> ids = grid_positions(Hg, Wg);
  NpyArray pa;
  pa.dtype = DType::kI64;
  pa.shape = {2, T};
  pa.data.resize(ids.size() * 8);
  std::memcpy(pa.data.data(), ids.data(), pa.data.size());
  npy_save(path("p.npy"), pa);
  for (const char* conv : {"qwen2vl", "pixtral"}) {
    SCOPED_TRACE(conv);
    std::string out;
    ASSERT_EQ(apply("--vision " + std::string(conv) + " --base 100 --layout thd --input '" + path("x.npy") +
                        "' --positions '" + path("p.npy") + "' --output '" + path("y.npy") + "'",
                    &out),
              0)
        << out;
    const NpyArray y = npy_load(path("y.npy"));
    const bool pixtral = std::string(conv) == "pixtral";
    double worst = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t off = (t * H + h) * D;
        std::vector<double> head(x.begin() + off, x.begin() + off + D);
        // Pair j (half-split over the whole head): row for j < D/4, col after.
        // qwen2vl: 100^(-4k/D) on both axes; pixtral: row 100^(-4k/D), col 100^(-(4k+2)/D).
        const auto want = mmtest::rotate_head(head, D / 2, Pairing::kHalfSplit, [&](int64_t j) {
          const bool row = j < D / 4;
          const int64_t k = row ? j : j - D / 4;
          const long double e = (pixtral && !row) ? 4.0L * k + 2 : 4.0L * k;
          return static_cast<long double>(row ? t / Wg : t % Wg) * powl(100.0L, -e / D);
        });
        for (int64_t d = 0; d < D; ++d) worst = std::max(worst, std::fabs(double(y.as<float>()[off + d]) - want[d]));
      }
    EXPECT_LE(worst, testing::kAccuracyContractF32);
  }
  std::string out;
  EXPECT_EQ(apply("--vision llama4 --layout thd --input '" + path("x.npy") + "' --positions '" + path("p.npy") +
                      "' --output '" + path("z.npy") + "'",
                  &out),
            2);  // a bad option value: usage error
  EXPECT_NE(out.find("qwen2vl, ggml-vision, pixtral"), std::string::npos) << out;
  EXPECT_NE(apply("--vision qwen2vl --preset llama-3.1-8b --layout thd --input '" + path("x.npy") + "' --positions '" +
                      path("p.npy") + "' --output '" + path("z.npy") + "'",
                  &out),
            0);
  EXPECT_NE(out.find("cannot be combined with --vision"), std::string::npos) << out;
  EXPECT_NE(apply("--vision qwen2vl --layout thd --input '" + path("x.npy") + "' --positions '" + path("x.npy") +
                      "' --output '" + path("z.npy") + "'",
                  &out),
            0);
  EXPECT_NE(out.find("must be int32 or int64"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(path("z.npy")));
}

}  // namespace
}  // namespace rotary
