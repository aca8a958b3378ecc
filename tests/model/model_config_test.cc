// HF config.json parsing against real-world Qwen2.5 and Llama-3.2 configs, validation messages,
// RoPE inverse frequencies (incl. Llama-3 scaling) and the to_json round trip.
#include "streamrl/model/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>

#include "input_error.h"
#include "run_binary.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

namespace streamrl::model {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

// Qwen/Qwen2.5-0.5B-Instruct config.json as published.
const char* kQwen25Config = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 21,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// meta-llama/Llama-3.2-1B-Instruct config.json as published.
const char* kLlama32Config = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// A small valid llama config to break one field at a time.
json tiny() {
  return {{"model_type", "llama"},   {"vocab_size", 64},       {"hidden_size", 32},
          {"intermediate_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2}};
}

using testing_util::input_error;

std::string parse_error(const json& j) {
  return input_error([&] { parse_model_config(j, "cfg.json"); });
}

TEST(ModelConfig, ParsesQwen25) {
  ModelConfig c = parse_model_config(json::parse(kQwen25Config), "qwen");
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 896);
  EXPECT_EQ(c.intermediate_size, 4864);
  EXPECT_EQ(c.num_hidden_layers, 24);
  EXPECT_EQ(c.num_attention_heads, 14);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.rope_type, "default");
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_EQ(c.pad_token_id, -1);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.architecture(), "Qwen2ForCausalLM");
}

TEST(ModelConfig, ParsesLlama32) {
  ModelConfig c = parse_model_config(json::parse(kLlama32Config), "llama");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_scaling, (RopeScaling{"llama3", 32.0, 1.0, 4.0, 8192}));
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.architecture(), "LlamaForCausalLM");
}

TEST(ModelConfig, Llama3RopeScalingMatchesTransformers) {
  // Reference values from transformers' _compute_llama3_parameters for Llama-3.2-1B (in double):
  // index 0 is kept (short wavelength), 15..17 interpolated, 31 divided by the factor.
  std::vector<double> f = parse_model_config(json::parse(kLlama32Config), "llama").rope_inv_freq();
  ASSERT_EQ(f.size(), 32u);
  const std::vector<std::pair<size_t, double>> expected = {
      {0, 1.0},
      {14, 0.0032114459947525913},
      {15, 0.001290547928209264},
      {16, 0.00042955679655936815},
      {17, 9.70828780262767e-05},
      {18, 1.9461638184831125e-05},
      {31, 9.418306725434909e-08},
  };
  for (const auto& [i, v] : expected) EXPECT_NEAR(f[i], v, 1e-12 * v) << "index " << i;
}

TEST(ModelConfig, DefaultAndLinearRopeFrequencies) {
  json j = tiny();  // head_dim 8, theta 10000
  std::vector<double> f = parse_model_config(j, "cfg").rope_inv_freq();
  ASSERT_EQ(f.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(f[i], std::pow(10000.0, -2.0 * i / 8));

  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  ModelConfig c = parse_model_config(j, "cfg");
  EXPECT_EQ(c.rope_scaling.rope_type, "linear");
  std::vector<double> g = c.rope_inv_freq();
  for (size_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(g[i], f[i] / 4);
}

TEST(ModelConfig, JsonRoundTrip) {
  for (const char* text : {kQwen25Config, kLlama32Config}) {
    ModelConfig c = parse_model_config(json::parse(text), "in");
    json out = to_json(c);
    EXPECT_EQ(out["architectures"], json::array({c.architecture()}));
    EXPECT_EQ(parse_model_config(out, "out"), c);
  }
  json j = tiny();
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  j["pad_token_id"] = 0;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  ModelConfig c = parse_model_config(j, "in");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.o_proj_bias);  // HF Llama's attention_bias also biases o_proj
  EXPECT_TRUE(c.mlp_bias);
  json out = to_json(c);
  EXPECT_EQ(out["eos_token_id"], nullptr);
  EXPECT_EQ(out["bos_token_id"], nullptr);
  EXPECT_EQ(parse_model_config(out, "out"), c);
}

TEST(ModelConfig, DefaultsForAbsentFields) {
  json j = tiny();
  j.erase("model_type");
  j.erase("num_key_value_heads");
  j["dtype"] = "float16";  // the newer transformers spelling of torch_dtype
  ModelConfig c = parse_model_config(j, "cfg");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.torch_dtype, "float16");
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_EQ(c.bos_token_id, -1);

  j["model_type"] = "qwen2";
  EXPECT_EQ(parse_model_config(j, "cfg").max_position_embeddings, 32768);
}

TEST(ModelConfig, ExplicitHeadDimNeedNotDivideHidden) {
  json j = tiny();
  j["hidden_size"] = 30;
  EXPECT_EQ(parse_error(j),
            "cfg.json: hidden_size (30) is not divisible by num_attention_heads (4) and no "
            "head_dim is given");
  j["head_dim"] = 16;
  EXPECT_EQ(parse_model_config(j, "cfg").head_dim, 16);
}

TEST(ModelConfig, MissingAndMistypedFields) {
  json j = json::parse(kQwen25Config);
  j.erase("hidden_size");
  EXPECT_EQ(parse_error(j), "cfg.json: missing required field 'hidden_size'");
  j = tiny();
  j["vocab_size"] = nullptr;
  EXPECT_EQ(parse_error(j), "cfg.json: missing required field 'vocab_size'");

  j = tiny();
  j["hidden_size"] = "32";
  EXPECT_EQ(parse_error(j), "cfg.json: field 'hidden_size' must be an integer, got \"32\"");
  j = tiny();
  j["num_hidden_layers"] = 2.5;
  EXPECT_EQ(parse_error(j), "cfg.json: field 'num_hidden_layers' must be an integer, got 2.5");
  j = tiny();
  j["tie_word_embeddings"] = 1;
  EXPECT_EQ(parse_error(j), "cfg.json: field 'tie_word_embeddings' must be true or false, got 1");
  j = tiny();
  j["rope_theta"] = "big";
  EXPECT_EQ(parse_error(j), "cfg.json: field 'rope_theta' must be a number, got \"big\"");
  j = tiny();
  j["eos_token_id"] = {1, "2"};
  EXPECT_EQ(parse_error(j), "cfg.json: field 'eos_token_id' must be an integer, got \"2\"");
  j = tiny();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_EQ(parse_error(j), "cfg.json: missing required field 'rope_scaling.low_freq_factor'");
  EXPECT_EQ(parse_error(json::array()), "cfg.json: a model config must be a JSON object");
}

TEST(ModelConfig, UnsupportedArchitecturesAreRejectedClearly) {
  json j = tiny();
  j["model_type"] = "mistral";
  EXPECT_EQ(parse_error(j),
            "cfg.json: model_type 'mistral' is not supported (supported: llama, qwen2, qwen3, "
            "mixtral, qwen2_moe, qwen3_moe)");
  j["model_type"] = "mixtral";  // a dense config under an MoE type
  j["num_local_experts"] = 0;
  EXPECT_NE(parse_error(j).find("mixtral is a mixture of experts: needs num_experts > 0"),
            std::string::npos);
  j = tiny();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_EQ(parse_error(j),
            "cfg.json: rope_scaling type 'yarn' is not supported (supported: default, linear, "
            "llama3)");
  j = tiny();
  j["hidden_act"] = "gelu";
  EXPECT_EQ(parse_error(j),
            "cfg.json: invalid model config: hidden_act 'gelu' is not supported (only silu: the "
            "MLP is SwiGLU)");
  j = json::parse(kQwen25Config);
  j["use_sliding_window"] = true;
  EXPECT_EQ(parse_error(j),
            "cfg.json: use_sliding_window=true is not supported (attention is always full)");
}

TEST(ModelConfig, ValidationNamesTheNumbers) {
  json j = tiny();
  j["num_key_value_heads"] = 3;
  EXPECT_EQ(parse_error(j),
            "cfg.json: invalid model config: num_attention_heads (4) must be divisible by "
            "num_key_value_heads (3)");
  j = tiny();
  j["num_hidden_layers"] = 0;
  EXPECT_EQ(parse_error(j),
            "cfg.json: invalid model config: num_hidden_layers must be positive, "
            "got 0");
  j = tiny();
  j["head_dim"] = 7;
  EXPECT_EQ(parse_error(j),
            "cfg.json: invalid model config: head_dim (7) must be even: RoPE rotates pairs");
  j = tiny();
  j["rms_norm_eps"] = 0;
  EXPECT_NE(parse_error(j).find("rms_norm_eps must be a positive number"), std::string::npos);
  j = json::parse(kLlama32Config);
  j["rope_scaling"]["high_freq_factor"] = 0.5;
  EXPECT_NE(parse_error(j).find("rope_scaling.high_freq_factor (0.500000) must exceed "
                                "low_freq_factor (1.000000)"),
            std::string::npos);
}

TEST(ModelConfig, ValidateChecksBiasFlagsPerModelType) {
  ModelConfig c = parse_model_config(tiny(), "cfg");
  c.validate();
  c.attention_bias = true;  // llama: q/k/v bias without o_proj bias has no HF spelling
  EXPECT_NE(input_error([&] {
              c.validate();
            }).find("attention_bias (true) and o_proj_bias (false) must agree"),
            std::string::npos);
  c.model_type = "qwen2";
  c.validate();
  c.attention_bias = false;
  EXPECT_NE(input_error([&] { c.validate(); }).find("qwen2 biases q/k/v only"), std::string::npos);
  EXPECT_NE(input_error([] { ModelConfig{}.validate(); }).find("vocab_size must be positive"),
            std::string::npos);
}

TEST(ModelConfig, LoadsFromFile) {
  fs::path dir = testing_util::fresh_temp_dir("model_config_test");
  core::write_file_atomic(dir / "config.json", kLlama32Config);
  EXPECT_EQ(load_model_config(dir / "config.json").hidden_size, 2048);

  core::write_file_atomic(dir / "bad.json", "{\"hidden_size\": 32,");
  std::string msg = input_error([&] { load_model_config(dir / "bad.json"); });
  EXPECT_EQ(msg.rfind((dir / "bad.json").string() + " is not valid JSON: ", 0), 0u) << msg;

  core::write_file_atomic(dir / "partial.json", R"({"model_type": "llama"})");
  EXPECT_EQ(input_error([&] { load_model_config(dir / "partial.json"); }),
            (dir / "partial.json").string() + ": missing required field 'vocab_size'");
  EXPECT_NE(input_error([&] { load_model_config(dir / "absent.json"); }).find("file not found"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace streamrl::model
