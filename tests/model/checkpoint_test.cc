#include "streamrl/model/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "streamrl/core/errors.h"
#include "streamrl/model/safetensors.h"

namespace streamrl::model {
namespace {
namespace fs = std::filesystem;

ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 20;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 32;
  return c;
}

class CheckpointTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("streamrl_ckpt_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string expect_input_error(const fs::path& d) {
    try {
      load_model(d);
    } catch (const InputError& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected InputError";
    return "";
  }
  fs::path dir_;
};

TEST_F(CheckpointTest, RoundTripKeepsWeightsAndOutputs) {
  CausalLM lm(small_config(), 5);
  save_checkpoint(dir_ / "ck", lm, "{}", {{"trainer_state.json", "{\"step\": 3}"}});
  EXPECT_TRUE(fs::exists(dir_ / "ck" / "config.json"));
  EXPECT_TRUE(fs::exists(dir_ / "ck" / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir_ / "ck" / "trainer_state.json"));
  CausalLM back = load_model(dir_ / "ck");
  auto a = lm->named_weights(), b = back->named_weights();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  }
  // Saving again over the same directory replaces it atomically.
  save_checkpoint(dir_ / "ck", back, "{}");
  EXPECT_FALSE(fs::exists(dir_ / "ck" / "trainer_state.json"));
  int siblings = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir_)) ++siblings;
  EXPECT_EQ(siblings, 1);
}

TEST_F(CheckpointTest, MissingTensorIsNamed) {
  CausalLM lm(small_config());
  save_checkpoint(dir_ / "ck", lm, "{}");
  TensorMap w = read_safetensors(dir_ / "ck" / "model.safetensors");
  w.erase("model.layers.1.mlp.up_proj.weight");
  write_safetensors(dir_ / "ck" / "model.safetensors", w);
  std::string msg = expect_input_error(dir_ / "ck");
  EXPECT_NE(msg.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
}

TEST_F(CheckpointTest, WrongShapeNamesBothShapes) {
  CausalLM lm(small_config());
  save_checkpoint(dir_ / "ck", lm, "{}");
  TensorMap w = read_safetensors(dir_ / "ck" / "model.safetensors");
  w["model.layers.0.mlp.down_proj.weight"] = torch::zeros({24, 16});
  write_safetensors(dir_ / "ck" / "model.safetensors", w);
  std::string msg = expect_input_error(dir_ / "ck");
  EXPECT_NE(msg.find("model.layers.0.mlp.down_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[24, 16]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[16, 24]"), std::string::npos) << msg;
}

TEST_F(CheckpointTest, LoadsHalfPrecisionWeights) {
  CausalLM lm(small_config(), 2);
  save_checkpoint(dir_ / "ck", lm, "{}");
  TensorMap w = read_safetensors(dir_ / "ck" / "model.safetensors");
  for (auto& [n, t] : w) t = t.to(torch::kBFloat16);
  write_safetensors(dir_ / "ck" / "model.safetensors", w);
  CausalLM back = load_model(dir_ / "ck");
  auto a = lm->named_weights(), b = back->named_weights();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i].second, b[i].second, 1e-2, 1e-2)) << a[i].first;
  }
}

TEST_F(CheckpointTest, MissingDirectoryAndFiles) {
  EXPECT_NE(expect_input_error(dir_ / "nope").find("not found"), std::string::npos);
  CausalLM lm(small_config());
  save_checkpoint(dir_ / "ck", lm, "{}");
  fs::remove(dir_ / "ck" / "model.safetensors");
  EXPECT_NE(expect_input_error(dir_ / "ck").find("model.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace streamrl::model
