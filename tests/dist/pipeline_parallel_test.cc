// Pipeline parallelism across real processes (`streamrl launch`): a 4-layer tiny model cut into
// 2 stages (PP=2, 1 or 2 model chunks each) and with two data-parallel replicas (DP=2 x PP=2, 4
// processes). The first step runs Megatron's static schedule, the second the per-batch dynamic
// one on token-balanced micro-batches; after both, every rank's parameters equal those of one
// process that trained on the whole batch.
#include "streamrl/dist/pipeline_parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "launch_fixtures.h"
#include "streamrl/core/errors.h"
#include "streamrl/pipeline/dynamic_schedule.h"
#include "streamrl/pipeline/micro_batches.h"
#include "streamrl/pipeline/validate.h"
#include "tiny_model.h"

namespace streamrl::dist {
namespace {

using torch::Tensor;

// With `moe`, layers 1-3 route over 4 experts (layer 0 stays dense, so a stage's MoE layers do
// not start at its first layer).
model::CausalLM four_layers(uint64_t seed, bool moe = false) {
  model::ModelConfig c = testing_util::tiny_model_config(50, 32);
  c.num_hidden_layers = 4;
  c.tie_word_embeddings = true;  // the first and the last stage both reach the embedding
  if (moe) {
    c.model_type = "mixtral";
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = c.intermediate_size;
    c.mlp_only_layers = {0};
    c.validate();
  }
  return model::CausalLM(c, seed);
}

// 8 right-padded sequences with long-tailed lengths.
const int64_t kLengths[] = {12, 3, 5, 2, 9, 4, 11, 6};

std::pair<Tensor, Tensor> pp_batch() {
  torch::manual_seed(7);
  Tensor tokens = torch::randint(3, 50, {8, 12}, torch::kLong);
  Tensor valid = torch::zeros({8, 12}, torch::kBool);
  for (int b = 0; b < 8; ++b) valid[b].narrow(0, 0, kLengths[b]).fill_(true);
  return {tokens, valid};
}

double scored_tokens(const Tensor& valid) { return valid.sum().item<double>() - valid.size(0); }

torch::optim::SGD sgd(model::CausalLM& lm) {
  return torch::optim::SGD(lm->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
}

// The schedule of `step` for micro-batches `mbs`: static (1F1B or interleaved) first, then the
// dynamic planner on costs that grow with each micro-batch's tokens.
pipeline::Schedule schedule_for(int step, int pp, int chunks,
                                const std::vector<pipeline::MicroBatch>& mbs) {
  const int m = static_cast<int>(mbs.size());
  if (step == 0) return pipeline::interleaved_one_f_one_b(pp, chunks, m);
  pipeline::OpCosts costs = pipeline::OpCosts::zeros(pp, chunks, m);
  for (int s = 0; s < pp; ++s) {
    for (int c = 0; c < chunks; ++c) {
      for (int i = 0; i < m; ++i) {
        costs.forward_s[costs.index(s, c, i)] = static_cast<double>(mbs[i].tokens);
        costs.backward_s[costs.index(s, c, i)] = 2.0 * static_cast<double>(mbs[i].tokens);
      }
    }
  }
  return pipeline::dynamic_schedule(costs).schedule;
}

// Step 0 splits statically into 2 pp micro-batches, step 1 into token-balanced ones.
std::vector<pipeline::MicroBatch> micro_batches(int step, const std::vector<int64_t>& lengths,
                                                int pp) {
  if (step == 0) return pipeline::split_static(lengths, pp * 2);
  pipeline::SplitOptions split;
  split.target_tokens = 8;
  split.round_up_to = pp;
  return pipeline::split_balanced(lengths, split);
}

// The rows of `mb` (indices from row `begin` of the batch).
StageBatch rows_of(const pipeline::MicroBatch& mb, int64_t begin, const Tensor& tokens,
                   const Tensor& valid) {
  std::vector<int64_t> rows;
  for (int i : mb.samples) rows.push_back(begin + i);
  const Tensor idx = torch::tensor(rows, torch::kLong);
  return {tokens.index_select(0, idx), valid.index_select(0, idx)};
}

// With an MoE model the router losses (means over a micro-batch) join the loss weighted by the
// micro-batch's share of the scored tokens, as sft and train weight them; the stages before the
// last add their layers' share through StageRouterLoss.
void expect_pipeline_matches_single_process(int pp, int chunks, bool moe = false) {
  torch::set_num_threads(1);
  ProcessGroup world(process_group_options_from_env(std::chrono::seconds(30)));
  model::CausalLM piped = four_layers(3, moe), single = four_layers(3, moe),
                  start = four_layers(3, moe);
  PipelineStage stage(piped, world, pp, pipeline::partition_by_count(4, pp, chunks));
  const PipelineLayout& layout = stage.layout();
  const auto rows_of_replica = [&](int d) {
    return std::pair<int64_t, int64_t>{8 * d / layout.dp(), 8 * (d + 1) / layout.dp()};
  };
  const auto [begin, end] = rows_of_replica(layout.dp_rank());
  model::MoeOptions router;
  router.aux_loss_coef = 0.05;
  router.z_loss_coef = 0.01;

  auto [tokens, valid] = pp_batch();
  const double global = scored_tokens(valid);
  const auto loss_of = [&](const StageBatch& b, const model::ScoreOutput& scores) {
    const Tensor loss = -scores.logprobs.sum() / global;
    return scores.moe ? loss + router.loss(scores.moe) * (scored_tokens(b.valid) / global) : loss;
  };
  auto opt = sgd(piped);
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    const std::vector<int64_t> lengths(kLengths + begin, kLengths + end);
    const std::vector<pipeline::MicroBatch> mbs = micro_batches(step, lengths, pp);
    const pipeline::Schedule schedule = schedule_for(step, pp, chunks, mbs);
    ASSERT_EQ(pipeline::validate(schedule), "") << schedule.name;
    std::vector<StageBatch> batches;
    for (const pipeline::MicroBatch& mb : mbs) batches.push_back(rows_of(mb, begin, tokens, valid));
    const PipelineRunStats stats = stage.run(
        schedule, batches,
        [&](int m, const model::ScoreOutput& scores) { return loss_of(batches[m], scores); }, {},
        [&](int m, const model::MoeAuxLosses& aux) {
          return router.loss(aux) * (scored_tokens(batches[m].valid) / global);
        });
    EXPECT_EQ(stats.forwards, chunks * static_cast<int>(mbs.size()));
    EXPECT_EQ(stats.backwards, stats.forwards);
    stage.all_reduce_gradients();
    opt.step();
  }

  // One process, micro-batch by micro-batch over every replica's share.
  auto single_opt = sgd(single);
  for (int step = 0; step < 2; ++step) {
    single_opt.zero_grad();
    for (int d = 0; d < layout.dp(); ++d) {
      const auto [first, last] = rows_of_replica(d);
      const std::vector<int64_t> lengths(kLengths + first, kLengths + last);
      for (const pipeline::MicroBatch& mb : micro_batches(step, lengths, pp)) {
        const StageBatch b = rows_of(mb, first, tokens, valid);
        loss_of(b, single->score(b.tokens, b.valid)).backward();
      }
    }
    single_opt.step();
  }
  const double diff = testing_util::max_param_diff(piped, single);
  const double moved = testing_util::max_param_diff(piped, start);
  std::printf("dp%d x pp%d x v%d%s vs one process: max |diff| = %.3g; update size %.3g\n",
              layout.dp(), pp, chunks, moe ? " moe" : "", diff, moved);
  EXPECT_LT(diff, 1e-6);
  EXPECT_GT(moved, 1e-2);
  world.barrier();
}

TEST(PpWorker, TwoStagesMatchOneProcess) {
  REQUIRE_WORKER();
  expect_pipeline_matches_single_process(2, 1);
}

TEST(PpWorker, InterleavedStagesMatchOneProcess) {
  REQUIRE_WORKER();
  expect_pipeline_matches_single_process(2, 2);
}

TEST(PpWorker, MoeStagesMatchOneProcess) {
  REQUIRE_WORKER();
  expect_pipeline_matches_single_process(2, 2, /*moe=*/true);
}

// A stage whose peer never sends fails with a clear error within the bound, not a hang.
TEST(PpWorker, MissingPeerTimesOut) {
  REQUIRE_WORKER();
  ProcessGroup world(process_group_options_from_env(std::chrono::seconds(3)));
  world.barrier();
  if (world.rank() == 1) {
    try {
      world.recv({2, 3}, torch::kFloat32, 0, 99);
      ADD_FAILURE() << "recv returned without a send";
    } catch (const TimeoutError& e) {
      std::printf("recv timed out: %s\n", e.what());
    }
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(5));  // alive, but never sends
  }
}

// Stages that planned differently (here: stage 1 splits the batch in three, stage 0 in two) fail
// with one line on both ranks before any tensor moves, instead of Gloo aborting on a short recv.
TEST(PpWorker, StagesWithDifferentSchedulesFailLoudly) {
  REQUIRE_WORKER();
  torch::set_num_threads(1);
  ProcessGroup world(process_group_options_from_env(std::chrono::seconds(30)));
  model::CausalLM lm = four_layers(3);
  PipelineStage stage(lm, world, 2, pipeline::partition_by_count(4, 2, 1));
  auto [tokens, valid] = pp_batch();
  const int m = world.rank() == 0 ? 2 : 3;
  std::vector<StageBatch> batches;
  for (int i = 0; i < m; ++i) {
    batches.push_back({tokens.narrow(0, i * 2, 2), valid.narrow(0, i * 2, 2)});
  }
  try {
    stage.run(pipeline::one_f_one_b(2, m), batches,
              [](int, const model::ScoreOutput& s) { return -s.logprobs.sum(); });
    ADD_FAILURE() << "stages with different schedules ran";
  } catch (const RuntimeFailure& e) {
    std::printf("mismatch: %s\n", e.what());
  }
  world.barrier();
}

TEST(PipelineParallel, LayoutAndBadPartitions) {
  EXPECT_THROW(PipelineLayout(4, 3, 0), InputError);
  const PipelineLayout l(4, 2, 3);
  EXPECT_EQ(l.stage(), 1);
  EXPECT_EQ(l.dp_rank(), 1);
  EXPECT_EQ(l.rank_of_stage(0), 2);
  ProcessGroup one(ProcessGroupOptions{});
  model::CausalLM lm = four_layers(1);
  EXPECT_THROW(PipelineStage(lm, one, 2, pipeline::partition_by_count(4, 2)), InputError);
  EXPECT_THROW(PipelineStage(lm, one, 1, pipeline::partition_by_count(3, 1)), InputError);
  // One stage of the whole model runs any schedule alone.
  PipelineStage whole(lm, one, 1, pipeline::partition_by_count(4, 1));
  auto [tokens, valid] = pp_batch();
  const PipelineRunStats s =
      whole.run(pipeline::one_f_one_b(1, 1), {{tokens, valid}},
                [](int, const model::ScoreOutput& scores) { return -scores.logprobs.sum(); });
  EXPECT_GT(s.loss, 0);
  EXPECT_THROW(whole.run(pipeline::one_f_one_b(1, 2), {{tokens, valid}},
                         [](int, const model::ScoreOutput& s) { return s.logprobs.sum(); }),
               InputError);
}

TEST(Launch, PipelineTwoStagesMatchOneProcess) {
  auto r = launch_workers("PpWorker.TwoStagesMatchOneProcess", 2, 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] dp1 x pp2 x v1 vs one process"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("SKIPPED ] PpWorker"), std::string::npos) << r.output;
}

TEST(Launch, PipelineInterleavedStagesMatchOneProcess) {
  auto r = launch_workers("PpWorker.InterleavedStagesMatchOneProcess", 2, 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] dp1 x pp2 x v2 vs one process"), std::string::npos) << r.output;
}

// An MoE model (layer 0 dense) in 4 virtual stages: each stage's router losses reach its routers.
TEST(Launch, PipelineMoeStagesMatchOneProcess) {
  auto r = launch_workers("PpWorker.MoeStagesMatchOneProcess", 2, 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] dp1 x pp2 x v2 moe vs one process"), std::string::npos)
      << r.output;
}

TEST(Launch, DataTimesPipelineFourRanksMatchOneProcess) {
  auto r = launch_workers("PpWorker.TwoStagesMatchOneProcess", 4, 180);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.output.find("[rank " + std::to_string(rank) + "] dp2 x pp2 x v1 vs one process"),
              std::string::npos)
        << r.output;
  }
}

TEST(Launch, PipelineRecvFromASilentPeerTimesOut) {
  auto r = launch_workers("PpWorker.MissingPeerTimesOut", 2, 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] recv timed out: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("recv from rank 0 (tag 99)"), std::string::npos) << r.output;
}

TEST(Launch, PipelineStagesWithDifferentSchedulesFailLoudly) {
  auto r = launch_workers("PpWorker.StagesWithDifferentSchedulesFailLoudly", 2, 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* rank : {"[rank 0] mismatch: ", "[rank 1] mismatch: "}) {
    EXPECT_NE(r.output.find(rank), std::string::npos) << r.output;
  }
  EXPECT_NE(r.output.find("was given another schedule"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace streamrl::dist
