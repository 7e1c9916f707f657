// libFuzzer driver for the spec target (fuzz_targets.h): a violated property aborts, i.e. counts as a crash.
#include <cstdio>
#include <cstdlib>

#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (const char* violation = rotary::fuzz::spec_target(data, size)) {
    std::fprintf(stderr, "rotary fuzz property violated (spec): %s\n", violation);
    std::abort();
  }
  return 0;
}
