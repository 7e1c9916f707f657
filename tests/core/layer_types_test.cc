// RoPE per layer type (transformers v5 nested rope_parameters, Gemma 3 legacy): parsing, lookups, fp64 frequencies, C API.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "rotary/config.h"
#include "rotary/freqs.h"
#include "rotary/rotary_c.h"

namespace {

using rotary::Error;
using rotary::LayerTypeSpecs;
using rotary::RopeType;

// transformers v5 Gemma3TextConfig(...).to_json_string() for a small model: rope_parameters nested per layer type.
const char* kGemma3V5 = R"({"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 2, "head_dim": 32,
  "num_hidden_layers": 7, "max_position_embeddings": 4096,
  "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                  "sliding_attention", "full_attention", "sliding_attention"],
  "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})";

// The same model as a Hub config.json written before v5 (google/gemma-3-*): top-level thetas + rope_scaling.
const char* kGemma3Legacy = R"({"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 2,
  "head_dim": 32, "num_hidden_layers": 7, "max_position_embeddings": 4096, "sliding_window_pattern": 6,
  "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0}})";

/// Independent fp64 truth: theta_i = base^(-2i/R) / factor.
std::vector<double> expected(double base, int64_t R, double factor) {
  std::vector<double> v;
  for (int64_t i = 0; i < R / 2; ++i) v.push_back(std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(R)) / factor);
  return v;
}

void expect_freqs(const rotary::Spec& s, const std::vector<double>& want) {
  const auto f = rotary::compute_frequencies(s).inv_freq;
  ASSERT_EQ(f.size(), want.size());
  for (size_t i = 0; i < f.size(); ++i) EXPECT_NEAR(f[i], want[i], 1e-15 * want[i]) << i;
}

std::string error_of(const std::function<void()>& f, Error::Kind* kind = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

TEST(LayerTypes, Gemma3V5NestedGivesOneSpecPerTypeAndTheLayerList) {
  const LayerTypeSpecs l = rotary::layer_type_specs_from_hf_config_json(kGemma3V5, "g.json");
  EXPECT_TRUE(l.nested);
  ASSERT_EQ(l.by_type.size(), 2u);
  EXPECT_EQ(l.by_type[0].layer_type, "full_attention");
  EXPECT_EQ(l.by_type[1].layer_type, "sliding_attention");
  EXPECT_EQ(l.type_names(), "full_attention, sliding_attention");
  ASSERT_EQ(l.layer_types.size(), 7u);
  EXPECT_EQ(l.layer_types[5], "full_attention");
  const rotary::Spec& full = l.spec_for("full_attention");
  const rotary::Spec& sliding = l.spec_for("sliding_attention");
  EXPECT_EQ(full.scaling.type, RopeType::kLinear);
  EXPECT_EQ(sliding.scaling.type, RopeType::kDefault);
  EXPECT_EQ(full.head_dim, 32);
  EXPECT_EQ(full.max_position_embeddings, 4096);
  expect_freqs(full, expected(1e6, 32, 8.0));
  expect_freqs(sliding, expected(1e4, 32, 1.0));
  EXPECT_EQ(&l.spec_for_layer(5), &full);
  EXPECT_EQ(&l.spec_for_layer(0), &sliding);
  EXPECT_EQ(full.name, "g.json#full_attention");
}

TEST(LayerTypes, Gemma3LegacyConfigReadsAsTransformersV5ConvertsIt) {
  const LayerTypeSpecs legacy = rotary::layer_type_specs_from_hf_config_json(kGemma3Legacy);
  const LayerTypeSpecs v5 = rotary::layer_type_specs_from_hf_config_json(kGemma3V5);
  EXPECT_TRUE(legacy.nested);
  EXPECT_EQ(legacy.layer_types, v5.layer_types);  // from sliding_window_pattern 6: layer 5 is full
  for (const char* t : {"full_attention", "sliding_attention"}) {
    SCOPED_TRACE(t);
    EXPECT_EQ(rotary::compute_frequencies(legacy.spec_for(t)).inv_freq, rotary::compute_frequencies(v5.spec_for(t)).inv_freq);
  }
  // transformers' Gemma 3 defaults: global theta 1e6 when rope_theta is absent.
  const LayerTypeSpecs no_theta = rotary::layer_type_specs_from_hf_config_json(
      R"({"head_dim": 8, "rope_local_base_freq": 500.0, "layer_types": ["full_attention"]})");
  expect_freqs(no_theta.spec_for("full_attention"), expected(1e6, 8, 1.0));
  expect_freqs(no_theta.spec_for("sliding_attention"), expected(500.0, 8, 1.0));
}

TEST(LayerTypes, TopLevelThetaAndPartialRotaryAreDefaultsOfEachNestedDict) {
  const LayerTypeSpecs l = rotary::layer_type_specs_from_hf_config_json(R"({"head_dim": 16, "rope_theta": 321.0,
    "partial_rotary_factor": 0.5, "max_position_embeddings": 64, "layer_types": ["a", "b", "a"],
    "rope_parameters": {"a": {"rope_type": "default"}, "b": {"rope_type": "yarn", "factor": 4.0,
                        "rope_theta": 99.0, "partial_rotary_factor": 1.0, "original_max_position_embeddings": 16}}})");
  EXPECT_EQ(l.spec_for("a").base, 321.0);
  EXPECT_EQ(l.spec_for("a").rotary_dim, 8);
  expect_freqs(l.spec_for("a"), expected(321.0, 8, 1.0));
  EXPECT_EQ(l.spec_for("b").base, 99.0);
  EXPECT_EQ(l.spec_for("b").rotary_dim, 16);
  EXPECT_EQ(l.spec_for("b").scaling.type, RopeType::kYarn);
  EXPECT_EQ(&l.spec_for_layer(2), &l.spec_for("a"));
}

TEST(LayerTypes, NullEntryIsALayerTypeWithoutRope) {
  const LayerTypeSpecs l = rotary::layer_type_specs_from_hf_config_json(R"({"head_dim": 8,
    "layer_types": ["rope", "nope"], "rope_parameters": {"rope": {"rope_type": "default"}, "nope": null}})");
  ASSERT_EQ(l.by_type.size(), 2u);
  EXPECT_FALSE(l.by_type[0].spec.has_value());  // "nope" sorts first
  EXPECT_EQ(l.by_type[0].layer_type, "nope");
  const std::string msg = error_of([&] { (void)l.spec_for_layer(1); });
  EXPECT_NE(msg.find("layer_type \"nope\" has no RoPE"), std::string::npos) << msg;
  EXPECT_NO_THROW((void)l.spec_for_layer(0));
}

TEST(LayerTypes, FlatConfigsShareOneSpec) {
  const LayerTypeSpecs l = rotary::layer_type_specs_from_hf_config_json(R"({"head_dim": 8, "rope_theta": 50.0,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]})");
  EXPECT_FALSE(l.nested);
  ASSERT_EQ(l.by_type.size(), 2u);  // first-appearance order
  EXPECT_EQ(l.by_type[0].layer_type, "sliding_attention");
  expect_freqs(l.spec_for("full_attention"), expected(50.0, 8, 1.0));
  EXPECT_NE(error_of([&] { (void)l.spec_for("other"); }).find("layer_type must be one of sliding_attention, full_attention, got \"other\""),
            std::string::npos);
  const LayerTypeSpecs none = rotary::layer_type_specs_from_hf_config_json(R"({"head_dim": 8})");
  ASSERT_EQ(none.by_type.size(), 1u);
  EXPECT_EQ(none.by_type[0].layer_type, "");
  EXPECT_EQ(&none.spec_for("anything"), &*none.by_type[0].spec);
  EXPECT_EQ(&none.spec_for_layer(40), &*none.by_type[0].spec);
}

TEST(LayerTypes, Gemma3TextConfigsWithoutTheLocalBaseOrPatternTakeTransformersDefaults) {
  // A flat Gemma 3 text config without rope_local_base_freq / sliding_window_pattern: transformers still gives
  // the sliding layers base 1e4 and makes every 6th layer full. rotary used to return one shared Spec (the
  // global base for every layer), or no layer_types.
  const LayerTypeSpecs bare = rotary::layer_type_specs_from_hf_config_json(
      R"({"model_type": "gemma3_text", "head_dim": 8, "num_hidden_layers": 7, "rope_theta": 500000.0})");
  EXPECT_TRUE(bare.nested);
  const std::vector<std::string> want = {"sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                                         "sliding_attention", "full_attention", "sliding_attention"};
  EXPECT_EQ(bare.layer_types, want);
  expect_freqs(bare.spec_for("full_attention"), expected(500000.0, 8, 1.0));
  expect_freqs(bare.spec_for("sliding_attention"), expected(1e4, 8, 1.0));
  expect_freqs(bare.spec_for_layer(0), expected(1e4, 8, 1.0));
  // the multimodal wrapper (model_type gemma3 with a text_config) reads the same way
  const LayerTypeSpecs wrapped = rotary::layer_type_specs_from_hf_config_json(
      R"({"model_type": "gemma3", "text_config": {"head_dim": 8, "num_hidden_layers": 6, "rope_theta": 500000.0}})");
  EXPECT_TRUE(wrapped.nested);
  expect_freqs(wrapped.spec_for_layer(5), expected(500000.0, 8, 1.0));
  expect_freqs(wrapped.spec_for_layer(4), expected(1e4, 8, 1.0));
  Error::Kind kind{};
  error_of([&] { (void)rotary::spec_from_hf_config_json(R"({"model_type": "gemma3_text", "head_dim": 8})"); }, &kind);
  EXPECT_EQ(kind, Error::Kind::kUnsupported);
}

TEST(LayerTypes, Gemma3DropsAFlatV5DictAndRotatesTheWholeHeadForDefaultFrequencies) {
  // transformers 5.25 (python/tests/test_hf_layer_type_defaults.py checks it live): Gemma3TextConfig keeps a flat
  // rope_parameters beside the two layer types it adds and reads only those; Gemma 3's default-type frequencies
  // ignore partial_rotary_factor, while its linear ones rotate the partial share.
  const LayerTypeSpecs flat = rotary::layer_type_specs_from_hf_config_json(R"({"model_type": "gemma3_text",
    "head_dim": 8, "num_hidden_layers": 6, "rope_parameters": {"rope_type": "linear", "factor": 8.0, "rope_theta": 5e5}})");
  expect_freqs(flat.spec_for("full_attention"), expected(1e6, 8, 1.0));
  expect_freqs(flat.spec_for("sliding_attention"), expected(1e4, 8, 1.0));
  const LayerTypeSpecs partial = rotary::layer_type_specs_from_hf_config_json(R"({"model_type": "gemma3_text",
    "head_dim": 8, "partial_rotary_factor": 0.5, "rope_scaling": {"rope_type": "linear", "factor": 2.0}})");
  expect_freqs(partial.spec_for("full_attention"), expected(1e6, 4, 2.0));
  expect_freqs(partial.spec_for("sliding_attention"), expected(1e4, 8, 1.0));
  EXPECT_EQ(partial.spec_for("sliding_attention").rotary_dim, 8);
  // A v4 dict naming only "type" merges into {"rope_type": "default"}: it stays default, as in transformers.
  const LayerTypeSpecs type_key = rotary::layer_type_specs_from_hf_config_json(R"({"model_type": "gemma3_text",
    "head_dim": 8, "rope_scaling": {"type": "linear", "factor": 2.0}})");
  EXPECT_EQ(type_key.spec_for("full_attention").scaling.type, RopeType::kDefault);
}

TEST(LayerTypes, TrimmedPerLayerTypeClassesTakeTheirClassDicts) {
  // OLMo 3: one base 5e5, a top-level rope_theta for full_attention only; every fourth layer full.
  const LayerTypeSpecs olmo3 = rotary::layer_type_specs_from_hf_config_json(
      R"({"model_type": "olmo3", "head_dim": 8, "num_hidden_layers": 4, "rope_theta": 2e4})");
  expect_freqs(olmo3.spec_for("full_attention"), expected(2e4, 8, 1.0));
  expect_freqs(olmo3.spec_for("sliding_attention"), expected(5e5, 8, 1.0));
  EXPECT_EQ(olmo3.layer_types, (std::vector<std::string>{"sliding_attention", "sliding_attention", "sliding_attention",
                                                         "full_attention"}));
  // Laguna's class dict: head_dim 128, full 5e5 with partial 0.5, sliding 1e4; every layer full.
  const LayerTypeSpecs laguna = rotary::layer_type_specs_from_hf_config_json(
      R"({"model_type": "laguna", "hidden_size": 768, "num_attention_heads": 8, "num_hidden_layers": 2})");
  expect_freqs(laguna.spec_for("full_attention"), expected(5e5, 64, 1.0));
  expect_freqs(laguna.spec_for("sliding_attention"), expected(1e4, 128, 1.0));
  EXPECT_EQ(laguna.layer_types, (std::vector<std::string>{"full_attention", "full_attention"}));
  Error::Kind kind{};
  const std::string msg = error_of([] { (void)rotary::spec_from_hf_config_json(R"({"model_type": "laguna", "head_dim": 8})"); }, &kind);
  EXPECT_EQ(kind, Error::Kind::kUnsupported) << msg;
  EXPECT_NE(msg.find("rope_parameters is nested per layer type (full_attention, sliding_attention)"), std::string::npos) << msg;
  error_of([] { (void)rotary::spec_from_hf_config_json(R"({"model_type": "olmo3", "head_dim": 8})"); }, &kind);
  EXPECT_EQ(kind, Error::Kind::kUnsupported);
}

TEST(LayerTypes, Gemma4FullAttentionLayersTakeTheirOwnHeadDim) {
  // Gemma 4's config.json: its full-attention layers take head_dim 512 through per_layer_config (keys are layer
  // indices, zero-padded as transformers writes them). Per layer type, that type's Spec has it; one Spec cannot.
  const char* gemma4 = R"({"model_type": "gemma4_text", "head_dim": 256, "num_hidden_layers": 6,
    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                    "sliding_attention", "full_attention"],
    "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                           "rope_theta": 1000000.0}},
    "per_layer_config": {"05": {"head_dim": 512, "num_key_value_heads": 1}}})";
  const LayerTypeSpecs l = rotary::layer_type_specs_from_hf_config_json(gemma4);
  const rotary::Spec& full = l.spec_for("full_attention");
  EXPECT_EQ(full.head_dim, 512);
  EXPECT_EQ(full.base, 1e6);
  const auto f = rotary::compute_frequencies(full);
  ASSERT_EQ(f.inv_freq.size(), 256u);  // proportional: the whole head, a quarter of it rotating
  EXPECT_NEAR(f.inv_freq[63], std::pow(1e6, -126.0 / 512), 1e-15);  // base^(-2i/512)
  EXPECT_EQ(f.inv_freq[64], 0.0);
  EXPECT_EQ(l.spec_for("sliding_attention").head_dim, 256);
  EXPECT_EQ(&l.spec_for_layer(5), &full);
  Error::Kind kind{};
  std::string msg = error_of([&] { (void)rotary::spec_from_hf_config_json(gemma4); }, &kind);
  EXPECT_EQ(kind, Error::Kind::kUnsupported) << msg;
  EXPECT_NE(msg.find("per_layer_config.05.head_dim gives that layer its own RoPE input"), std::string::npos) << msg;
  EXPECT_NE(msg.find("got 512"), std::string::npos) << msg;
  // A trimmed file: the class's head_dim 256 and 512 (or a top-level global_head_dim), layer pattern and dicts.
  const LayerTypeSpecs t = rotary::layer_type_specs_from_hf_config_json(
      R"({"model_type": "gemma4_text", "hidden_size": 768, "num_attention_heads": 8, "num_hidden_layers": 7})");
  EXPECT_EQ(t.layer_types, (std::vector<std::string>{"sliding_attention", "sliding_attention", "sliding_attention",
                                                      "sliding_attention", "sliding_attention", "full_attention",
                                                      "full_attention"}));  // every sixth, and the last
  EXPECT_EQ(t.spec_for("full_attention").head_dim, 512);
  EXPECT_EQ(t.spec_for("full_attention").scaling.type, rotary::RopeType::kProportional);
  EXPECT_EQ(t.spec_for("sliding_attention").head_dim, 256);
  EXPECT_EQ(rotary::layer_type_specs_from_hf_config_json(
                R"({"model_type": "gemma4_text", "global_head_dim": 384, "num_hidden_layers": 6})")
                .spec_for("full_attention").head_dim, 384);
}

TEST(LayerTypes, PerLayerHeadDimsAreGemma4sAndMustAgreeWithinALayerType) {
  // transformers' per_layer_config[layer_type] refuses a type whose layers differ; so does rotary, naming them.
  const std::string base = R"({"model_type": "gemma4_text", "head_dim": 64,
    "layer_types": ["full_attention", "sliding_attention", "full_attention"], "per_layer_config": )";
  std::string msg = error_of([&] {
    (void)rotary::layer_type_specs_from_hf_config_json(base + R"({"0": {"head_dim": 128}}})");
  });
  EXPECT_NE(msg.find("layers 0 and 2 are both \"full_attention\" but take head_dim 128 and the top level's"),
            std::string::npos) << msg;
  msg = error_of([&] {
    (void)rotary::layer_type_specs_from_hf_config_json(base + R"({"1": {"rope_theta": 5e5}}})");
  });
  EXPECT_NE(msg.find("per_layer_config.1.rope_theta gives that layer its own RoPE input"), std::string::npos) << msg;
  msg = error_of([&] {
    (void)rotary::layer_type_specs_from_hf_config_json(base + R"({"7": {"head_dim": 32}}})");
  });
  EXPECT_NE(msg.find("keys must be layer indices below the 3 entries of layer_types, got \"7\""), std::string::npos)
      << msg;
  // Both full layers alike: their type's Spec takes it. An entry equal to the top level's is none (transformers drops
  // it); a null per_layer_config is given, so the class's 512 does not apply.
  const LayerTypeSpecs ok = rotary::layer_type_specs_from_hf_config_json(
      base + R"({"0": {"head_dim": 128}, "1": {"head_dim": 64}, "2": {"head_dim": 128}}})");
  EXPECT_EQ(ok.spec_for("full_attention").head_dim, 128);
  EXPECT_EQ(ok.spec_for("sliding_attention").head_dim, 64);
  EXPECT_EQ(rotary::layer_type_specs_from_hf_config_json(base + "null}").spec_for("full_attention").head_dim, 64);
  // Gemma 4's class makes the last layer full whatever layer_types says.
  const LayerTypeSpecs last = rotary::layer_type_specs_from_hf_config_json(
      R"({"model_type": "gemma4_text", "layer_types": ["full_attention", "sliding_attention"]})");
  EXPECT_EQ(last.layer_types, (std::vector<std::string>{"full_attention", "full_attention"}));
  EXPECT_EQ(last.spec_for_layer(1).head_dim, 512);
  // Other classes' transformers configs refuse a head_dim per layer; rotary too, naming the entry.
  Error::Kind kind{};
  msg = error_of([] {
    (void)rotary::layer_type_specs_from_hf_config_json(
        R"({"model_type": "qwen2", "head_dim": 64, "layer_types": ["full_attention", "sliding_attention"],
            "per_layer_config": {"0": {"head_dim": 128}}})");
  }, &kind);
  EXPECT_EQ(kind, Error::Kind::kUnsupported) << msg;
  EXPECT_NE(msg.find("per_layer_config.0.head_dim gives that layer its own RoPE input"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model_type \"qwen2\""), std::string::npos) << msg;
  // overrides of other things (kv heads, sliding windows) are not RoPE's business
  const LayerTypeSpecs other = rotary::layer_type_specs_from_hf_config_json(
      R"({"head_dim": 8, "per_layer_config": {"3": {"num_key_value_heads": 2}}})");
  EXPECT_FALSE(other.nested);
}

TEST(LayerTypes, OneSpecReadersRefuseLayerTypeConfigsNamingTheWayOut) {
  for (const char* text : {kGemma3V5, kGemma3Legacy}) {
    Error::Kind kind{};
    const std::string msg = error_of([&] { (void)rotary::spec_from_hf_config_json(text); }, &kind);
    EXPECT_EQ(kind, Error::Kind::kUnsupported) << msg;
    EXPECT_NE(msg.find("layer_type_specs_from_hf_config_json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--layer-type"), std::string::npos) << msg;
  }
  // Nested keys need not be Gemma's names, nor layer_types present (object values).
  Error::Kind kind{};
  error_of([&] { (void)rotary::spec_from_hf_config_json(R"({"head_dim": 8, "rope_parameters": {"local": {"rope_theta": 3.0}}})"); }, &kind);
  EXPECT_EQ(kind, Error::Kind::kUnsupported);
}

TEST(LayerTypes, BadFieldsAreNamedErrors) {
  struct Bad {
    const char* json;
    const char* needle;
  } cases[] = {
      {R"({"head_dim": 8, "layer_types": "full_attention"})", "layer_types must be a list of strings, got \"full_attention\""},
      {R"({"head_dim": 8, "layer_types": ["a", 3]})", "layer_types[1] must be a string, got 3"},
      {R"({"head_dim": 8, "layer_types": ["a"], "rope_parameters": {"a": 5}})", "rope_parameters.a must be an object or null, got 5"},
      {R"({"head_dim": 8, "layer_types": ["a"], "rope_parameters": {"a": {"rope_type": "linear", "factor": "x"}}})",
       "rope_parameters.a.factor must be a number, got \"x\""},
      {R"({"head_dim": 8, "layer_types": ["a"], "rope_parameters": {"a": {"rope_type": "linear", "factor": 0.5}}})",
       "scaling.factor must be >= 1, got 0.5 (in config.json#a)"},
      {R"({"head_dim": 8, "rope_local_base_freq": "x"})", "rope_local_base_freq must be a number, got \"x\""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.json);
    const std::string msg = error_of([&] { (void)rotary::layer_type_specs_from_hf_config_json(c.json); });
    EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind("[rotary_", 0), 0u) << msg;
  }
  const LayerTypeSpecs l = rotary::layer_type_specs_from_hf_config_json(kGemma3V5);
  EXPECT_NE(error_of([&] { (void)l.spec_for_layer(7); }).find("layer must be < the number of layer_types 7, got 7"), std::string::npos);
  EXPECT_NE(error_of([&] { (void)l.spec_for_layer(-1); }).find("layer must be >= 0, got -1"), std::string::npos);
}

TEST(LayerTypesC, TheCApiListsTypesLayersAndSpecs) {
  const std::string text = kGemma3V5;
  rotary_layer_specs_t* l = nullptr;
  ASSERT_EQ(rotary_layer_specs_from_config_json(text.data(), text.size(), &l), ROTARY_OK) << rotary_last_error();
  int64_t n_types = 0, n_layers = 0;
  int32_t nested = 0;
  ASSERT_EQ(rotary_layer_specs_describe(l, &n_types, &n_layers, &nested), ROTARY_OK);
  EXPECT_EQ(n_types, 2);
  EXPECT_EQ(n_layers, 7);
  EXPECT_EQ(nested, 1);
  const char* name = nullptr;
  ASSERT_EQ(rotary_layer_specs_type_name(l, 1, &name), ROTARY_OK);
  EXPECT_STREQ(name, "sliding_attention");
  ASSERT_EQ(rotary_layer_specs_layer_type(l, 5, &name), ROTARY_OK);
  EXPECT_STREQ(name, "full_attention");
  rotary_spec_t* spec = nullptr;
  ASSERT_EQ(rotary_layer_specs_get(l, "full_attention", &spec), ROTARY_OK);
  double inv[16];
  int64_t count = 0;
  ASSERT_EQ(rotary_spec_inv_freq(spec, -1, inv, 16, &count), ROTARY_OK);
  ASSERT_EQ(count, 16);
  const auto want = expected(1e6, 32, 8.0);
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(inv[i], want[static_cast<size_t>(i)], 1e-15 * want[static_cast<size_t>(i)]);
  rotary_spec_free(spec);
  spec = nullptr;
  EXPECT_EQ(rotary_layer_specs_get(l, "global", &spec), ROTARY_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(spec, nullptr);
  EXPECT_NE(std::string(rotary_last_error()).find("layer_type must be one of full_attention, sliding_attention"), std::string::npos);
  EXPECT_EQ(rotary_layer_specs_type_name(l, 2, &name), ROTARY_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(rotary_layer_specs_layer_type(l, -1, &name), ROTARY_ERROR_INVALID_ARGUMENT);
  rotary_layer_specs_free(l);
  // The one-spec reader refuses it with UNSUPPORTED.
  EXPECT_EQ(rotary_spec_from_config_json(text.data(), text.size(), &spec), ROTARY_ERROR_UNSUPPORTED);
  EXPECT_EQ(rotary_layer_specs_from_config_file("/nonexistent/config.json", &l), ROTARY_ERROR_IO);
}

TEST(LayerTypes, NestedYarnEntriesTakeTheTruncateBesideTheLayerTypes) {
  // transformers 5.25's YaRN reads rope_parameters["truncate"]: for a nested dict the key beside the layer types,
  // not the entry's own (tests/core: independent of transformers; python/tests compare with it).
  auto truncate_of = [](const std::string& beside, const std::string& own) {
    return rotary::layer_type_specs_from_hf_config_json(
               R"({"head_dim": 64, "layer_types": ["full_attention", "sliding_attention"], "rope_parameters": {)" +
                   beside + R"("full_attention": {"rope_type": "yarn", "factor": 8.0, "rope_theta": 1e6,
                   "original_max_position_embeddings": 4096)" + own + R"(},
                   "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}})")
        .spec_for("full_attention")
        .scaling.truncate;
  };
  EXPECT_TRUE(truncate_of("", ""));
  EXPECT_TRUE(truncate_of("", R"(, "truncate": false)"));
  EXPECT_FALSE(truncate_of(R"("truncate": false, )", ""));
  EXPECT_FALSE(truncate_of(R"("truncate": false, )", R"(, "truncate": true)"));
  // Step 3.7's text config keeps only its layer types' entries: a truncate beside them is dropped.
  EXPECT_TRUE(rotary::layer_type_specs_from_hf_config_json(
                  R"({"model_type": "step3p5", "head_dim": 64, "layer_types": ["full_attention"], "rope_parameters": {
                      "truncate": false, "full_attention": {"rope_type": "yarn", "factor": 8.0, "rope_theta": 1e6,
                      "original_max_position_embeddings": 4096}}})")
                  .spec_for("full_attention")
                  .scaling.truncate);
}

}  // namespace
