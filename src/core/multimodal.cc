// Multi-axis frequencies in double: M-RoPE axis maps, the 2-D vision conventions, per-token cos/sin rows.
#include "rotary/multimodal.h"

#include <cmath>
#include <string>

#include "core/messages.h"
#include "rotary/table.h"

namespace rotary {
namespace {

using Kind = Error::Kind;

using detail::str;
constexpr int64_t kMaxHalf = int64_t(1) << 15;         // pairs of the largest head (head_dim 65536)
constexpr int64_t kPositionLimit = int64_t(1) << 31;  // positions are integers in [0, 2^31)

/// theta_k = 1 / base^(2k/dim), the HF default ladder.
double ladder(double base, int64_t k, int64_t dim) {
  return 1.0 / std::pow(base, static_cast<double>(2 * k) / static_cast<double>(dim));
}

}  // namespace

void AxisFrequencies::validate() const {
  const char* where = "rotary_axis_frequencies";
  if (n_axes < 1 || n_axes > kMaxPositionAxes)
    fail(Kind::kInvalidArgument, where, "n_axes must be in [1, 4], got " + str(n_axes));
  if (freqs.inv_freq.empty()) fail(Kind::kInvalidArgument, where, "freqs.inv_freq must not be empty, got 0 entries");
  if (axis_of_freq.size() != freqs.inv_freq.size())
    fail(Kind::kInvalidArgument, where,
         "axis_of_freq must have one entry per frequency (" + str(static_cast<int64_t>(freqs.inv_freq.size())) +
             "), got " + str(static_cast<int64_t>(axis_of_freq.size())));
  for (std::size_t j = 0; j < freqs.inv_freq.size(); ++j) {
    if (!std::isfinite(freqs.inv_freq[j]))
      fail(Kind::kInvalidArgument, where, "freqs.inv_freq[" + str(static_cast<int64_t>(j)) + "] must be finite");
    if (axis_of_freq[j] >= n_axes)
      fail(Kind::kInvalidArgument, where,
           "axis_of_freq[" + str(static_cast<int64_t>(j)) + "] must be < n_axes " + str(n_axes) + ", got " +
               str(axis_of_freq[j]));
  }
  if (!(freqs.attention_factor > 0 && freqs.attention_factor <= 3.4028234663852886e+38))  // as check_frequencies
    fail(Kind::kInvalidArgument, where, "freqs.attention_factor must be finite, > 0 and at most 3.4028234663852886e+38 "
                                        "(the f32 maximum), got " + detail::num(freqs.attention_factor));
  const int p = static_cast<int>(pairing);
  if (p < 0 || p > 1) fail(Kind::kInvalidArgument, where, "pairing must be half or interleaved, got " + str(p));
}

std::vector<uint8_t> mrope_axis_map(const MRope& mrope, int64_t half) {
  const char* where = "rotary_mrope";
  if (half <= 0 || half > kMaxHalf)
    fail(Kind::kInvalidArgument, where, "rotary_dim/2 must be in [1, 32768], got " + str(half));
  if (mrope.section.size() != 3)
    fail(Kind::kInvalidArgument, where,
         "mrope.section must have exactly 3 entries (t, h, w), got " + str(static_cast<int64_t>(mrope.section.size())));
  int64_t sum = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    if (mrope.section[i] < 0)
      fail(Kind::kInvalidArgument, where,
           "mrope.section[" + str(static_cast<int64_t>(i)) + "] must be >= 0, got " + str(mrope.section[i]));
    // Bounded entries keep the sum and 3 * section below free of overflow.
    if (mrope.section[i] > half)
      fail(Kind::kInvalidArgument, where,
           "mrope.section[" + str(static_cast<int64_t>(i)) + "] must be <= rotary_dim/2 = " + str(half) + ", got " +
               str(mrope.section[i]));
    sum += mrope.section[i];
  }
  if (sum != half)
    fail(Kind::kInvalidArgument, where, "mrope.section must sum to rotary_dim/2 = " + str(half) + ", got " + str(sum));
  const int64_t s0 = mrope.section[0], s1 = mrope.section[1], s2 = mrope.section[2];
  std::vector<uint8_t> axis(static_cast<std::size_t>(half), 0);
  for (int64_t j = 0; j < half; ++j) {
    uint8_t a = 0;
    if (mrope.interleaved) {
      if (j % 3 == 1 && j < 3 * s1) a = 1;
      else if (j % 3 == 2 && j < 3 * s2) a = 2;
    } else if (j >= s0) {
      a = j < s0 + s1 ? 1 : 2;
    }
    axis[static_cast<std::size_t>(j)] = a;
  }
  return axis;
}

AxisFrequencies mrope_frequencies(const Spec& spec, std::optional<int64_t> seq_len) {
  const Spec s = spec.normalized();
  AxisFrequencies af;
  af.freqs = compute_frequencies(s, seq_len);
  af.pairing = s.pairing;
  const int64_t half = static_cast<int64_t>(af.freqs.inv_freq.size());
  if (s.mrope.enabled()) {
    af.axis_of_freq = mrope_axis_map(s.mrope, half);
    af.n_axes = 3;
  } else {
    af.axis_of_freq.assign(static_cast<std::size_t>(half), 0);
    af.n_axes = 1;
  }
  return af;
}

const char* vision_convention_name(VisionConvention c) {
  switch (c) {
    case VisionConvention::kQwen2VL: return "qwen2vl";
    case VisionConvention::kGgmlVision: return "ggml-vision";
    case VisionConvention::kPixtral: return "pixtral";
  }
  return "unknown";
}

VisionConvention parse_vision_convention(const std::string& s, const char* field) {
  if (s == "qwen2vl" || s == "qwen2-vl" || s == "qwen2.5-vl" || s == "qwen2_vl") return VisionConvention::kQwen2VL;
  if (s == "ggml-vision" || s == "ggml" || s == "ggml_vision") return VisionConvention::kGgmlVision;
  if (s == "pixtral") return VisionConvention::kPixtral;
  fail(Kind::kInvalidArgument, "rotary_vision",
       std::string(field) + " must be one of qwen2vl, ggml-vision, pixtral, got " + quote_value(s));
}

AxisFrequencies vision_frequencies(const VisionSpec& spec) {
  const char* where = "rotary_vision";
  const int c = static_cast<int>(spec.convention);
  if (c < 0 || c > 2) fail(Kind::kInvalidArgument, where, "convention must be qwen2vl, ggml-vision or pixtral, got " + str(c));
  const int64_t D = spec.head_dim;
  if (D <= 0 || D % 4 != 0)
    fail(Kind::kInvalidArgument, where, "head_dim must be a positive multiple of 4 (two axes of pairs), got " + str(D));
  if (D > 2 * kMaxHalf) fail(Kind::kInvalidArgument, where, "head_dim must be <= 65536 (rotary's limit), got " + str(D));
  if (!std::isfinite(spec.base) || spec.base <= 1.0)
    fail(Kind::kInvalidArgument, where, "base must be finite and > 1, got " + std::to_string(spec.base));
  if (spec.pairing) {
    const int p = static_cast<int>(*spec.pairing);
    if (p < 0 || p > 1) fail(Kind::kInvalidArgument, where, "pairing must be half or interleaved, got " + str(p));
  }
  const int64_t quarter = D / 4;  // frequencies per axis
  AxisFrequencies af;
  af.n_axes = 2;
  af.pairing = spec.pairing.value_or(Pairing::kHalfSplit);
  af.freqs.attention_factor = 1.0;
  af.freqs.inv_freq.resize(static_cast<std::size_t>(2 * quarter));
  af.axis_of_freq.resize(static_cast<std::size_t>(2 * quarter));
  for (int64_t k = 0; k < quarter; ++k) {
    double row, col;
    if (spec.convention == VisionConvention::kPixtral) {
      // f_i = base^(-2i/D): row takes the even i = 2k, col the odd i = 2k + 1.
      row = ladder(spec.base, 2 * k, D);
      col = ladder(spec.base, 2 * k + 1, D);
    } else {
      // Qwen2-VL ViT / ggml VISION: one ladder base^(-2k/(D/2)) per axis (index restarts per section).
      row = col = ladder(spec.base, k, D / 2);
    }
    af.freqs.inv_freq[static_cast<std::size_t>(k)] = row;
    af.freqs.inv_freq[static_cast<std::size_t>(quarter + k)] = col;
    af.axis_of_freq[static_cast<std::size_t>(k)] = 0;
    af.axis_of_freq[static_cast<std::size_t>(quarter + k)] = 1;
  }
  return af;
}

std::vector<int64_t> grid_positions(int64_t height, int64_t width) {
  if (height < 0 || width < 0)
    fail(Kind::kInvalidArgument, "rotary_grid_positions",
         "height and width must be >= 0, got " + str(height) + " x " + str(width));
  // One id per patch and axis: the patch count must be a token count rotary can address (< 2^31),
  // which also keeps 2 * n and every index below free of overflow.
  int64_t n = 0;
  if (__builtin_mul_overflow(height, width, &n) || n >= kPositionLimit)
    fail(Kind::kOutOfRange, "rotary_grid_positions",
         "height * width (the patch count) must be < 2^31, got " + str(height) + " x " + str(width));
  std::vector<int64_t> ids(static_cast<std::size_t>(2 * n));
  for (int64_t p = 0; p < n; ++p) {
    ids[static_cast<std::size_t>(p)] = p / width;
    ids[static_cast<std::size_t>(n + p)] = p % width;
  }
  return ids;
}

void compute_cos_sin_row_axes(const AxisFrequencies& af, const double* positions, float* cos_out, float* sin_out) {
  const int64_t half = static_cast<int64_t>(af.freqs.inv_freq.size());
  for (int64_t j = 0; j < half; ++j) {
    const double p = positions[af.axis_of_freq[static_cast<std::size_t>(j)]];
    compute_cos_sin_row(af.freqs.inv_freq.data() + j, 1, af.freqs.attention_factor, p, cos_out + j, sin_out + j);
  }
}

}  // namespace rotary
