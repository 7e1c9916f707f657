// Internal: memory-overlap geometry of strided tensors and the aliasing rules of an apply call (engine only).
#pragma once

#include "rotary/apply.h"

namespace rotary::detail {

/// An output must not write two elements to one address (throws naming `name`).
void check_no_self_overlap(const TensorView& v, const char* name);

/// The aliasing rules of q, k and their outputs (checked shapes and dtypes): each output is its input
/// (in place) or disjoint from it; the two outputs share no element; no output overlaps the other input.
void check_aliasing(const ApplyArgs& args, Layout layout);

}  // namespace rotary::detail
