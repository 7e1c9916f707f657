// Internal: the canonical form of an engine's RoPE data and the one table of layout converters (both directions).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/npy.h"
#include "rotary/parity.h"

namespace rotary::parity {

inline constexpr const char* kWhere = "rotary_check";

/// What the data gives per frequency band i in [0, half):
///   kFreqs   inv_freq[i] (and, for ggml, the attention factor)
///   kValues  a = cos, b = sin (attention factor folded in) per row (position) and band, row-major [rows, half]
///   kAngles  a = the angle pos*theta_i per row and band (no attention factor)
enum class Form { kFreqs, kValues, kAngles };

struct Canonical {
  Form form = Form::kValues;
  DType dtype = DType::kF32;
  int64_t half = 0;
  std::vector<double> inv_freq;
  std::optional<double> attention_factor;
  std::vector<double> positions;  ///< one per row
  std::vector<double> a, b;
  std::optional<Pairing> pairing;  ///< the pairing the data itself shows (duplication pattern, rotated fit)
  double noise_scale = 1.0;        ///< rotated q/k: several roundings per value
  bool ggml = false;               ///< angles formed as ggml does (theta *= theta_scale in f32)
  std::vector<std::string> notes;
  int64_t rows() const { return static_cast<int64_t>(positions.size()); }
};

/// The layout table: which tensors each convention holds and how its columns map to bands.
struct LayoutInfo {
  EngineLayout layout;
  const char* name;
  const char* inv_freq;  ///< tensor name of its inv_freq, nullptr if the layout has none
  const char* cos;       ///< first table tensor (cos, cos_sin_cache, freqs, cos_cache)
  const char* sin;       ///< second (sin, sin_cache), nullptr for one-tensor tables
  enum class Columns { kDuplicated, kCosThenSin, kHalf } columns;
  bool angles;           ///< the table holds angles (te)
  bool f32_only;         ///< the engine accepts only float32 tables (flashinfer)
};
const LayoutInfo& layout_info(EngineLayout layout);

/// Exact values of `freqs`/`af` in the layout's tensors (see export_tables). `pairing` picks the duplication
/// pattern of te (interleaved: each value twice) and of hf for GPT-J-style interleaved specs.
TensorFile encode(const LayoutInfo& info, TableKind what, const std::vector<double>& inv_freq, double af,
                  int64_t rows, DType dtype, Pairing pairing);
/// The ggml encoding: parameters in metadata, freq_factors making theta exact.
TensorFile encode_ggml(const Spec& spec, const std::vector<double>& inv_freq, double af);

/// The layout's tensors -> canonical form. Throws Error(kInvalidArgument) naming the tensor for a missing
/// tensor, a shape or dtype the layout does not allow, or non-finite values.
Canonical decode(const LayoutInfo& info, TableKind kind, const TensorFile& tensors, Pairing expected,
                 int64_t expected_rotary_dim);
/// Rotated q/k -> per-token cos/sin (least squares over heads), with the rotary width and pairing that fit.
Canonical decode_rotated(const LayoutInfo& info, const TensorFile& tensors, Pairing expected, int64_t expected_rotary_dim);

/// A tensor by exact name, by a unique name ending in "." + name (state_dict keys), or (allow_single) the only one.
const NpyArray& pick_tensor(const TensorFile& f, const std::vector<std::string>& names, bool allow_single,
                            const char* layout);
/// The values as doubles; Error naming `what` for a non-float dtype (ints allowed with allow_int) or a non-finite value.
std::vector<double> tensor_doubles(const NpyArray& a, const std::string& what, bool allow_int = false);
std::string shape_string(const std::vector<int64_t>& shape);

/// Half an ulp of `x` in dtype d (d's spacing at |x|, including subnormals; f64: 2^-53 relative).
double half_ulp(DType d, double x);
/// x rounded once to dtype d.
double round_to(DType d, double x);

}  // namespace rotary::parity
