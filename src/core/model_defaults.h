// Internal: transformers' per-model config-class defaults for RoPE fields a config.json may leave out (core only).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rotary::detail {

/// What a transformers config class (and its model's code) assumes when config.json omits a RoPE field.
/// Files written by save_pretrained carry these fields; hand-written or trimmed files rely on the class's
/// defaults, which differ per model (Mixtral's base is 1e6, Phi rotates half the head, Qwen3's head_dim is
/// 128 whatever hidden_size / num_attention_heads give). A field present with a JSON null is not omitted:
/// transformers passes None to the class, so the head_dim and partial-rotary defaults do not apply to it.
struct ModelDefaults {
  std::string_view model_type;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  /// The class's head_dim when the file gives none (0: hidden_size / num_attention_heads).
  int64_t head_dim = 0;
  /// DeepSeek's qk_rope_head_dim (the rotated part of a head) when the file gives none (0: not such a model).
  int64_t qk_rope_head_dim = 0;
  /// The class's RoPE dict when the file has neither rope_parameters nor rope_scaling (null: default type).
  const nlohmann::json* rope_dict = nullptr;
  /// Qwen2-VL / Qwen3-VL: the section the model's code uses when the RoPE dict gives no mrope_section
  /// (zeros: none), and whether its assignment is interleaved (Qwen3-VL's code always interleaves).
  std::array<int64_t, 3> mrope_section{};
  bool mrope_interleaved = false;
  /// The model's code rotates interleaved pairs (x[2i], x[2i+1]): GPT-J, DeepSeek, GLM, Cohere, ERNIE 4.5, Llama 4; or
  /// its class's rope_interleave defaults to true (MLA models such as Mistral 4), where a top-level rope_interleave wins.
  bool interleaved_pairs = false;
  /// The model's code reads no rope_interleave: its pairs are fixed, and a top-level rope_interleave is ignored, as
  /// transformers ignores it (DeepSeek-V3.2, GLM, Llama 4...). False: the flag wins (classes that read it, and types
  /// not in the table).
  bool pairing_fixed = false;
  /// The file key transformers maps num_attention_heads to (attribute_map: Moonshine's decoder_num_attention_heads),
  /// read when the file has no num_attention_heads; empty: none.
  std::string_view heads_key;
  /// The file keys transformers maps hidden_size and max_position_embeddings to (attribute_map: DBRX's d_model and
  /// max_seq_len), read when the file lacks the plain key; empty: none.
  std::string_view hidden_key;
  std::string_view max_pos_key;
  /// true: max_pos_key wins over a max_position_embeddings in the same file, as the class's __init__ makes it
  /// (Bailing hybrid: model_max_length); false: read only when the file lacks the plain key (DBRX's max_seq_len).
  bool max_pos_key_wins = false;
  /// The sub-object whose rope_theta is the base when neither the RoPE dict nor the top level gives one (DBRX's
  /// attn_config: its code and vLLM read it there, transformers 5.25 does not; docs/scaling.md); empty: none.
  std::string_view theta_in;
  /// The file key transformers maps head_dim to (the config class's attribute_map: JetMoe's kv_channels, Zamba2's
  /// attention_head_dim); empty: head_dim itself.
  std::string_view head_dim_key;
  /// Mistral 4: the class's head_dim is qk_nope_head_dim + qk_rope_head_dim and its partial_rotary_factor a share of
  /// that sum (qk_rope / sum unless the file says otherwise), so the rotated width is that share of the sum, not a
  /// share of qk_rope_head_dim. The class's qk_nope_head_dim (0: not such a class).
  int64_t qk_nope_head_dim = 0;
  /// The model's code rotates head_dim times the partial factor whatever a top-level rotary_dim says
  /// (MiniMax-M3-VL's config documents rotary_dim; its code does not read it).
  bool ignores_rotary_dim = false;
  /// The model's code assigns frequencies to the 3-D position axes in a way no Spec expresses (ERNIE 4.5 VL: the
  /// even and odd ones of the first part to h and w, the rest to t): the Spec is what the code computes for text
  /// positions (t = h = w), plain RoPE; the dict's mrope_section is not read.
  bool text_positions_only = false;
  /// Why a Spec cannot describe the model's RoPE (read as a refusal); null: it can.
  const char* unsupported = nullptr;
  /// A top-level flag that, when true (Python truthiness), means the model has no RoPE to read, and why (Falcon's
  /// alibi: its attention then adds ALiBi biases instead of rotating); empty: none.
  std::string_view refused_if_key;
  const char* refused_if_why = nullptr;
  /// Why a file whose RoPE dict is not nested per layer type is refused: the class builds its per-layer-type RoPE
  /// from keys rotary does not read (Dots 3 Note: swa_rope_theta, swa_* head widths, a derived layer pattern); null:
  /// such a file is read.
  const char* flat_refused = nullptr;
  /// A file whose RoPE dict is not nested per layer type (a Hub file: top-level rope_theta, a flat rope_parameters or
  /// rope_scaling) is read as the class converts it: the flat dict is flat_rope_type's entry and flat_no_rope_type's
  /// layers have no RoPE (ErgoConfig.convert_rope_params_to_dict: {"sliding_attention": flat, "full_attention":
  /// None}); null: a flat dict is every layer's.
  const char* flat_rope_type = nullptr;
  const char* flat_no_rope_type = nullptr;
  /// MLA classes whose RoPE dict's partial_rotary_factor is a share of head_dim, not of qk_rope_head_dim (Dots 3
  /// Note's class sets qk_rope_head_dim / head_dim): the rotated width int(head_dim * factor) must be the
  /// qk_rope_head_dim channels its attention rotates (rotary's head_dim), which are rotated whole.
  bool partial_of_head_dim = false;
  /// The class sets partial_rotary_factor whatever the file's top level says (Bamba: 0.5); a RoPE dict's own still wins.
  bool forced_partial = false;
  /// head_dim without a file value is this multiple of hidden_size / num_attention_heads (Zamba2: 2).
  int64_t head_dim_hidden_multiple = 1;

  // Per layer type (src/core/layer_types.cc). rope_dict above may be nested per layer type (LFM3, Laguna...).
  /// The class converts its RoPE fields as Gemma3TextConfig.convert_rope_params_to_dict does: full_attention =
  /// {"rope_type": "default"} updated with rope_scaling, base rope_theta (default: rope_theta above); sliding_attention
  /// = default frequencies, base read from this key (default: local_rope_theta; "": always local_rope_theta, as OLMo 3,
  /// whose one rope_theta goes to full_attention only); a flat rope_parameters is dropped. Null: not such a class.
  const char* local_theta_key = nullptr;
  double local_rope_theta = 10000.0;
  /// Without layer_types: every full_every-th layer (1-based; read from full_every_key when given) is
  /// full_attention, the others sliding_attention (0: the class derives none rotary follows); also layer 0
  /// (first_full) and the last layer (last_full).
  int64_t full_every = 0;
  const char* full_every_key = nullptr;
  /// full_every_key is a strict int field of the class (ERGO's dataclass: a float, bool or null is refused); false:
  /// a kwarg the class computes with Python's `%` (Gemma 3, T5Gemma 2: 2.0 and true count as 2 and 1).
  bool full_every_int_only = false;
  bool first_full = false;
  bool last_full = false;
  /// The class fills each layer type's entry, the file's own too, from its nested dict: a missing rope_theta is the
  /// top-level one, else the class entry's; other missing keys (partial_rotary_factor) the class entry's (NeoMME).
  bool class_dict_fills_entries = false;
  /// The head_dim of full_attention layers when the file has no per_layer_config (a top-level global_head_dim
  /// replaces it; 0: the top level's). Gemma 4: 512 (its class builds per_layer_config from it).
  int64_t full_head_dim = 0;
  /// The class makes the last layer full_attention, a file's layer_types too (Gemma 4).
  bool forces_last_full = false;
  /// The class keys rope_parameters by RoPE label (main / compress), each layer type reading one label's, over the
  /// trailing head_dim x partial_rotary_factor channels of a head (DeepSeek V4: src/core/rope_labels.cc).
  bool rope_labels = false;
  /// The model's default-type frequencies ignore partial_rotary_factor (its compute_default_rope_parameters spans
  /// the whole head_dim: Llama, Qwen2, Gemma 3 and most others in transformers 5.x); other types still read it, as
  /// transformers' generic functions do. Set from model_defaults_partial.cc's list or by an entry (per-layer-type
  /// models); applied by parse_spec.
  bool default_ignores_partial = false;
  /// The share the model's own default-type function reads when the RoPE dict has no partial_rotary_factor (an entry
  /// of a nested dict: its class does not copy a top-level factor there, though layer_types.cc copies it into the
  /// entries from the first non-default type on, as transformers' standardize_rope_params does; a flat dict: when
  /// the top level has none either); 0: the generic 1.0. MiMo-V2-Flash: 0.334 (other types read the generic rules).
  double default_type_partial = 0.0;
  /// The class rebuilds a nested rope_parameters from its layer types' entries alone, dropping a `truncate` beside
  /// them (Step 3.7's text config): its YaRN entries always truncate.
  bool drops_keys_beside_types = false;
};

/// Whether transformers' own default-type RoPE of `model_type` ignores partial_rotary_factor (the list in
/// model_defaults_partial.cc, from scripts/survey_default_partial.py); false for a model type transformers does not know.
bool default_type_ignores_partial(std::string_view model_type);
/// That list (sorted).
std::span<const std::string_view> default_partial_ignorers();

/// The defaults of `model_type` (config.json's "model_type"); for a model without an entry, the generic
/// ones (base 10000, full rotation, hidden_size / num_attention_heads, default type, half-split pairs).
const ModelDefaults& model_defaults(std::string_view model_type);

}  // namespace rotary::detail
