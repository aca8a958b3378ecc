// A Hugging Face-style checkpoint end to end: a tiny Qwen2 model saved as sharded BF16 safetensors
// with config.json and tokenizer.json loads back with BF16-rounded weights and matching log-probs,
// and broken checkpoints (missing shard, integer weight) fail with one-line InputErrors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/safetensors.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::model {
namespace {
namespace fs = std::filesystem;

ModelConfig tiny_qwen2() {
  ModelConfig c;
  c.model_type = "qwen2";
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  c.vocab_size = 100;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.rope_theta = 1000000.0;
  c.torch_dtype = "bfloat16";
  return c;
}

class HfCheckpointTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("streamrl_hf_ckpt_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    model_ = CausalLM(tiny_qwen2(), 7);
    // Zero biases and unit norms would hide mistakes in how they are stored; randomise them.
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : model_->named_weights()) {
      if (name.ends_with(".bias") || name.ends_with("norm.weight"))
        t.add_(torch::randn_like(t) * 0.1);
    }
    for (auto& [name, t] : model_->named_weights()) bf16_[name] = t.detach().to(torch::kBFloat16);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the checkpoint with `tensors` in shards of at most 8 KiB.
  void save(const TensorMap& tensors) {
    write_safetensors_dir(dir_, tensors, 8 * 1024, {{"format", "pt"}});
    core::write_file_atomic(dir_ / "config.json", to_json(model_->config()).dump(2));
    core::write_file_atomic(dir_ / "tokenizer.json", tokenizer::make_tokenizer("char")->to_json());
  }
  std::string load_error() {
    try {
      load_model(dir_);
    } catch (const InputError& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected InputError";
    return "";
  }
  int count_shards() const {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().extension() == ".safetensors") ++n;
    }
    return n;
  }

  fs::path dir_;
  CausalLM model_{nullptr};
  TensorMap bf16_;
};

torch::Tensor logprobs(CausalLM& lm, const std::vector<int32_t>& ids) {
  torch::NoGradGuard no_grad;
  auto tokens = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0);
  return lm->score(tokens, torch::ones_like(tokens, torch::kBool)).logprobs;
}

TEST_F(HfCheckpointTest, ShardedBf16LoadsWithRoundedWeightsAndCloseLogprobs) {
  save(bf16_);
  ASSERT_TRUE(fs::exists(dir_ / kSafetensorsIndexFileName));
  ASSERT_GE(count_shards(), 2);
  CausalLM loaded = load_model(dir_);
  EXPECT_EQ(loaded->config(), model_->config());
  for (auto& [name, t] : loaded->named_weights()) {
    EXPECT_EQ(t.scalar_type(), torch::kFloat32) << name;
    EXPECT_TRUE(torch::equal(t, bf16_.at(name).to(torch::kFloat32))) << name;
  }
  auto tok = tokenizer::load_tokenizer(dir_);
  const std::vector<int32_t> ids = tok->encode("Hello, Qwen! 2+2=4", /*add_special_tokens=*/false);
  EXPECT_EQ(ids, tokenizer::make_tokenizer("char")->encode("Hello, Qwen! 2+2=4"));
  const torch::Tensor want = logprobs(model_, ids), got = logprobs(loaded, ids);
  // BF16 keeps 8 significant bits, so each weight moves by up to 2^-9 of itself.
  EXPECT_TRUE(torch::allclose(got, want, /*rtol=*/1e-2, /*atol=*/1e-2))
      << (got - want).abs().max().item<float>();
  EXPECT_FALSE(torch::equal(got, want));
}

TEST_F(HfCheckpointTest, TiedCheckpointCarryingLmHeadLoads) {
  TensorMap tensors = bf16_;
  tensors["lm_head.weight"] = tensors.at("model.embed_tokens.weight").clone();
  save(tensors);
  CausalLM loaded = load_model(dir_);
  for (auto& [name, t] : loaded->named_weights()) {
    EXPECT_TRUE(torch::equal(t, bf16_.at(name).to(torch::kFloat32))) << name;
  }
}

TEST_F(HfCheckpointTest, MissingShardIsOneLineError) {
  save(bf16_);
  fs::path victim;
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (e.path().filename().string().starts_with("model-00002-of-")) victim = e.path();
  }
  ASSERT_FALSE(victim.empty());
  fs::remove(victim);
  const std::string msg = load_error();
  EXPECT_NE(msg.find(victim.filename().string()), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST_F(HfCheckpointTest, IntegerWeightIsNamed) {
  TensorMap tensors = bf16_;
  const std::string name = "model.layers.1.self_attn.k_proj.weight";
  tensors[name] = torch::zeros(tensors.at(name).sizes(), torch::kInt64);
  save(tensors);
  const std::string msg = load_error();
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("Long"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

}  // namespace
}  // namespace streamrl::model
