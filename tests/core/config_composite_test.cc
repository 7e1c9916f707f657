// Composite config.json documents: the language model's settings read where transformers' get_text_config() finds them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rotary/config.h"
#include "rotary/types.h"
#include "rotary/freqs.h"

namespace {

using rotary::Pairing;
using rotary::Spec;

Spec parse(const std::string& text) { return rotary::spec_from_hf_config_json(text, "test.json"); }

// Qwen2.5-Omni-7B's config.json, its RoPE fields and their containers (thinker_config.text_config).
const char* kQwen25Omni = R"({"model_type": "qwen2_5_omni", "enable_audio_output": true,
  "talker_config": {"model_type": "qwen2_5_omni_talker", "hidden_size": 896, "num_attention_heads": 12,
                    "head_dim": 128, "rope_theta": 1000000.0,
                    "rope_scaling": {"mrope_section": [16, 24, 24], "rope_type": "default", "type": "default"}},
  "thinker_config": {"model_type": "qwen2_5_omni_thinker",
    "audio_config": {"model_type": "qwen2_5_omni_audio_encoder", "d_model": 1280, "encoder_attention_heads": 20},
    "text_config": {"model_type": "qwen2_5_omni_text", "hidden_size": 3584, "num_attention_heads": 28,
                    "num_key_value_heads": 4, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                    "rope_scaling": {"mrope_section": [16, 24, 24], "rope_type": "default", "type": "default"}},
    "vision_config": {"model_type": "qwen2_5_omni_vision_encoder", "hidden_size": 1280, "num_heads": 16}}})";

TEST(ConfigComposite, QwenOmniReadsItsThinkersTextConfig) {
  const Spec s = parse(kQwen25Omni);
  EXPECT_EQ(s.head_dim, 128);  // 3584 / 28, not the talker's or the vision encoder's
  EXPECT_EQ(s.base, 1e6);
  EXPECT_EQ(s.max_position_embeddings, 32768);
  EXPECT_EQ(s.mrope.section, (std::vector<int64_t>{16, 24, 24}));
  EXPECT_FALSE(s.mrope.interleaved);
  EXPECT_EQ(rotary::compute_frequencies(s).inv_freq, rotary::default_inv_freq(1e6, 128));
  // Qwen3-Omni-MoE: the same containers; its text model interleaves the sections.
  const Spec q3 = parse(R"({"model_type": "qwen3_omni_moe", "thinker_config": {"model_type": "qwen3_omni_moe_thinker",
      "text_config": {"model_type": "qwen3_omni_moe_text", "hidden_size": 2048, "num_attention_heads": 32,
                      "head_dim": 128, "rope_theta": 1000000.0, "max_position_embeddings": 65536,
                      "rope_scaling": {"interleaved": true, "mrope_interleaved": true, "mrope_section": [24, 20, 20],
                                       "rope_type": "default"}}}})");
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_EQ(q3.mrope.section, (std::vector<int64_t>{24, 20, 20}));
  EXPECT_TRUE(q3.mrope.interleaved);
}

TEST(ConfigComposite, ANestedObjectWithoutModelTypeTakesItsContainersClassDefaults) {
  // A trimmed file: transformers builds the thinker's text part with Qwen3OmniMoeTextConfig's defaults (base 1e6,
  // interleaved sections [24, 20, 20]), which rotary lists under the composite's model_type.
  const Spec s = parse(R"({"model_type": "qwen3_omni_moe",
                           "thinker_config": {"text_config": {"hidden_size": 1024, "num_attention_heads": 8}}})");
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.base, 1e6);
  EXPECT_EQ(s.mrope.section, (std::vector<int64_t>{24, 20, 20}));
  EXPECT_TRUE(s.mrope.interleaved);
  // The thinker's own model_type, when given, is the nearer container.
  const Spec t = parse(R"({"model_type": "qwen2_5_omni", "thinker_config": {"model_type": "qwen2_5_omni_thinker",
                           "text_config": {"hidden_size": 1024, "num_attention_heads": 8}}})");
  EXPECT_EQ(t.base, 1e6);
  EXPECT_EQ(t.mrope.section, (std::vector<int64_t>{16, 24, 24}));
}

TEST(ConfigComposite, DecoderContainersAndVlmConfig) {
  // Dia: decoder_config (its class head_dim 128, not 1024 / 16); T5Gemma: decoder (head_dim 256).
  const Spec dia = parse(R"({"model_type": "dia", "encoder_config": {"hidden_size": 1024, "num_attention_heads": 16},
                             "decoder_config": {"hidden_size": 1024, "num_attention_heads": 16}})");
  EXPECT_EQ(dia.head_dim, 128);
  const Spec t5 = parse(R"({"model_type": "t5gemma", "decoder": {"hidden_size": 768, "num_attention_heads": 8,
                            "rope_theta": 20000.0}})");
  EXPECT_EQ(t5.head_dim, 256);
  EXPECT_EQ(t5.base, 20000.0);
  // ColQwen2: vlm_config.text_config (Qwen2-VL's text part).
  const Spec col = parse(R"({"model_type": "colqwen2", "vlm_config": {"model_type": "qwen2_vl",
      "text_config": {"hidden_size": 1536, "num_attention_heads": 12, "rope_theta": 1000000.0,
                      "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}}})");
  EXPECT_EQ(col.head_dim, 128);
  EXPECT_EQ(col.mrope.section, (std::vector<int64_t>{16, 24, 24}));
}

TEST(ConfigComposite, TopLevelHeadFieldsKeepTheTopLevel) {
  // A document that gives its own heads is read where it is, whatever objects it also holds.
  const Spec s = parse(R"({"hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 5e5,
                           "thinker_config": {"text_config": {"hidden_size": 1024, "num_attention_heads": 8}},
                           "decoder": {"head_dim": 64}})");
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.base, 5e5);
  EXPECT_EQ(s.pairing, Pairing::kHalfSplit);
}

TEST(ConfigComposite, OnlyTheCompositesLookInTheirContainers) {
  // thinker_config, vlm_config, decoder_config and decoder are the language model's only for the composites whose
  // config class reads them there: a model whose heads come from its own keys keeps them (JetMoE's kv_channels,
  // Moonshine's decoder_num_attention_heads), whatever objects it also holds.
  EXPECT_EQ(parse(R"({"model_type": "jetmoe", "kv_channels": 64, "hidden_size": 2048, "decoder": {"x": 1}})").head_dim,
            64);
  const Spec moon = parse(R"({"model_type": "moonshine", "hidden_size": 640, "decoder_num_attention_heads": 8,
                              "decoder_config": {"x": 1}, "decoder": {"x": 1}})");
  EXPECT_EQ(moon.head_dim, 80);
  EXPECT_EQ(moon.rotary_dim, 72);  // its class's partial 0.9
  // A composite's container with its own model_type: the nearest one decides (PaliGemma's text part is Gemma's).
  EXPECT_EQ(parse(R"({"model_type": "colpali", "vlm_config": {"model_type": "paligemma",
                      "text_config": {"hidden_size": 1024, "num_attention_heads": 8}}})").head_dim, 256);
}

TEST(ConfigComposite, ErrorsNameTheNestedField) {
  try {
    parse(R"({"model_type": "qwen2_5_omni", "thinker_config": {"text_config": {"hidden_size": 3584,
             "num_attention_heads": 28, "rope_theta": "big"}}})");
    FAIL() << "no error";
  } catch (const rotary::Error& e) {
    EXPECT_NE(std::string(e.what()).find("thinker_config.text_config.rope_theta must be a number"), std::string::npos)
        << e.what();
  }
}

}  // namespace
