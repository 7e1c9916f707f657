// Multi-axis RoPE: M-RoPE (t, h, w), 2-D vision RoPE conventions, and applying frequencies that read n position axes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rotary/api.h"
#include "rotary/freqs.h"
#include "rotary/spec.h"
#include "rotary/types.h"

namespace rotary {

/// Most position axes a token may carry (ggml's multi-rope uses 4: t, h, w, e).
inline constexpr int kMaxPositionAxes = 4;

/// Frequencies whose pairs read different position axes. Pair j (j < R/2) rotates by
///   angle_j = positions[axis_of_freq[j]] * freqs.inv_freq[j]
/// and cos/sin are multiplied by freqs.attention_factor. inv_freq may repeat values (2-D vision
/// RoPE gives each axis its own copy of a frequency ladder). Positions come as ids of shape
/// [n_axes, B, S] (bshd/bhsd), [n_axes, S] (broadcast over batch) or [n_axes, T] (thd).
///
///   M-RoPE sectioned [16,24,24] (Qwen2-VL):   axis_of_freq = [t x16 | h x24 | w x24]
///   M-RoPE interleaved (Qwen3-VL):            axis_of_freq = [t h w t h w ... t t]
///   2-D vision (Qwen2-VL ViT, D=8):           inv_freq = [a0 a1 | a0 a1], axis_of_freq = [0 0 | 1 1]
struct AxisFrequencies {
  Frequencies freqs;
  std::vector<uint8_t> axis_of_freq;      ///< size == freqs.inv_freq.size(), each < n_axes
  int n_axes = 1;                         ///< 1..kMaxPositionAxes
  Pairing pairing = Pairing::kHalfSplit;  ///< the convention's pairing (used when ApplyArgs::pairing is unset)
  /// Positions may be negative (ggml's meaning: angle = pos * inv_freq, so pos < 0 rotates by the inverse of |pos|;
  /// llama.cpp's K-shift passes such deltas). ggml_frequencies sets it; the other conventions' functions leave it off,
  /// so their positions must be >= 0. A caller building its own AxisFrequencies may set it, e.g. for axial coordinates
  /// centred on zero (rotary-embedding-torch's 'pixel' positions in [-1, 1]). Either way |pos| must be < 2^31 (exact
  /// angles promised to 2^24).
  bool signed_positions = false;

  int64_t rotary_dim() const { return 2 * static_cast<int64_t>(freqs.inv_freq.size()); }
  /// Throws Error(kInvalidArgument) naming the bad field, e.g.
  /// "[rotary_axis_frequencies] axis_of_freq[5] must be < n_axes 2, got 3".
  ROTARY_API void validate() const;
};

/// M-RoPE frequency -> axis map (0 t, 1 h, 2 w) for R/2 = `half` frequencies.
///   sectioned   (Qwen2-VL/2.5-VL, HF apply_multimodal_rotary_pos_emb): j < s0 -> t, j < s0+s1 -> h, else w
///   interleaved (Qwen3-VL, ggml IMROPE): h if j%3==1 and j < 3*s1; w if j%3==2 and j < 3*s2; else t
/// Validates strictly: exactly 3 entries, each >= 0, summing to `half` (Error kInvalidArgument otherwise).
ROTARY_API std::vector<uint8_t> mrope_axis_map(const MRope& mrope, int64_t half);

/// The spec's frequencies (compute_frequencies(spec, seq_len)) with its M-RoPE axis map (3 axes), or
/// with one axis when the spec has no sections. Pairing = spec.pairing.
ROTARY_API AxisFrequencies mrope_frequencies(const Spec& spec, std::optional<int64_t> seq_len = std::nullopt);

/// 2-D vision RoPE conventions. Each patch has (row, col) = axes (0, 1); both axes share the head's
/// rotary dims. D = head_dim (a multiple of 4), b = base; all three rotate the full head.
///
///   kQwen2VL     HF Qwen2-VL / Qwen2.5-VL ViT (VisionRotaryEmbedding(head_dim/2)), apply_rotary_pos_emb_vision:
///                a_k = b^(-4k/D), k < D/4;  inv_freq = [a_0..a_{D/4-1} | a_0..a_{D/4-1}], axes [row.. | col..]
///                pairing half-split over the whole head (pairs (j, j + D/2)).
///   kGgmlVision  ggml GGML_ROPE_TYPE_VISION (llama.cpp clip: n_dims = D/2, sections {D/4, D/4, ...}),
///                theta index restarting at each section: the same frequencies, axes and pairing as kQwen2VL
///                (ggml rotates pairs (j, j + n_dims) = (j, j + D/2)).
///   kPixtral     HF Pixtral (PixtralVisionRotaryEmbedding) and mistral's reference: f_i = b^(-2i/D), i < D/2;
///                row uses the even-index frequencies, col the odd-index ones:
///                inv_freq = [f_0 f_2 f_4 .. | f_1 f_3 f_5 ..], axes [row.. | col..].
///                HF pairs half-split; mistral's original (complex) code pairs interleaved (set `pairing`).
enum class VisionConvention : int { kQwen2VL = 0, kGgmlVision = 1, kPixtral = 2 };
ROTARY_API const char* vision_convention_name(VisionConvention c);  ///< "qwen2vl", "ggml-vision", "pixtral"
/// Parses "qwen2vl" (also "qwen2-vl", "qwen2.5-vl"), "ggml-vision" (also "ggml"), "pixtral"; throws naming `field`.
ROTARY_API VisionConvention parse_vision_convention(const std::string& s, const char* field = "vision");

struct VisionSpec {
  VisionConvention convention = VisionConvention::kQwen2VL;
  int64_t head_dim = 0;             ///< D: > 0, multiple of 4
  double base = 10000.0;            ///< rope_theta (Pixtral-12B: 10000, Qwen2-VL ViT: 10000)
  std::optional<Pairing> pairing;   ///< nullopt: the convention's (half-split)
};

/// Frequencies + axis map (2 axes: row, col) of a vision convention. Throws on a bad spec.
ROTARY_API AxisFrequencies vision_frequencies(const VisionSpec& spec);

/// Row/col positions of an h x w patch grid in row-major patch order: ids[0][p] = p / w, ids[1][p] = p % w,
/// returned flat as [2, h*w] (the [2, T] ids of one image). Qwen2-VL's merge-window order is the caller's
/// business (any order works: positions are per patch).
ROTARY_API std::vector<int64_t> grid_positions(int64_t height, int64_t width);

/// Exact cos/sin of one token whose axis positions are `positions[0..n_axes)` (may be fractional):
/// angle in double, correctly range-reduced sin/cos, times attention_factor, rounded once to f32.
ROTARY_API void compute_cos_sin_row_axes(const AxisFrequencies& af, const double* positions, float* cos_out,
                                         float* sin_out);

/// apply_axes (rotating with AxisFrequencies) is declared with the other apply calls in rotary/apply.h.

}  // namespace rotary
