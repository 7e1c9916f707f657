// A call the CUDA emulator tests share: q [1, S, H, D] f32 in place on the emulated device at offset positions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "rotary/apply.h"
#include "testing/shared.h"

namespace rotary::testing {

/// q [1, S, H, D] f32 filled with N(0,1), in place, on the emulated device.
struct Simple {
  std::vector<float> q;
  ApplyArgs a;
  Simple(int64_t S, int64_t H, int64_t D, int64_t offset) : q(randn(static_cast<std::size_t>(S * H * D), 5)) {
    a.q = TensorView::contiguous(q.data(), DType::kF32, {1, S, H, D});
    a.positions = Positions::contiguous(offset);
    a.backend = Backend::kCuda;
  }
};

}  // namespace rotary::testing
