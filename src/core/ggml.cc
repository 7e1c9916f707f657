// ggml_rope_ext / ggml_rope_multi parameters -> multi-axis frequencies (YaRN mix per pair, section axes), in double.
#include "rotary/ggml.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "core/messages.h"

namespace rotary {
namespace {

using Kind = Error::Kind;
constexpr const char* kWhere = "rotary_ggml";
constexpr int64_t kMaxDims = int64_t(1) << 16;  // as Spec::head_dim: bounds every per-pair allocation

[[noreturn]] void invalid(const std::string& msg) { fail(Kind::kInvalidArgument, kWhere, msg); }
using detail::num;
using detail::str;

bool multi(GgmlRopeMode m) {
  return m == GgmlRopeMode::kMrope || m == GgmlRopeMode::kVision || m == GgmlRopeMode::kImrope;
}

/// ggml_rope_yarn_corr_dim in float32 (as ggml evaluates it).
float corr_dim_f32(int64_t n_dims, int64_t n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) *
         logf(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * static_cast<float>(std::numbers::pi))) /
         (2.0f * logf(base));
}

/// ggml's GPU ropes (CUDA, Metal, Vulkan, SYCL, OpenCL) compute VISION from sections[0..1] only: sector =
/// j % (s0 + s1), row 0 with theta index `sector` below s0, else row 1 with index `sector - s0`. Its CPU rope
/// (rotary's map: `axis`, `k`) uses all four sections. Refuses sections for which the two differ at pair j: ggml's
/// result would depend on the backend.
void check_vision_backends_agree(const GgmlRopeParams& p, const int64_t sect[4], int64_t j, int axis, int64_t k) {
  const int64_t s01 = sect[0] + sect[1];
  const int64_t sector = s01 > 0 ? j % s01 : 0;
  const int gpu_axis = sector < sect[0] ? 0 : 1;
  const int64_t gpu_k = gpu_axis == 0 ? sector : sector - sect[0];
  if (s01 > 0 && gpu_axis == axis && gpu_k == k) return;
  const std::string got = "{" + str(sect[0]) + ", " + str(sect[1]) + ", " + str(sect[2]) + ", " + str(sect[3]) + "}";
  invalid("sections for mode vision must give the same rotation on ggml's CPU and GPU backends (its GPU ropes use "
          "sections[0..1] only, wrapping every sections[0] + sections[1] pairs): let sections[0] + sections[1] cover "
          "the n_dims = " + str(p.n_dims) + " pairs, or sections[2..3] be 0, got " + got + " (pair " + str(j) +
          ": CPU row " + str(axis) + " theta index " + str(k) +
          (s01 > 0 ? ", GPU row " + str(gpu_axis) + " theta index " + str(gpu_k) : ", GPU divides by 0") + ")");
}

}  // namespace

const char* ggml_rope_mode_name(GgmlRopeMode m) {
  switch (m) {
    case GgmlRopeMode::kNormal: return "normal";
    case GgmlRopeMode::kNeox: return "neox";
    case GgmlRopeMode::kMrope: return "mrope";
    case GgmlRopeMode::kVision: return "vision";
    case GgmlRopeMode::kImrope: return "imrope";
  }
  return "unknown";
}

GgmlRopeMode parse_ggml_rope_mode(const std::string& s, const char* field) {
  if (s == "normal" || s == "0") return GgmlRopeMode::kNormal;
  if (s == "neox" || s == "2") return GgmlRopeMode::kNeox;
  if (s == "mrope" || s == "8") return GgmlRopeMode::kMrope;
  if (s == "vision" || s == "24") return GgmlRopeMode::kVision;
  if (s == "imrope" || s == "40") return GgmlRopeMode::kImrope;
  invalid(std::string(field) + " must be one of normal (0), neox (2), mrope (8), vision (24), imrope (40), got " + quote_value(s));
}

std::array<double, 2> ggml_yarn_corr_dims(int64_t n_dims, int64_t n_ctx_orig, double freq_base, double beta_fast,
                                          double beta_slow) {
  const float base = static_cast<float>(freq_base);
  const float start = std::floor(corr_dim_f32(n_dims, n_ctx_orig, static_cast<float>(beta_fast), base));
  const float end = std::ceil(corr_dim_f32(n_dims, n_ctx_orig, static_cast<float>(beta_slow), base));
  return {static_cast<double>(std::max(0.0f, start)), static_cast<double>(std::min(static_cast<float>(n_dims - 1), end))};
}

AxisFrequencies ggml_frequencies(const GgmlRopeParams& p) {
  const int mode_i = static_cast<int>(p.mode);
  if (mode_i != 0 && mode_i != 2 && mode_i != 8 && mode_i != 24 && mode_i != 40)
    invalid("mode must be normal (0), neox (2), mrope (8), vision (24) or imrope (40), got " + str(mode_i));
  if (p.n_dims <= 0 || p.n_dims % 2 != 0) invalid("n_dims must be even and > 0, got " + str(p.n_dims));
  if (p.n_dims > kMaxDims) invalid("n_dims must be <= 65536 (rotary's head_dim limit), got " + str(p.n_dims));
  if (!std::isfinite(p.freq_base) || p.freq_base <= 0.0) invalid("freq_base must be finite and > 0, got " + num(p.freq_base));
  if (!std::isfinite(p.freq_scale) || p.freq_scale <= 0.0)
    invalid("freq_scale must be finite and > 0, got " + num(p.freq_scale));
  if (!std::isfinite(p.ext_factor) || p.ext_factor < 0.0)
    invalid("ext_factor must be finite and >= 0, got " + num(p.ext_factor));
  if (!std::isfinite(p.attn_factor)) invalid("attn_factor must be finite, got " + num(p.attn_factor));
  const bool yarn = p.ext_factor != 0.0;
  if (yarn) {
    // n_ctx_orig 0 is what ggml's own tests pass: its correction dims become [0, -inf] (or [inf, n_dims - 1] for
    // a base below 1), which ggml_yarn_corr_dims reproduces; a negative one would make them NaN.
    if (p.n_ctx_orig < 0)
      invalid("n_ctx_orig must be >= 0 when ext_factor != 0 (YaRN; 0 gives ggml's degenerate correction dims), got " +
              str(p.n_ctx_orig));
    if (!std::isfinite(p.beta_fast) || p.beta_fast <= 0.0) invalid("beta_fast must be finite and > 0, got " + num(p.beta_fast));
    if (!std::isfinite(p.beta_slow) || p.beta_slow <= 0.0) invalid("beta_slow must be finite and > 0, got " + num(p.beta_slow));
    // The correction dims divide by ln(freq_base); without YaRN a base of 1 is just theta_i = 1, as ggml computes it.
    if (p.freq_base == 1.0) invalid("freq_base must be != 1 when ext_factor != 0 (YaRN's correction dims divide by ln(freq_base)), got 1");
  }

  const bool is_multi = multi(p.mode);
  const bool vision = p.mode == GgmlRopeMode::kVision;
  const bool imrope = p.mode == GgmlRopeMode::kImrope;
  // Pairs: NORMAL/NEOX/MROPE/IMROPE rotate n_dims channels (n_dims/2 pairs); VISION the whole head
  // of 2*n_dims channels, pairs (j, j + n_dims).
  const int64_t half = vision ? p.n_dims : p.n_dims / 2;

  int64_t sect[4] = {0, 0, 0, 0};
  int64_t sect_dims = 0;
  if (is_multi) {
    // ggml asserts sect_dims <= ne0, the head size: 2*n_dims for VISION (asserted), any head >= n_dims for
    // MROPE/IMROPE (partial rotation), which is not known here: rotary takes sums up to its largest head, and
    // maps pairs as ggml does for any sum (sector = j % sect_dims). Each entry is bounded first, so the sum
    // (and 3 * sect[i] below) cannot overflow. ggml does not check sections >= 0; rotary refuses negative ones.
    const int64_t ne0 = vision ? 2 * p.n_dims : kMaxDims;
    const char* what =
        vision ? " (2 * n_dims, the head size ggml's VISION asserts)" : " (rotary's largest head)";
    for (int i = 0; i < 4; ++i) {
      sect[i] = p.sections[static_cast<std::size_t>(i)];
      if (sect[i] < 0) invalid("sections[" + str(i) + "] must be >= 0, got " + str(sect[i]));
      if (sect[i] > ne0) invalid("sections[" + str(i) + "] must be <= " + str(ne0) + what + ", got " + str(sect[i]));
      sect_dims += sect[i];
    }
    if (sect[0] <= 0 && sect[1] <= 0 && sect[2] <= 0)
      invalid("sections[0..2] must not all be 0 for mode " + std::string(ggml_rope_mode_name(p.mode)));
    if (sect_dims > ne0) invalid("sum(sections) must be <= " + str(ne0) + what + ", got " + str(sect_dims));
  } else {
    for (int i = 0; i < 4; ++i)
      if (p.sections[static_cast<std::size_t>(i)] != 0)
        invalid("sections are only used by modes mrope, vision and imrope, got sections[" + str(i) + "] = " +
                str(p.sections[static_cast<std::size_t>(i)]) + " for mode " + ggml_rope_mode_name(p.mode));
  }
  if (!p.freq_factors.empty()) {
    if (static_cast<int64_t>(p.freq_factors.size()) < half)
      invalid("freq_factors must have at least " + str(half) + " entries (one per pair), got " +
              str(static_cast<int64_t>(p.freq_factors.size())));
    for (std::size_t i = 0; i < p.freq_factors.size(); ++i)
      if (!std::isfinite(p.freq_factors[i]) || p.freq_factors[i] <= 0.0)
        invalid("freq_factors[" + str(static_cast<int64_t>(i)) + "] must be finite and > 0, got " + num(p.freq_factors[i]));
  }

  std::array<double, 2> corr = {0.0, 0.0};
  if (yarn) corr = ggml_yarn_corr_dims(p.n_dims, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow);

  AxisFrequencies af;
  af.n_axes = is_multi ? 4 : 1;
  af.pairing = p.mode == GgmlRopeMode::kNormal ? Pairing::kInterleaved : Pairing::kHalfSplit;
  af.signed_positions = true;  // ggml's positions are int32, any sign (K-shift deltas are negative)
  af.freqs.inv_freq.resize(static_cast<std::size_t>(half));
  af.axis_of_freq.assign(static_cast<std::size_t>(half), 0);
  af.freqs.attention_factor = yarn ? p.attn_factor * (1.0 + 0.1 * std::log(1.0 / p.freq_scale)) : p.attn_factor;

  // The step at which each axis' theta was last reset (VISION restarts the ladder per section).
  int64_t reset_at[4] = {0, 0, 0, 0};
  const int64_t sec_w = sect[0] + sect[1];
  const int64_t sec_e = sec_w + sect[2];
  for (int64_t j = 0; j < half; ++j) {
    int axis = 0;
    if (is_multi) {
      const int64_t sector = j % sect_dims;
      if (vision) {  // same else-if chain as ggml_mrope_cache_init's independent sections
        if (sector == 0) reset_at[0] = j;
        else if (sector == sect[0]) reset_at[1] = j;
        else if (sector == sec_w) reset_at[2] = j;
        else if (sector == sec_e) reset_at[3] = j;
      }
      if (imrope) {
        if (sector % 3 == 1 && sector < 3 * sect[1]) axis = 1;
        else if (sector % 3 == 2 && sector < 3 * sect[2]) axis = 2;
        else if (sector % 3 == 0 && sector < 3 * sect[0]) axis = 0;
        else axis = 3;
      } else {
        if (sector >= sect[0] && sector < sec_w) axis = 1;
        else if (sector >= sec_w && sector < sec_w + sect[2]) axis = 2;
        else if (sector >= sec_w + sect[2]) axis = 3;
      }
    }
    const int64_t k = j - reset_at[axis];  // index on the ladder base^(-2k/n_dims)
    if (vision) check_vision_backends_agree(p, sect, j, axis, k);
    double theta = 1.0 / std::pow(p.freq_base, static_cast<double>(2 * k) / static_cast<double>(p.n_dims));
    if (!p.freq_factors.empty()) theta /= p.freq_factors[static_cast<std::size_t>(j)];
    double scale = p.freq_scale;
    if (yarn) {
      const double y = (static_cast<double>(j) - corr[0]) / std::max(0.001, corr[1] - corr[0]);
      const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
      scale = p.freq_scale * (1.0 - mix) + mix;
    }
    af.freqs.inv_freq[static_cast<std::size_t>(j)] = theta * scale;
    af.axis_of_freq[static_cast<std::size_t>(j)] = static_cast<uint8_t>(axis);
  }
  return af;
}

}  // namespace rotary
