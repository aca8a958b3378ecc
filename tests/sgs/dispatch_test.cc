// Dispatch policies and Algorithm 2's split on hand-made PTL profiles, with expected values worked
// out by hand in the comments.
#include "streamrl/sgs/dispatch.h"

#include <gtest/gtest.h>

#include <set>

#include "streamrl/core/errors.h"
#include "streamrl/sgs/replay.h"

namespace streamrl::sgs {
namespace {

// PTL flat at 10 ms up to batch 16, then linear (constant throughput): 20 ms at 32, 40 ms at 64.
engine::Profile knee_profile() {
  engine::Profile p;
  for (auto [bs, s] : std::vector<std::pair<int, double>>{
           {1, 0.010}, {8, 0.010}, {16, 0.010}, {32, 0.020}, {64, 0.040}}) {
    p.ptl.push_back({bs, 64, s});
  }
  return p;
}

std::vector<DispatchItem> items_with(const std::vector<double>& estimates, int n = 1) {
  std::vector<DispatchItem> out;
  for (double e : estimates) out.push_back({e, n, 8});
  return out;
}

LengthWindow window_of(const std::vector<double>& lengths) {
  LengthWindow w;
  for (double l : lengths) w.add(l);
  return w;
}

// Algorithm 2 as in the paper: Eq. 2 with a fixed alpha of 0.2.
DispatchConfig paper_config() {
  DispatchConfig c;
  c.latency_model = LatencyModel::kEq2;
  c.auto_alpha = false;
  return c;
}

// A CPU-like PTL: 1 ms per step plus 0.1 ms per sequence in the batch.
engine::Profile affine_profile() {
  engine::Profile p;
  for (int bs : {1, 2, 4, 8, 16, 32, 64}) p.ptl.push_back({bs, 64, 0.001 + 0.0001 * bs});
  return p;
}

TEST(Dispatch, Eq2LatencyCountsRounds) {
  const auto p = knee_profile();
  EXPECT_DOUBLE_EQ(eq2_latency(p, 0, 100, 8, 64), 0.0);
  EXPECT_NEAR(eq2_latency(p, 20, 100, 16, 64), 0.010 * 100 * 2, 1e-12);
  EXPECT_NEAR(eq2_latency(p, 20, 100, 20, 64), 0.0125 * 100, 1e-12);  // PTL(20) interpolated
}

TEST(Dispatch, GroupLatencyPicksBestBatch) {
  const auto p = knee_profile();
  // 20 samples on one instance: batch 20 in one round (12.5 ms x 100) beats 16 in two (20 ms x
  // 100).
  GroupLatency g = group_latency(p, 20, 100, 1, 64, 64);
  EXPECT_EQ(g.batch_size, 20);
  EXPECT_NEAR(g.seconds, 1.25, 1e-9);
  // On two instances each runs 10 at once in the flat region: 10 ms x 100.
  g = group_latency(p, 20, 100, 2, 64, 64);
  EXPECT_EQ(g.batch_size, 10);
  EXPECT_NEAR(g.seconds, 1.0, 1e-9);
  EXPECT_TRUE(std::isinf(group_latency(p, 5, 10, 0, 64, 64).seconds));
  EXPECT_DOUBLE_EQ(group_latency(p, 0, 10, 0, 64, 64).seconds, 0.0);
}

TEST(Dispatch, Algorithm2SplitOnKneeProfile) {
  const auto p = knee_profile();
  // Long: 20 samples at 100 tokens -> 1.25 s on 1 instance, 1.0 s on 2 or 3.
  // Regular: 80 samples at 20 tokens -> 1.0 s on 1, 0.5 s on 2, 0.3375 s on 3 (batch 27).
  const GroupSpec lg{20, 100, 64}, rg{80, 20, 64};
  SplitChoice c = choose_split(p, lg, rg, 4, 64, SplitObjective::kMax);
  // max: (1,3) 1.25, (2,2) 1.0, (3,1) 1.0; the tie goes to the smaller sum, (2,2) 1.5 < 2.0.
  EXPECT_EQ(c.long_instances, 2);
  EXPECT_EQ(c.regular_instances, 2);
  EXPECT_EQ(c.long_batch, 10);
  EXPECT_NEAR(c.seconds, 1.0, 1e-9);
  EXPECT_NEAR(c.regular_seconds, 0.5, 1e-9);
  // sum: (1,3) 1.5875, (2,2) 1.5, (3,1) 2.0.
  c = choose_split(p, lg, rg, 4, 64, SplitObjective::kSum);
  EXPECT_EQ(c.long_instances, 2);
  EXPECT_NEAR(c.seconds, 1.5, 1e-9);
  // Batch cap 16: long 2.0 / 1.0 / 1.0 s on 1 / 2 / 3 instances; regular (rounds of 10 ms x 20)
  // 1.0 / 0.6 / 0.4 s on 1 / 2 / 3. sum: (1,3) 2.4, (2,2) 1.6, (3,1) 2.0.
  c = choose_split(p, lg, rg, 4, 16, SplitObjective::kSum);
  EXPECT_EQ(c.long_instances, 2);
  EXPECT_EQ(c.regular_batch, 14);  // 40 samples in 3 rounds: the first batch size that needs 3
  EXPECT_NEAR(c.seconds, 1.6, 1e-9);
}

TEST(Dispatch, SplitEdgeCases) {
  const auto p = knee_profile();
  // N = 1 cannot serve two non-empty groups.
  EXPECT_THROW(choose_split(p, {5, 50, 64}, {5, 10, 64}, 1, 64, SplitObjective::kMax), InputError);
  // Empty long group: every instance serves the regular group.
  SplitChoice c = choose_split(p, {0, 50, 64}, {40, 10, 64}, 3, 64, SplitObjective::kMax);
  EXPECT_EQ(c.long_instances, 0);
  EXPECT_EQ(c.regular_instances, 3);
  // Empty regular group: every instance serves the long tail.
  c = choose_split(p, {40, 50, 64}, {0, 10, 64}, 3, 64, SplitObjective::kMax);
  EXPECT_EQ(c.long_instances, 3);
  // Both empty: nothing to wait for.
  c = choose_split(p, {0, 50, 64}, {0, 10, 64}, 2, 64, SplitObjective::kSum);
  EXPECT_DOUBLE_EQ(c.seconds, 0.0);
}

TEST(Dispatch, LptOrderIsStableLongestFirst) {
  auto items = items_with({3, 9, 3, 7, 9});
  EXPECT_EQ(lpt_order(items, {0, 1, 2, 3, 4}), (std::vector<size_t>{1, 4, 3, 0, 2}));
}

TEST(Dispatch, SkewAwarePutsTopAlphaOnLongInstancesInLptOrder) {
  const auto p = knee_profile();
  // 20 requests, estimates 1..20; alpha 0.2 -> the 4 longest (17..20) are the long tail.
  std::vector<double> est;
  for (int i = 1; i <= 20; ++i) est.push_back(i);
  auto items = items_with(est);
  auto lengths = window_of(est);
  DispatchConfig cfg = paper_config();
  cfg.max_batch_size = 16;
  Assignment a = dispatch(items, 2, cfg, &p, &lengths);
  ASSERT_EQ(a.instances.size(), 2u);
  EXPECT_EQ(a.long_items, 4u);
  EXPECT_EQ(a.long_instances, 1);
  EXPECT_EQ(a.instances[0].order, (std::vector<size_t>{19, 18, 17, 16}));
  EXPECT_EQ(a.instances[0].batch_size, 4);  // all four in one round, flat PTL
  const auto& reg = a.instances[1].order;
  ASSERT_EQ(reg.size(), 16u);
  for (size_t k = 1; k < reg.size(); ++k)
    EXPECT_GT(items[reg[k - 1]].estimate, items[reg[k]].estimate);
  EXPECT_GT(a.predicted_seconds, 0.0);
}

TEST(Dispatch, SkewAwareEdgeCases) {
  const auto p = knee_profile();
  auto items = items_with({5, 1, 9, 3});
  auto lengths = window_of({1, 3, 5, 9});
  DispatchConfig cfg = paper_config();
  // N = 1: one instance serves everything, longest first.
  Assignment a = dispatch(items, 1, cfg, &p, &lengths);
  EXPECT_EQ(a.long_instances, 0);
  EXPECT_EQ(a.instances[0].order, (std::vector<size_t>{2, 0, 3, 1}));
  // alpha 0: no long tail, both instances regular.
  cfg.alpha = 0.0;
  a = dispatch(items, 2, cfg, &p, &lengths);
  EXPECT_EQ(a.long_items, 0u);
  EXPECT_EQ(a.long_instances, 0);
  EXPECT_EQ(a.instances[0].order.size() + a.instances[1].order.size(), 4u);
  // alpha 1: everything is long tail.
  cfg.alpha = 1.0;
  a = dispatch(items, 2, cfg, &p, &lengths);
  EXPECT_EQ(a.long_instances, 2);
  // No requests: empty plans.
  a = dispatch({}, 3, cfg, &p, &lengths);
  ASSERT_EQ(a.instances.size(), 3u);
  for (const auto& plan : a.instances) EXPECT_TRUE(plan.order.empty());
  // Missing inputs are errors.
  EXPECT_THROW(dispatch(items, 2, cfg), InputError);
  LengthWindow empty;
  EXPECT_THROW(dispatch(items, 2, cfg, &p, &empty), InputError);
  EXPECT_THROW(dispatch(items, 0, cfg, &p, &lengths), InputError);
  cfg.alpha = 1.5;
  EXPECT_THROW(dispatch(items, 2, cfg, &p, &lengths), InputError);
}

TEST(Dispatch, RandomDealsEvenlyInArrivalOrder) {
  auto items = items_with(std::vector<double>(11, 1.0));
  DispatchConfig cfg;
  cfg.policy = DispatchPolicy::kRandom;
  cfg.seed = 3;
  Assignment a = dispatch(items, 3, cfg);
  std::set<size_t> seen;
  for (const auto& plan : a.instances) {
    EXPECT_GE(plan.order.size(), 3u);
    EXPECT_LE(plan.order.size(), 4u);
    EXPECT_TRUE(std::is_sorted(plan.order.begin(), plan.order.end()));  // FIFO
    EXPECT_EQ(plan.batch_size, cfg.max_batch_size);
    seen.insert(plan.order.begin(), plan.order.end());
  }
  EXPECT_EQ(seen.size(), 11u);
  Assignment b = dispatch(items, 3, cfg);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(a.instances[k].order, b.instances[k].order);
}

TEST(Dispatch, LeastLoadedBalancesEstimatedTokens) {
  auto items = items_with({10, 1, 1, 1, 4});
  DispatchConfig cfg;
  cfg.policy = DispatchPolicy::kLeastLoaded;
  Assignment a = dispatch(items, 2, cfg);
  EXPECT_EQ(a.instances[0].order, (std::vector<size_t>{0}));
  EXPECT_EQ(a.instances[1].order, (std::vector<size_t>{1, 2, 3, 4}));
  cfg.admission = engine::AdmissionPolicy::kLongestFirst;
  a = dispatch(items, 2, cfg);
  EXPECT_EQ(a.instances[1].order, (std::vector<size_t>{4, 1, 2, 3}));
}

TEST(Dispatch, BatchHoldsTheLargestRequest) {
  auto items = items_with({5, 1}, 6);
  DispatchConfig cfg;
  cfg.policy = DispatchPolicy::kRandom;
  cfg.max_batch_size = 4;
  Assignment a = dispatch(items, 1, cfg);
  EXPECT_EQ(a.instances[0].batch_size, 6);
}

TEST(Dispatch, LengthWindowKeepsRecent) {
  LengthWindow w(4);
  for (double l : {100, 1, 2, 3, 4}) w.add(l);
  EXPECT_EQ(w.size(), 4u);
  EXPECT_DOUBLE_EQ(w.percentile(1.0), 4.0);  // 100 fell out of the window
  EXPECT_DOUBLE_EQ(w.percentile(0.5), 2.5);
  EXPECT_THROW(LengthWindow().percentile(0.5), InputError);
}

TEST(Dispatch, ParsesNames) {
  EXPECT_EQ(parse_dispatch_policy("skew_aware"), DispatchPolicy::kSkewAware);
  EXPECT_EQ(parse_split_objective("sum"), SplitObjective::kSum);
  EXPECT_THROW(parse_dispatch_policy("fastest"), InputError);
  EXPECT_THROW(parse_split_objective("min"), InputError);
}

TEST(Replay, EqualLengthsOnOneInstanceRunInRounds) {
  // 20 samples of 100 tokens at batch 10: two rounds of 100 steps at PTL(10) = 10 ms (flat part).
  const auto p = knee_profile();
  EXPECT_NEAR(replay_instance(p, std::vector<double>(20, 100), 10, 8), 2.0, 1e-9);
  EXPECT_DOUBLE_EQ(replay_instance(p, {}, 10, 8), 0.0);
}

TEST(Replay, BatchShrinksAsSamplesFinish) {
  // Lengths 1 and 3 together: one step at batch 2 (1.2 ms), then two at batch 1 (1.1 ms each).
  const auto p = affine_profile();
  EXPECT_NEAR(replay_instance(p, {1, 3}, 2, 8), 0.0012 + 2 * 0.0011, 1e-12);
  // One at a time: 1 + 3 steps at batch 1. Prefill adds prompt tokens at the profile's rate.
  EXPECT_NEAR(replay_instance(p, {1, 3}, 1, 8), 4 * 0.0011, 1e-12);
  engine::Profile q = p;
  q.prefill_tokens_per_s = 800;  // 8-token prompts: 10 ms per admitted sample
  EXPECT_NEAR(replay_instance(q, {1, 3}, 2, 8), 0.0034 + 0.02, 1e-12);
}

TEST(Replay, CalibrationKeepsOrderAndUsesTheWindow) {
  const auto window = window_of({10, 20, 30, 40, 50});
  const auto cal = calibrate_to_quantiles({5, 1, 9, 3, 3}, window);
  ASSERT_EQ(cal.size(), 5u);
  EXPECT_GT(cal[2], cal[0]);         // 9 > 5
  EXPECT_GT(cal[0], cal[3]);         // 5 > 3
  EXPECT_DOUBLE_EQ(cal[3], cal[4]);  // equal estimates, equal lengths
  EXPECT_GT(cal[3], cal[1]);         // 3 > 1
  for (double c : cal) {
    EXPECT_GE(c, 10.0);
    EXPECT_LE(c, 50.0);
  }
}

TEST(Replay, SplitIsolatesTheLongSampleWhenStepsCostTime) {
  // One 200-token request and 40 of 10 tokens on two instances, affine PTL. Alone on an
  // instance the long one takes 200 x 1.1 ms = 220 ms and the 40 short ones 10 x 5 ms = 50 ms
  // on the other; balancing tokens instead keeps 10 short ones beside it (230 ms).
  const auto p = affine_profile();
  std::vector<double> est = {200};
  for (int i = 0; i < 40; ++i) est.push_back(10);
  auto items = items_with(est);
  auto lengths = window_of(est);
  DispatchConfig cfg;  // replay, alpha auto
  Assignment a = dispatch(items, 2, cfg, &p, &lengths);
  EXPECT_EQ(a.long_instances, 1);
  EXPECT_EQ(a.long_items, 1u);
  EXPECT_EQ(a.instances[0].order, (std::vector<size_t>{0}));
  EXPECT_EQ(a.instances[1].order.size(), 40u);
  // Calibrated to the window the long one counts as 108 tokens (its 0.988 quantile, interpolated
  // between 10 and 200): 108 steps x 1.1 ms.
  EXPECT_NEAR(a.predicted_seconds, 108 * 0.0011, 1e-9);
  // Equal lengths: no long tail to isolate; an even LPT spread over both instances.
  auto flat = items_with(std::vector<double>(40, 10));
  auto flat_lengths = window_of(std::vector<double>(40, 10));
  a = dispatch(flat, 2, cfg, &p, &flat_lengths);
  EXPECT_EQ(a.long_instances, 0);
  EXPECT_EQ(a.instances[0].order.size(), 20u);
  EXPECT_EQ(a.instances[1].order.size(), 20u);
  // A fixed alpha is honoured; auto alpha with the eq2 model is an error.
  cfg.auto_alpha = false;
  cfg.alpha = 0.5;
  a = dispatch(items, 2, cfg, &p, &lengths);
  EXPECT_EQ(a.long_items, 20u);
  cfg.auto_alpha = true;
  cfg.latency_model = LatencyModel::kEq2;
  EXPECT_THROW(dispatch(items, 2, cfg, &p, &lengths), InputError);
}

}  // namespace
}  // namespace streamrl::sgs
