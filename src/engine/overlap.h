// Internal: memory-overlap geometry of strided tensors and the aliasing rules of an apply call (engine only).
#pragma once

#include <initializer_list>

#include "rotary/apply.h"

namespace rotary::detail {

/// An output must not write two elements to one address (throws naming `name`).
void check_no_self_overlap(const TensorView& v, const char* name);

/// The aliasing rules of q, k and their outputs (checked shapes and dtypes): each output is its input
/// (in place) or disjoint from it; the two outputs share no element; no output overlaps the other input.
/// `k_read_only`: k has no output (PlanRequest::k_read_only); only q's output is checked against it.
void check_aliasing(const ApplyArgs& args, Layout layout, bool k_read_only = false);

/// Exact test (rank <= 4 views, non-negative strides, checked extents): does any element of `input` share
/// a byte with an element of `output`? Conservative (byte ranges) if `output` maps two elements to one address.
bool views_overlap(const TensorView& input, const TensorView& output);

/// A read-only input of an apply call besides q and k, named as messages name it.
struct NamedInput {
  const TensorView* view = nullptr;
  const char* name = "";
};

/// The position arrays `p` reads per token (batch_offsets; ids; cu_seqlens and seq_offsets, by its kind),
/// named as messages name them ("positions.ids"), into out[0..]; returns how many (at most 2).
int position_inputs(const Positions& p, NamedInput out[2]);

/// No output of the call (q_out / k_out, or q / k rotated in place) shares an element with the position
/// arrays that args.positions uses (ids, batch_offsets, cu_seqlens, seq_offsets; when `positions`) or with `extra` (a caller's
/// cos/sin): writing it would change that input before it is read. Throws naming both. Call after
/// check_aliasing (outputs checked for self-overlap) and after the inputs' views are checked.
void check_outputs_spare_inputs(const ApplyArgs& args, Layout layout, bool positions,
                                std::initializer_list<NamedInput> extra = {}, bool k_read_only = false);

/// Exact test: does an element of activation `a` share a byte with an element of activation `out`
/// (both of `layout`; `out` passed check_no_self_overlap)? Costs O(rows of a) when their ranges meet.
bool activations_overlap(const TensorView& a, const TensorView& out, Layout layout);

}  // namespace rotary::detail
