// Parity with other engines: their RoPE table conventions, exact exports in them (`rotary export`) and the
// hypothesis-testing audit of an engine's table against a config (`rotary check`). Semantics: docs/parity.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rotary/api.h"
#include "rotary/safetensors.h"
#include "rotary/spec.h"
#include "rotary/types.h"

namespace rotary {

/// Table conventions (h = R/2 frequencies, N positions; "af" = attention factor):
///   kHf         cos, sin [N, R]: cat(freqs, freqs) halves (HF *RotaryEmbedding.forward), or each value twice
///               (repeat_interleave, GPT-J's rotate_every_two); af folded in. inv_freq [h].
///   kVllm       cos_sin_cache [N, R] = cos | sin (h columns each), af folded in. inv_freq [h].
///   kFlashInfer cos_sin_cache as vLLM, float32 only (FlashInfer raises otherwise).
///   kTe         freqs [N, 1, 1, R]: angles, cat(freqs, freqs) (interleaved=False) or each twice (interleaved=True);
///               no af (TE has none). inv_freq [h].
///   kGgml       ggml_rope_ext parameters (safetensors metadata) and optional freq_factors [h]; no table.
///   kOnnx       cos_cache, sin_cache [N, h] (ONNX RotaryEmbedding-23 inputs), af folded in.
///   kRaw        rotary's own: inv_freq [h]; cos, sin [N, h] or cos_sin [N, R] (cos | sin, CosSinTable rows).
enum class EngineLayout : int { kHf = 0, kVllm, kFlashInfer, kTe, kGgml, kOnnx, kRaw };
ROTARY_API const char* engine_layout_name(EngineLayout l);  ///< "hf", "vllm", "flashinfer", "te", "ggml", "onnx", "raw"
/// Throws Error(kInvalidArgument) "[where] layout must be one of hf, vllm, ..., got \"x\"".
ROTARY_API EngineLayout parse_engine_layout(const std::string& s, const char* where = "rotary_check");

/// What a file holds: frequencies (ggml: its parameters), a cos/sin (te: angle) table, or q/k an engine rotated.
enum class TableKind : int { kInvFreq = 0, kCosSin = 1, kRotated = 2 };
ROTARY_API const char* table_kind_name(TableKind k);  ///< "inv_freq", "cos_sin", "rotated"

struct ExportOptions {
  EngineLayout layout = EngineLayout::kHf;
  TableKind what = TableKind::kCosSin;  ///< kInvFreq or kCosSin (ggml: always its parameters)
  DType dtype = DType::kF32;            ///< f32, f16, bf16 (f64 too for raw); flashinfer and te: f32 only
  int64_t positions = 0;                ///< rows [0, positions); 0 = max_position_embeddings (4096 if unknown)
};

/// rotary's exact values in `layout`'s tensors and metadata: angles pos*theta_i formed in double, cos/sin
/// (times the attention factor) rounded once to the dtype. Length-dependent types use seq_len = positions.
/// Metadata records the spec, layout and (te, which cannot hold it) the attention factor.
/// Throws Error(kInvalidArgument) naming the option a layout cannot take.
ROTARY_API TensorFile export_tables(const Spec& spec, const ExportOptions& options);

/// An engine's output to audit. Tensor names by kind and layout (docs/parity.md); a tensor is found by its
/// exact name, by a name ending in "." + name (state_dict keys), or as the only tensor of the file:
///   kInvFreq  "inv_freq" (ggml: metadata n_dims, mode, freq_base, ... and optional "freq_factors")
///   kCosSin   hf/raw "cos" + "sin" (raw also "cos_sin"), vllm/flashinfer "cos_sin_cache", te "freqs",
///             onnx "cos_cache" + "sin_cache" (or "cos" + "sin")
///   kRotated  "input" and "rotated" [T, D] or [T, H, D] (hf also [B, H, S, D]) and "positions" [T] (hf [S]/[B, S])
struct CheckInput {
  TableKind kind = TableKind::kCosSin;
  EngineLayout layout = EngineLayout::kHf;
  TensorFile tensors;
  /// The sequence length the engine serves (HF's seq_len for dynamic and longrope) and, for kInvFreq, the
  /// positions examined. Default: the table's rows (kCosSin), max(positions)+1 (kRotated), or
  /// max_position_embeddings (kInvFreq; HF's initial inv_freq is computed without a seq_len).
  std::optional<int64_t> max_pos;
};

struct ParityDiagnosis {
  std::string code;     ///< attention_factor_missing, ..., low_precision_table (docs/parity.md)
  std::string message;
};

struct BandParity {
  int64_t index = 0;
  double expected = 0;     ///< theta_i of the config (rad/token)
  double found = 0;        ///< estimated from the data (NaN when the data cannot resolve it)
  double rel_err = 0;      ///< |found/expected - 1| (absolute for expected == 0; NaN if unresolved)
  double wavelength = 0;   ///< 2*pi/expected tokens (inf for expected == 0)
  bool ok = true;          ///< the data agrees with the config in this band within the dtype tolerance
};

/// Error vs exact (fp64) values as a function of position: per octave [2^k, 2^(k+1)) the largest
/// max(|angle error|, |cos error|, |sin error|) over frequencies.
struct PrecisionSeries {
  std::string description;
  std::optional<int64_t> first_pos_err_1e3;  ///< first position whose error exceeds 1e-3 (nullopt: none)
  std::optional<int64_t> first_pos_err_1e2;
  double max_err = 0;
  std::vector<int64_t> octave_start;
  std::vector<double> octave_max_err;
};

struct CheckResult {
  bool agree = false;
  std::string spec_json;                        ///< the spec checked against (rotary::spec_to_json)
  std::string layout, kind, dtype;              ///< as given
  std::string pairing_found;                    ///< "half", "interleaved" or "" (not determined by the data)
  int64_t positions = 0;                        ///< rows of the table / tokens / positions examined
  std::optional<int64_t> seq_len;               ///< the length the expected frequencies were computed for
  int64_t rotary_dim_expected = 0, rotary_dim_found = 0;
  std::optional<double> max_rel_err_inv_freq;   ///< over bands the data resolves (nullopt: it resolves none)
  double attention_factor_expected = 1.0;
  std::optional<double> attention_factor_found; ///< nullopt when the layout has none (te, inv_freq)
  std::vector<BandParity> bands;
  std::vector<ParityDiagnosis> diagnoses;
  std::vector<std::string> notes;
  PrecisionSeries precision;                    ///< the data as given
  PrecisionSeries precision_f32_angles;         ///< exact frequencies, angles formed in f32 as the engine does
};

/// Audits `input` against `spec` (normalized here). Input errors (missing tensor, wrong shape or dtype for
/// the layout, non-finite values) throw Error(kInvalidArgument) naming the tensor, before any result.
ROTARY_API CheckResult check_parity(const Spec& spec, const CheckInput& input);
/// Every figure of a result as one JSON object (the CLI's --json, rotary.check's dict).
ROTARY_API std::string check_result_json(const CheckResult& r);
/// The human-readable report (verdict line last).
ROTARY_API std::string check_result_text(const CheckResult& r);

}  // namespace rotary
