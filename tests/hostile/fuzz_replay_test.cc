// Replays every fuzz corpus file (seeds and crash regressions) through the fuzz entry points in the normal build.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../../fuzz/fuzz_targets.h"

namespace {

namespace fs = std::filesystem;

using Target = const char* (*)(const uint8_t*, size_t);

void replay(const std::string& name, Target target, size_t min_files) {
  const fs::path dir = fs::path(ROTARY_SOURCE_DIR) / "fuzz" / "corpus" / name;
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  size_t n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream f(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const char* violation = target(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    EXPECT_EQ(violation, nullptr) << entry.path().filename() << ": " << (violation ? violation : "");
    ++n;
  }
  EXPECT_GE(n, min_files) << "corpus " << dir << " is too small";
}

TEST(FuzzReplay, ConfigCorpus) { replay("config", rotary::fuzz::config_target, 5); }
TEST(FuzzReplay, NpyCorpus) { replay("npy", rotary::fuzz::npy_target, 5); }
TEST(FuzzReplay, ApplyCorpus) { replay("apply", rotary::fuzz::apply_target, 5); }
TEST(FuzzReplay, SpecCorpus) { replay("spec", rotary::fuzz::spec_target, 10); }

}  // namespace
