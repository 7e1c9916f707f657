// Spec validation and normalization: the strict checks that Hugging Face only warns about.
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/freqs_internal.h"
#include "core/messages.h"
#include "rotary/spec.h"

namespace rotary {
namespace {

constexpr const char* kWhere = "rotary_spec";
// Largest head_dim a Spec accepts (real models use <= 512); bounds every per-frequency allocation.
constexpr int64_t kMaxSpecHeadDim = int64_t(1) << 16;

struct RopeTypeEntry {
  RopeType type;
  const char* name;
};

constexpr RopeTypeEntry kRopeTypes[] = {
    {RopeType::kDefault, "default"}, {RopeType::kLinear, "linear"},   {RopeType::kDynamic, "dynamic"},
    {RopeType::kYarn, "yarn"},       {RopeType::kLongRope, "longrope"}, {RopeType::kLlama3, "llama3"},
    {RopeType::kProportional, "proportional"}, {RopeType::kNtk, "ntk"},
};

using detail::num;

[[noreturn]] void invalid(const std::string& message) { fail(Error::Kind::kInvalidArgument, kWhere, message); }

void require_finite(const char* field, double v) {
  if (!std::isfinite(v)) invalid(std::string(field) + " must be a finite number, got " + num(v));
}

void require_positive(const char* field, double v) {
  require_finite(field, v);
  if (!(v > 0)) invalid(std::string(field) + " must be > 0, got " + num(v));
}

/// factor: finite and >= 1. `required`: a missing value is an error for this rope type.
void check_factor(const Scaling& s, bool required) {
  if (!s.factor) {
    if (required)
      invalid(std::string("scaling.factor is required for rope_type ") + rope_type_name(s.type) + ", got none");
    return;
  }
  require_finite("scaling.factor", *s.factor);
  if (*s.factor < 1.0) invalid("scaling.factor must be >= 1, got " + num(*s.factor));
}

void check_factor_list(const char* field, const std::vector<double>& v, int64_t expected) {
  if (static_cast<int64_t>(v.size()) != expected)
    invalid(std::string(field) + " must have rotary_dim/2 = " + std::to_string(expected) + " entries, got " +
            std::to_string(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    std::string f = std::string(field) + "[" + std::to_string(i) + "]";
    if (!std::isfinite(v[i])) invalid(f + " must be a finite number, got " + num(v[i]));
    if (!(v[i] > 0)) invalid(f + " must be > 0, got " + num(v[i]));
  }
}

/// rotary_dim and original_max_position_embeddings resolved (what normalized() returns, unvalidated).
Spec with_defaults(const Spec& spec) {
  Spec out = spec;
  if (out.rotary_dim == 0) out.rotary_dim = out.head_dim;
  if (out.scaling.original_max_position_embeddings == 0 &&
      (out.scaling.type == RopeType::kYarn || out.scaling.type == RopeType::kLongRope ||
       out.scaling.type == RopeType::kLlama3))
    out.scaling.original_max_position_embeddings = out.max_position_embeddings;
  return out;
}

// The largest finite f32: cos/sin rows are stored in f32 (and kernels may hold theta in f32).
constexpr double kF32Max = static_cast<double>(std::numeric_limits<float>::max());

bool in_f32_range(double v) { return std::isfinite(v) && v <= kF32Max && v >= -kF32Max; }

/// The fields that produced the attention factor, with their values (for messages).
std::string attention_factor_source(const Spec& s) {
  const Scaling& sc = s.scaling;
  if (sc.attention_factor) return "scaling.attention_factor " + num(*sc.attention_factor);
  if (sc.type == RopeType::kYarn && sc.mscale && sc.mscale_all_dim)
    return "scaling.mscale " + num(*sc.mscale) + " and scaling.mscale_all_dim " + num(*sc.mscale_all_dim) +
           " (mscale(factor, mscale) / mscale(factor, mscale_all_dim))";
  if (sc.type == RopeType::kLongRope)
    return "scaling.original_max_position_embeddings " + std::to_string(sc.original_max_position_embeddings) +
           " (sqrt(1 + ln(factor) / ln(original_max_position_embeddings)))";
  return "scaling.factor";
}

/// Evaluates the frequencies of a structurally valid spec (`s` with defaults resolved) wherever they can
/// differ: once for length-independent types, at both ends of [max_position_embeddings, 2^31] for
/// dynamic NTK, for both factor lists of LongRoPE. Refuses, naming the field responsible, any inv_freq
/// or attention_factor that is not finite or is outside the f32 range (and a non-positive attention
/// factor), so that a spec that validates never fails, nor produces inf/NaN, when applied.
void check_frequencies(const Spec& s) {
  const Scaling& sc = s.scaling;
  std::vector<std::optional<int64_t>> lengths = {std::nullopt};
  if (sc.type == RopeType::kDynamic && !sc.alpha) lengths.push_back(detail::kMaxSeqLen);  // NTK-alpha: fixed base
  if (sc.type == RopeType::kLongRope) lengths.push_back(detail::kMaxSeqLen);  // long factors if orig < 2^31
  for (const auto& len : lengths) {
    double dyn_base = s.base;  // dynamic NTK: the base at this length
    if (sc.type == RopeType::kDynamic) {
      dyn_base = detail::dynamic_base(s, len);
      if (sc.alpha && (!std::isfinite(dyn_base) || !(dyn_base > 0)))
        invalid("scaling.alpha " + num(*sc.alpha) + " gives the NTK-alpha base " + num(dyn_base) +
                " (base * alpha^(R/(R-2)) with base " + num(s.base) + ", R " + std::to_string(s.rotary_dim) +
                "); it must be finite and > 0");
      if (!std::isfinite(dyn_base) || !(dyn_base > 0))
        invalid("scaling.factor " + num(*sc.factor) + " gives the dynamic NTK base " + num(dyn_base) + " at seq_len " +
                (len ? std::to_string(*len) : std::string("max_position_embeddings")) +
                " (base * (factor * seq_len / max_position_embeddings - (factor - 1))^(R/(R-2)) with base " + num(s.base) +
                ", max_position_embeddings " + std::to_string(s.max_position_embeddings) + ", R " +
                std::to_string(s.rotary_dim) + "); it must be finite and > 0");
    }
    if (sc.type == RopeType::kNtk && !sc.mixed_b && sc.factor && !std::isfinite(s.base * *sc.factor))
      invalid("scaling.factor " + num(*sc.factor) + " gives the NTK base " + num(s.base * *sc.factor) +
              " (base * factor with base " + num(s.base) + "); it must be finite");
    Frequencies f;
    try {
      f = detail::frequencies_unchecked(s, len);
    } catch (const Error& e) {  // a bad value the checks above missed still fails as a spec error, naming the cause
      if (e.kind() != Error::Kind::kInvalidArgument) throw;
      invalid(std::string("the frequencies cannot be computed: ") + e.what());
    }
    const double af = f.attention_factor;
    if (!in_f32_range(af) || !(af > 0))
      invalid(attention_factor_source(s) + " gives attention_factor " + num(af) +
              ", which must be finite, > 0 and at most 3.4028234663852886e+38 (the f32 maximum)");
    for (std::size_t i = 0; i < f.inv_freq.size(); ++i) {
      const double v = f.inv_freq[i];
      if (in_f32_range(v) && v >= 0) continue;
      const std::string what = "inv_freq[" + std::to_string(i) + "] = " + num(v) +
                               ", which must be finite, >= 0 and at most 3.4028234663852886e+38 (the f32 maximum)";
      if (sc.type == RopeType::kLongRope) {
        // The plain ladder at i is fine: the factor list divided it out of range.
        const double ladder = 1.0 / std::pow(s.base, static_cast<double>(2 * static_cast<int64_t>(i)) /
                                                         static_cast<double>(s.rotary_dim));
        if (in_f32_range(ladder)) {
          const bool use_long = len.has_value() && *len > sc.original_max_position_embeddings;
          const std::vector<double>& ext = use_long ? sc.long_factor : sc.short_factor;
          invalid(std::string(use_long ? "scaling.long_factor[" : "scaling.short_factor[") + std::to_string(i) + "] " +
                  num(ext[i]) + " gives " + what);
        }
      }
      if (dyn_base != s.base && sc.alpha)
        invalid("scaling.alpha " + num(*sc.alpha) + " gives the NTK-alpha base " + num(dyn_base) + ", and with it " + what);
      if (dyn_base != s.base)
        invalid("scaling.factor " + num(*sc.factor) + " gives the dynamic NTK base " + num(dyn_base) + " at seq_len " +
                std::to_string(len.value_or(s.max_position_embeddings)) + ", and with it " + what);
      invalid("base " + num(s.base) + " with rotary_dim " + std::to_string(s.rotary_dim) +
              (sc.type == RopeType::kDefault ? std::string() : std::string(" and rope_type ") + rope_type_name(sc.type)) +
              " gives " + what);
    }
  }
}

}  // namespace

const char* rope_type_name(RopeType t) {
  for (const auto& e : kRopeTypes)
    if (e.type == t) return e.name;
  return "unknown";
}

RopeType parse_rope_type(const std::string& s, const char* field) {
  for (const auto& e : kRopeTypes)
    if (s == e.name) return e.type;
  std::string names;
  for (const auto& e : kRopeTypes) names += std::string(names.empty() ? "" : ", ") + e.name;
  invalid(std::string(field) + " must be one of " + names + ", got " + quote_value(s));
}

void Spec::validate() const {
  if (head_dim <= 0) invalid("head_dim must be > 0, got " + std::to_string(head_dim));
  if (head_dim > kMaxSpecHeadDim)
    invalid("head_dim must be <= " + std::to_string(kMaxSpecHeadDim) + " (rotary's limit), got " + std::to_string(head_dim));
  if (rotary_dim < 0) invalid("rotary_dim must be >= 0 (0 = head_dim), got " + std::to_string(rotary_dim));
  const int64_t r = effective_rotary_dim();
  if (r > head_dim)
    invalid("rotary_dim must be <= head_dim (" + std::to_string(head_dim) + "), got " + std::to_string(r));
  if (r % 2 != 0) invalid("rotary_dim must be even, got " + std::to_string(r));
  require_positive("base", base);
  if (max_position_embeddings < 0)
    invalid("max_position_embeddings must be >= 0 (0 = unknown), got " + std::to_string(max_position_embeddings));
  require_finite("partial_rotary_factor", partial_rotary_factor);
  if (!(partial_rotary_factor > 0 && partial_rotary_factor <= 1))
    invalid("partial_rotary_factor must be in (0, 1], got " + num(partial_rotary_factor));

  const Scaling& s = scaling;
  const int64_t orig = s.original_max_position_embeddings > 0 ? s.original_max_position_embeddings
                                                              : max_position_embeddings;
  if (s.original_max_position_embeddings < 0)
    invalid("scaling.original_max_position_embeddings must be >= 0 (0 = max_position_embeddings), got " +
            std::to_string(s.original_max_position_embeddings));
  auto require_orig = [&] {
    if (orig <= 0)
      invalid(std::string("scaling.original_max_position_embeddings is required for rope_type ") +
              rope_type_name(s.type) + " (or set max_position_embeddings), got 0");
  };
  auto require_max_pos = [&](const char* why) {
    if (max_position_embeddings <= 0)
      invalid(std::string("max_position_embeddings is required for ") + why + ", got " +
              std::to_string(max_position_embeddings));
  };

  switch (s.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      check_factor(s, true);
      break;
    case RopeType::kDynamic:
      if (s.alpha) {  // vLLM / HF Hunyuan NTK-alpha: a fixed base, factor unused
        require_finite("scaling.alpha", *s.alpha);
        if (*s.alpha < 1.0) invalid("scaling.alpha must be >= 1 (1 = no scaling), got " + num(*s.alpha));
      } else {
        check_factor(s, true);
        require_max_pos("rope_type dynamic");
      }
      if (r <= 2) invalid("rotary_dim must be > 2 for rope_type dynamic (exponent R/(R-2)), got " + std::to_string(r));
      break;
    case RopeType::kNtk:
      check_factor(s, true);
      if (s.mixed_b) {
        require_positive("scaling.mixed_b", *s.mixed_b);
        // a = ln(factor) / (R/2)^b, then exp(a * (i+1)^b): (R/2)^b must be finite (inf gives 0 * inf = NaN).
        if (!std::isfinite(std::pow(r / 2.0, *s.mixed_b)))
          invalid("scaling.mixed_b must keep (rotary_dim/2)^mixed_b finite (rotary_dim " + std::to_string(r) + "), got " +
                  num(*s.mixed_b));
      }
      break;
    case RopeType::kYarn: {
      check_factor(s, false);
      require_orig();
      if (!s.factor) require_max_pos("rope_type yarn without scaling.factor (factor = max_pos / original_max)");
      require_finite("scaling.beta_fast", s.beta_fast);
      require_finite("scaling.beta_slow", s.beta_slow);
      if (s.beta_fast < 0) invalid("scaling.beta_fast must be > 0 (0 = default 32), got " + num(s.beta_fast));
      if (s.beta_slow < 0) invalid("scaling.beta_slow must be > 0 (0 = default 1), got " + num(s.beta_slow));
      const double bf = s.beta_fast != 0 ? s.beta_fast : 32.0, bs = s.beta_slow != 0 ? s.beta_slow : 1.0;
      if (bf <= bs)
        invalid("scaling.beta_fast must be > scaling.beta_slow (" + num(bs) + "), got " + num(bf));
      if (s.mscale) require_finite("scaling.mscale", *s.mscale);
      if (s.mscale_all_dim) require_finite("scaling.mscale_all_dim", *s.mscale_all_dim);
      if (s.attention_factor) require_positive("scaling.attention_factor", *s.attention_factor);
      break;
    }
    case RopeType::kLongRope:
      check_factor(s, false);
      require_orig();
      if (!s.factor) require_max_pos("rope_type longrope without scaling.factor (factor = max_pos / original_max)");
      check_factor_list("scaling.short_factor", s.short_factor, r / 2);
      check_factor_list("scaling.long_factor", s.long_factor, r / 2);
      if (s.attention_factor) require_positive("scaling.attention_factor", *s.attention_factor);
      break;
    case RopeType::kLlama3:
      check_factor(s, true);
      require_orig();
      require_positive("scaling.low_freq_factor", s.low_freq_factor);
      require_positive("scaling.high_freq_factor", s.high_freq_factor);
      // Equal factors (Llama 4 Scout ships low = high = 1) leave no blend band: a step at orig / low.
      if (s.low_freq_factor > s.high_freq_factor)
        invalid("scaling.low_freq_factor must be <= scaling.high_freq_factor (" + num(s.high_freq_factor) +
                "), got " + num(s.low_freq_factor));
      break;
    case RopeType::kProportional:
      check_factor(s, false);
      if (r != head_dim)
        invalid("rotary_dim must equal head_dim (" + std::to_string(head_dim) +
                ") for rope_type proportional (partial_rotary_factor selects the rotated part), got " +
                std::to_string(r));
      break;
    default:
      invalid("scaling.type must be a known RopeType, got " + std::to_string(static_cast<int>(s.type)));
  }

  if (mrope.interleaved && !mrope.enabled())
    invalid("mrope.interleaved needs mrope.section (3 entries: t, h, w), got no section");
  if (mrope.enabled()) {
    if (mrope.section.size() != 3)
      invalid("mrope.section must have exactly 3 entries (t, h, w), got " + std::to_string(mrope.section.size()));
    int64_t sum = 0;
    for (size_t i = 0; i < mrope.section.size(); ++i) {
      if (mrope.section[i] < 0)
        invalid("mrope.section[" + std::to_string(i) + "] must be >= 0, got " + std::to_string(mrope.section[i]));
      // Each entry <= r/2 keeps the sum far from int64 overflow (hostile configs).
      if (mrope.section[i] > r / 2)
        invalid("mrope.section[" + std::to_string(i) + "] must be <= rotary_dim/2 = " + std::to_string(r / 2) +
                ", got " + std::to_string(mrope.section[i]));
      sum += mrope.section[i];
    }
    if (sum != r / 2)
      invalid("mrope.section must sum to rotary_dim/2 = " + std::to_string(r / 2) + ", got " + std::to_string(sum));
  }

  // Every field is in range on its own: now the numbers they produce together.
  check_frequencies(with_defaults(*this));
}

Spec Spec::normalized() const {
  Spec out = with_defaults(*this);
  out.validate();
  return out;
}

}  // namespace rotary
