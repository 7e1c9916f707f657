// Internal: the table of transformers' config-class RoPE defaults per model_type (facts of transformers 5.x).
#include "core/model_defaults.h"

#include <vector>

namespace rotary::detail {
namespace {

using json = nlohmann::json;

// Class default RoPE dicts. gpt-oss's leaves rope_theta to the table, so a top-level rope_theta still wins, as
// in transformers; Apertus's class dict carries its own, which a top-level rope_theta does not replace.
const json kGptOssRope = {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                          {"truncate", false}, {"original_max_position_embeddings", 4096}};
const json kApertusRope = {{"rope_type", "llama3"}, {"rope_theta", 12000000.0}, {"factor", 8.0},
                           {"original_max_position_embeddings", 8192}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}};

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
  M& interleaved() { interleaved_pairs = true; return *this; }
  M& head_key(std::string_view key) { head_dim_key = key; return *this; }
  M& qk_nope_head(int64_t v) { qk_nope_head_dim = v; return *this; }
  M& no_rotary_dim() { ignores_rotary_dim = true; return *this; }
  M& text_only() { text_positions_only = true; return *this; }
  M& refused(const char* why) { unsupported = why; return *this; }
};

// Only the models whose defaults differ from the generic ones. GPT-NeoX reads its own legacy names
// (config.cc); Gemma 3's legacy fields are read by layer_types.cc. python/tests/test_hf_class_defaults.py
// checks the entries against the installed transformers (frequencies and pairing on trimmed files; GPT-J's
// pairing is tests/core/config_presets_test.cc's).
const std::vector<ModelDefaults> kTable = {
    M("apertus").theta(12000000.0).dict(kApertusRope),
    M("axk1").interleaved(),  // rope_interleave defaults to true in this and the other MLA classes below
    M("bitnet").theta(500000.0),
    M("blt").theta(500000.0).interleaved(),  // repeat_interleave'd cos/sin, rotate_half on x[::2] / x[1::2]
    M("blt_global_transformer").theta(500000.0).interleaved(),
    M("blt_local_decoder").theta(500000.0).interleaved(),
    M("blt_local_encoder").theta(500000.0).interleaved(),
    M("blt_patcher").theta(500000.0).interleaved(),
    M("codegen").interleaved(),  // rotate_every_two, as GPT-J
    M("cohere").theta(500000.0).interleaved(),
    M("cohere2").interleaved(),
    M("cohere2_moe").head(128).interleaved(),
    M("deepseek_v2").qk_rope_head(64).interleaved(),
    M("deepseek_v3").qk_rope_head(64).interleaved(),
    M("ernie4_5").theta(500000.0).head(128).interleaved(),
    M("ernie4_5_moe").theta(500000.0).interleaved(),
    M("ernie4_5_vl_moe").theta(500000.0).interleaved().text_only(),
    M("ernie4_5_vl_moe_text").theta(500000.0).interleaved().text_only(),
    M("gemma").head(256),
    M("gemma2").head(256),
    M("glm").partial(0.5).head(128).interleaved(),
    M("glm4").partial(0.5).head(128).interleaved(),
    M("glm4_moe_lite").interleaved(),
    M("glm_ocr").interleaved(),  // rotate_half_llm: the text model's pairs
    M("glm_ocr_text").interleaved(),
    M("gpt_oss").theta(150000.0).head(64).dict(kGptOssRope),
    M("gptj").interleaved(),
    M("helium").theta(100000.0).head(128).interleaved(),
    M("jetmoe").head_key("kv_channels"),
    M("lfm2").theta(1000000.0),
    M("minimax").theta(1000000.0),
    M("minimax_m3_vl").no_rotary_dim(),
    M("minimax_m3_vl_text").no_rotary_dim(),
    M("mistral4").qk_rope_head(64).qk_nope_head(64).interleaved(),
    M("mixtral").theta(1000000.0),
    M("moonshine_streaming").interleaved(),  // its first-half cos/sin repeat_interleave'd, pairs (x[2i], x[2i+1])
    M("nanochat").refused("its code rotates by minus the angle (rotate_half is cat(x2, -x1)), which a Spec does not "
                          "express: build the Spec from the config's fields and rotate with the inverse direction"),
    M("nemotron").partial(0.5),
    M("openai_privacy_filter").interleaved(),  // x[..., ::2] / x[..., 1::2]
    M("persimmon").partial(0.5),
    M("phi").partial(0.5),
    M("phimoe").theta(1000000.0),
    M("qwen2_5_vl").theta(1000000.0).sections(16, 24, 24, false),
    M("qwen2_5_vl_text").theta(1000000.0).sections(16, 24, 24, false),
    M("qwen2_vl").theta(1000000.0).sections(16, 24, 24, false),
    M("qwen2_vl_text").theta(1000000.0).sections(16, 24, 24, false),
    M("qwen3").head(128),
    M("qwen3_5").partial(0.25).head(256).sections(11, 11, 10, true),
    M("qwen3_5_moe").partial(0.25).head(256).sections(11, 11, 10, true),
    M("qwen3_5_moe_text").partial(0.25).head(256).sections(11, 11, 10, true),
    M("qwen3_5_text").partial(0.25).head(256).sections(11, 11, 10, true),
    M("qwen3_vl").theta(500000.0).head(128).sections(24, 20, 20, true),
    M("qwen3_vl_moe").theta(500000.0).head(128).sections(24, 20, 20, true),
    M("qwen3_vl_moe_text").theta(500000.0).head(128).sections(24, 20, 20, true),
    M("qwen3_vl_text").theta(500000.0).head(128).sections(24, 20, 20, true),
    M("seed_oss").head(128),
    M("smollm3").theta(2000000.0),
    M("stablelm").partial(0.25),
    M("youtu").interleaved(),
    M("zamba2").head_key("attention_head_dim"),
};

const ModelDefaults kGeneric{};

}  // namespace

const ModelDefaults& model_defaults(std::string_view model_type) {
  for (const ModelDefaults& m : kTable)
    if (m.model_type == model_type) return m;
  return kGeneric;
}

}  // namespace rotary::detail
