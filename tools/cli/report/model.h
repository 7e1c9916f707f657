// The model a report describes: context sizes, scaled vs unscaled frequencies, band classes, comparison variants.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rotary/freqs.h"
#include "rotary/spec.h"

namespace rotary::cli::report {

/// The accuracy contract holds for positions < 2^24; the checks and curves go up to this position.
constexpr int64_t kMaxExactPosition = (int64_t(1) << 24) - 1;

/// The model's context sizes and the frequencies being compared.
struct ModelView {
  Spec spec;                       ///< normalized (text-only copy for M-RoPE specs)
  int64_t L = 0;                   ///< original context
  bool L_from_factor = false;      ///< linear without original_max: L = max_position_embeddings / factor
  int64_t max_pos = 0;             ///< max_position_embeddings
  int64_t extended = 0;            ///< context the scaling is meant for: max(max_pos, factor * L)
  double nominal_factor = 1.0;     ///< the spec's scaling factor (HF default where unset)
  std::optional<int64_t> seq_len;  ///< length at which length-dependent types are shown scaled
  Frequencies scaled;              ///< what the model uses at long context
  Frequencies unscaled;            ///< the same base without scaling
  double full_factor = 1.0;        ///< ratio that counts as "interpolated"
};
ModelView make_model_view(Spec spec);

/// Band classes relative to the original context L.
enum class BandClass { kFullRotations, kInterpolated, kBlended, kSubRotation };
constexpr BandClass kBandClasses[] = {BandClass::kFullRotations, BandClass::kBlended, BandClass::kInterpolated,
                                      BandClass::kSubRotation};
const char* class_key(BandClass c);      ///< "full_rotations", ... (CSV / JSON)
const char* class_label(BandClass c);    ///< "full rotations within L", ... (console, figures)
const char* class_meaning(BandClass c);  ///< one sentence

/// One dimension pair: its θ as the model uses it and unscaled, wavelengths, ratio and class.
struct Band {
  int64_t i = 0;
  double theta = 0, theta_default = 0, wavelength = 0, wavelength_default = 0, ratio = 1;
  BandClass cls = BandClass::kFullRotations;
};
std::vector<Band> make_bands(const ModelView& m);

/// What the spec's rope_type does to the bands, in one paragraph.
std::string type_explanation(const ModelView& m);

/// One set of frequencies shown in the decay/score curves.
struct Variant {
  std::string key;    ///< column name in decay.csv / score.csv
  std::string label;  ///< legend text
  Frequencies freqs;
};
/// The model's frequencies first, then the same context extended with the other scaling types.
std::vector<Variant> make_variants(const ModelView& m);

}  // namespace rotary::cli::report
