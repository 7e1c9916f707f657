// ONNX RotaryEmbedding (ai.onnx opset 23): the operator's attributes and inputs mapped onto apply_cos_sin.
#pragma once

#include <cstdint>

#include "rotary/api.h"
#include "rotary/apply.h"
#include "rotary/types.h"

namespace rotary {

/// Inputs, output and attributes of one ONNX RotaryEmbedding-23 node (semantics: the ONNX operator specification, opset 23).
struct OnnxRotaryArgs {
  TensorView x;             ///< 4-D [B, num_heads, S, head_size] or 3-D [B, S, num_heads * head_size]
  TensorView cos_cache;     ///< [max_pos, R/2] with position_ids; [B, S, R/2] without. Wider caches
  TensorView sin_cache;     ///<   are accepted and sliced to their first R/2 columns (as the function body does).
  TensorView position_ids;  ///< optional, i64 (or i32) [B, S]; absent = the caches are already gathered
  TensorView y;             ///< output, same shape and dtype as x; y == x (same data and strides) is in place
  int64_t interleaved = 0;           ///< attribute: 0 half-split pairs (i, i+R/2); 1 pairs (2i, 2i+1)
  int64_t rotary_embedding_dim = 0;  ///< attribute: R; 0 = head_size (full rotation)
  int64_t num_heads = 0;             ///< attribute: required for 3-D x (head_size = hidden / num_heads)
  /// Not an ONNX attribute: kInverse rotates by -angle, the operator's gradient with respect to X (the rotation
  /// is orthogonal, so dL/dX = RotaryEmbedding with sin negated applied to dL/dY).
  Direction direction = Direction::kForward;
  int threads = 0;                   ///< as ApplyArgs::threads
  Backend backend = Backend::kAuto;
  void* stream = nullptr;            ///< as ApplyArgs::stream (backend cuda)
};

/// Runs the operator. Throws rotary::Error naming the ONNX input/attribute at fault (e.g.
/// "[onnx_rotary_embedding] num_heads must be > 0 for 3-D input, got 0"); nothing is written on error.
ROTARY_API void onnx_rotary_embedding(const OnnxRotaryArgs& args);

}  // namespace rotary
