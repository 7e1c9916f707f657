// ggml compatibility: ggml_rope_ext / ggml_rope_multi parameters expressed as rotary multi-axis frequencies.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "rotary/api.h"
#include "rotary/multimodal.h"

namespace rotary {

/// ggml's rope modes (GGML_ROPE_TYPE_*).
enum class GgmlRopeMode : int {
  kNormal = 0,   ///< pairs (2j, 2j+1) over n_dims                       = Pairing::kInterleaved
  kNeox = 2,     ///< pairs (j, j + n_dims/2)                            = Pairing::kHalfSplit
  kMrope = 8,    ///< ggml_rope_multi, sectioned t/h/w/e (Qwen2-VL)       half-split, 4 position axes
  kVision = 24,  ///< MROPE|16: theta index restarts per section; n_dims = ne0/2, pairs (j, j + n_dims)
  kImrope = 40,  ///< MROPE|32: interleaved sections (Qwen3-VL)         half-split, 4 position axes
};
ROTARY_API const char* ggml_rope_mode_name(GgmlRopeMode m);  ///< "normal", "neox", "mrope", "vision", "imrope"
ROTARY_API GgmlRopeMode parse_ggml_rope_mode(const std::string& s, const char* field = "mode");

/// Mirror of ggml_rope_ext(ctx, a, b, c, n_dims, mode, n_ctx_orig, freq_base, freq_scale, ext_factor,
/// attn_factor, beta_fast, beta_slow) and ggml_rope_multi(..., sections, ...). Values that disable YaRN:
/// freq_scale 1, ext_factor 0, attn_factor 1.
struct GgmlRopeParams {
  GgmlRopeMode mode = GgmlRopeMode::kNormal;
  int64_t n_dims = 0;        ///< rotated channels (VISION: head_dim/2; pairs then span the whole head)
  int64_t n_ctx_orig = 0;    ///< YaRN correction range (used when ext_factor != 0; must then be >= 0). 0, as
                             ///< ggml's own tests pass it, gives ggml's degenerate corr dims [0, -inf]: pair 0
                             ///< mixes by ext_factor, every other pair is interpolated (docs/multimodal.md)
  double freq_base = 10000.0;
  double freq_scale = 1.0;   ///< linear interpolation factor (1/scale)
  double ext_factor = 0.0;   ///< YaRN extrapolation mix (0 = off)
  double attn_factor = 1.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  /// MROPE / IMROPE / VISION only. ggml bounds the sum by the head size (VISION: 2*n_dims; MROPE/IMROPE: any head
  /// >= n_dims, here up to 65536). VISION sections that ggml's CPU and GPU kernels map differently are refused.
  std::array<int64_t, 4> sections = {0, 0, 0, 0};
  std::vector<double> freq_factors;                ///< ggml's optional `c` tensor; empty = none, else >= pairs values
};

/// The rotary equivalent of a ggml rope call:
///   theta_extrap_j = base^(-2 k_j / n_dims) / ff_j           (k_j = j; VISION: j's index inside its section)
///   theta_j        = theta_extrap_j * (freq_scale * (1 - mix_j) + mix_j)
///   mix_j          = ext_factor * (1 - clamp((j - low) / max(0.001, high - low), 0, 1))   (0 when ext_factor == 0)
///   low/high       = ggml_rope_yarn_corr_dims(n_dims, n_ctx_orig, base, beta_fast, beta_slow)
///   attention      = attn_factor * (1 + 0.1 ln(1/freq_scale)) when ext_factor != 0, else attn_factor
/// Pairs: R/2 = n_dims/2 (VISION: n_dims) with pairing NORMAL -> interleaved, others half-split.
/// Axes: NORMAL/NEOX 1 axis; MROPE/IMROPE/VISION 4 axes (ggml's position rows t, h, w, e) chosen per pair
/// exactly as ggml_mrope_cache_init does.
/// ggml forms theta in float32 by repeated multiplication; rotary forms pos * theta_j in double, so results
/// agree with ggml to ggml's float rounding for positions < 2^16 and are exact (vs fp64) beyond.
/// Positions may be negative, as ggml takes them (llama.cpp's K-shift rotates the K cache by the shift delta):
/// the result has signed_positions set, so apply_axes accepts ids in (-2^31, 2^31) and rotates by pos * theta_j
/// (cos even, sin odd: exactly the inverse rotation by |pos|).
/// Throws Error(kInvalidArgument) naming the bad parameter.
ROTARY_API AxisFrequencies ggml_frequencies(const GgmlRopeParams& params);

/// ggml's corr dims {low, high} (floor/ceil of the YaRN correction dims, clamped to [0, n_dims - 1]),
/// evaluated in float32 as ggml does so that the discrete cut points match. n_ctx_orig 0 gives ggml's
/// {0, -inf} (base > 1) or {inf, n_dims - 1} (base < 1), as ggml_rope_yarn_corr_dims does.
ROTARY_API std::array<double, 2> ggml_yarn_corr_dims(int64_t n_dims, int64_t n_ctx_orig, double freq_base,
                                                     double beta_fast, double beta_slow);

}  // namespace rotary
