// DeepSeek V4's RoPE keyed by label (main / compress): each layer type's Spec, layer patterns, refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "rotary/config.h"
#include "rotary/freqs.h"
#include "testing/shared.h"

namespace {

using rotary::Error;
using rotary::LayerTypeSpecs;
using rotary::Pairing;
using rotary::RopeType;
using rotary::Spec;
using rotary::testing::error_of;

LayerTypeSpecs read(const std::string& text) { return rotary::layer_type_specs_from_hf_config_json(text, "v4.json"); }

/// Independent fp64 truth: theta_i = base^(-2i/R).
std::vector<double> plain(double base, int64_t R) {
  std::vector<double> v;
  for (int64_t i = 0; i < R / 2; ++i) v.push_back(std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(R)));
  return v;
}

void expect_freqs(const Spec& s, const std::vector<double>& want) {
  const auto f = rotary::compute_frequencies(s).inv_freq;
  ASSERT_EQ(f.size(), want.size());
  for (size_t i = 0; i < f.size(); ++i) EXPECT_NEAR(f[i], want[i], 1e-15 * want[i]) << i;
}

// The Hub files' form: legacy per-layer compress_ratios and qk_rope_head_dim, a flat YaRN rope_scaling.
const char* kHub = R"({"model_type": "deepseek_v4", "num_hidden_layers": 4, "hidden_size": 1024,
  "num_attention_heads": 16, "head_dim": 512, "qk_rope_head_dim": 64, "rope_theta": 10000,
  "compress_rope_theta": 160000, "max_position_embeddings": 1048576, "compress_ratios": [0, 4, 128, 4],
  "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536, "beta_fast": 32,
                   "beta_slow": 1}})";

TEST(ConfigLabels, HubFormGivesSlidingLayersMainAndCompressedLayersYarn) {
  const LayerTypeSpecs l = read(kHub);
  EXPECT_TRUE(l.nested);
  EXPECT_EQ(l.layer_types, (std::vector<std::string>{"sliding_attention", "compressed_sparse_attention",
                                                     "heavily_compressed_attention", "compressed_sparse_attention"}));
  ASSERT_EQ(l.by_type.size(), 3u);
  const Spec& main = l.spec_for("sliding_attention");
  EXPECT_EQ(main.head_dim, 64);  // the rotated slice (64 of 512), not the head
  EXPECT_EQ(main.rotary_dim, 64);
  EXPECT_EQ(main.pairing, Pairing::kInterleaved);
  EXPECT_EQ(main.scaling.type, RopeType::kDefault);
  expect_freqs(main, plain(1e4, 64));
  for (const char* t : {"compressed_sparse_attention", "heavily_compressed_attention"}) {
    const Spec& c = l.spec_for(t);
    EXPECT_EQ(c.head_dim, 64) << t;
    EXPECT_EQ(c.rotary_dim, 64) << t;
    EXPECT_EQ(c.pairing, Pairing::kInterleaved) << t;
    EXPECT_EQ(c.base, 160000.0) << t;
    EXPECT_EQ(c.scaling.type, RopeType::kYarn) << t;
    EXPECT_EQ(c.scaling.factor, 16.0) << t;
    EXPECT_EQ(c.scaling.original_max_position_embeddings, 65536) << t;
    EXPECT_EQ(rotary::compute_frequencies(c).attention_factor, 1.0) << t;  // the class's, not YaRN's 1.277
  }
  EXPECT_EQ(l.spec_for_layer(0).scaling.type, RopeType::kDefault);
  EXPECT_EQ(l.spec_for_layer(2).scaling.type, RopeType::kYarn);
}

TEST(ConfigLabels, NestedLabelsAreReadAsTheyAreWithTheirOwnShares) {
  const std::string labels = R"("layer_types": ["sliding_attention", "heavily_compressed_attention"],
      "rope_parameters": {"main": {"rope_type": "default", "rope_theta": 20000.0, "partial_rotary_factor": 0.25},
                          "compress": )";
  const std::string plain_compress = labels + R"({"rope_type": "default", "rope_theta": 50000.0}}})";
  const LayerTypeSpecs l = read(R"({"model_type": "deepseek_v4", "num_hidden_layers": 2, "head_dim": 256,
      "qk_rope_head_dim": 64, "partial_rotary_factor": 0.125, )" + plain_compress);
  expect_freqs(l.spec_for("sliding_attention"), plain(2e4, 64));  // its own 0.25 of 256, not qk_rope_head_dim's
  // A dict without a factor takes the top level's (transformers' default for it): 256 x 0.125.
  expect_freqs(l.spec_for("heavily_compressed_attention"), plain(5e4, 32));
  // Without one, a default-type dict spans the whole head; a YaRN one the class's share (qk_rope_head_dim / head_dim).
  const std::string bare = R"({"model_type": "deepseek_v4", "num_hidden_layers": 2, "head_dim": 256,
      "qk_rope_head_dim": 64, )";
  expect_freqs(read(bare + plain_compress).spec_for("heavily_compressed_attention"), plain(5e4, 256));
  const Spec yarn = read(bare + labels + R"({"rope_type": "yarn", "rope_theta": 50000.0, "factor": 4.0,
      "original_max_position_embeddings": 4096, "truncate": false}}})").spec_for("compressed_sparse_attention");
  EXPECT_EQ(yarn.head_dim, 64);
  EXPECT_TRUE(yarn.scaling.truncate);  // a nested entry's truncate is not read, as in transformers
}

TEST(ConfigLabels, TrimmedFileTakesTheClassDefaults) {
  const LayerTypeSpecs l = read(R"({"model_type": "deepseek_v4", "num_hidden_layers": 5})");
  EXPECT_EQ(l.layer_types, (std::vector<std::string>{"heavily_compressed_attention", "heavily_compressed_attention",
                                                     "heavily_compressed_attention", "compressed_sparse_attention",
                                                     "heavily_compressed_attention"}));
  expect_freqs(l.spec_for("sliding_attention"), plain(1e4, 64));  // 512 x 64/512
  expect_freqs(l.spec_for("compressed_sparse_attention"), plain(160000.0, 64));
  // The top-level factor, else qk_rope_head_dim's share of head_dim.
  expect_freqs(read(R"({"model_type": "deepseek_v4", "partial_rotary_factor": 0.25, "qk_rope_head_dim": 64})")
                   .spec_for("sliding_attention"),
               plain(1e4, 128));
  expect_freqs(read(R"({"model_type": "deepseek_v4", "qk_rope_head_dim": 32})").spec_for("sliding_attention"),
               plain(1e4, 32));
}

TEST(ConfigLabels, OneSpecIsRefusedAndBadFieldsAreNamed) {
  try {
    (void)rotary::spec_from_hf_config_json(kHub, "v4.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("keyed by label"), std::string::npos) << e.what();
  }
  const std::string hub(kHub);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = hub;
    t.replace(t.find(from), from.size(), to);
    return error_of([&] { (void)read(t); });
  };
  EXPECT_NE(with("[0, 4, 128, 4]", "[0, 4, 64, 4]").find("compress_ratios[2] must be 0, 4 or 128, got 64"),
            std::string::npos);
  EXPECT_NE(with("\"compress_ratios\": [0, 4, 128, 4]", "\"layer_types\": [\"full_attention\"]")
                .find("layer_types[0] must be one of"),
            std::string::npos);
  EXPECT_NE(with("\"qk_rope_head_dim\": 64", "\"partial_rotary_factor\": 0.1")
                .find("partial_rotary_factor must give an even number of rotated channels, got head_dim 512 x 0.1 = 51"),
            std::string::npos);
  EXPECT_NE(with("\"type\": \"yarn\"", "\"type\": 5").find("rope_scaling.type must be a string"), std::string::npos);
  EXPECT_NE(with("\"compress_rope_theta\": 160000", "\"compress_rope_theta\": \"x\"")
                .find("compress_rope_theta must be a number"),
            std::string::npos);
  try {
    (void)read(R"({"model_type": "deepseek_v4", "compress_rope_theta": "x"})");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
  }
  // What the config class refuses: a null head_dim, fewer layers listed than num_hidden_layers.
  EXPECT_NE(with("\"head_dim\": 512", "\"head_dim\": null").find("head_dim must be an integer"), std::string::npos);
  EXPECT_NE(with("[0, 4, 128, 4]", "[0, 4]").find("compress_ratios must list num_hidden_layers (4) layers, got 2"),
            std::string::npos);
}

TEST(ConfigLabels, LengthDependentScalingSeesTheClassesMaxPositions) {
  const LayerTypeSpecs l =
      read(R"({"model_type": "deepseek_v4", "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}})");
  EXPECT_EQ(l.spec_for("compressed_sparse_attention").max_position_embeddings, 1048576);
  EXPECT_EQ(l.spec_for("compressed_sparse_attention").scaling.type, RopeType::kDynamic);
  EXPECT_EQ(l.spec_for("sliding_attention").scaling.type, RopeType::kDefault);  // main: plain RoPE
}

}  // namespace
