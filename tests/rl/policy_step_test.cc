// PolicyStep: the update does not depend on how samples were split into micro-batches or when
// they arrived (stream gives the same update as disagg).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "streamrl/core/errors.h"
#include "streamrl/model/model_config.h"
#include "streamrl/rl/mini_batch_step.h"
#include "streamrl/rl/policy_update.h"

namespace streamrl::rl {
namespace {

model::CausalLM tiny_model() {
  torch::manual_seed(7);
  return model::CausalLM(model::load_model_config(STREAMRL_TEST_DATA_DIR "/tiny_model.json"));
}

// Samples of varied lengths with behaviour log-probs from the model itself (on-policy), so the
// first step has ratio 1, and advantages of both signs.
std::vector<ScoredSample> make_samples(model::CausalLM& m, int n) {
  std::vector<ScoredSample> out;
  torch::manual_seed(11);
  for (int i = 0; i < n; ++i) {
    ScoredSample s;
    const int p = 2 + i % 3, o = 1 + (i * 5) % 9;
    auto ids = torch::randint(4, 90, {p + o}, torch::kLong);
    for (int t = 0; t < p; ++t) s.sample.prompt_ids.push_back(ids[t].item<int>());
    for (int t = p; t < p + o; ++t) s.sample.output_ids.push_back(ids[t].item<int>());
    torch::NoGradGuard no_grad;
    auto lp = m->score(ids.view({1, -1}), torch::ones({1, p + o}, torch::kBool)).logprobs[0];
    for (int t = p; t < p + o; ++t) s.sample.logprobs.push_back(lp[t].item<float>());
    s.advantage = (i % 4) - 1.5;
    out.push_back(std::move(s));
  }
  return out;
}

// Runs one step over `samples` delivered in `chunks` (eager), returns the flattened parameters.
torch::Tensor step_params(RlLossConfig loss, int budget, const std::vector<int>& chunks,
                          UpdateResult* result, bool zero_some = false) {
  model::CausalLM m = tiny_model();
  auto samples = make_samples(m, 12);
  if (zero_some) {
    for (size_t i = 0; i < samples.size(); i += 3) samples[i].advantage = 0.0;
  }
  // eps = 1 makes Adam's first update ~ lr * g, so the comparison sees the gradients themselves
  // rather than sign(g) of components that cancel to ~0 (see rl_train_test.cc).
  OptimConfig oc;
  oc.lr = 1.0;
  oc.eps = 1.0;
  auto opt = make_adamw(*m, oc);
  UpdateConfig uc;
  uc.micro_batch_tokens = budget;
  PolicyStep step(m, *opt, loss, uc);
  size_t next = 0;
  for (int c : chunks) {
    std::vector<ScoredSample> part(samples.begin() + next, samples.begin() + next + c);
    next += c;
    step.add(std::move(part), /*eager=*/true);
  }
  EXPECT_EQ(next, samples.size());
  *result = step.finish(1.0, 0.0);
  std::vector<torch::Tensor> flat;
  for (const auto& p : m->parameters()) flat.push_back(p.detach().flatten());
  return torch::cat(flat);
}

TEST(PolicyStep, SameUpdateForAnySplitAndArrivalOrder) {
  for (LossAggMode mode : {LossAggMode::kTokenMean, LossAggMode::kSeqMeanTokenMean,
                           LossAggMode::kSeqMeanTokenSumNorm}) {
    RlLossConfig loss;
    loss.loss_agg = mode;
    loss.loss_agg_t_const = 16;
    UpdateResult whole, streamed;
    torch::Tensor a = step_params(loss, 1 << 20, {12}, &whole);
    torch::Tensor b = step_params(loss, 16, {1, 3, 2, 4, 2}, &streamed);
    EXPECT_EQ(whole.micro_batches, 1);
    EXPECT_GT(streamed.micro_batches, 4);
    EXPECT_LT((a - b).abs().max().item<double>(), 1e-6);
    EXPECT_NEAR(whole.grad_norm, streamed.grad_norm, 1e-6 * std::max(1.0, whole.grad_norm));
    EXPECT_NEAR(whole.metrics.loss, streamed.metrics.loss, 1e-6);
    EXPECT_EQ(whole.tokens, streamed.tokens);
    // On-policy first step: ratio 1, nothing clipped.
    EXPECT_NEAR(whole.metrics.ratio_mean(), 1.0, 1e-5);
    EXPECT_EQ(whole.metrics.clip_fraction(), 0.0);
  }
}

// Zero-advantage samples skip forward/backward (no KL or entropy in the loss) but still count in
// the denominator: the update equals the one that ran them (a negligible entropy coefficient
// forces that path).
TEST(PolicyStep, SkippingZeroAdvantageSamplesKeepsTheUpdate) {
  RlLossConfig skip;
  RlLossConfig run_all;
  run_all.entropy_coef = 1e-30;
  UpdateResult a, b;
  torch::Tensor pa = step_params(skip, 64, {5, 7}, &a, /*zero_some=*/true);
  torch::Tensor pb = step_params(run_all, 64, {5, 7}, &b, /*zero_some=*/true);
  EXPECT_EQ(a.skipped_samples, 4);
  EXPECT_EQ(b.skipped_samples, 0);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_LT((pa - pb).abs().max().item<double>(), 1e-6);
}

// A non-finite loss stops the step with a clear error and leaves the parameters unchanged (the run
// then stops naming its last good checkpoint, rl_run.cc).
TEST(PolicyStep, NonFiniteLossThrowsAndKeepsTheParameters) {
  model::CausalLM m = tiny_model();
  auto samples = make_samples(m, 4);
  samples[2].sample.logprobs[0] = std::numeric_limits<float>::quiet_NaN();
  std::vector<torch::Tensor> before;
  for (const auto& p : m->parameters()) before.push_back(p.detach().clone());
  auto opt = make_adamw(*m, OptimConfig{});
  PolicyStep step(m, *opt, RlLossConfig{}, UpdateConfig{});
  step.add(std::move(samples), /*eager=*/false);
  try {
    step.finish(1e-3, 1.0);
    FAIL() << "expected RuntimeFailure";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("not finite"), std::string::npos) << e.what();
  }
  size_t i = 0;
  for (const auto& p : m->parameters()) EXPECT_TRUE(torch::equal(p.detach(), before[i++]));
}

torch::Tensor flat_params(model::CausalLM& m) {
  std::vector<torch::Tensor> flat;
  for (const auto& p : m->parameters()) flat.push_back(p.detach().flatten().clone());
  return torch::cat(flat);
}

// A step on no samples takes no optimizer step: Adam's moments would otherwise move the weights
// (MiniBatchStep runs such steps when dynamic sampling runs out of refills).
TEST(PolicyStep, EmptyStepLeavesParametersUnchanged) {
  model::CausalLM m = tiny_model();
  auto opt = make_adamw(*m, OptimConfig{});
  policy_update(m, *opt, make_samples(m, 4), RlLossConfig{}, UpdateConfig{}, 1e-2, 1.0);
  const torch::Tensor before = flat_params(m);
  PolicyStep step(m, *opt, RlLossConfig{}, UpdateConfig{});
  UpdateResult r = step.finish(1e-2, 1.0);
  EXPECT_EQ(r.tokens, 0);
  EXPECT_EQ(r.micro_batches, 0);
  EXPECT_EQ(r.steps, 0);
  EXPECT_TRUE(torch::equal(flat_params(m), before));
}

// Multi-turn samples: tokens appended between turns (tool results, sampled_mask 0) are context
// only. Whatever their behaviour log-probs, the update is the same, and they are not counted;
// without the mask the same garbage changes the update.
TEST(PolicyStep, AppendedToolTokensAreOutsideTheLoss) {
  auto run = [](bool masked, float garbage, UpdateResult* result) {
    model::CausalLM m = tiny_model();
    auto samples = make_samples(m, 6);
    for (auto& s : samples) {
      const size_t n = s.sample.output_ids.size();
      if (n < 3) continue;
      if (masked) s.sample.sampled_mask.assign(n, 1);
      for (size_t t = 1; t + 1 < n; t += 2) {  // every other inner token is "appended"
        if (masked) s.sample.sampled_mask[t] = 0;
        s.sample.logprobs[t] = garbage;
      }
    }
    OptimConfig oc;
    oc.lr = 1.0;
    oc.eps = 1.0;
    auto opt = make_adamw(*m, oc);
    *result = policy_update(m, *opt, std::move(samples), RlLossConfig{}, UpdateConfig{}, 1.0, 0.0);
    return flat_params(m);
  };
  UpdateResult a, b, c, d;
  const torch::Tensor pa = run(true, -0.5f, &a), pb = run(true, -40.0f, &b);
  EXPECT_LT((pa - pb).abs().max().item<double>(), 1e-7);
  EXPECT_EQ(a.tokens, b.tokens);
  const torch::Tensor pc = run(false, -0.5f, &c), pd = run(false, -40.0f, &d);
  EXPECT_GT((pc - pd).abs().max().item<double>(), 1e-4);
  EXPECT_LT(a.tokens, c.tokens);
}

TEST(MiniBatchStep, QuotasSplitTheGroupsEvenly) {
  EXPECT_EQ(mini_batch_quotas(10, 4), (std::vector<int>{3, 3, 2, 2}));
  EXPECT_EQ(mini_batch_quotas(2, 4), (std::vector<int>{1, 1, 0, 0}));
  EXPECT_EQ(mini_batch_quotas(8, 1), (std::vector<int>{8}));
  EXPECT_THROW(mini_batch_quotas(8, 0), InputError);
}

// Twelve samples in groups of three (request ids 0..3): mini-batches of `quotas` groups, the
// groups delivered in `chunks` samples per add(), against plain PolicySteps on the same parts.
void expect_same_as_sequential_steps(const std::vector<int>& quotas, const std::vector<int>& chunks,
                                     int groups_arriving) {
  auto grouped = [](model::CausalLM& m) {
    auto samples = make_samples(m, 12);
    for (size_t i = 0; i < samples.size(); ++i) samples[i].sample.request_id = i / 3;
    return samples;
  };
  OptimConfig oc;
  oc.lr = 1e-2;
  UpdateConfig uc;
  uc.micro_batch_tokens = 16;

  model::CausalLM a = tiny_model();
  auto opt_a = make_adamw(*a, oc);
  auto samples_a = grouped(a);
  samples_a.resize(3 * groups_arriving);
  MiniBatchStep step(
      [&]() -> std::unique_ptr<TrainerStep> {
        return std::make_unique<PolicyStep>(a, *opt_a, RlLossConfig{}, uc);
      },
      quotas, 1e-2, 1.0);
  size_t next = 0;
  for (int c : chunks) {
    step.add(std::vector<ScoredSample>(samples_a.begin() + next, samples_a.begin() + next + c),
             /*eager=*/true);
    next += c;
  }
  ASSERT_EQ(next, samples_a.size());
  const UpdateResult merged = step.finish(0.0, 0.0);  // the constructor's lr and clip apply

  model::CausalLM b = tiny_model();
  auto opt_b = make_adamw(*b, oc);
  auto samples_b = grouped(b);  // behaviour log-probs of the initial weights, as for `a`
  samples_b.resize(3 * groups_arriving);
  int64_t tokens = 0, steps = 0;
  size_t from = 0;
  for (int q : quotas) {
    const size_t to = std::min(samples_b.size(), from + 3 * static_cast<size_t>(q));
    if (to == from) continue;
    UpdateResult r = policy_update(
        b, *opt_b, std::vector<ScoredSample>(samples_b.begin() + from, samples_b.begin() + to),
        RlLossConfig{}, uc, 1e-2, 1.0);
    tokens += r.tokens;
    steps += r.steps;
    from = to;
  }
  EXPECT_EQ(merged.steps, steps);
  EXPECT_EQ(merged.tokens, tokens);
  EXPECT_LT((flat_params(a) - flat_params(b)).abs().max().item<double>(), 1e-6);
}

TEST(MiniBatchStep, EachMiniBatchIsOneStepOnItsGroups) {
  expect_same_as_sequential_steps({2, 2}, {12}, 4);                // all at once
  expect_same_as_sequential_steps({2, 1, 1}, {3, 6, 3}, 4);        // streamed, whole groups
  expect_same_as_sequential_steps({1, 1, 1, 1}, {3, 3, 3, 3}, 4);  // a step per group
}

// Fewer groups than planned (refills ran out): the steps that got none leave the weights alone.
TEST(MiniBatchStep, MissingGroupsTakeNoStep) {
  expect_same_as_sequential_steps({2, 1, 1}, {6}, 2);
  expect_same_as_sequential_steps({1, 1, 1, 1}, {3}, 1);
}

}  // namespace
}  // namespace streamrl::rl
