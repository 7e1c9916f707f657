// Internal: the table of transformers' config-class RoPE defaults per model_type (facts of transformers 5.x).
#include "core/model_defaults.h"

#include <algorithm>
#include <vector>

namespace rotary::detail {
namespace {

using json = nlohmann::json;

// Class default RoPE dicts. gpt-oss's leaves rope_theta to the table, so a top-level rope_theta still wins, as
// in transformers; Apertus's class dict carries its own, which a top-level rope_theta does not replace.
const char* const kNoRope =
    "its attention has no rotary embedding in transformers (positions enter as learned or fixed absolute embeddings, "
    "or as ALiBi or relative attention biases): there is no RoPE to read (a remote-code model that reuses this "
    "model_type with a RoPE of its own: build the Spec from its fields)";
const json kGptOssRope = {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                          {"truncate", false}, {"original_max_position_embeddings", 4096}};
const json kApertusRope = {{"rope_type", "llama3"}, {"rope_theta", 12000000.0}, {"factor", 8.0},
                           {"original_max_position_embeddings", 8192}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}};

// Class dicts of Apertus 1.5 (Apertus's), Higgs Audio v2 (llama3), Ministral 3 and Mistral 4 (yarn; their
// llama_4_scaling_beta scales queries outside RoPE: docs/scaling.md), Mistral Large 4 (yarn, attention factor 1).
// Mistral 4's partial_rotary_factor (qk_rope's share) is its config.cc branch's.
const json kHiggsAudioV2Rope = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 32.0},
                                {"low_freq_factor", 0.125}, {"high_freq_factor", 0.5},
                                {"original_max_position_embeddings", 1024}};
json yarn(double theta, double factor, int64_t orig) {
  return {{"rope_type", "yarn"}, {"rope_theta", theta}, {"factor", factor}, {"original_max_position_embeddings", orig},
          {"beta_fast", 32.0}, {"beta_slow", 1.0}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
}
const json kMinistral3Rope = yarn(1000000.0, 16.0, 16384);
const json kMistral4Rope = yarn(10000.0, 128.0, 8192);
const json kMistralLarge4Rope = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 2048.0},
                                 {"original_max_position_embeddings", 512}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                                 {"attention_factor", 1.0}};

// CWM's class dict (llama3; its own base, which a top-level rope_theta does not replace).
const json kCwmRope = {{"rope_type", "llama3"}, {"rope_theta", 1000000.0}, {"factor", 16.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
// Class dicts nested per layer type (layer_types.cc reads them per type; the one-Spec readers refuse them).
json per_type(const json& full, const json& sliding, const char* full_name = "full_attention",
              const char* sliding_name = "sliding_attention") {
  return {{full_name, full}, {sliding_name, sliding}};
}
json rope(double theta) { return {{"rope_type", "default"}, {"rope_theta", theta}}; }
json rope(double theta, double partial) {
  return {{"rope_type", "default"}, {"rope_theta", theta}, {"partial_rotary_factor", partial}};
}
// Mellum: its class dict takes no top-level partial_rotary_factor (transformers leaves the entries without one).
const json kMellumRope = per_type(rope(500000.0, 1.0), rope(10000.0, 1.0));
const json kUltraBertRope = per_type(rope(2560000.0), rope(10000.0));
const json kDoryRope = per_type(rope(10000000.0), rope(10000.0));
const json kLfm3Rope = per_type({{"rope_type", "proportional"}, {"rope_theta", 1000000.0}, {"partial_rotary_factor", 0.5}},
                                rope(10000.0));
const json kLagunaRope = per_type(rope(500000.0, 0.5), rope(10000.0, 1.0));
const json kMimoV2FlashRope = per_type(rope(5000000.0, 0.334), rope(10000.0, 0.334));
const json kZayaRope = per_type(rope(5000000.0, 0.5), rope(10000.0, 0.5), "hybrid", "hybrid_sliding");
const json kNeoMmeRope = per_type(rope(1000000.0, 0.25), rope(10000.0, 1.0));
// Gemma 4's class dicts (full: proportional over a quarter of its 512-wide head; Embedding Gemma 2: default).
const json kGemma4Rope =
    per_type({{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}}, rope(10000.0));
const json kEmbeddingGemma2Rope = per_type(rope(1000000.0), rope(10000.0));
// Moonshine Streaming's and Muse Spark's class dicts (their partial factor and base win over top-level ones).
const json kMoonshineStreamingRope = rope(10000.0, 0.8);
const json kMuseSparkTextRope = rope(500000.0);

const char* const kDots3Flat =
    "its config class builds rope_parameters per layer type from swa_rope_theta (the sliding layers' base), the "
    "swa_* head widths and a derived layer pattern, which rotary does not read: pass the config transformers builds "
    "(the config object, its to_dict() or a file it saved), whose rope_parameters are nested per layer type";

/// One entry, built field by field: M("glm").partial(0.5).head(128).interleaved().
struct M : ModelDefaults {
  explicit M(std::string_view type) { model_type = type; }
  M& theta(double v) { rope_theta = v; return *this; }
  M& partial(double v) { partial_rotary_factor = v; return *this; }
  M& head(int64_t v) { head_dim = v; return *this; }
  M& qk_rope_head(int64_t v) { qk_rope_head_dim = v; return *this; }
  M& dict(const json& d) { rope_dict = &d; return *this; }
  M& sections(int64_t t, int64_t h, int64_t w, bool interleave) {
    mrope_section = {t, h, w};
    mrope_interleaved = interleave;
    return *this;
  }
  M& interleaved() { interleaved_pairs = pairing_fixed = true; return *this; }  // the code's pairs, whatever the flag
  M& interleave_flag() { interleaved_pairs = true; return *this; }  // rope_interleave, read by the code, defaults to true
  M& heads_from(std::string_view key) { heads_key = key; return *this; }
  M& hidden_from(std::string_view key) { hidden_key = key; return *this; }
  M& max_pos_from(std::string_view key, bool wins = false) { max_pos_key = key; max_pos_key_wins = wins; return *this; }
  M& base_in(std::string_view key) { theta_in = key; return *this; }
  M& head_key(std::string_view key) { head_dim_key = key; return *this; }
  M& qk_nope_head(int64_t v) { qk_nope_head_dim = v; return *this; }
  M& no_rotary_dim() { ignores_rotary_dim = true; return *this; }
  M& text_only() { text_positions_only = true; return *this; }
  M& refused(const char* why) { unsupported = why; return *this; }
  M& refused_if(std::string_view key, const char* why) { refused_if_key = key; refused_if_why = why; return *this; }
  M& nested_only(const char* why) { flat_refused = why; return *this; }
  M& flat_is(const char* type, const char* no_rope_type) {
    flat_rope_type = type;
    flat_no_rope_type = no_rope_type;
    return *this;
  }
  M& share_of_head() { partial_of_head_dim = true; return *this; }
  M& labels() { rope_labels = true; return *this; }
  M& default_partial(double v) { default_type_partial = v; return *this; }
  M& types_only() { drops_keys_beside_types = true; return *this; }
  M& head_times_hidden_per_head(int64_t v) { head_dim_hidden_multiple = v; return *this; }
  /// Gemma3TextConfig's conversion (model_defaults.h): global base `global`, the local one from `key` (default `local`),
  /// every `every`-th layer full (read from `every_key` when given); default-type frequencies ignore the partial factor.
  M& gemma3_style(double global, const char* key, double local, int64_t every, const char* every_key = nullptr) {
    rope_theta = global;
    local_theta_key = key;
    local_rope_theta = local;
    return layers(every, every_key).default_whole_head();
  }
  M& layers(int64_t every, const char* key = nullptr, bool first = false, bool last = false) {
    full_every = every;
    full_every_key = key;
    first_full = first;
    last_full = last;
    return *this;
  }
  M& int_count() { full_every_int_only = true; return *this; }  // full_every_key: a strict int field
  M& partial_forced() { forced_partial = true; return *this; }
  M& fills_entries() { class_dict_fills_entries = true; return *this; }
  M& full_head(int64_t v) { full_head_dim = v; return *this; }
  /// Gemma4TextConfig's defaults: head_dim 256 (512 for full_attention layers), class dict `d` per layer type, every
  /// sixth layer full and the last one too (a file's layer_types too); default-type frequencies span the whole head.
  M& gemma4(const json& d) {
    forces_last_full = true;
    return head(256).dict(d).layers(6, nullptr, false, true).full_head(512).default_whole_head();
  }
  M& default_whole_head() { default_ignores_partial = true; return *this; }
};

// Only the models whose defaults differ from the generic ones. GPT-NeoX reads its own legacy names
// (config.cc); Gemma 3's legacy fields are read by layer_types.cc. python/tests/test_hf_class_defaults.py
// checks the entries against the installed transformers (frequencies and pairing on trimmed files; GPT-J's
// pairing is tests/core/config_presets_test.cc's).
const std::vector<ModelDefaults> kTable = {
    M("EvollaModel").theta(500000.0),
    M("afmoe").head(128),
    M("apertus").theta(12000000.0).dict(kApertusRope),
    M("apertus1p5").theta(12000000.0).dict(kApertusRope),  // its text part's class dict: Apertus's
    M("apertus1p5_text").theta(12000000.0).dict(kApertusRope),
    // Model types whose attention has no rotary embedding at all (learned or fixed absolute positions, ALiBi or
    // relative biases): a config of theirs has no RoPE to read, and the generic reading would invent one (base 10000).
    M("albert").refused(kNoRope), M("bart").refused(kNoRope), M("bert").refused(kNoRope),
    M("bloom").refused(kNoRope), M("camembert").refused(kNoRope), M("clip").refused(kNoRope),
    M("clip_text_model").refused(kNoRope), M("clip_vision_model").refused(kNoRope), M("deberta").refused(kNoRope),
    M("deberta-v2").refused(kNoRope), M("distilbert").refused(kNoRope), M("electra").refused(kNoRope),
    M("gpt2").refused(kNoRope), M("gpt_bigcode").refused(kNoRope), M("gpt_neo").refused(kNoRope),
    M("mbart").refused(kNoRope), M("mpt").refused(kNoRope), M("mt5").refused(kNoRope), M("opt").refused(kNoRope),
    M("roberta").refused(kNoRope), M("siglip").refused(kNoRope), M("siglip_text_model").refused(kNoRope),
    M("siglip_vision_model").refused(kNoRope),
    M("t5").refused(kNoRope), M("vit").refused(kNoRope), M("whisper").refused(kNoRope),
    M("xlm-roberta").refused(kNoRope),
    // transformers' Falcon rotates q/k unless config.alibi (the RW models), when it adds ALiBi biases instead.
    M("falcon").refused_if("alibi",
                           "then uses ALiBi attention biases and no rotary embedding; there is no RoPE to read"),
    M("audioflamingo3_encoder").refused("its attention has no rotary embedding (the encoder adds learned absolute "
                                        "positions, embed_positions): read the composite's text_config for the "
                                        "language model's RoPE"),
    M("axk1").qk_rope_head(64).interleave_flag(),  // rope_interleave defaults to true in this and the other MLA classes below
    M("axk2").qk_rope_head(32).interleaved(),
    // head_dim is qk_rope_head_dim; max_position_embeddings is model_max_length (its attribute_map).
    M("bailing_hybrid").theta(6000000.0).qk_rope_head(64).interleaved().max_pos_from("model_max_length", /*wins=*/true),
    M("bamba").partial(0.5).partial_forced(),  // "hardcode for BC": a top-level partial_rotary_factor is not read
    M("bitnet").theta(500000.0),
    M("blt").theta(500000.0).interleaved(),  // repeat_interleave'd cos/sin, rotate_half on x[::2] / x[1::2]
    M("blt_global_transformer").theta(500000.0).interleaved(),
    M("blt_local_decoder").theta(500000.0).interleaved(),
    M("blt_local_encoder").theta(500000.0).interleaved(),
    M("blt_patcher").interleaved(),  // base 1e4, unlike the other blt parts
    M("codegen").interleaved(),  // rotate_every_two, as GPT-J
    M("cohere").theta(500000.0).interleaved(),
    M("cohere2").interleaved(),
    M("cohere2_moe").head(128).interleaved(),
    // Cohere Compass: per layer type (a null entry: no RoPE), each entry's code default [24, 20, 20], half-split pairs.
    M("cohere_compass").sections(24, 20, 20, true),
    M("cohere_compass_text").sections(24, 20, 20, true),
    // Composites list their text part's class defaults (config_root.cc finds that part; a nested object without
    // a model_type takes its nearest container's): colpali's vlm_config.text_config is Gemma's.
    M("colpali").head(256),
    M("colqwen2").theta(1000000.0).sections(16, 24, 24, false),  // vlm_config.text_config: Qwen2-VL's text
    M("cosmos3_edge").theta(100000000.0).head(128).sections(24, 20, 20, true),  // its class dict's base and sections
    M("cosmos3_edge_text").theta(100000000.0).head(128).sections(24, 20, 20, true),
    M("csm").theta(500000.0),
    M("csm_depth_decoder_model").theta(500000.0),
    M("cwm").head(128).dict(kCwmRope),
    // DBRX: its attribute_map, and its Hub files' base in attn_config.
    M("dbrx").hidden_from("d_model").heads_from("n_heads").max_pos_from("max_seq_len").base_in("attn_config"),
    M("deepseek_v32").qk_rope_head(64).interleaved(),
    M("deepseek_v4").head(512).partial(0.125).theta(10000.0).interleaved().labels(),  // rope_labels.cc
    M("dia").head(128),  // decoder_config: dia_decoder
    M("dia_decoder").head(128),
    M("dia_encoder").head(128),
    M("diffusion_gemma").gemma4(kGemma4Rope),
    M("diffusion_gemma_text").gemma4(kGemma4Rope),
    // Dots 3 Note: DeepSeek MLA (q_pass, q_rot: rotary's head_dim is qk_rope_head_dim, rotated in interleaved pairs by
    // apply_rotary_pos_emb_interleave), per layer type; its class sets each entry's partial_rotary_factor to
    // qk_rope_head_dim / head_dim. Hub-style files (no nested rope_parameters) are refused: kDots3Flat.
    M("dots3_note").theta(80000000.0).head(256).qk_rope_head(64).interleaved().share_of_head()
        .nested_only(kDots3Flat),
    M("dots3_note_text").theta(80000000.0).head(256).qk_rope_head(64).interleaved().share_of_head()
        .nested_only(kDots3Flat),
    M("dory").head(256).dict(kDoryRope).layers(4).default_whole_head(),
    M("deepseek_v2").qk_rope_head(64).interleaved(),
    M("deepseek_v3").qk_rope_head(64).interleave_flag(),
    M("embedding_gemma2").gemma4(kEmbeddingGemma2Rope),
    M("embedding_gemma2_text").gemma4(kEmbeddingGemma2Rope),
    M("emu3").theta(1000000.0),
    M("emu3_text_model").theta(1000000.0),
    // ERGO: per layer type, every global_attention_every_n_layers-th layer (4) full_attention, without RoPE (its
    // entry null); a flat RoPE dict is the sliding_attention layers' (ErgoConfig.convert_rope_params_to_dict);
    // default_theta 1e6; rotate_half on x[..., ::2] / x[..., 1::2] with repeat_interleave'd cos/sin, default
    // frequencies over the whole head.
    M("ergo").theta(1000000.0).interleaved().default_whole_head().layers(4, "global_attention_every_n_layers")
        .flat_is("sliding_attention", "full_attention").int_count(),
    M("ernie4_5").theta(500000.0).head(128).interleaved(),
    M("ernie4_5_moe").theta(500000.0).interleaved(),
    M("ernie4_5_vl_moe").theta(500000.0).interleaved().text_only(),
    M("ernie4_5_vl_moe_text").theta(500000.0).interleaved().text_only(),
    M("evolla").theta(500000.0),
    M("flex_olmo").theta(500000.0),
    M("flint").head(128),
    M("gemma").head(256),
    M("gemma2").head(256),
    M("gemma3").head(256).gemma3_style(1000000.0, "rope_local_base_freq", 10000.0, 6, "sliding_window_pattern"),
    M("gemma3_text").head(256).gemma3_style(1000000.0, "rope_local_base_freq", 10000.0, 6, "sliding_window_pattern"),
    M("gemma3n").head(256).gemma3_style(1000000.0, "rope_local_base_freq", 10000.0, 5),
    M("gemma3n_text").head(256).gemma3_style(1000000.0, "rope_local_base_freq", 10000.0, 5),
    M("gemma4").gemma4(kGemma4Rope),
    M("gemma4_text").gemma4(kGemma4Rope),
    M("gemma4_unified").gemma4(kGemma4Rope),
    M("gemma4_unified_text").gemma4(kGemma4Rope),
    M("glm").partial(0.5).head(128).interleaved(),
    M("glm4").partial(0.5).head(128).interleaved(),
    M("glm4_moe").partial(0.5),
    M("glm4_moe_lite").qk_rope_head(64).interleave_flag(),
    // GLM-4V / GLM-Image / GLM-OCR code: contiguous M-RoPE blocks [8, 12, 12] without a mrope_section (as Qwen2-VL).
    M("glm4v").interleaved().sections(8, 12, 12, false),  // rotate_half_llm on repeat_interleave'd M-RoPE cos/sin
    M("glm4v_moe").partial(0.5).sections(8, 12, 12, false),  // half-split pairs, unlike glm4v
    M("glm4v_moe_text").partial(0.5).sections(8, 12, 12, false),
    M("glm4v_text").interleaved().sections(8, 12, 12, false),
    M("glm_image").sections(8, 12, 12, false),
    M("glm_image_text").sections(8, 12, 12, false),
    M("glm_moe_dsa").qk_rope_head(64).interleaved(),
    M("glm_ocr").interleaved().sections(8, 12, 12, false),  // rotate_half_llm: the text model's pairs
    M("glm_ocr_text").interleaved().sections(8, 12, 12, false),
    M("glmasr_encoder").partial(0.5),
    M("gpt_oss").theta(150000.0).head(64).dict(kGptOssRope),
    M("gptj").interleaved(),
    M("gte").theta(160000.0),
    M("helium").theta(100000.0).head(128).interleaved(),
    M("higgs_audio_v2").theta(500000.0).head(128).dict(kHiggsAudioV2Rope),
    M("hrm_text").head(128),
    // HunYuan-VL: text positions only (docs/scaling.md): recomposition_frequencies splits cat(freq, freq) over the
    // whole head by 2 x mrope_section (its class renames xdrope_section to it), which is no rotation a Spec expresses.
    M("hunyuan_vl").text_only(),
    M("hunyuan_vl_text").text_only(),
    M("hy_v3").theta(11158840.0).head(128),
    M("hy_v4").qk_rope_head(64).interleaved(),
    // HY-V4-VL: the config class sets mrope_section [12, 10, 10] (its code's own [24, 20, 20] is never reached).
    M("hy_v4_vl").qk_rope_head(64).interleaved().sections(12, 10, 10, true),
    M("hy_v4_vl_text").qk_rope_head(64).interleaved().sections(12, 10, 10, true),
    M("jetmoe").head(128).head_key("kv_channels"),
    M("jina_embeddings_v3").theta(20000.0),
    M("kolibri1").head(128),
    M("laguna").head(128).dict(kLagunaRope).layers(1),  // every layer full_attention
    M("lara_mini").head(128),
    M("lfm2").theta(1000000.0),
    M("lfm2_moe").theta(1000000.0),
    M("lfm3").head(128).dict(kLfm3Rope).default_whole_head(),  // its layer types (conv among them) are not derived
    M("lightglue").refused("its rotary angles are keypoint coordinates through a learned projection "
                           "(LightGluePositionalEncoder), not token positions times fixed frequencies, which a Spec "
                           "does not express"),
    M("llama4").theta(500000.0).head(128).interleaved(),
    M("llama4_text").theta(500000.0).head(128).interleaved(),
    M("longcat_flash").theta(10000000.0).qk_rope_head(64).interleaved(),
    M("minicpm3").qk_rope_head(32),
    M("minicpm5_moe").theta(5000000.0).head(128),
    M("minimax").theta(1000000.0),
    M("mellum").head(128).dict(kMellumRope).layers(1),
    M("mimo_v2_flash").head(192).dict(kMimoV2FlashRope).layers(6, nullptr, true).default_partial(0.334),
    M("minimax_m2").theta(5000000.0).head(128),
    M("minimax_m3_vl").theta(5000000.0).head(128).no_rotary_dim(),
    M("minimax_m3_vl_text").theta(5000000.0).head(128).no_rotary_dim(),
    M("ministral3").theta(1000000.0).head(128).dict(kMinistral3Rope),
    M("mistral4").qk_rope_head(64).qk_nope_head(64).interleave_flag().dict(kMistral4Rope),
    // head_dim is qk_rope_head_dim; its code always rotates interleaved pairs. LeRoPE's learned per-frequency scale
    // and its NoPE layers are checkpoint / per-layer matters a Spec does not hold (docs/scaling.md).
    M("mistral_large4").qk_rope_head(64).interleaved().dict(kMistralLarge4Rope),
    M("mistral_large4_text").qk_rope_head(64).interleaved().dict(kMistralLarge4Rope),
    M("mixtral").theta(1000000.0),
    M("mllama").theta(500000.0),
    M("mllama_text_model").theta(500000.0),
    M("molmo2").head(128),
    M("molmo2_text").head(128),
    M("moonshine").partial(0.9).interleaved().heads_from("decoder_num_attention_heads"),  // x[0::2] with x[1::2]
    // Moonshine Streaming: its first-half cos/sin repeat_interleave'd, pairs (x[2i], x[2i+1]).
    M("moonshine_streaming").interleaved().dict(kMoonshineStreamingRope),
    M("moonshine_streaming_encoder").refused("its attention has no rotary embedding (the encoder rotates nothing; "
                                             "the decoder's RoPE is the moonshine_streaming config's)"),
    M("muse_glimmer").head(128),
    M("muse_glimmer_assistant").theta(500000.0).head(128),
    M("muse_glimmer_text").head(128),
    M("muse_spark_text").head(64).dict(kMuseSparkTextRope),
    M("musicflamingo").refused("its rope_parameters are the audio side's 2-D time RoPE (window and frame axes, "
                               "angles scaled by each window's timestamps), which a Spec does not express; the "
                               "language model's RoPE is its text_config's: pass config.text_config"),
    M("nanochat").refused("its code rotates by minus the angle (rotate_half is cat(x2, -x1)), which a Spec does not "
                          "express: build the Spec from the config's fields and rotate with the inverse direction"),
    M("nemotron").partial(0.5),
    M("nemotron3_5_transcribe_asr_audio").partial(0.5),
    M("nemotron3_5_transcribe_word_timestamp").partial(0.5),
    M("neomme").head(64).dict(kNeoMmeRope).layers(6, nullptr, false, true).fills_entries(),
    M("neucodec").head(64),
    M("nomic_bert").theta(1000.0),
    M("olmo3").gemma3_style(500000.0, "", 500000.0, 4),  // a top-level rope_theta is full_attention's only
    M("openai_privacy_filter").theta(150000.0).head(64).dict(kGptOssRope).interleaved(),  // x[..., ::2] / x[..., 1::2]
    M("paddleocr_vl").theta(500000.0).head(128).sections(16, 24, 24, false),
    M("paddleocr_vl_text").theta(500000.0).head(128).sections(16, 24, 24, false),
    M("paligemma").head(256),  // its text_config's class: Gemma (ColPali's vlm_config)
    M("pe_audio_encoder").theta(20000.0).head(128).interleaved(),
    M("pe_audio_video_encoder").theta(20000.0).head(128).interleaved(),
    M("pe_video_encoder").theta(20000.0).head(128).interleaved(),
    M("persimmon").partial(0.5),
    M("phi").partial(0.5),
    M("phimoe").theta(1000000.0),
    M("qwen2_5_omni").theta(1000000.0).sections(16, 24, 24, false),  // thinker_config.text_config
    M("qwen2_5_omni_dit").head(64),
    M("qwen2_5_omni_talker").theta(1000000.0).head(128).sections(16, 24, 24, false),
    M("qwen2_5_omni_text").theta(1000000.0).sections(16, 24, 24, false),
    M("qwen2_5_omni_thinker").theta(1000000.0).sections(16, 24, 24, false),  // its text_config's class
    M("qwen2_5_vl").theta(1000000.0).sections(16, 24, 24, false),
    M("qwen2_5_vl_text").theta(1000000.0).sections(16, 24, 24, false),
    M("qwen2_vl").theta(1000000.0).sections(16, 24, 24, false),
    M("qwen2_vl_text").theta(1000000.0).sections(16, 24, 24, false),
    M("qwen3").head(128),
    M("qwen3_5").partial(0.25).head(256).sections(11, 11, 10, true),
    M("qwen3_5_moe").partial(0.25).head(256).sections(11, 11, 10, true),
    M("qwen3_5_moe_text").partial(0.25).head(256).sections(11, 11, 10, true),
    M("qwen3_5_text").partial(0.25).head(256).sections(11, 11, 10, true),
    M("qwen3_omni_moe").theta(1000000.0).sections(24, 20, 20, true),  // thinker_config.text_config
    M("qwen3_omni_moe_talker_code_predictor").head(128),
    M("qwen3_omni_moe_talker_text").sections(24, 20, 20, true),
    M("qwen3_omni_moe_text").theta(1000000.0).sections(24, 20, 20, true),
    M("qwen3_omni_moe_thinker").theta(1000000.0).sections(24, 20, 20, true),  // its text_config's class
    M("qwen3_vl").theta(500000.0).head(128).sections(24, 20, 20, true),
    M("qwen3_vl_moe").theta(500000.0).sections(24, 20, 20, true),  // head_dim: hidden_size / heads, unlike qwen3_vl
    M("qwen3_vl_moe_text").theta(500000.0).sections(24, 20, 20, true),
    M("qwen3_vl_text").theta(500000.0).head(128).sections(24, 20, 20, true),
    M("qwen3_next").partial(0.25).head(256),
    M("qwen4_exp").head(256).sections(11, 11, 10, true),  // the sections fit a partial_rotary_factor of 0.25
    M("qwen4_exp_text").head(256).sections(11, 11, 10, true),
    M("recurrent_gemma").partial(0.5),
    // SAM 3: its text encoder (text_config) is CLIP's, without RoPE, and its vision backbone's RoPE is 2-D axial
    // (rows and columns of the patch grid). A composite's refusal is read before its parts' (config.cc), so a sam3
    // file is refused as sam3, not as the clip_text_model that get_text_config() finds.
    M("sam3").refused("it has no text-decoder RoPE that rotary reads: its text encoder (text_config, CLIP) has no "
                      "rotary embedding and its vision RoPE is 2-D axial (vision_config.backbone_config, rope_type "
                      "axial: rows and columns of the patch grid), which a Spec does not express"),
    M("sam3_vision_model").refused("its RoPE is 2-D axial (backbone_config, rope_type axial: rows and columns of the "
                                   "patch grid), which a Spec does not express; there is no text RoPE to read"),
    M("seed_oss").head(128),
    M("smollm3").theta(2000000.0),
    M("solar_open").theta(1000000.0).head(128),
    M("stablelm").partial(0.25),
    M("step3p5").types_only(),  // Step 3.7's text config
    M("step3p7").types_only(),
    M("t5_gemma_module").head(256),
    M("t5gemma").head(256),  // decoder: t5_gemma_module
    // t5gemma2's decoder: t5gemma2_decoder.
    M("t5gemma2").head(256).gemma3_style(1000000.0, "rope_local_base_freq", 10000.0, 6, "sliding_window_pattern"),
    M("t5gemma2_decoder").head(256).gemma3_style(1000000.0, "rope_local_base_freq", 10000.0, 6, "sliding_window_pattern"),
    M("t5gemma2_text").head(256).gemma3_style(1000000.0, "rope_local_base_freq", 10000.0, 6, "sliding_window_pattern"),
    M("timesfm2_5").head(80),
    M("ultrabert").dict(kUltraBertRope).layers(3).default_whole_head(),
    M("vaultgemma").head(256),
    M("voxtral_realtime").theta(1000000.0).head(128),
    M("voxtral_realtime_encoder").head(64),
    M("xcodec2").head(64),
    M("youtu").qk_rope_head(64).interleave_flag(),
    M("zamba2").head_key("attention_head_dim").head_times_hidden_per_head(2),  // 2 * hidden_size / heads
    M("zaya").head(128).dict(kZayaRope),  // layer types hybrid / hybrid_sliding: every layer hybrid
};

const ModelDefaults kGeneric{};

/// kTable with default_ignores_partial set from model_defaults_partial.cc's list (an entry of its own for a listed
/// model type kTable lacks: generic defaults otherwise).
const std::vector<ModelDefaults>& table() {
  static const std::vector<ModelDefaults> t = [] {
    std::vector<ModelDefaults> v = kTable;
    for (ModelDefaults& m : v)
      if (default_type_ignores_partial(m.model_type)) m.default_ignores_partial = true;
    for (std::string_view name : default_partial_ignorers())
      if (std::none_of(v.begin(), v.end(), [&](const ModelDefaults& m) { return m.model_type == name; }))
        v.push_back(M(name).default_whole_head());
    return v;
  }();
  return t;
}

}  // namespace

const ModelDefaults& model_defaults(std::string_view model_type) {
  for (const ModelDefaults& m : table())
    if (m.model_type == model_type) return m;
  return kGeneric;
}

}  // namespace rotary::detail
