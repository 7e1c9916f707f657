// rotary::Spec: everything that determines a model's rotary frequencies (head/rotary dims, base, scaling).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rotary/api.h"
#include "rotary/types.h"

namespace rotary {

/// The scaling variants of Hugging Face transformers' ROPE_INIT_FUNCTIONS (plus "default"), and vLLM's
/// extension "ntk". Formulas, defaults and quirks: docs/scaling.md.
enum class RopeType : int {
  kDefault = 0,       ///< theta_i = base^(-2i/R)
  kLinear = 1,        ///< position interpolation: theta_i / factor
  kDynamic = 2,       ///< dynamic NTK: base' = base*((f*L/max_pos)-(f-1))^(R/(R-2)), L = max(seq_len, max_pos);
                      ///< with Scaling::alpha (vLLM/HF Hunyuan "dynamic" + alpha): base' = base*alpha^(R/(R-2)), static
  kYarn = 3,          ///< YaRN ramp between interpolation and extrapolation + attention factor
  kLongRope = 4,      ///< per-frequency short/long factors (Phi-3), switched at original_max
  kLlama3 = 5,        ///< Llama 3.1 smooth band-wise scaling
  kProportional = 6,  ///< Gemma-style: denominator head_dim, zero frequency beyond partial rotary
  kNtk = 7,           ///< vLLM "ntk" (static NTK): theta_i = (base*f)^(-2i/R) / f^(2/R); with Scaling::mixed_b,
                      ///< theta_i = base^(-2i/R) / exp(ln(f) * ((i+1)/(R/2))^mixed_b)
};
ROTARY_API const char* rope_type_name(RopeType t);  ///< HF spelling: "default", "linear", "dynamic", ...
/// Parses an HF rope_type string; throws Error naming `field` if unknown.
ROTARY_API RopeType parse_rope_type(const std::string& s, const char* field = "rope_type");

/// Scaling parameters. Every field's default means "off"/"HF default"; only the fields
/// used by `type` are read (see docs/scaling.md for which).
struct Scaling {
  RopeType type = RopeType::kDefault;

  /// linear, dynamic, yarn, llama3, longrope, proportional, ntk. 1 = no scaling.
  /// yarn/longrope: if unset (nullopt), HF uses max_position_embeddings / original_max_position_embeddings.
  std::optional<double> factor;

  /// yarn, longrope, llama3: the pre-training context. 0 = take Spec::max_position_embeddings (HF standardize).
  int64_t original_max_position_embeddings = 0;

  // --- yarn
  double beta_fast = 32.0;               ///< HF: `beta_fast or 32` (0 means default)
  double beta_slow = 1.0;                ///< HF: `beta_slow or 1`
  std::optional<double> mscale;          ///< DeepSeek: used only together with mscale_all_dim (HF quirk)
  std::optional<double> mscale_all_dim;
  bool truncate = true;                  ///< floor/ceil the correction range (gpt-oss sets false)

  // --- yarn, longrope: explicit attention factor overrides the computed one
  std::optional<double> attention_factor;

  // --- longrope (each of length rotary_dim/2)
  std::vector<double> short_factor;
  std::vector<double> long_factor;

  // --- llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;

  // --- vLLM extensions (docs/scaling.md "vLLM extensions")
  /// dynamic: NTK-alpha (Hunyuan): a fixed base' = base * alpha^(R/(R-2)); then `factor` is not used and the
  /// frequencies do not depend on the sequence length. nullopt = HF's dynamic NTK.
  std::optional<double> alpha;
  /// ntk: vLLM's mixed NTK exponent b (nullopt = fixed NTK).
  std::optional<double> mixed_b;
};

/// Multimodal position sections (Qwen2-VL style M-RoPE). Empty `section` = off.
/// sum(section) must equal rotary_dim/2. `interleaved` selects Qwen3-VL's interleaved assignment.
struct MRope {
  std::vector<int64_t> section;  ///< e.g. {16, 24, 24} for rotary_dim 128 (t, h, w)
  bool interleaved = false;
  bool enabled() const { return !section.empty(); }
};

/// A complete RoPE specification. Construct directly, from a preset, or from an HF config.json.
struct Spec {
  std::string name;                       ///< informational (preset name / config path)
  int64_t head_dim = 0;                   ///< D, in [1, 65536]
  int64_t rotary_dim = 0;                 ///< R (even, <= D); 0 means "= head_dim" (resolved by validate/normalized)
  double base = 10000.0;                  ///< rope_theta
  Pairing pairing = Pairing::kHalfSplit;  ///< interleaved for GPT-J / Meta checkpoints
  int64_t max_position_embeddings = 0;    ///< config.max_position_embeddings (0 = unknown)
  /// Informational (from_hf_config sets rotary_dim = int(D * it); a Spec built field by field rotates rotary_dim,
  /// 0 = D, whatever this says: give rotary_dim for partial rotation), except proportional: rotated share of D.
  double partial_rotary_factor = 1.0;
  Scaling scaling;
  MRope mrope;

  /// Throws rotary::Error (kInvalidArgument) naming the first bad field, e.g.
  /// "[rotary_spec] scaling.factor must be >= 1, got 0.5".
  ROTARY_API void validate() const;
  /// Returns a copy with rotary_dim and original_max_position_embeddings resolved, then validated.
  ROTARY_API Spec normalized() const;
  /// rotary_dim if set, else head_dim.
  int64_t effective_rotary_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  /// True when frequencies depend on the sequence length (dynamic without alpha, longrope).
  bool length_dependent() const {
    return (scaling.type == RopeType::kDynamic && !scaling.alpha) || scaling.type == RopeType::kLongRope;
  }
};

}  // namespace rotary
