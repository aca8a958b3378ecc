#include "streamrl/engine/sampler.h"

#include <gtest/gtest.h>

namespace streamrl::engine {
namespace {

TEST(Sampler, CounterUniformIsDeterministicAndSpread) {
  EXPECT_EQ(counter_uniform(1, 2, 3), counter_uniform(1, 2, 3));
  EXPECT_NE(counter_uniform(1, 2, 3), counter_uniform(1, 2, 4));
  EXPECT_NE(counter_uniform(1, 2, 3), counter_uniform(2, 2, 3));
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    double u = counter_uniform(9, 0, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

// Probabilities {0.1, 0.2, 0.3, 0.4}: the inverse CDF, taken in descending-probability order
// (0.4, 0.3, 0.2, 0.1), maps uniforms to tokens deterministically.
TEST(Sampler, InverseCdfOnKnownDistribution) {
  auto logits = torch::tensor({0.1f, 0.2f, 0.3f, 0.4f}).log().view({1, 4});
  SamplingParams p;
  auto pick = [&](double u) { return sample_tokens(logits, {&p}, {u}).tokens[0].item<int64_t>(); };
  EXPECT_EQ(pick(0.0), 3);
  EXPECT_EQ(pick(0.35), 3);
  EXPECT_EQ(pick(0.45), 2);
  EXPECT_EQ(pick(0.75), 1);
  EXPECT_EQ(pick(0.95), 0);
  int counts[4] = {0, 0, 0, 0};
  for (int i = 0; i < 4000; ++i) ++counts[pick(counter_uniform(1, 2, i))];
  EXPECT_NEAR(counts[0] / 4000.0, 0.1, 0.02);
  EXPECT_NEAR(counts[3] / 4000.0, 0.4, 0.03);
  auto out = sample_tokens(logits, {&p}, {0.1});
  EXPECT_NEAR(out.logprobs[0].item<float>(), std::log(0.4f), 1e-5);
}

TEST(Sampler, TopKAndTopPTruncate) {
  auto logits = torch::tensor({0.1f, 0.2f, 0.3f, 0.4f}).log().view({1, 4});
  SamplingParams k2;
  k2.top_k = 2;  // keeps tokens 3 (0.4) and 2 (0.3)
  for (double u : {0.0, 0.3, 0.56, 0.99}) {
    int64_t t = sample_tokens(logits, {&k2}, {u}).tokens[0].item<int64_t>();
    EXPECT_TRUE(t == 3 || t == 2) << u;
  }
  EXPECT_EQ(sample_tokens(logits, {&k2}, {0.5}).tokens[0].item<int64_t>(), 3);  // 0.5 < 0.4/0.7
  SamplingParams p05;
  p05.top_p = 0.5f;  // mass before token 3 is 0 (<0.5) and before token 2 is 0.4 (<0.5): keep both
  for (double u : {0.0, 0.99}) {
    int64_t t = sample_tokens(logits, {&p05}, {u}).tokens[0].item<int64_t>();
    EXPECT_TRUE(t == 3 || t == 2);
  }
  SamplingParams p01;
  p01.top_p = 0.1f;  // only the most likely token
  EXPECT_EQ(sample_tokens(logits, {&p01}, {0.99}).tokens[0].item<int64_t>(), 3);
}

TEST(Sampler, GreedyAndTemperature) {
  auto logits = torch::tensor({1.0f, 3.0f, 2.0f}).view({1, 3});
  SamplingParams greedy;
  greedy.temperature = 0;
  auto g = sample_tokens(logits, {&greedy}, {0.99});
  EXPECT_EQ(g.tokens[0].item<int64_t>(), 1);
  EXPECT_NEAR(g.logprobs[0].item<float>(), torch::log_softmax(logits, -1)[0][1].item<float>(),
              1e-6);
  SamplingParams hot;
  hot.temperature = 2.0f;
  auto h = sample_tokens(logits, {&hot}, {0.0});
  EXPECT_NEAR(h.logprobs[0].item<float>(),
              torch::log_softmax(logits / 2.0, -1)[0][h.tokens[0].item<int64_t>()].item<float>(),
              1e-6);
}

TEST(Sampler, RowsAreIndependentOfBatchComposition) {
  torch::manual_seed(0);
  auto logits = torch::randn({3, 11});
  SamplingParams a, b;
  b.top_p = 0.7f;
  std::vector<double> u = {0.3, 0.6, 0.9};
  auto batched = sample_tokens(logits, {&a, &b, &a}, u);
  for (int64_t r = 0; r < 3; ++r) {
    auto single = sample_tokens(logits[r].view({1, 11}), {r == 1 ? &b : &a}, {u[r]});
    EXPECT_EQ(single.tokens[0].item<int64_t>(), batched.tokens[r].item<int64_t>());
  }
}

}  // namespace
}  // namespace streamrl::engine
