// Test helpers: locating ../shared reference data and the built CLI, random tensors, bf16/f16 conversion.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rotary::testing {

/// Root of the shared reference data (env ROTARY_SHARED_DIR overrides the build-time path).
/// Returns "" if it does not exist; tests then GTEST_SKIP() with a message.
std::string shared_dir();
/// Path of the built `rotary` CLI ("" if not built).
std::string cli_path();
/// Runs a shell command, capturing stdout (and stderr if `merge_stderr`); returns exit status.
int run_command(const std::string& cmd, std::string* output, bool merge_stderr = false);
/// Reads a whole file ("" + ADD_FAILURE if missing).
std::string read_file(const std::string& path);

/// Deterministic N(0,1) values.
std::vector<float> randn(size_t n, uint64_t seed);
std::vector<double> randn_f64(size_t n, uint64_t seed);

uint16_t f32_to_bf16_bits(float x);   ///< round-to-nearest-even
float bf16_bits_to_f32(uint16_t b);
uint16_t f32_to_f16_bits(float x);    ///< round-to-nearest-even
float f16_bits_to_f32(uint16_t h);

}  // namespace rotary::testing

#define ROTARY_REQUIRE_SHARED(dir)                                                        \
  std::string dir = ::rotary::testing::shared_dir();                                     \
  if (dir.empty()) GTEST_SKIP() << "shared reference data not found (set ROTARY_SHARED_DIR)"
