// Internal: the checks of the prologue family's own arguments: caches, slots, scales, norm weights, sources, disjointness (engine only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/prologue_plan.h"
#include "rotary/prologue.h"

namespace rotary::detail {

inline constexpr const char* kPrologueWhere = "rotary_prologue";
inline constexpr const char* kRerotateWhere = "rotary_rerotate_cache";

/// Rethrows an error of the apply validation (checks shared with apply: tensors, positions, aliasing)
/// with `where` in place of its "[rotary_apply]" prefix; kind and cause are kept. `q_is_k`: the apply checks saw
/// the caller's k as their "q" (a call without q), so the words q / q_out of the message become k / k_out.
[[noreturn]] void rethrow_as(const Error& e, const char* where, bool q_is_k = false);

/// The cache layout's dims as text: "[num_blocks, block_size, Hkv, D]" etc.
const char* cache_dims(CacheLayout layout);

/// Validates a rank-4 cache view for `layout` (dtype f32/f16/bf16/i8/f8e4m3/f8e5m2, `heads` heads of `dim`
/// channels, no two elements at one address) and sets *rows to its row addressing (scales not yet attached).
/// `major` receives num_blocks (paged) or the cache batch (contiguous). `dense`: the caller found the view
/// dense (dense_view), so its view and self-overlap checks pass by construction and are not repeated.
void cache_rows(const TensorView& cache, CacheLayout layout, const char* name, int64_t heads, int64_t dim,
                const char* where, int64_t* major, PlanRows* rows, bool dense = false);

/// Attaches the scale of a quantised cache: i8, an f32 [cache dims without the last] written per row;
/// fp8, an f32 tensor of one element (finite, > 0) read now. Unquantised caches take no scale. `dense`: as
/// cache_rows' (the scale view found dense by the caller).
void attach_scale(PlanRows& rows, const TensorView& scale, const TensorView& cache, CacheLayout layout,
                  const char* name, const char* cache_name, const char* where, bool dense = false);

/// Reads an i32/i64 index vector of `n` entries (rank 1, or `rank2` = [B,S] for a bshd/bhsd token grid).
void read_indices(const TensorView& v, const char* name, int64_t n, const std::string& shape_text, const char* where,
                  std::vector<int64_t>* out, int64_t rank2_b = -1, int64_t rank2_s = -1);

/// Every slot is -1 (skip) or in [0, capacity), and no slot repeats.
void check_slots(const int64_t* slots, int64_t n, int64_t capacity, const char* name, const char* capacity_text,
                 const char* where);

/// A norm weight [dim] of a floating dtype as f32 weight + offset (the caller's data when f32 with offset 0).
const float* norm_weight(const TensorView& w, const char* name, int64_t dim, double offset, const char* where,
                         std::vector<float>* storage);

/// The bytes [*lo, *hi) that a view's elements span (lo == hi: no elements).
void byte_range(const TensorView& v, uintptr_t* lo, uintptr_t* hi);

/// No element of `out` (written) shares memory with `other`: exact for two activations of `activations`
/// (non-null: e.g. q and v slices of one fused QKV buffer) and for views of equal shape and strides (the
/// k and v halves of one paged pool), by byte ranges otherwise.
void check_disjoint(const TensorView& out, const char* out_name, const TensorView& other, const char* other_name,
                    const char* where, const Layout* activations = nullptr);

/// One frequency source's own checks: a rope, and a seq_len in (0, 2^31] when given; throws naming
/// `name` (`name[index]` for index >= 0).
void check_source(const FrequencySource& s, const char* name, int64_t index, const char* where);

/// The frequency sources' common geometry (all must agree); throws naming sources[i].
struct SourceGeometry {
  int64_t head_dim = 0, rotary_dim = 0;
  Pairing pairing = Pairing::kHalfSplit;
  int n_axes = 1;
};
SourceGeometry check_sources(const std::vector<FrequencySource>& sources, const char* name, const char* where);

}  // namespace rotary::detail
