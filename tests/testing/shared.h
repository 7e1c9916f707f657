// Test helpers: locating the reference data (tests/data) and the built CLI, random tensors, bf16/f16 conversion.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rotary::testing {

/// Root of the reference data in the repository, tests/data (tests/data/README.md says how each file was made).
/// Returns "" if it does not exist; ROTARY_TEST_DATA then fails the test.
std::string test_data_dir();
/// Path of the built `rotary` CLI ("" if not built).
std::string cli_path();
/// Runs a shell command, capturing stdout (and stderr if `merge_stderr`); returns exit status.
int run_command(const std::string& cmd, std::string* output, bool merge_stderr = false);
/// Reads a whole file ("" + ADD_FAILURE if missing).
std::string read_file(const std::string& path);

/// What `fn` throws as rotary::Error (its what()), or "no error" when it returns.
std::string error_of(const std::function<void()>& fn);

/// Deterministic N(0,1) values.
std::vector<float> randn(size_t n, uint64_t seed);
std::vector<double> randn_f64(size_t n, uint64_t seed);

uint16_t f32_to_bf16_bits(float x);   ///< round-to-nearest-even
float bf16_bits_to_f32(uint16_t b);
uint16_t f32_to_f16_bits(float x);    ///< round-to-nearest-even
float f16_bits_to_f32(uint16_t h);

}  // namespace rotary::testing

#define ROTARY_TEST_DATA(dir)                             \
  std::string dir = ::rotary::testing::test_data_dir();  \
  if (dir.empty()) FAIL() << "reference data not found at " ROTARY_TEST_DATA_DIR
