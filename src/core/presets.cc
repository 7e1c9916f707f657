// Built-in presets: RoPE-relevant excerpts of real models' published config.json files, parsed like any config.
#include <string>
#include <vector>

#include "rotary/config.h"

namespace rotary {
namespace {

/// One preset. `config` holds the model's own config.json values for every key the RoPE parser reads
/// (other keys such as vocab_size are left out); `description` says what is notable.
struct PresetEntry {
  const char* name;
  const char* description;
  const char* config;
};

// clang-format off
const PresetEntry kPresets[] = {
{"llama-2-7b", "meta-llama/Llama-2-7b-hf: default RoPE, theta 1e4, head 128, 4k context",
R"({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 4096,
  "num_attention_heads": 32,
  "num_key_value_heads": 32,
  "max_position_embeddings": 4096,
  "rope_theta": 10000.0,
  "rope_scaling": null
}
)"},
{"llama-3.1-8b", "meta-llama/Llama-3.1-8B: llama3 scaling (factor 8, low 1, high 4, original 8192), theta 5e5",
R"({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 4096,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "max_position_embeddings": 131072,
  "rope_theta": 500000.0,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  }
}
)"},
{"llama-3.2-1b", "meta-llama/Llama-3.2-1B: llama3 scaling with factor 32, head 64",
R"({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 2048,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "head_dim": 64,
  "max_position_embeddings": 131072,
  "rope_theta": 500000.0,
  "rope_scaling": {
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  }
}
)"},
{"mistral-7b", "mistralai/Mistral-7B-v0.1: default RoPE, theta 1e4, head 128, 32k positions",
R"({
  "architectures": ["MistralForCausalLM"],
  "model_type": "mistral",
  "hidden_size": 4096,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "max_position_embeddings": 32768,
  "rope_theta": 10000.0,
  "sliding_window": 4096
}
)"},
{"qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct: default RoPE, theta 1e6, head 128 (3584/28)",
R"({
  "architectures": ["Qwen2ForCausalLM"],
  "model_type": "qwen2",
  "hidden_size": 3584,
  "num_attention_heads": 28,
  "num_key_value_heads": 4,
  "max_position_embeddings": 32768,
  "rope_theta": 1000000.0,
  "rope_scaling": null
}
)"},
{"qwen2.5-7b-yarn", "Qwen/Qwen2.5-7B-Instruct with the model card's long-context setting: yarn factor 4, original 32768",
R"({
  "architectures": ["Qwen2ForCausalLM"],
  "model_type": "qwen2",
  "hidden_size": 3584,
  "num_attention_heads": 28,
  "num_key_value_heads": 4,
  "max_position_embeddings": 32768,
  "rope_theta": 1000000.0,
  "rope_scaling": {
    "factor": 4.0,
    "original_max_position_embeddings": 32768,
    "type": "yarn"
  }
}
)"},
{"qwen3-0.6b", "Qwen/Qwen3-0.6B: explicit head_dim 128 (not hidden/heads = 64), theta 1e6",
R"({
  "architectures": ["Qwen3ForCausalLM"],
  "model_type": "qwen3",
  "hidden_size": 1024,
  "num_attention_heads": 16,
  "num_key_value_heads": 8,
  "head_dim": 128,
  "max_position_embeddings": 40960,
  "rope_theta": 1000000,
  "rope_scaling": null
}
)"},
{"deepseek-v3", "deepseek-ai/DeepSeek-V3: yarn factor 40 with mscale = mscale_all_dim = 1 (cos/sin factor 1), rope part 64 (qk_rope_head_dim), interleaved",
R"({
  "architectures": ["DeepseekV3ForCausalLM"],
  "model_type": "deepseek_v3",
  "hidden_size": 7168,
  "num_attention_heads": 128,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "v_head_dim": 128,
  "max_position_embeddings": 163840,
  "rope_theta": 10000,
  "rope_scaling": {
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 40,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
    "type": "yarn"
  }
}
)"},
{"phi-3.5-mini", "microsoft/Phi-3.5-mini-instruct: longrope (48 short/long factors), top-level original 4096, head 96",
R"({
  "architectures": ["Phi3ForCausalLM"],
  "model_type": "phi3",
  "hidden_size": 3072,
  "num_attention_heads": 32,
  "num_key_value_heads": 32,
  "max_position_embeddings": 131072,
  "original_max_position_embeddings": 4096,
  "rope_theta": 10000.0,
  "rope_scaling": {
    "long_factor": [
      1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601, 1.5899999141693115, 1.600000023841858,
      1.6200000047683716, 2.620000123977661, 3.2300000190734863, 3.2300000190734863, 4.789999961853027, 7.400000095367432,
      7.700000286102295, 9.09000015258789, 12.199999809265137, 17.670000076293945, 24.46000099182129, 28.57000160217285,
      30.420001983642578, 30.840002059936523, 32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992,
      50.340003967285156, 50.45000457763672, 57.55000305175781, 57.93000411987305, 58.21000289916992, 60.1400032043457,
      62.61000442504883, 62.62000274658203, 62.71000289916992, 63.1400032043457, 63.1400032043457, 63.77000427246094,
      63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688, 64.06999969482422, 64.08000183105469,
      64.12000274658203, 64.41000366210938, 64.4800033569336, 64.51000213623047, 64.52999877929688, 64.83999633789062
    ],
    "short_factor": [
      1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705, 1.0499999523162842, 1.0499999523162842,
      1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0699999332427979, 1.0999999046325684, 1.1099998950958252,
      1.1599998474121094, 1.1599998474121094, 1.1699998378753662, 1.2899998426437378, 1.339999794960022, 1.679999828338623,
      1.7899998426437378, 1.8199998140335083, 1.8499997854232788, 1.8799997568130493, 1.9099997282028198, 1.9399996995925903,
      1.9899996519088745, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
      2.0199997425079346, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
      2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0799996852874756, 2.0899996757507324,
      2.189999580383301, 2.2199995517730713, 2.5899994373321533, 2.729999542236328, 2.749999523162842, 2.8399994373321533
    ],
    "type": "longrope"
  }
}
)"},
{"gpt-neox-20b", "EleutherAI/gpt-neox-20b: partial rotary (rotary_pct 0.25 -> 24 of 96 channels)",
R"({
  "architectures": ["GPTNeoXForCausalLM"],
  "model_type": "gpt_neox",
  "hidden_size": 6144,
  "num_attention_heads": 64,
  "max_position_embeddings": 2048,
  "rotary_emb_base": 10000,
  "rotary_pct": 0.25
}
)"},
{"gpt-j-6b", "EleutherAI/gpt-j-6b: interleaved pairs, rotary_dim 64 of head 256",
R"({
  "architectures": ["GPTJForCausalLM"],
  "model_type": "gptj",
  "n_embd": 4096,
  "n_head": 16,
  "n_positions": 2048,
  "rotary_dim": 64
}
)"},
{"gemma-7b", "google/gemma-7b: explicit head_dim 256 (hidden 3072, 16 heads)",
R"({
  "architectures": ["GemmaForCausalLM"],
  "model_type": "gemma",
  "hidden_size": 3072,
  "num_attention_heads": 16,
  "num_key_value_heads": 16,
  "head_dim": 256,
  "max_position_embeddings": 8192,
  "rope_theta": 10000.0,
  "rope_scaling": null
}
)"},
{"gpt-oss-20b", "openai/gpt-oss-20b: yarn factor 32, original 4096, truncate false, theta 150000, head 64",
R"({
  "architectures": ["GptOssForCausalLM"],
  "model_type": "gpt_oss",
  "hidden_size": 2880,
  "num_attention_heads": 64,
  "num_key_value_heads": 8,
  "head_dim": 64,
  "max_position_embeddings": 131072,
  "rope_theta": 150000,
  "rope_scaling": {
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "factor": 32.0,
    "original_max_position_embeddings": 4096,
    "rope_type": "yarn",
    "truncate": false
  }
}
)"},
{"qwen2-vl-7b", "Qwen/Qwen2-VL-7B-Instruct: M-RoPE sections [16, 24, 24] (t, h, w) over default frequencies",
R"({
  "architectures": ["Qwen2VLForConditionalGeneration"],
  "model_type": "qwen2_vl",
  "hidden_size": 3584,
  "num_attention_heads": 28,
  "num_key_value_heads": 4,
  "max_position_embeddings": 32768,
  "rope_theta": 1000000.0,
  "rope_scaling": {
    "type": "mrope",
    "mrope_section": [16, 24, 24]
  }
}
)"},
{"qwen3-vl-8b", "Qwen/Qwen3-VL-8B-Instruct: interleaved M-RoPE [24, 20, 20], settings in text_config, theta 5e6",
R"({
  "architectures": ["Qwen3VLForConditionalGeneration"],
  "model_type": "qwen3_vl",
  "text_config": {
    "model_type": "qwen3_vl_text",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 262144,
    "rope_theta": 5000000,
    "rope_scaling": {
      "mrope_interleaved": true,
      "mrope_section": [24, 20, 20],
      "rope_type": "default"
    }
  }
}
)"},
};
// clang-format on

const PresetEntry& find(std::string_view name) {
  for (const auto& p : kPresets)
    if (name == p.name) return p;
  std::string names;
  for (const auto& p : kPresets) names += std::string(names.empty() ? "" : ", ") + p.name;
  fail(Error::Kind::kInvalidArgument, "rotary_preset",
       "preset must be one of " + names + ", got " + quote_value(name));
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.emplace_back(p.name);
  return out;
}

Spec preset(std::string_view name) {
  const PresetEntry& p = find(name);
  Spec spec = spec_from_hf_config_json(p.config, std::string("preset ") + p.name);
  spec.name = p.name;
  return spec;
}

std::string preset_config_json(std::string_view name) { return find(name).config; }

std::string preset_description(std::string_view name) { return find(name).description; }

}  // namespace rotary
