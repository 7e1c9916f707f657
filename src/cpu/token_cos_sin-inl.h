// Per-target cos/sin rows of one token for the CPU kernels: from the table or resolved, prepared per pairing.
//
// A Highway "-inl.h" piece, re-included per target by kernels.cc. The walk asks once per token:
// TokenCosSin for the plain rows (the register paths sign and duplicate them in registers),
// TokenRows for rows prepared in memory as the general loops (rows_general-inl.h) want them.
#if defined(ROTARY_CPU_TOKEN_COS_SIN_INL_H_) == defined(HWY_TARGET_TOGGLE)  // per-target include guard
#ifdef ROTARY_CPU_TOKEN_COS_SIN_INL_H_
#undef ROTARY_CPU_TOKEN_COS_SIN_INL_H_
#else
#define ROTARY_CPU_TOKEN_COS_SIN_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/rows_general-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::detail::cpu::HWY_NAMESPACE {

/// Per-thread buffers for cos/sin rows that must be gathered, computed, negated or duplicated.
inline float* Scratch(size_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

/// Token (b, s)'s cos and sin rows (`half` f32 each), straight from the table when possible.
HWY_INLINE void TokenCosSin(const RowJob& job, int64_t b, int64_t s, float* resolved, const float** crow,
                            const float** srow) {
  const Plan& p = *job.plan;
  if (job.table_fast) {
    *crow = p.cs.table + (p.pos.offset + s) * (2 * p.half);
    *srow = *crow + p.half;
  } else {
    resolve_cos_sin(p, b, s, resolved, crow, srow);
  }
}

/// The rows the general loops multiply by for token (b, s): cos and sin as the pairing wants them
/// (half-split: c, s or -s; interleaved: duplicated per channel with the pair's signs).
template <Pairing P>
HWY_INLINE void TokenRows(const RowJob& job, int64_t b, int64_t s, float* resolved, float* prepared,
                          const float** c_use, const float** s_use) {
  const Plan& p = *job.plan;
  const size_t h = static_cast<size_t>(p.half);
  const float* crow;
  const float* srow;
  TokenCosSin(job, b, s, resolved, &crow, &srow);
  const bool inverse = p.direction == Direction::kInverse;
  *c_use = crow;
  *s_use = srow;
  if constexpr (P == Pairing::kHalfSplit) {
    if (inverse) {
      for (size_t i = 0; i < h; ++i) prepared[i] = -srow[i];
      *s_use = prepared;
    }
  } else {
    InterleavedChannelRows(crow, srow, h, inverse, prepared, prepared + 2 * h);
    *c_use = prepared;
    *s_use = prepared + 2 * h;
  }
}

}  // namespace rotary::detail::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ROTARY_CPU_TOKEN_COS_SIN_INL_H_
