// `rotary bench`: the JSON lines carry the fields docs/cli.md describes, with their types, over the whole P2 matrix.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "testing/shared.h"

namespace rotary {
namespace {

TEST(CliBench, DecodeJsonLinesHaveEveryFieldAndConfiguration) {
  const std::string cli = testing::cli_path();
  if (cli.empty() || !std::filesystem::exists(cli)) GTEST_SKIP() << "rotary CLI not built";
  std::string out;
  ASSERT_EQ(testing::run_command("'" + cli + "' bench --quick --case P2 --threads 1 --json", &out, false), 0) << out;
  const std::string doc = testing::read_file(std::string(ROTARY_SOURCE_DIR) + "/docs/cli.md");
  std::istringstream lines(out);
  std::string line;
  std::set<std::tuple<std::string, std::string, bool, std::string>> seen;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    for (const char* key : {"case", "dtype", "pairing", "inplace", "direction", "threads", "ms", "us", "gbps",
                            "limit", "limit_gbps", "ratio", "hugepages"})
      ASSERT_TRUE(j.contains(key)) << key << " missing in " << line;
    EXPECT_EQ(j["case"], "P2");
    EXPECT_EQ(j["hugepages"], false) << "not asked for: " << line;
    EXPECT_TRUE(j["inplace"].is_boolean()) << line;
    EXPECT_TRUE(j["threads"].is_number_integer()) << line;
    EXPECT_EQ(j["threads"].get<int>(), 1);
    const std::string dtype = j["dtype"], pairing = j["pairing"], direction = j["direction"], limit = j["limit"];
    EXPECT_TRUE(dtype == "f32" || dtype == "f16" || dtype == "bf16") << dtype;
    EXPECT_TRUE(pairing == "half" || pairing == "interleaved") << pairing;
    EXPECT_TRUE(direction == "forward" || direction == "inverse") << direction;
    EXPECT_EQ(limit, j["inplace"].get<bool>() ? "inplace-stream" : "memcpy") << line;
    const double ms = j["ms"], us = j["us"], gbps = j["gbps"], limit_gbps = j["limit_gbps"], ratio = j["ratio"];
    EXPECT_GT(us, 0.0);
    EXPECT_NEAR(ms * 1e3, us, 1e-9 * us);
    EXPECT_GT(gbps, 0.0);
    EXPECT_GT(limit_gbps, 0.0);
    EXPECT_NEAR(ratio, gbps / limit_gbps, 1e-9 * ratio);
    // bytes = input read + output written: 40 rows of 128 values, twice
    const double bytes = (dtype == "f32" ? 4.0 : 2.0) * 40 * 128 * 2;
    EXPECT_NEAR(gbps, bytes / (us * 1e-6) / 1e9, 1e-6 * gbps) << line;
    seen.insert({dtype, pairing, j["inplace"].get<bool>(), direction});
    for (const auto& [key, value] : j.items())
      EXPECT_NE(doc.find("| `" + key + "` |"), std::string::npos) << key << " is not described in docs/cli.md";
  }
  EXPECT_EQ(seen.size(), 24u) << "every dtype x pairing x inplace x direction once";
}

TEST(CliBench, PrologueJsonLinesCarryTheIssuesFieldsForEveryConfiguration) {
  const std::string cli = testing::cli_path();
  if (cli.empty() || !std::filesystem::exists(cli)) GTEST_SKIP() << "rotary CLI not built";
  std::string out;
  ASSERT_EQ(testing::run_command("'" + cli + "' bench --quick --case prologue --threads 1 --json", &out, false), 0) << out;
  const std::string doc = testing::read_file(std::string(ROTARY_SOURCE_DIR) + "/docs/cli.md");
  std::istringstream lines(out);
  std::string line;
  std::set<std::tuple<std::string, std::string, std::string, std::string, bool>> seen;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    for (const char* key : {"case", "model", "phase", "dtype", "cache_dtype", "qk_norm", "threads", "ms", "gbps", "limit",
                            "limit_gbps", "ratio", "unfused_ms", "fused_again_ms", "speedup", "hugepages"})
      ASSERT_TRUE(j.contains(key)) << key << " missing in " << line;
    EXPECT_EQ(j["case"], "prologue");
    EXPECT_EQ(j["hugepages"], false) << "not asked for: " << line;
    const std::string phase = j["phase"], dtype = j["dtype"], cache = j["cache_dtype"];
    EXPECT_EQ(j.contains("us"), phase == "decode") << line;
    EXPECT_EQ(j.contains("cold_us"), phase == "decode") << line;
    if (phase == "decode") EXPECT_GT(j["cold_us"].get<double>(), 0.0) << line;
    // Prefill at one thread: the in-cache time (scaled to T) and the ceiling it puts on the ratio.
    const bool one_thread_prefill = phase == "prefill" && j["threads"] == 1;
    for (const char* key : {"in_cache_ms", "in_cache_tokens", "ceiling"})
      EXPECT_EQ(j.contains(key), one_thread_prefill) << key << " in " << line;
    if (one_thread_prefill) {
      const int64_t hot = j["in_cache_tokens"];
      EXPECT_GE(hot, 1) << line;
      EXPECT_LE(hot, 64) << "a few tokens, whose rows stay in cache: " << line;
      EXPECT_GT(j["in_cache_ms"].get<double>(), 0.0) << line;
      const double ceiling = j["ceiling"];
      const double limit_sec = j["bytes"].get<double>() / (j["limit_gbps"].get<double>() * 1e9);
      EXPECT_NEAR(ceiling, limit_sec / (j["in_cache_ms"].get<double>() * 1e-3), 1e-9 * ceiling) << line;
    }
    EXPECT_NEAR(j["speedup"].get<double>(), j["unfused_ms"].get<double>() / j["fused_again_ms"].get<double>(),
                1e-9 * j["speedup"].get<double>()) << line;
    const double ms = j["ms"], gbps = j["gbps"], lg = j["limit_gbps"], ratio = j["ratio"], unfused = j["unfused_ms"];
    EXPECT_GT(ms, 0.0);
    EXPECT_GT(unfused, 0.0);
    EXPECT_NEAR(ratio, gbps / lg, 1e-9 * ratio);
    // bytes: q, k, v read in the input dtype; q written back, k and v into the cache dtype (+ f32 row scales for i8)
    const double T = phase == "prefill" ? 4096 : 1, in = dtype == "f32" ? 4 : 2;
    const double c = cache == "f32" ? 4 : cache == "bf16" ? 2 : 1;
    const double bytes = T * 128 * (48 * in + 32 * in + 16 * c) + (cache == "i8" ? T * 16 * 4 : 0.0);
    EXPECT_NEAR(j["bytes"].get<double>(), bytes, 1e-9 * bytes) << line;
    EXPECT_NEAR(gbps, bytes / (ms * 1e-3) / 1e9, 1e-6 * gbps) << line;
    seen.insert({j["model"], phase, dtype, cache, j["qk_norm"].get<bool>()});
    for (const auto& [key, value] : j.items())
      EXPECT_NE(doc.find("| `" + key + "` |"), std::string::npos) << key << " is not described in docs/cli.md";
  }
  EXPECT_EQ(seen.size(), 64u) << "2 models x 2 phases x 2 dtypes x 4 cache dtypes x qk-norm on/off";
}

// --hugepages: every line says so where Linux can back the buffers with transparent huge pages; elsewhere the run
// is refused (exit 1) rather than reported as if it had them.
TEST(CliBench, HugePagesAreReportedOrRefused) {
  const std::string cli = testing::cli_path();
  if (cli.empty() || !std::filesystem::exists(cli)) GTEST_SKIP() << "rotary CLI not built";
  std::string mode;
  {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::getline(f, mode);
  }
  const bool thp = mode.find("[always]") != std::string::npos || mode.find("[madvise]") != std::string::npos;
  std::string out;
  const int rc =
      testing::run_command("'" + cli + "' bench --quick --case P2 --threads 1 --json --hugepages", &out, !thp);
  if (!thp) {
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find("[rotary_bench] --hugepages: this machine has no transparent huge pages"), std::string::npos)
        << out;
    return;
  }
  ASSERT_EQ(rc, 0) << out;
  std::istringstream lines(out);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["hugepages"], true) << line;
    ++n;
  }
  EXPECT_EQ(n, 24);
}

TEST(CliBench, BadArgumentsAreUsageErrors) {
  const std::string cli = testing::cli_path();
  if (cli.empty() || !std::filesystem::exists(cli)) GTEST_SKIP() << "rotary CLI not built";
  std::string out;
  EXPECT_NE(testing::run_command("'" + cli + "' bench --case P3", &out, true), 0);
  EXPECT_NE(out.find("--case must be P1, P2 or prologue, got \"P3\""), std::string::npos) << out;
  EXPECT_NE(testing::run_command("'" + cli + "' bench --threads 0", &out, true), 0);
  EXPECT_NE(out.find("--threads must be in [1, 1024], got 0"), std::string::npos) << out;
  // A stray word (e.g. `rotary bench prologue` for `--case prologue`) is refused, not ignored.
  EXPECT_EQ(testing::run_command("'" + cli + "' bench --case prologue bogus --json", &out, true), 2);
  EXPECT_NE(out.find("unexpected argument \"bogus\""), std::string::npos) << out;
  // Host buffers only: the CUDA benchmark's tensors are device memory.
  EXPECT_EQ(testing::run_command("'" + cli + "' bench --backend cuda --hugepages", &out, true), 2);
  EXPECT_NE(out.find("--hugepages is for the CPU benchmark"), std::string::npos) << out;
  // Bad arguments stay usage errors beside --hugepages, whether or not the machine has huge pages.
  EXPECT_EQ(testing::run_command("'" + cli + "' bench --hugepages --case bogus", &out, true), 2);
  EXPECT_NE(out.find("--case must be P1, P2 or prologue"), std::string::npos) << out;
  EXPECT_EQ(testing::run_command("'" + cli + "' bench --hugepages --threads 0", &out, true), 2);
  EXPECT_NE(out.find("--threads must be in [1, 1024], got 0"), std::string::npos) << out;
}

}  // namespace
}  // namespace rotary
