// model::time_layers: a figure for every layer, and no side effect on the training that follows
// (no gradient written, no random number drawn).
#include "streamrl/model/layer_timing.h"

#include <gtest/gtest.h>

#include <cmath>

#include "../tiny_model.h"
#include "streamrl/core/errors.h"

namespace streamrl::model {
namespace {

ModelConfig three_layers() {
  ModelConfig c = testing_util::tiny_model_config(/*vocab_size=*/50, /*max_positions=*/64);
  c.num_hidden_layers = 3;
  return c;
}

TEST(LayerTiming, TimesEveryLayerWithoutSideEffects) {
  torch::manual_seed(7);
  CausalLM model(three_layers());
  torch::manual_seed(11);
  const torch::Tensor expected = torch::rand({4});
  torch::manual_seed(11);
  const LayerSeconds s = time_layers(model, /*rows=*/3, /*row_tokens=*/20, /*repeats=*/3);
  ASSERT_EQ(s.forward.size(), 3u);
  ASSERT_EQ(s.backward.size(), 3u);
  for (size_t l = 0; l < 3; ++l) {
    EXPECT_TRUE(std::isfinite(s.forward[l]) && s.forward[l] > 0) << l;
    EXPECT_TRUE(std::isfinite(s.backward[l]) && s.backward[l] > 0) << l;
  }
  for (const torch::Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected)) << "timing drew random numbers";
  EXPECT_THROW(time_layers(model, 0, 20, 1), InputError);
}

}  // namespace
}  // namespace streamrl::model
