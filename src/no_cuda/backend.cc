// CUDA backend stub for builds without CUDA: same symbols, every call reports kUnsupported.
#include "plan/plan.h"

namespace rotary::detail {

void cuda_apply(const Plan&) {
  fail(Error::Kind::kUnsupported, "rotary_apply", "rotary was built without CUDA (rebuild with -DROTARY_BUILD_CUDA=ON)");
}

bool cuda_available() { return false; }

}  // namespace rotary::detail
