#include "streamrl/planner/pipeline_cost_fit.h"

#include <gtest/gtest.h>

#include <random>

#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

using pipeline::MicroBatch;
using pipeline::OpKind;

MicroBatch batch(int64_t rows, int64_t len) { return {{}, rows * len, rows * len * len, 0}; }

// Per virtual stage (forward, backward) true coefficients (per_op, per_token, per_token_sq).
struct Truth {
  double c, a, b;
  double at(const MicroBatch& mb) const {
    return c + a * static_cast<double>(mb.tokens) + b * static_cast<double>(mb.tokens_sq);
  }
};

TEST(FitRelativeNonnegative, RecoversExactCoefficients) {
  std::vector<double> x1, x2, y;
  const Truth t{1e-3, 2e-6, 3e-9};
  for (auto [rows, len] : {std::pair{64, 16}, {32, 64}, {16, 128}, {8, 256}, {4, 512}, {2, 1024}}) {
    const MicroBatch mb = batch(rows, len);
    x1.push_back(static_cast<double>(mb.tokens)), x2.push_back(static_cast<double>(mb.tokens_sq));
    y.push_back(t.at(mb));
  }
  const std::vector<double> k = fit_relative_nonnegative(x1, x2, y);
  ASSERT_EQ(k.size(), 3u);
  EXPECT_NEAR(k[0] / t.c, 1.0, 1e-6);
  EXPECT_NEAR(k[1] / t.a, 1.0, 1e-6);
  EXPECT_NEAR(k[2] / t.b, 1.0, 1e-6);
}

TEST(FitRelativeNonnegative, NeverReturnsANegativeCoefficient) {
  // y = 1e-6 * x1 - 1e-3: the unconstrained fit has a negative intercept.
  std::vector<double> x1, x2, y;
  for (double t : {2000.0, 4000.0, 8000.0, 16000.0}) {
    x1.push_back(t), x2.push_back(t * 10), y.push_back(1e-6 * t - 1e-3);
  }
  const std::vector<double> k = fit_relative_nonnegative(x1, x2, y);
  for (double c : k) EXPECT_GE(c, 0.0);
  EXPECT_EQ(k[0], 0.0);  // the intercept the data wants is negative: left out
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_NEAR((k[0] + k[1] * x1[i] + k[2] * x2[i]) / y[i], 1.0, 0.5);
  }
  // Nothing to fit: zeros.
  EXPECT_EQ(fit_relative_nonnegative({}, {}, {}), (std::vector<double>{0, 0, 0}));
}

TEST(PipelineCostFit, LearnsEachStagesCostsAndTheEmulatorUsesThem) {
  const pipeline::Partition partition = pipeline::partition_by_count(6, 2, 1);  // 3 + 3 layers
  // Stage 1 also scores the batch (the LM head and loss): dearer per token.
  const Truth fwd[2] = {{2e-3, 3e-6, 1e-9}, {3e-3, 6e-6, 1e-9}};
  const Truth bwd[2] = {{4e-3, 6e-6, 2e-9}, {5e-3, 9e-6, 2e-9}};
  std::vector<MicroBatch> mbs;
  for (auto [rows, len] : {std::pair{16, 40}, {8, 120}, {4, 300}, {2, 700}, {12, 60}}) {
    mbs.push_back(batch(rows, len));
  }
  // Each stage observes only its own ops; the sums of the two add up (the all-reduce).
  PipelineCostFit stage0(partition), stage1(partition), both(partition);
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> noise(0.97, 1.03);
  for (int m = 0; m < static_cast<int>(mbs.size()); ++m) {
    for (int s = 0; s < 2; ++s) {
      const double f = fwd[s].at(mbs[m]) * noise(rng), b = bwd[s].at(mbs[m]) * noise(rng);
      PipelineCostFit& mine = s == 0 ? stage0 : stage1;
      mine.add({{s, {OpKind::kForward, m, 0}, f}, {s, {OpKind::kBackward, m, 0}, b}}, mbs);
      both.add(s, 0, OpKind::kForward, mbs[m], f);
      both.add(s, 0, OpKind::kBackward, mbs[m], b);
    }
  }
  PipelineCostFit merged(partition);
  merged.merge(stage0.sums());
  merged.merge(stage1.sums());
  ASSERT_EQ(merged.sums().size(), both.sums().size());
  for (size_t i = 0; i < both.sums().size(); ++i) {
    EXPECT_NEAR(merged.sums()[i], both.sums()[i], 1e-9 * std::abs(both.sums()[i]) + 1e-12);
  }
  EXPECT_DOUBLE_EQ(merged.observations(1, 0, OpKind::kBackward), 5.0);

  PipelineProfile prior;
  prior.layers.assign(6, PipelineLayerProfile{});
  prior.layers[0].activation_bytes_per_token = 7;
  prior.link_bytes_per_s = 1e9;
  const PipelineProfile fitted = merged.apply(prior);
  EXPECT_EQ(fitted.layers[0].activation_bytes_per_token, 7);            // kept
  const std::vector<MicroBatch> fresh = {batch(6, 90), batch(3, 500)};  // not seen by the fit
  const pipeline::OpCosts costs = pipeline_op_costs(fitted, partition, fresh);
  for (int s = 0; s < 2; ++s) {
    for (int m = 0; m < 2; ++m) {
      EXPECT_NEAR(costs.forward(s, 0, m) / fwd[s].at(fresh[m]), 1.0, 0.06) << s << " " << m;
      EXPECT_NEAR(costs.backward(s, 0, m) / bwd[s].at(fresh[m]), 1.0, 0.06) << s << " " << m;
    }
  }
}

TEST(PipelineCostFit, KeepsThePriorUntilEveryStageIsObservedAndForgetsByDecay) {
  const pipeline::Partition partition = pipeline::partition_by_count(4, 2, 1);
  PipelineProfile prior;
  prior.layers.assign(4, PipelineLayerProfile{1e-6, 0, 2e-6, 0, 0, 0, 0});
  PipelineCostFit fit(partition);
  for (int m = 0; m < 4; ++m) {
    fit.add(0, 0, OpKind::kForward, batch(4, 10 * (m + 1)), 1e-3 * (m + 1));
    fit.add(0, 0, OpKind::kBackward, batch(4, 10 * (m + 1)), 2e-3 * (m + 1));
  }
  // Stage 1 never ran: the fit would mix measured and prior seconds, so the prior stays whole.
  EXPECT_EQ(fit.apply(prior).layers[0].forward_per_token_s, 1e-6);
  for (int m = 0; m < 4; ++m) {
    fit.add(1, 0, OpKind::kForward, batch(4, 10 * (m + 1)), 1e-3 * (m + 1));
    fit.add(1, 0, OpKind::kBackward, batch(4, 10 * (m + 1)), 2e-3 * (m + 1));
  }
  EXPECT_NEAR(fit.apply(prior).layers[0].forward_per_token_s, 1e-3 / 40 / 2, 1e-9);
  fit.add(1, 0, OpKind::kForward, batch(1, 1), 0.0);  // not a timing: skipped
  fit.add(1, 0, OpKind::kForward, batch(1, 1), std::nan(""));
  EXPECT_DOUBLE_EQ(fit.observations(1, 0, OpKind::kForward), 4.0);
  fit.decay(0.5);
  EXPECT_DOUBLE_EQ(fit.observations(1, 0, OpKind::kForward), 2.0);
  EXPECT_EQ(fit.apply(prior).layers[0].forward_per_token_s, 1e-6);  // under 3 observations
  fit.decay(0);
  EXPECT_EQ(fit.observations(0, 0, OpKind::kBackward), 0.0);
  EXPECT_THROW(fit.merge({1.0}), InputError);
  EXPECT_THROW(fit.add(2, 0, OpKind::kForward, batch(1, 1), 1.0), InputError);
  prior.layers.pop_back();
  EXPECT_THROW(fit.apply(prior), InputError);
}

}  // namespace
}  // namespace streamrl::planner
