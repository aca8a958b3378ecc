// The tiny decoder the unit tests build on: 2 layers, width 32, GQA 4/2 with head_dim 8. Each test
// picks the vocabulary, positions and initialisation scale it needs (a larger scale gives peaked,
// seed-sensitive distributions, which sampling tests want).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "streamrl/model/model_config.h"
#include "streamrl/model/transformer.h"

namespace streamrl::testing_util {

// `initializer_range` <= 0 keeps ModelConfig's default.
inline model::ModelConfig tiny_model_config(int64_t vocab_size, int64_t max_positions,
                                            double initializer_range = 0.3) {
  model::ModelConfig c;
  c.vocab_size = vocab_size;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = max_positions;
  if (initializer_range > 0) c.initializer_range = initializer_range;
  return c;
}

inline model::CausalLM tiny_model(uint64_t seed, int64_t vocab_size, int64_t max_positions,
                                  double initializer_range = 0.3) {
  return model::CausalLM(tiny_model_config(vocab_size, max_positions, initializer_range), seed);
}

// The largest difference between `lm`'s parameters and the same-named ones of `reference` (a
// parameter `reference` lacks is a test failure).
inline double max_param_diff(model::CausalLM& lm, model::CausalLM& reference) {
  const auto ref = reference->named_parameters();
  double m = 0;
  for (const auto& p : lm->named_parameters()) {
    const torch::Tensor* r = ref.find(p.key());
    EXPECT_NE(r, nullptr) << p.key();
    if (r) m = std::max(m, (p.value() - *r).abs().max().item<double>());
  }
  return m;
}

}  // namespace streamrl::testing_util
