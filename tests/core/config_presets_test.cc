// Reading HF config.json variants (v4/v5, legacy keys, VL text_config) and the built-in presets, via API and CLI.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "rotary/config.h"
#include "rotary/freqs.h"
#include "testing/shared.h"
#include "testing/tolerances.h"

namespace {

using json = nlohmann::json;
using rotary::Pairing;
using rotary::RopeType;
using rotary::Spec;

Spec parse(const std::string& text) { return rotary::spec_from_hf_config_json(text, "test.json"); }

void expect_same_frequencies(const Spec& a, const Spec& b, std::optional<int64_t> seq_len = std::nullopt) {
  const auto fa = rotary::compute_frequencies(a, seq_len), fb = rotary::compute_frequencies(b, seq_len);
  EXPECT_EQ(fa.inv_freq, fb.inv_freq);
  EXPECT_EQ(fa.attention_factor, fb.attention_factor);
}

/// Rewrites a v4 config (rope_theta + rope_scaling{type}) as v5 (rope_parameters{rope_type, rope_theta}).
json to_v5(json v4) {
  json rp = v4.contains("rope_scaling") && v4["rope_scaling"].is_object() ? v4["rope_scaling"] : json::object();
  if (rp.contains("type")) {
    rp["rope_type"] = rp["type"];
    rp.erase("type");
  }
  if (!rp.contains("rope_type")) rp["rope_type"] = "default";
  if (v4.contains("rope_theta")) rp["rope_theta"] = v4["rope_theta"];
  if (v4.contains("partial_rotary_factor")) rp["partial_rotary_factor"] = v4["partial_rotary_factor"];
  v4.erase("rope_scaling");
  v4.erase("rope_theta");
  v4.erase("partial_rotary_factor");
  v4["rope_parameters"] = rp;
  return v4;
}

TEST(Config, V4AndV5StylesAreEquivalent) {
  const char* v4_configs[] = {
      R"({"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 4096, "rope_theta": 10000.0})",
      R"({"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 4096, "rope_theta": 10000.0,
          "rope_scaling": {"type": "dynamic", "factor": 2.0}})",
      R"({"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 131072, "rope_theta": 500000.0,
          "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192, "rope_type": "llama3"}})",
      R"({"hidden_size": 2880, "num_attention_heads": 64, "head_dim": 64, "max_position_embeddings": 131072,
          "rope_theta": 150000.0, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
          "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false}})",
      R"({"hidden_size": 2560, "num_attention_heads": 32, "max_position_embeddings": 2048, "rope_theta": 10000.0,
          "partial_rotary_factor": 0.4})",
  };
  for (const char* text : v4_configs) {
    SCOPED_TRACE(text);
    const json v4 = json::parse(text);
    const Spec a = parse(v4.dump()), b = parse(to_v5(v4).dump());
    EXPECT_EQ(a.scaling.type, b.scaling.type);
    EXPECT_EQ(a.rotary_dim, b.rotary_dim);
    EXPECT_EQ(a.base, b.base);
    expect_same_frequencies(a, b, 9000);
  }
}

TEST(Config, TypeAndRopeTypeSpellingsAgree) {
  const Spec a = parse(R"({"head_dim": 64, "rope_scaling": {"type": "linear", "factor": 2}})");
  const Spec b = parse(R"({"head_dim": 64, "rope_scaling": {"rope_type": "linear", "factor": 2}})");
  EXPECT_EQ(a.scaling.type, RopeType::kLinear);
  expect_same_frequencies(a, b);
}

TEST(Config, HeadDimExplicitOrDerived) {
  EXPECT_EQ(parse(R"({"hidden_size": 1024, "num_attention_heads": 16, "head_dim": 128})").head_dim, 128);
  EXPECT_EQ(parse(R"({"hidden_size": 1024, "num_attention_heads": 16})").head_dim, 64);
  const Spec d = parse(R"({"hidden_size": 1024, "num_attention_heads": 16, "rope_theta": 5e5})");
  EXPECT_EQ(d.base, 5e5);
  EXPECT_EQ(parse(R"({"head_dim": 64})").base, 10000.0);  // HF default_theta
}

TEST(Config, FieldsTheFileLeavesOutTakeTheModelsConfigClassDefaults) {
  // transformers' config classes (python/tests/test_hf_class_defaults.py checks them live): Mixtral's base,
  // Phi's half rotation, Qwen3's head_dim whatever hidden_size / heads give, gpt-oss's yarn dict.
  const Spec mixtral = parse(R"({"model_type": "mixtral", "hidden_size": 1024, "num_attention_heads": 16})");
  EXPECT_EQ(mixtral.base, 1e6);
  EXPECT_EQ(parse(R"({"model_type": "phi", "hidden_size": 1024, "num_attention_heads": 16})").rotary_dim, 32);
  EXPECT_EQ(parse(R"({"model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16})").head_dim, 128);
  EXPECT_EQ(parse(R"({"model_type": "deepseek_v3", "head_dim": 192, "hidden_size": 1024, "num_attention_heads": 16})")
                .head_dim, 64);  // qk_rope_head_dim's default, the rotated part
  const Spec oss = parse(R"({"model_type": "gpt_oss", "hidden_size": 2880, "num_attention_heads": 64})");
  EXPECT_EQ(oss.scaling.type, RopeType::kYarn);
  EXPECT_EQ(oss.base, 150000.0);
  EXPECT_EQ(oss.head_dim, 64);
  const Spec vl = parse(R"({"model_type": "qwen3_vl", "text_config": {"hidden_size": 1024, "num_attention_heads": 8}})");
  EXPECT_EQ(vl.mrope.section, (std::vector<int64_t>{24, 20, 20}));
  EXPECT_TRUE(vl.mrope.interleaved);
  // A head whose rotated part the code's section does not cover reads as plain RoPE, not as an error.
  const Spec narrow = parse(R"({"model_type": "qwen3_vl", "text_config": {"head_dim": 64}})");
  EXPECT_TRUE(narrow.mrope.section.empty());
  EXPECT_FALSE(narrow.mrope.interleaved);
  // The model's code, not a default: GLM, Cohere, ERNIE 4.5 and Helium rotate interleaved pairs.
  EXPECT_EQ(parse(R"({"model_type": "glm4", "head_dim": 128, "partial_rotary_factor": 0.5})").pairing,
            Pairing::kInterleaved);
  EXPECT_EQ(parse(R"({"model_type": "cohere", "head_dim": 128})").pairing, Pairing::kInterleaved);
  EXPECT_EQ(parse(R"({"model_type": "qwen3", "head_dim": 128})").pairing, Pairing::kHalfSplit);
  // An explicit null is not an omission: transformers passes None on, so the class default does not apply.
  EXPECT_EQ(parse(R"({"model_type": "phi", "head_dim": 64, "partial_rotary_factor": null})").rotary_dim, 64);
  EXPECT_EQ(parse(R"({"model_type": "qwen3", "head_dim": null, "hidden_size": 1024, "num_attention_heads": 16})")
                .head_dim, 64);
  // Llama's and Qwen2's default type ignore partial_rotary_factor (their code spans the whole head), a dict's or the
  // top level's; their linear type and Phi's default read it, as does a model type transformers does not know.
  EXPECT_EQ(parse(R"({"model_type": "llama", "head_dim": 96, "partial_rotary_factor": 0.5})").rotary_dim, 96);
  EXPECT_EQ(parse(R"({"model_type": "qwen2", "head_dim": 96, "rope_parameters": {"rope_type": "default",
                      "partial_rotary_factor": 0.5}})").rotary_dim, 96);
  EXPECT_EQ(parse(R"({"model_type": "llama", "head_dim": 96, "rope_parameters": {"rope_type": "linear", "factor": 2,
                      "partial_rotary_factor": 0.5}})").rotary_dim, 48);
  EXPECT_EQ(parse(R"({"model_type": "phi", "head_dim": 96, "partial_rotary_factor": 0.5})").rotary_dim, 48);
  EXPECT_EQ(parse(R"({"model_type": "not_in_transformers", "head_dim": 96, "partial_rotary_factor": 0.5})").rotary_dim,
            48);
  // The file's own values win; a model without an entry keeps the generic defaults.
  EXPECT_EQ(parse(R"({"model_type": "mixtral", "head_dim": 64, "rope_theta": 5e5})").base, 5e5);
  EXPECT_EQ(parse(R"({"model_type": "qwen3", "head_dim": 64})").head_dim, 64);
  EXPECT_EQ(parse(R"({"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 16})").base, 10000.0);
}

TEST(Config, ANonEmptyRopeScalingWinsOverRopeParametersAsInTransformers) {
  // convert_rope_params_to_dict: `rope_scaling or rope_parameters`; an empty dict counts as absent.
  const Spec both = parse(R"({"head_dim": 64, "rope_parameters": {"rope_type": "default", "rope_theta": 5e5},
                              "rope_scaling": {"rope_type": "linear", "factor": 4.0, "rope_theta": 2e4}})");
  EXPECT_EQ(both.scaling.type, RopeType::kLinear);
  EXPECT_EQ(both.base, 2e4);
  const Spec empty = parse(R"({"head_dim": 64, "rope_scaling": {},
                               "rope_parameters": {"rope_type": "linear", "factor": 2.0}})");
  EXPECT_EQ(empty.scaling.type, RopeType::kLinear);
  EXPECT_EQ(empty.scaling.factor, 2.0);
  EXPECT_EQ(parse(R"({"model_type": "gpt_oss", "hidden_size": 2880, "num_attention_heads": 64, "rope_scaling": {}})")
                .scaling.type, RopeType::kYarn);  // the class's dict
  // Any falsy rope_scaling gives way; an empty rope_parameters is default RoPE, not the class's dict.
  EXPECT_EQ(parse(R"({"head_dim": 64, "rope_scaling": [], "rope_parameters": {"rope_type": "linear", "factor": 2.0}})")
                .scaling.type, RopeType::kLinear);
  EXPECT_EQ(parse(R"({"model_type": "gpt_oss", "hidden_size": 2880, "num_attention_heads": 64, "rope_parameters": {}})")
                .scaling.type, RopeType::kDefault);
}

TEST(Config, DictValuesWinOverTopLevel) {
  const Spec s = parse(R"({"head_dim": 64, "rope_theta": 1, "partial_rotary_factor": 1.0,
                           "rope_parameters": {"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.5}})");
  EXPECT_EQ(s.base, 5e5);
  EXPECT_EQ(s.rotary_dim, 32);
}

TEST(Config, GptNeoxLegacyKeys) {
  const Spec s = parse(R"({"model_type": "gpt_neox", "hidden_size": 6144, "num_attention_heads": 64,
                           "rotary_pct": 0.25, "rotary_emb_base": 10000, "max_position_embeddings": 2048})");
  EXPECT_EQ(s.head_dim, 96);
  EXPECT_EQ(s.rotary_dim, 24);
  EXPECT_EQ(s.pairing, Pairing::kHalfSplit);
}

TEST(Config, GptNeoxReadsItsOwnNamesAsItsConfigClassDoes) {
  // GPTNeoXConfig takes the base from rotary_emb_base (a top-level rope_theta is not its key) and the fraction
  // from rotary_pct (default 0.25) ahead of a top-level partial_rotary_factor; rotary used to prefer the others.
  const Spec s = parse(R"({"model_type": "gpt_neox", "hidden_size": 256, "num_attention_heads": 4, "rope_theta": 50000,
                           "partial_rotary_factor": 0.5, "rotary_pct": 0.25})");
  EXPECT_EQ(s.base, 10000.0);
  EXPECT_EQ(s.rotary_dim, 16);
  EXPECT_EQ(parse(R"({"model_type": "gpt_neox", "hidden_size": 256, "num_attention_heads": 4})").rotary_dim, 16);
  EXPECT_EQ(parse(R"({"model_type": "gpt_neox", "hidden_size": 256, "num_attention_heads": 4,
                      "rope_parameters": {"rope_theta": 3e4, "partial_rotary_factor": 1.0}})").rotary_dim, 64);
  // other models keep the usual order
  EXPECT_EQ(parse(R"({"hidden_size": 256, "num_attention_heads": 4, "rope_theta": 50000, "rotary_pct": 0.25})").base, 50000.0);
}

TEST(Config, Phi3LegacySuAndYarnAreLongrope) {
  // Phi-3 checkpoints written before "longrope" had its name: transformers' Phi3Config renames both. rotary read
  // "yarn" as YaRN (inv_freq off by up to 96 %) and refused "su".
  for (const char* type : {"yarn", "su", "longrope"}) {
    SCOPED_TRACE(type);
    const Spec s = parse(std::string(R"({"model_type": "phi3", "head_dim": 8, "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096, "rope_scaling": {"type": ")") + type +
                         R"(", "short_factor": [1, 1.5, 2, 3], "long_factor": [2, 3, 4, 5]}})");
    EXPECT_EQ(s.scaling.type, rotary::RopeType::kLongRope);
  }
  // elsewhere "yarn" is YaRN
  EXPECT_EQ(parse(R"({"head_dim": 8, "max_position_embeddings": 8192, "rope_scaling": {"type": "yarn", "factor": 2.0}})")
                .scaling.type,
            rotary::RopeType::kYarn);
}

TEST(Config, GptjIsInterleavedWithExplicitRotaryDim) {
  const Spec s = parse(R"({"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64, "n_positions": 2048})");
  EXPECT_EQ(s.head_dim, 256);
  EXPECT_EQ(s.rotary_dim, 64);
  EXPECT_EQ(s.pairing, Pairing::kInterleaved);
  EXPECT_EQ(s.max_position_embeddings, 2048);
  EXPECT_EQ(rotary::compute_frequencies(s).inv_freq, rotary::default_inv_freq(10000.0, 64));
}

TEST(Config, RopeInterleaveFlagOverridesModelType) {
  EXPECT_EQ(parse(R"({"model_type": "deepseek_v3", "head_dim": 64})").pairing, Pairing::kInterleaved);
  EXPECT_EQ(parse(R"({"model_type": "deepseek_v3", "head_dim": 64, "rope_interleave": false})").pairing,
            Pairing::kHalfSplit);
  EXPECT_EQ(parse(R"({"head_dim": 64, "rope_interleave": true})").pairing, Pairing::kInterleaved);
}

TEST(Config, Phi3TopLevelOriginalMaxOverridesDict) {
  const Spec s = parse(R"({"head_dim": 4, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
                           "rope_scaling": {"type": "longrope", "short_factor": [1, 2], "long_factor": [3, 4],
                                            "original_max_position_embeddings": 8192}})");
  EXPECT_EQ(s.scaling.original_max_position_embeddings, 4096);
  // factor defaults to max_pos / original = 32 -> sqrt(1 + ln 32 / ln 4096)
  EXPECT_DOUBLE_EQ(rotary::compute_frequencies(s).attention_factor, std::sqrt(1.0 + 5.0 / 12.0));
}

TEST(Config, OriginalMaxIsReadAsTheModelClassReadsIt) {
  // transformers 5: a config attribute replaces a flat dict's value. phi3 / phi4_multimodal: a class attribute
  // (default 4096); other classes keep a top-level key as one, except phimoe (its class sets it from the dict).
  const std::string dict = R"("rope_scaling": {"type": "longrope", "short_factor": [1, 2], "long_factor": [3, 4],
                                                "original_max_position_embeddings": 8192}})";
  const std::string head = R"({"head_dim": 4, "max_position_embeddings": 131072, )";
  for (const char* mt : {"phi3", "phi4_multimodal"}) {
    const std::string t = std::string(R"("model_type": ")") + mt + R"(", )";
    EXPECT_EQ(parse(head + t + dict).scaling.original_max_position_embeddings, 4096) << mt;
    EXPECT_EQ(parse(head + t + R"("original_max_position_embeddings": 2048, )" + dict)
                  .scaling.original_max_position_embeddings, 2048) << mt;
    // A null top-level value counts as absent (rotary's rule for every optional field): the class default. transformers
    // 5.25 keeps None as the attribute; its RoPE init copies it into the dict and fails dividing by it (docs/scaling.md).
    EXPECT_EQ(parse(head + t + R"("original_max_position_embeddings": null, )" + dict)
                  .scaling.original_max_position_embeddings, 4096) << mt;
  }
  const std::string moe = R"("model_type": "phimoe", "original_max_position_embeddings": 2048, )";
  const std::string moe_dict = R"("rope_scaling": {"type": "longrope", "short_factor": [1, 2], "long_factor": [3, 4],
      "short_mscale": 1.25, "long_mscale": 1.25, "original_max_position_embeddings": 8192}})";
  EXPECT_EQ(parse(head + moe + moe_dict).scaling.original_max_position_embeddings, 8192);
  for (const char* mt : {"llama", "qwen2", ""}) {
    const std::string t = *mt ? std::string(R"("model_type": ")") + mt + R"(", )" : std::string();
    EXPECT_EQ(parse(head + t + dict).scaling.original_max_position_embeddings, 8192) << mt;
    EXPECT_EQ(parse(head + t + R"("original_max_position_embeddings": 2048, )" + dict)
                  .scaling.original_max_position_embeddings, 2048) << mt;
    EXPECT_EQ(parse(head + t + R"("original_max_position_embeddings": null, )" + dict)
                  .scaling.original_max_position_embeddings, 8192) << mt;
  }
}

TEST(Config, YarnOriginalDefaultsToMaxPositions) {
  const Spec s = parse(R"({"head_dim": 128, "max_position_embeddings": 4096, "rope_scaling": {"rope_type": "yarn", "factor": 2.0}})");
  EXPECT_EQ(s.scaling.original_max_position_embeddings, 4096);
  EXPECT_TRUE(s.scaling.truncate);
  // null factor: HF uses max_position_embeddings / original
  const Spec n = parse(R"({"head_dim": 128, "max_position_embeddings": 8192,
                           "rope_scaling": {"rope_type": "yarn", "factor": null, "original_max_position_embeddings": 2048}})");
  EXPECT_FALSE(n.scaling.factor.has_value());
  EXPECT_DOUBLE_EQ(rotary::compute_frequencies(n).attention_factor, 0.1 * std::log(4.0) + 1.0);
}

TEST(Config, Qwen2VlMropeMeansDefaultWithSections) {
  const Spec s = parse(R"({"hidden_size": 3584, "num_attention_heads": 28, "rope_theta": 1000000.0,
                           "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}})");
  EXPECT_EQ(s.scaling.type, RopeType::kDefault);
  EXPECT_EQ(s.mrope.section, (std::vector<int64_t>{16, 24, 24}));
  EXPECT_FALSE(s.mrope.interleaved);
  EXPECT_EQ(rotary::compute_frequencies(s).inv_freq, rotary::default_inv_freq(1e6, 128));
}

TEST(Config, Qwen3VlTextConfigWithInterleavedMrope) {
  const Spec s = parse(R"({"model_type": "qwen3_vl", "text_config": {"head_dim": 128, "hidden_size": 4096,
      "num_attention_heads": 32, "rope_theta": 5000000, "max_position_embeddings": 262144,
      "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": true}}})");
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.base, 5e6);
  EXPECT_EQ(s.max_position_embeddings, 262144);
  EXPECT_EQ(s.mrope.section, (std::vector<int64_t>{24, 20, 20}));
  EXPECT_TRUE(s.mrope.interleaved);
}

TEST(Config, PythonNonFiniteTokensOutsideRopeFieldsAreRead) {
  // save_pretrained writes float('inf') as Python's bare Infinity (Bamba, Falcon-H1, Granite 4.0-H, Nemotron-H:
  // time_step_limit), which JSON lacks: the file is read; a RoPE field holding such a token is refused, naming it.
  const Spec s = parse(R"({"head_dim": 64, "rope_theta": 5e5, "time_step_limit": [0.0, Infinity],
                           "x": NaN, "y": [-Infinity], "note": "Infinity, NaN and \"-Infinity\" in a string"})");
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_EQ(s.base, 5e5);
  for (const char* bad : {R"({"head_dim": 64, "rope_theta": Infinity})", R"({"head_dim": 64, "rope_theta": NaN})"}) {
    try {
      parse(bad);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const rotary::Error& e) {
      EXPECT_NE(std::string(e.what()).find("rope_theta must be a number, got \""), std::string::npos) << e.what();
    }
  }
  // Only values: a key is not a place for them (Python's json refuses it too).
  EXPECT_THROW(parse(R"({"head_dim": 64, NaN: 1})"), rotary::Error);
  // Another fault in a file with such tokens is reported where it is (not at the first token), at the file's column.
  try {
    parse("{\"x\": -Infinity, \"y\": NaN,\n \"head_dim\": 64,, \"z\": Infinity}");
    ADD_FAILURE() << "no error";
  } catch (const rotary::Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2, column 17"), std::string::npos) << e.what();
  }
  try {
    parse(R"({"x": [Infinity, NaN, 1 2]})");
    ADD_FAILURE() << "no error";
  } catch (const rotary::Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 1, column 25"), std::string::npos) << e.what();
  }
  try {  // the parser's "last read" would quote the token's stand-in ("Infini"), which is not in the file
    parse(R"({"a": Infinityx})");
    ADD_FAILURE() << "no error";
  } catch (const rotary::Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 1, column 15"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("Infini\""), std::string::npos) << e.what();
  }
}

TEST(Config, DbrxReadsItsAttributeMapAndAttnConfigBase) {
  // databricks/dbrx-instruct's fields: d_model, n_heads, max_seq_len (DbrxConfig's attribute_map) and its base in
  // attn_config, as DBRX's code and vLLM read it (transformers 5.25 leaves 1e4: docs/scaling.md).
  const Spec hub = parse(R"({"model_type": "dbrx", "d_model": 6144, "n_heads": 48, "max_seq_len": 32768,
                             "attn_config": {"kv_n_heads": 8, "rope_theta": 500000}})");
  EXPECT_EQ(hub.head_dim, 128);
  EXPECT_EQ(hub.max_position_embeddings, 32768);
  EXPECT_EQ(hub.base, 5e5);
  // A file transformers 5 saved carries rope_parameters: its base wins, as there.
  EXPECT_EQ(parse(R"({"model_type": "dbrx", "d_model": 6144, "n_heads": 48, "attn_config": {"rope_theta": 500000},
                      "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}})").base, 1e4);
}

TEST(Config, ProportionalKeepsWholeHead) {
  const Spec s = parse(R"({"head_dim": 256, "rope_theta": 1e6,
                           "rope_scaling": {"rope_type": "proportional", "partial_rotary_factor": 0.25}})");
  EXPECT_EQ(s.rotary_dim, 256);
  EXPECT_EQ(s.partial_rotary_factor, 0.25);
  const auto f = rotary::compute_frequencies(s);
  EXPECT_EQ(f.inv_freq.size(), 128u);
  EXPECT_GT(f.inv_freq[31], 0.0);
  EXPECT_EQ(f.inv_freq[32], 0.0);
}

TEST(Config, FileRoundTrip) {
  const std::string path = (std::filesystem::temp_directory_path() / "rotary_config_presets_test.json").string();
  {
    std::ofstream f(path);
    f << rotary::preset_config_json("llama-3.1-8b");
  }
  const Spec s = rotary::spec_from_hf_config_file(path);
  std::filesystem::remove(path);
  EXPECT_EQ(s.name, path);
  expect_same_frequencies(s, rotary::preset("llama-3.1-8b"));
}

// ----------------------------------------------------------------- presets

TEST(Presets, AllLoadAndValidate) {
  const auto names = rotary::preset_names();
  const std::set<std::string> required = {"llama-2-7b",   "llama-3.1-8b", "llama-3.2-1b", "mistral-7b",
                                          "qwen2.5-7b",   "qwen2.5-7b-yarn", "qwen3-0.6b", "deepseek-v3",
                                          "phi-3.5-mini", "gpt-neox-20b", "gpt-j-6b",     "gemma-7b",
                                          "gpt-oss-20b",  "qwen2-vl-7b",  "qwen3-vl-8b"};
  for (const auto& r : required) EXPECT_NE(std::find(names.begin(), names.end(), r), names.end()) << r;
  for (const auto& n : names) {
    SCOPED_TRACE(n);
    const Spec s = rotary::preset(n);
    EXPECT_EQ(s.name, n);
    EXPECT_NO_THROW(s.validate());
    EXPECT_FALSE(rotary::preset_description(n).empty());
    EXPECT_TRUE(json::accept(rotary::preset_config_json(n)));
    const auto f = rotary::compute_frequencies(s);
    EXPECT_EQ(static_cast<int64_t>(f.inv_freq.size()), s.rotary_dim / 2);
  }
}

TEST(Presets, KeyFacts) {
  auto p = [](const char* n) { return rotary::preset(n); };
  EXPECT_EQ(p("qwen3-0.6b").head_dim, 128);
  EXPECT_EQ(p("gemma-7b").head_dim, 256);
  EXPECT_EQ(p("gpt-neox-20b").rotary_dim, 24);
  EXPECT_EQ(p("gpt-j-6b").rotary_dim, 64);
  EXPECT_EQ(p("gpt-j-6b").head_dim, 256);
  EXPECT_EQ(p("gpt-j-6b").pairing, Pairing::kInterleaved);
  EXPECT_EQ(p("deepseek-v3").head_dim, 64);
  EXPECT_EQ(p("deepseek-v3").pairing, Pairing::kInterleaved);
  EXPECT_EQ(p("deepseek-v3").scaling.type, RopeType::kYarn);
  EXPECT_EQ(p("gpt-oss-20b").scaling.truncate, false);
  EXPECT_EQ(p("phi-3.5-mini").scaling.short_factor.size(), 48u);
  EXPECT_EQ(p("phi-3.5-mini").scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(p("qwen2.5-7b-yarn").scaling.factor, 4.0);
  EXPECT_EQ(p("qwen2-vl-7b").mrope.section, (std::vector<int64_t>{16, 24, 24}));
  EXPECT_TRUE(p("qwen3-vl-8b").mrope.interleaved);
  EXPECT_EQ(p("llama-3.1-8b").scaling.type, RopeType::kLlama3);
}

TEST(Presets, UnknownNameListsValidOnes) {
  try {
    rotary::preset("llama-4");
    FAIL() << "no error";
  } catch (const rotary::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[rotary_preset] preset must be one of"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gpt-oss-20b"), std::string::npos) << msg;
    EXPECT_NE(msg.find("got \"llama-4\""), std::string::npos) << msg;
  }
}

/// Presets that correspond to a golden HF config reproduce HF's numbers.
TEST(Presets, MatchHfGoldenData) {
  ROTARY_TEST_DATA(dir);
  std::ifstream f(dir + "/hf/manifest.json");
  ASSERT_TRUE(f) << "manifest missing under " << dir;
  const json m = json::parse(f);
  const std::pair<const char*, const char*> pairs[] = {
      {"llama-2-7b", "llama2_7b_default"},          {"llama-3.1-8b", "llama31_8b_llama3"},
      {"llama-3.2-1b", "llama32_1b_llama3_f32_head64"}, {"gemma-7b", "gemma_7b_default_head256"},
      {"gpt-neox-20b", "gptneox_20b_partial0p25_head96"}, {"qwen2.5-7b-yarn", "qwen25_7b_yarn_f4"},
      {"deepseek-v3", "deepseek_v3_yarn_f40_head64"}, {"gpt-oss-20b", "gptoss_20b_yarn_f32_truncate_false"},
      {"phi-3.5-mini", "phi35_mini_longrope_seq131072_long"},
  };
  for (const auto& [preset, golden] : pairs) {
    SCOPED_TRACE(preset);
    const json* c = nullptr;
    for (const auto& x : m.at("inv_freq_configs"))
      if (x.at("name") == golden) c = &x;
    ASSERT_NE(c, nullptr) << golden;
    std::optional<int64_t> len;
    if (!c->at("seq_len_passed").is_null()) len = c->at("seq_len_passed").get<int64_t>();
    const auto fr = rotary::compute_frequencies(rotary::preset(preset), len);
    const auto expected = c->at("inv_freq_float64").get<std::vector<double>>();
    ASSERT_EQ(fr.inv_freq.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_LE(std::fabs(fr.inv_freq[i] - expected[i]) / expected[i], rotary::testing::kInvFreqRelTol) << i;
    EXPECT_LE(std::fabs(fr.attention_factor - c->at("attention_factor").get<double>()),
              rotary::testing::kAttentionFactorRelTol);
  }
}

// ----------------------------------------------------------------- CLI

std::string cli_or_skip() {
  const std::string cli = rotary::testing::cli_path();
  if (cli.empty() || !std::filesystem::exists(cli)) return "";
  return "'" + cli + "'";
}

TEST(Cli, PresetsListsEveryPresetAndShowPrintsConfig) {
  const std::string cli = cli_or_skip();
  if (cli.empty()) GTEST_SKIP() << "rotary CLI not built";
  std::string out;
  ASSERT_EQ(rotary::testing::run_command(cli + " presets", &out), 0);
  for (const auto& n : rotary::preset_names()) EXPECT_NE(out.find(n), std::string::npos) << n;
  ASSERT_EQ(rotary::testing::run_command(cli + " presets --show phi-3.5-mini", &out), 0);
  EXPECT_EQ(out, rotary::preset_config_json("phi-3.5-mini"));
  EXPECT_EQ(rotary::testing::run_command(cli + " presets --show llama-3.1-8 2>&1 >/dev/null", &out), 2);
  EXPECT_NE(out.find("unknown preset \"llama-3.1-8\" (did you mean llama-3.1-8b?)"), std::string::npos) << out;
}

TEST(Cli, FreqsPresetJsonAndTable) {
  const std::string cli = cli_or_skip();
  if (cli.empty()) GTEST_SKIP() << "rotary CLI not built";
  std::string out;
  ASSERT_EQ(rotary::testing::run_command(cli + " freqs --preset gpt-neox-20b --json", &out), 0) << out;
  const json j = json::parse(out);
  const std::set<std::string> keys = {"rope_type", "head_dim", "rotary_dim", "base", "inv_freq", "attention_factor"};
  std::set<std::string> got;
  for (const auto& [k, v] : j.items()) got.insert(k);
  EXPECT_EQ(got, keys);
  EXPECT_EQ(j.at("rotary_dim"), 24);
  EXPECT_EQ(j.at("head_dim"), 96);
  EXPECT_TRUE(j.at("base").is_number_float());
  EXPECT_EQ(j.at("inv_freq").get<std::vector<double>>(), rotary::default_inv_freq(10000.0, 24));

  ASSERT_EQ(rotary::testing::run_command(cli + " freqs --preset llama-3.1-8b", &out), 0) << out;
  EXPECT_NE(out.find("wavelength"), std::string::npos) << out;
  EXPECT_NE(out.find("unchanged"), std::string::npos) << out;
  EXPECT_NE(out.find("x 0.125 (= 1/8)"), std::string::npos) << out;
}

TEST(Cli, FreqsErrorsExitOneOrTwoWithMessageOnStderr) {
  const std::string cli = cli_or_skip();
  if (cli.empty()) GTEST_SKIP() << "rotary CLI not built";
  const std::string path = (std::filesystem::temp_directory_path() / "rotary_cli_bad_factor.json").string();
  {
    std::ofstream f(path);
    f << R"({"head_dim": 64, "rope_scaling": {"type": "linear", "factor": 0.5}})";
  }
  std::string out;
  // An invalid config is a runtime failure (1); a malformed command line is a usage error (2).
  EXPECT_EQ(rotary::testing::run_command(cli + " freqs --config '" + path + "' --json 2>/dev/null", &out), 1);
  EXPECT_EQ(out, "");  // nothing on stdout
  EXPECT_EQ(rotary::testing::run_command(cli + " freqs --config '" + path + "' --json 2>&1 >/dev/null", &out), 1);
  EXPECT_NE(out.find("scaling.factor must be >= 1, got 0.5"), std::string::npos) << out;
  std::filesystem::remove(path);

  EXPECT_EQ(rotary::testing::run_command(cli + " freqs --config /nonexistent.json", &out, true), 1);
  EXPECT_NE(out.find("/nonexistent.json"), std::string::npos) << out;
  EXPECT_EQ(rotary::testing::run_command(cli + " freqs --preset llama-2-7b --seq-len x", &out, true), 2);
  EXPECT_EQ(rotary::testing::run_command(cli + " freqs", &out, true), 2);
  EXPECT_EQ(rotary::testing::run_command(cli + " freqs --preset a --config b", &out, true), 2);
}

TEST(Cli, FreqsSeqLenSwitchesLongRope) {
  const std::string cli = cli_or_skip();
  if (cli.empty()) GTEST_SKIP() << "rotary CLI not built";
  std::string short_out, long_out;
  ASSERT_EQ(rotary::testing::run_command(cli + " freqs --preset phi-3.5-mini --json --seq-len 4096", &short_out), 0);
  ASSERT_EQ(rotary::testing::run_command(cli + " freqs --preset phi-3.5-mini --json --seq-len 4097", &long_out), 0);
  const Spec s = rotary::preset("phi-3.5-mini");
  EXPECT_EQ(json::parse(short_out).at("inv_freq").get<std::vector<double>>(), rotary::compute_frequencies(s, 4096).inv_freq);
  EXPECT_EQ(json::parse(long_out).at("inv_freq").get<std::vector<double>>(), rotary::compute_frequencies(s, 4097).inv_freq);
  EXPECT_NE(short_out, long_out);
}

}  // namespace
