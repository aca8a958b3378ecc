// Length ranker: recall/Spearman computation, fitting a synthetic length signal, online refit
// after the signal drifts, save/load.
#include "streamrl/sgs/length_ranker.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "run_binary.h"
#include "streamrl/core/errors.h"

namespace streamrl::sgs {
namespace {

TEST(RankingMetrics, RecallAndSpearmanByHand) {
  std::vector<double> actual, pred;
  for (int i = 1; i <= 20; ++i) actual.push_back(i);
  pred = actual;
  RankerMetrics m = ranking_metrics(pred, actual);
  EXPECT_DOUBLE_EQ(m.recall_top20, 1.0);
  EXPECT_DOUBLE_EQ(m.spearman, 1.0);
  // Swap the 4th and 5th longest: the predicted top 4 keeps 3 of the true top 4; the top 2
  // and top 1 are untouched.
  std::swap(pred[16], pred[15]);
  m = ranking_metrics(pred, actual);
  EXPECT_DOUBLE_EQ(m.recall_top20, 0.75);
  EXPECT_DOUBLE_EQ(m.recall_top10, 1.0);
  EXPECT_DOUBLE_EQ(m.recall_top5, 1.0);
  std::reverse(pred.begin(), pred.end());
  m = ranking_metrics(pred, actual);
  EXPECT_DOUBLE_EQ(m.recall_top20, 0.0);
  EXPECT_LT(m.spearman, -0.9);
  EXPECT_EQ(ranking_metrics({}, {}).eval_examples, 0u);
}

// Prompts of 4..16 random tokens in [3, 9); the output length counts one marker token, so the
// signal is in the content, not only in the prompt length.
std::vector<LengthExample> synthetic(int count, int32_t marker, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<LengthExample> out;
  for (int i = 0; i < count; ++i) {
    LengthExample e;
    e.prompt_ids.push_back(1);
    const int len = 4 + static_cast<int>(rng() % 13);
    int hits = 0;
    for (int t = 0; t < len; ++t) {
      const int32_t id = 3 + static_cast<int32_t>(rng() % 6);
      hits += id == marker;
      e.prompt_ids.push_back(id);
    }
    e.length = 2 + 10 * hits + static_cast<double>(rng() % 3);
    out.push_back(std::move(e));
  }
  return out;
}

RankerConfig tiny_ranker() {
  RankerConfig c;
  c.vocab_size = 23;
  c.hidden_size = 32;
  c.layers = 1;
  c.heads = 2;
  c.max_prompt_tokens = 32;
  c.steps = 200;
  c.batch_size = 32;
  c.lr = 5e-3;
  c.seed = 1;
  return c;
}

TEST(LengthRanker, OnlineRefitFollowsADriftedSignal) {
  LengthRanker r(tiny_ranker());
  const auto eval_a = synthetic(300, 7, 2);
  const RankerMetrics before = r.evaluate(eval_a);
  RankerMetrics fit = r.fit(synthetic(800, 7, 1), eval_a);
  EXPECT_GT(fit.recall_top20, before.recall_top20 + 0.3);
  EXPECT_GT(fit.recall_top20, 0.7);
  EXPECT_GT(fit.spearman, 0.6);
  EXPECT_EQ(fit.train_examples, 800u);

  // The policy drifts: now a different token makes outputs long. The old fit ranks poorly; an
  // online refit on a window of recent rollouts recovers.
  const auto eval_b = synthetic(300, 5, 4);
  const RankerMetrics stale = r.evaluate(eval_b);
  OnlineRankerTrainer online(r, 800, 2);
  for (auto& e : synthetic(1000, 5, 3)) online.observe(e.prompt_ids, e.length);
  EXPECT_EQ(online.window_size(), 800u);             // bounded window
  EXPECT_FALSE(online.end_iteration().has_value());  // refit every 2nd iteration
  auto refit = online.end_iteration();
  ASSERT_TRUE(refit.has_value());
  EXPECT_GT(refit->eval_examples, 50u);
  const RankerMetrics fresh = r.evaluate(eval_b);
  EXPECT_GT(fresh.recall_top20, stale.recall_top20 + 0.3);
  EXPECT_GT(fresh.recall_top20, 0.7);
}

TEST(LengthRanker, SaveLoadKeepsPredictions) {
  RankerConfig c = tiny_ranker();
  c.steps = 20;
  LengthRanker r(c);
  r.fit(synthetic(100, 7, 1), {});
  const auto dir = std::filesystem::path(testing_util::fresh_temp_dir("ranker_test"));
  r.save(dir);
  LengthRanker back = LengthRanker::load(dir);
  std::vector<std::vector<int32_t>> prompts = {{1, 7, 7, 4}, {1, 5, 6}};
  auto a = r.predict(prompts), b = back.predict(prompts);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_NEAR(a[0], b[0], 1e-4 * std::max(1.0, a[0]));
  EXPECT_NEAR(a[1], b[1], 1e-4 * std::max(1.0, a[1]));
  EXPECT_GT(a[0], 0.0);
  std::filesystem::remove_all(dir);
  EXPECT_THROW(LengthRanker::load(dir), InputError);
}

TEST(LengthRanker, RejectsBadInput) {
  RankerConfig c = tiny_ranker();
  c.vocab_size = 0;
  EXPECT_THROW(LengthRanker{c}, InputError);
  LengthRanker r(tiny_ranker());
  EXPECT_THROW(r.fit({}, {}), InputError);
  EXPECT_THROW(r.predict({{1, 99}}), InputError);
}

}  // namespace
}  // namespace streamrl::sgs
