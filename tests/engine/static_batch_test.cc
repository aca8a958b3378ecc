#include "streamrl/engine/static_batch.h"
#include "engine_model.h"

#include <gtest/gtest.h>

namespace streamrl::engine {
namespace {

GenerateRequest request(int64_t id, std::vector<int32_t> prompt, int n, uint64_t seed) {
  GenerateRequest r;
  r.request_id = id;
  r.prompt_ids = std::move(prompt);
  r.n = n;
  r.params.seed = seed;
  r.params.max_new_tokens = 12;
  r.params.stop_token_ids = {2};
  return r;
}

TEST(StaticBatch, SameSeedSameTokensAtAnyBatchComposition) {
  auto lm = engine_model(11, 64);
  auto a = generate_static(lm, {request(0, {5, 6, 7}, 3, 42), request(1, {9, 1}, 2, 42)});
  auto b = generate_static(lm, {request(1, {9, 1}, 2, 42)});
  auto c = generate_static(lm, {request(0, {5, 6, 7}, 3, 42), request(1, {9, 1}, 2, 42)});
  ASSERT_EQ(a.size(), 5u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].output_ids, c[i].output_ids);
  EXPECT_EQ(a[3].output_ids, b[0].output_ids);
  EXPECT_EQ(a[4].output_ids, b[1].output_ids);
  // Samples of one prompt differ (distinct RNG streams).
  EXPECT_NE(a[0].output_ids, a[1].output_ids);
  auto d = generate_static(lm, {request(0, {5, 6, 7}, 3, 43)});
  EXPECT_NE(a[0].output_ids, d[0].output_ids);
}

TEST(StaticBatch, LogprobsMatchTrainingPath) {
  auto lm = engine_model(11, 64);
  auto samples = generate_static(lm, {request(0, {3, 4, 5, 6}, 2, 1), request(1, {7}, 1, 1)});
  for (const auto& s : samples) {
    std::vector<int64_t> ids(s.prompt_ids.begin(), s.prompt_ids.end());
    ids.insert(ids.end(), s.output_ids.begin(), s.output_ids.end());
    const int64_t T = ids.size();
    auto tokens = torch::tensor(ids, torch::kLong).view({1, T});
    auto lp = lm->score(tokens, torch::ones({1, T}, torch::kBool)).logprobs;
    for (size_t i = 0; i < s.output_ids.size(); ++i) {
      EXPECT_NEAR(lp[0][s.prompt_ids.size() + i].item<float>(), s.logprobs[i], 1e-4);
    }
  }
}

TEST(StaticBatch, StopsAtStopTokenOrLength) {
  auto lm = engine_model(11, 64);
  GenerateRequest r = request(0, {1, 2, 3}, 8, 5);
  r.params.max_new_tokens = 4;
  for (const auto& s : generate_static(lm, {r})) {
    if (s.finish_reason == FinishReason::kStop) {
      EXPECT_EQ(s.output_ids.back(), 2);
    } else {
      EXPECT_EQ(s.output_ids.size(), 4u);
    }
    EXPECT_EQ(s.logprobs.size(), s.output_ids.size());
  }
}

}  // namespace
}  // namespace streamrl::engine
