// Checkpoint layout conversion: permuting q/k projection weights between interleaved (Meta) and half-split (HF) pairing.
#pragma once

#include <cstdint>
#include <vector>

#include "rotary/api.h"
#include "rotary/types.h"

namespace rotary {

/// Describes the q or k projection to permute. Rows of the weight [n_heads*head_dim, in] (and of the
/// bias [n_heads*head_dim]) are grouped per head; within each head only the first rotary_dim rows move:
///
///   interleaved -> half-split (HF convert_llama_weights_to_hf.py `permute`:
///   w.view(n_heads, R/2, 2, in).transpose(1, 2)) per head, i < R/2, c in {0, 1}:
///       new row  c*R/2 + i   <-  old row  2i + c          [x0 y0 x1 y1 x2 y2 | p] -> [x0 x1 x2 y0 y1 y2 | p]
///   half-split -> interleaved: the inverse (llama.cpp convert_hf_to_gguf `permute`).
/// Rows >= rotary_dim of each head (partial rotary) stay where they are. For GQA convert k with its own
/// (smaller) n_heads. Because q and k get the same per-head permutation, q·k logits are unchanged when
/// the converted model is run with the other pairing.
struct QkPermutation {
  int64_t n_heads = 0;                      ///< heads of THIS projection (k: num_key_value_heads)
  int64_t head_dim = 0;                     ///< D
  int64_t rotary_dim = 0;                   ///< R (even, <= D); 0 = head_dim
  Pairing from = Pairing::kInterleaved;     ///< layout of the source rows
  Pairing to = Pairing::kHalfSplit;         ///< layout of the destination rows
};

/// dst row r takes src row perm[r] (size n_heads*head_dim). from == to gives the identity.
ROTARY_API std::vector<int64_t> qk_row_permutation(const QkPermutation& p);

/// Permutes the rows of a weight [n_heads*head_dim, in] (rank 2) or a bias [n_heads*head_dim] (rank 1).
/// src and dst: same dtype (f32, f16, bf16, f64; values are moved bit-exactly), same shape, any strides;
/// dst may be src itself (same data and strides: in place) but must not otherwise overlap it.
/// Throws Error(kInvalidArgument) naming the bad field before writing anything.
ROTARY_API void permute_qk_weight(const TensorView& src, const TensorView& dst, const QkPermutation& p);

}  // namespace rotary
