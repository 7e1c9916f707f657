// The bench's one-thread-per-pair CUDA peer (vLLM's scheme, re-implemented): in place on [T, H, D] q and k.
#pragma once

#include <cstdint>

namespace rotary::cli {

struct NaiveRopeArgs {
  int elem_bytes_kind = 0;  ///< 0 f32, 1 f16, 2 bf16
  bool neox = true;         ///< half-split pairs; false: interleaved
  const int64_t* positions = nullptr;  ///< device [tokens]
  void* q = nullptr;                   ///< device [tokens, hq, head_size], rotated in place
  void* k = nullptr;                   ///< device [tokens, hk, head_size]
  const float* cache = nullptr;        ///< device [max_pos, rot_dim]: cos | sin
  int64_t tokens = 0;
  int hq = 0, hk = 0, head_size = 0, rot_dim = 0;
  void* stream = nullptr;
};

/// Enqueues the kernel on a.stream.
void naive_rope(const NaiveRopeArgs& a);

}  // namespace rotary::cli
