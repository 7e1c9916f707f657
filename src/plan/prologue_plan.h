// The backend interface of the prologue family: validated plans of a prologue call and of a cache re-rotation.
#pragma once

#include <cstdint>
#include <list>
#include <vector>

#include "plan/plan.h"
#include "rotary/freqs.h"
#include "rotary/types.h"

namespace rotary::detail {

/// A tensor of rows addressed by slot: the k or v cache of a prologue call, or the keys of a re-rotation.
/// Row (slot, head) starts at data + (slot / minor_count) * s_major + (slot % minor_count) * s_minor
/// + head * s_head (elements); its channels are s_d apart.
struct PlanRows {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t heads = 0, dim = 0;
  int64_t minor_count = 1;  ///< block_size (paged) or S_max (contiguous); 0: the tensor holds no row (no slot is valid)
  int64_t s_major = 0, s_minor = 0, s_head = 0, s_d = 1;
  /// i8: one f32 scale per (slot, head), same addressing with these strides; fp8: tensor_scale.
  float* scales = nullptr;
  int64_t sc_major = 0, sc_minor = 0, sc_head = 0;
  float tensor_scale = 1.0f;
  bool present() const { return data != nullptr; }
  int64_t row_offset(int64_t slot, int64_t head) const {
    return (slot / minor_count) * s_major + (slot % minor_count) * s_minor + head * s_head;
  }
  int64_t scale_offset(int64_t slot, int64_t head) const {
    return (slot / minor_count) * sc_major + (slot % minor_count) * sc_minor + head * sc_head;
  }
};

/// Where a prologue call writes a rotated row: into `out` (q_out / k_out in place or not, the apply
/// plan's tensors) or into a PlanRows cache.
struct ProloguePlan {
  /// q (t[q_index]) and k (t[k_index]) as an apply plan: dims, strides (canonical b, s, h, d), pairing,
  /// positions. Its `cs` is the cos/sin source of a call with one source (with several, `sources` holds
  /// them). t[k_index].out is k_out (or k) when there is no cache; with a cache it is unused.
  Plan rope;
  int q_index = -1, k_index = -1;  ///< -1: absent (or no heads)
  int64_t hkv = 0;                 ///< k's (and v's and the caches') heads
  bool rotate = false;             ///< false: no frequency source (norm and cache write only)
  std::vector<PlanCosSin> sources;  ///< empty: one source, rope.cs
  /// Source of each token (b * S + s); empty = source 0 for every token.
  std::vector<uint8_t> token_source;
  /// v (input only): canonical strides, Hkv heads of v_dim channels.
  PlanTensor v;
  int64_t v_dim = 0;
  bool has_v = false;
  /// Caches (absent: k goes to rope.t[k_index].out, there is no v).
  PlanRows k_cache, v_cache;
  /// Cache slot of each token (b * S + s), -1 = not written; null without a cache. Points into the
  /// caller's slot_mapping (i64, contiguous) or into slot_storage.
  const int64_t* slots = nullptr;
  std::vector<int64_t> slot_storage;
  /// RMSNorm: weight + offset as f32 [head_dim] (null = off; the caller's f32 weight when the offset is 0),
  /// and eps.
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  std::vector<float> q_norm_storage, k_norm_storage;
  float eps = 0.0f;
  int threads = 0;
  /// Frequencies the on-the-fly sources point into (stable addresses).
  std::list<Frequencies> freq_storage;

  const PlanCosSin& source_of(int64_t token) const {
    if (sources.empty()) return rope.cs;
    return sources[token_source.empty() ? 0 : token_source[static_cast<size_t>(token)]];
  }
};

/// A re-rotation: rows of `rows` at `slots` rotate by the difference of two frequency sets at two positions.
struct RerotatePlan {
  PlanRows rows;
  Pairing pairing = Pairing::kHalfSplit;
  int64_t rotary_dim = 0, half = 0;
  std::vector<int64_t> slots, from_pos, to_pos;  ///< -1 slots are skipped
  const double* from_freq = nullptr;             ///< inv_freq of the source rotated from [half]
  const double* to_freq = nullptr;
  double factor_ratio = 1.0;                     ///< attention_factor(to) / attention_factor(from)
  bool same_freqs = false;                       ///< equal frequencies: the angle is (b - a) * theta
  std::list<Frequencies> freq_storage;
  int threads = 0;
};

/// cos/sin (`half` f32 each, scaled by the ratio) of re-rotation row i: the angle
/// fl(b * theta_B) - fl(a * theta_A) in double (same_freqs: (b - a) * theta), correctly reduced, rounded once.
/// Returns true when the row's rotation is the identity (every cos 1 and sin 0: a zero angle for every pair,
/// as for the same position under the same frequencies, and a ratio that rounds to 1); backends then leave
/// the row's bits (and an i8 row's scale) as they are: rotating would turn -0 into +0 and spread NaN / inf
/// to the pair's other channel (x * 0), and requantising would change i8 rows stored with another scale.
bool rerotate_cos_sin(const RerotatePlan& plan, int64_t i, float* cos_out, float* sin_out);

// Backends. Each consumes a validated plan; none validates.
void reference_prologue(const ProloguePlan& plan);  // src/reference/
void cpu_prologue(const ProloguePlan& plan);        // src/cpu/
void reference_rerotate(const RerotatePlan& plan);
void cpu_rerotate(const RerotatePlan& plan);

}  // namespace rotary::detail
