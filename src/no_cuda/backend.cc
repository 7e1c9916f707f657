// CUDA backend entry points for builds without CUDA: kUnsupported, unless a test routes them through the grid emulator.
#include "cuda/device.h"
#include "plan/plan.h"

namespace rotary::detail {

void cuda_apply(const Plan& plan) {
  if (cuda::DeviceRuntime* rt = cuda::runtime_override()) return cuda::device_apply(plan, *rt);
  fail(Error::Kind::kUnsupported, "rotary_apply", "rotary was built without CUDA (rebuild with -DROTARY_BUILD_CUDA=ON)");
}

bool cuda_available() { return cuda::runtime_override() != nullptr; }

}  // namespace rotary::detail
