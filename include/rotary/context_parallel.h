// Context parallelism: TransformerEngine's load-balanced dual-chunk sharding of positions, and apply on a shard.
#pragma once

#include <cstdint>
#include <vector>

#include "rotary/api.h"
#include "rotary/freqs.h"

namespace rotary {

/// One rank of a context-parallel group. The global sequence (length L_global) is split into
/// 2*size equal chunks; rank r holds chunks r and 2*size-1-r, concatenated (the causal load balance
/// of TransformerEngine / Megatron):
///
///   size 2, L_global 8:  chunks [0 1][2 3][4 5][6 7]
///                        rank 0 holds [0 1 | 6 7], rank 1 holds [2 3 | 4 5]
struct ContextParallel {
  int64_t rank = 0;  ///< in [0, size)
  int64_t size = 1;  ///< >= 1; size 1 = no sharding
};

/// Global position of local token `local_index` on a shard of `local_len` tokens (L_global = local_len*size).
/// local_len must be even when size > 1. With c = local_len/2:
///   local_index <  c : rank*c + local_index
///   local_index >= c : (2*size - 1 - rank)*c + (local_index - c)
/// (TE fused_rope: s + r*L/2, and s + L*cp - (r+1)*L/2 - L/2.) Throws Error(kInvalidArgument) on bad input.
ROTARY_API int64_t cp_global_position(const ContextParallel& cp, int64_t local_index, int64_t local_len);

/// Positions of a bshd/bhsd shard: [local_len] values cp_global_position(cp, s, local_len) + offset.
ROTARY_API std::vector<int64_t> cp_positions(const ContextParallel& cp, int64_t local_len, int64_t offset = 0);

/// Positions of a packed (thd) shard, TE semantics: `global_cu_seqlens` ([N+1], cu[0] = 0, non-decreasing)
/// are the GLOBAL (padded) boundaries, every sequence length divisible by 2*size; this rank holds
/// cu[n]/size .. cu[n+1]/size of each sequence n, and each sequence is sharded like cp_positions.
/// Returns [cu[N]/size] positions (each sequence starting at global position 0).
ROTARY_API std::vector<int64_t> cp_positions_packed(const ContextParallel& cp, const std::vector<int64_t>& global_cu_seqlens);

/// The local cu_seqlens of a packed shard: global_cu_seqlens[n] / size.
ROTARY_API std::vector<int64_t> cp_local_cu_seqlens(const ContextParallel& cp, const std::vector<int64_t>& global_cu_seqlens);

/// Which (rank, local index) holds global position g of a sequence of `global_len` tokens (2*size | global_len).
struct CpLocation {
  int64_t rank = 0;
  int64_t local_index = 0;
};
ROTARY_API CpLocation cp_locate(int64_t size, int64_t global_position, int64_t global_len);

/// A shard's global positions and the sequence length length-dependent scaling sees for it: what
/// apply_context_parallel derives (and what Python's rotary.apply_context_parallel uses).
struct CpShard {
  std::vector<int64_t> positions;  ///< global positions of the shard's tokens
  int64_t seq_len = 1;             ///< the global length an unsharded call would see
};

/// A bshd/bhsd shard of `local_len` tokens per sequence: positions cp_positions(cp, local_len, offset),
/// seq_len = offset + local_len * size.
ROTARY_API CpShard cp_shard(const ContextParallel& cp, int64_t local_len, int64_t offset = 0);
/// A thd shard from the GLOBAL cu_seqlens: positions cp_positions_packed(cp, cu), seq_len = the longest
/// global sequence (at least 1).
ROTARY_API CpShard cp_shard_packed(const ContextParallel& cp, const std::vector<int64_t>& global_cu_seqlens);

/// apply_context_parallel (rotating a shard) is declared with the other apply calls in rotary/apply.h.

}  // namespace rotary
