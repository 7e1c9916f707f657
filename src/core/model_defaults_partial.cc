// Internal: the model types whose transformers default-type RoPE ignores partial_rotary_factor (generated list).
#include <algorithm>
#include <array>
#include <string_view>

#include "core/model_defaults.h"

namespace rotary::detail {
namespace {

// scripts/survey_default_partial.py --table on transformers 5.25: each model's own RotaryEmbedding, default type,
// partial_rotary_factor 0.5 in rope_parameters, gives as many frequencies as with 1.0 (its
// compute_default_rope_parameters uses the whole head_dim). Sorted. The models that read the factor (Phi, StableLM,
// GPT-NeoX, GLM, Qwen3-Next, Nemotron...) are not listed; per-layer-type models set the flag in model_defaults.cc.
constexpr std::array<std::string_view, 173> kIgnorers = {
    "EvollaModel", "afmoe", "apertus", "apertus1p5", "apertus1p5_text", "arcee", "aria", "aria_text", "axk1", "axk2",
    "bailing_hybrid", "bitnet", "blt", "blt_global_transformer", "blt_local_decoder", "blt_local_encoder",
    "blt_patcher", "chameleon", "cohere", "cohere2", "cohere2_moe", "cosmos3_edge", "cosmos3_edge_text", "csm",
    "csm_depth_decoder_model", "cwm", "dbrx", "deepseek_ocr2", "deepseek_ocr2_encoder", "deepseek_ocr2_text",
    "deepseek_v2", "deepseek_v3", "deepseek_v32", "dia", "dia_decoder", "dia_encoder", "diffllama", "doge", "dots1",
    "emu3", "emu3_text_model", "eomt_dinov3", "ernie4_5", "ernie4_5_moe", "ernie4_5_vl_moe", "ernie4_5_vl_moe_text",
    "esmc", "eurobert", "evolla", "exaone4", "exaone_moe", "falcon", "falcon_h1", "flex_olmo", "flint", "gemma",
    "gemma2", "glm_moe_dsa", "gpt_oss", "gradium_phonon_tts", "granite", "granite4_vision", "granite4_vision_text",
    "granite_docling_text", "granite_swa", "granitemoe", "granitemoe_swa", "granitemoehybrid", "granitemoeshared",
    "gte", "helium", "higgs_audio_v2", "hrm_text", "hunyuan_v1_dense", "hunyuan_v1_moe", "hunyuan_vl",
    "hunyuan_vl_text", "hy_v3", "hy_v4", "hy_v4_vl", "hy_v4_vl_text", "hyperclovax", "idefics", "jais2", "jetmoe",
    "jina_embeddings_v3", "kolibri1", "kolibri1_1", "kyutai_speech_to_text", "lara_mini", "lasr_encoder", "lfm2",
    "lfm2_moe", "llama", "llama4", "llama4_text", "longcat_flash", "mimi", "mimi_decoder", "mimi_encoder", "minicpm3",
    "minicpm5_moe", "minimax", "ministral", "ministral3", "mistral", "mistral4", "mistral_large4",
    "mistral_large4_text", "mixtral", "mllama", "mllama_text_model", "molmo2", "molmo2_text", "moshi", "muse_glimmer",
    "muse_glimmer_assistant", "muse_glimmer_text", "muse_spark_text", "nanochat", "neucodec", "nomic_bert", "olmo",
    "olmo2", "olmo_hybrid", "olmoe", "openai_privacy_filter", "paddleocr_vl", "paddleocr_vl_text", "pe_audio_encoder",
    "pe_audio_video_encoder", "pe_video_encoder", "phimoe", "pocket_tts", "pocket_tts_audio_tokenizer",
    "pocket_tts_audio_tokenizer_decoder", "pocket_tts_audio_tokenizer_encoder", "qwen2", "qwen2_5_omni",
    "qwen2_5_omni_dit", "qwen2_5_omni_talker", "qwen2_5_omni_text", "qwen2_5_omni_thinker", "qwen2_5_vl",
    "qwen2_5_vl_text", "qwen2_moe", "qwen2_vl", "qwen2_vl_text", "qwen3", "qwen3_moe", "qwen3_omni_moe",
    "qwen3_omni_moe_talker_code_predictor", "qwen3_omni_moe_talker_text", "qwen3_omni_moe_text",
    "qwen3_omni_moe_thinker", "qwen3_vl", "qwen3_vl_moe", "qwen3_vl_moe_text", "qwen3_vl_text", "seed_oss", "smollm3",
    "starcoder2", "t5_gemma_module", "timesfm2_5", "unlimited_ocr", "unlimited_ocr_text", "vaultgemma",
    "voxtral_realtime", "voxtral_realtime_encoder", "voxtral_realtime_text", "xcodec2", "youtu", "zamba2"
};

}  // namespace

bool default_type_ignores_partial(std::string_view model_type) {
  return std::binary_search(kIgnorers.begin(), kIgnorers.end(), model_type);
}

std::span<const std::string_view> default_partial_ignorers() { return kIgnorers; }

}  // namespace rotary::detail
