// Internal: apply calls whose q_out or k_out is fp8 (e4m3/e5m2 with a per-tensor scale): rotate in f32, then quantise.
#pragma once

#include <functional>

#include "rotary/apply.h"

namespace rotary::detail {

/// True if q_out or k_out is present with an fp8 dtype.
bool has_fp8_output(const ApplyArgs& args);

/// Runs `rotate` (an apply entry point) on a copy of `args` whose fp8 outputs are replaced by f32 scratch
/// (the inputs widened to f32, rotated in place there), then stores every rotated value y of those
/// outputs as f32_to_fp8(fl32(y / scale)) (plan/quantize.h: saturating, nearest even — the rounding of
/// the prologue's fp8 KV caches), scale = args.q_out_scale / k_out_scale. The fp8 outputs' own checks
/// (shape, scale, no overlap) run first and `rotate` validates the rest before anything is written.
void apply_fp8_outputs(const ApplyArgs& args, const std::function<void(const ApplyArgs&)>& rotate);

}  // namespace rotary::detail
