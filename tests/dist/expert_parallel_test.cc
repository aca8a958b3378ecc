// Expert parallelism across real processes (`streamrl launch`): the tiny MoE's 8 experts per
// layer split over 2 expert ranks, alone (EP=2) and with two data-parallel replicas (DP=2 x EP=2,
// 4 processes). Each rank trains on its own rows of one batch; after two steps every rank's
// parameters, experts included, equal those of one process that trained on the whole batch.
#include "streamrl/dist/expert_parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "launch_fixtures.h"
#include "streamrl/core/errors.h"
#include "streamrl/dist/backward_comm.h"
#include "streamrl/model/model_config.h"
#include "streamrl/model/transformer.h"
#include "tiny_model.h"

namespace streamrl::dist {
namespace {

using torch::Tensor;

model::CausalLM tiny_moe(uint64_t seed) {
  model::ModelConfig c = model::load_model_config(STREAMRL_TEST_DATA_DIR "/tiny_moe.json");
  c.initializer_range = 0.3;  // routing that differs from token to token
  return model::CausalLM(c, seed);
}

// 8 right-padded sequences of different lengths.
std::pair<Tensor, Tensor> moe_batch() {
  torch::manual_seed(11);
  Tensor tokens = torch::randint(3, 100, {8, 9}, torch::kLong);
  Tensor valid = torch::zeros({8, 9}, torch::kBool);
  const int64_t lengths[] = {9, 3, 5, 6, 8, 2, 7, 4};
  for (int b = 0; b < 8; ++b) valid[b].narrow(0, 0, lengths[b]).fill_(true);
  return {tokens, valid};
}

// Two SGD steps on rows [begin, end); the summed loss is divided by the whole batch's token
// count, so the ranks' gradients add up to one process's. With `comm`, the shared gradients are
// all-reduced during backward, under fair sharing in the first step and Lina's rule in the second.
void train_moe_steps(model::CausalLM& lm, ProcessGroup* world, ExpertDataParallel* edp,
                     int64_t begin, int64_t end, BackwardComm* comm = nullptr, int chunks = 1) {
  auto [tokens, valid] = moe_batch();
  tokens = tokens.narrow(0, begin, end - begin);
  valid = valid.narrow(0, begin, end - begin);
  torch::optim::SGD opt(lm->parameters(), torch::optim::SGDOptions(0.5).momentum(0.9));
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    const double local = valid.sum().item<double>() - tokens.size(0);
    const double global = world ? world->all_reduce_sum(std::vector<double>{local})[0] : local;
    const Tensor loss = -lm->score(tokens, valid).logprobs.sum() / global;
    if (comm) comm->begin(step == 0 ? ep::Policy::kFairShare : ep::Policy::kPartitioned);
    loss.backward();
    if (comm) {
      const BackwardCommStats s = comm->finish();
      EXPECT_EQ(s.all_to_all_ops, 2 * 2 * chunks);  // dispatch, combine of 2 MoE layers' chunks
      EXPECT_GT(s.all_reduce_ops, 0);
    }
    if (edp) edp->all_reduce_gradients(lm->named_parameters(), /*chunk_bytes=*/4096, !comm);
    opt.step();
  }
}

int expert_parameters(model::CausalLM& lm) {
  int n = 0;
  for (const auto& p : lm->named_parameters()) n += model::is_expert_parameter(p.key());
  return n;
}

void expect_matches_single_process(bool scheduled, int chunks = 1) {
  torch::set_num_threads(1);
  ProcessGroup world(process_group_options_from_env(std::chrono::seconds(30)));
  ExpertDataParallel edp(world, /*ep=*/2);
  edp.experts()->set_chunks(chunks);
  const ParallelLayout& layout = edp.layout();
  const int n = world.world_size(), rank = world.rank();
  const int64_t begin = 8 * rank / n, end = 8 * (rank + 1) / n;

  model::CausalLM ep = tiny_moe(100);
  model::CausalLM single = tiny_moe(100);
  const int all_experts = expert_parameters(ep);
  EXPECT_EQ(model::shard_experts(*ep, edp.experts()), 2);
  EXPECT_EQ(expert_parameters(ep) * 2, all_experts);  // this rank holds half the experts
  EXPECT_NE(ep->named_parameters().find("model.layers.0.mlp.experts." +
                                        std::to_string(4 * layout.ep_rank()) + ".up_proj.weight"),
            nullptr);

  {  // The sharded forward equals the whole model's on this rank's rows.
    auto [tokens, valid] = moe_batch();
    tokens = tokens.narrow(0, begin, end - begin);
    valid = valid.narrow(0, begin, end - begin);
    torch::NoGradGuard no_grad;
    const double d = (ep->score(tokens, valid).logprobs - single->score(tokens, valid).logprobs)
                         .abs()
                         .max()
                         .item<double>();
    EXPECT_LT(d, 1e-5);
  }

  std::unique_ptr<BackwardComm> comm;
  if (scheduled) {
    // 4 KiB chunks: every gradient of the tiny model is cut into several.
    comm = edp.backward_comm(ep->named_parameters(), {ep::Policy::kPartitioned, 4096, 512},
                             std::chrono::seconds(30));
  }
  train_moe_steps(ep, &world, &edp, begin, end, comm.get(), chunks);
  model::CausalLM start = tiny_moe(100);
  train_moe_steps(single, nullptr, nullptr, 0, 8);
  const double diff = testing_util::max_param_diff(ep, single);
  const double moved = testing_util::max_param_diff(ep, start);
  std::printf("%sdp%d x ep%d (%d chunks) vs one process: max |diff| = %.3g; update size %.3g\n",
              scheduled ? "scheduled " : "", layout.dp(), layout.ep, chunks, diff, moved);
  EXPECT_LT(diff, 1e-5);
  EXPECT_GT(moved, 1e-2);
  world.barrier();
}

TEST(EpWorker, ExpertParallelStepMatchesSingleProcess) {
  REQUIRE_WORKER();
  expect_matches_single_process(false);
}

// Shared gradients all-reduced during backward by the communication thread, fair share and Lina.
TEST(EpWorker, ScheduledBackwardMatchesSingleProcess) {
  REQUIRE_WORKER();
  expect_matches_single_process(true);
}

// Lina's pipelining: every dispatch and combine cut into 3 token chunks (some empty on this small
// batch), the experts computing on each as it lands, under the scheduled backward.
TEST(EpWorker, ChunkedExchangeMatchesSingleProcess) {
  REQUIRE_WORKER();
  expect_matches_single_process(true, 3);
}

TEST(EpWorker, AllToAllWithUnequalSplitsAndItsGradient) {
  REQUIRE_WORKER();
  ProcessGroup world(process_group_options_from_env(std::chrono::seconds(30)));
  ASSERT_EQ(world.world_size(), 2);
  const int rank = world.rank();
  ExpertDataParallel edp(world, 2);
  // Rank 0 sends 3 rows to rank 1 and none to itself; rank 1 sends 2 rows to rank 0 only.
  const std::vector<int64_t> send =
      rank == 0 ? std::vector<int64_t>{0, 3} : std::vector<int64_t>{2, 0};
  const std::vector<int64_t> recv =
      rank == 0 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{3, 0};
  const int64_t rows = rank == 0 ? 3 : 2;
  Tensor x = (torch::arange(rows * 2, torch::kFloat).view({rows, 2}) + 100 * rank).requires_grad_();
  Tensor y = edp.experts()->all_to_all(x, send, recv);
  const int64_t got = rank == 0 ? 2 : 3;
  ASSERT_EQ(y.size(0), got);
  const Tensor expect = torch::arange(got * 2, torch::kFloat).view({got, 2}) + 100 * (1 - rank);
  EXPECT_TRUE(torch::equal(y.detach(), expect)) << y;
  // The receiver scales what it got by rank + 1: the senders' rows get that as their gradient.
  (y * (rank + 1)).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), torch::full({rows, 2}, rank == 0 ? 2.0f : 1.0f))) << x.grad();
  std::printf("all_to_all ok on rank %d\n", rank);
}

TEST(EpWorker, ChunkedAllReduceEqualsUnchunked) {
  REQUIRE_WORKER();
  ProcessGroup world(process_group_options_from_env(std::chrono::seconds(30)));
  torch::manual_seed(world.rank());
  std::vector<Tensor> a = {torch::randn({1001}), torch::randn({7, 5}, torch::kDouble),
                           torch::randn({3})};
  std::vector<Tensor> b;
  for (const auto& t : a) b.push_back(t.clone());
  world.all_reduce_sum(a);
  world.all_reduce_sum(b, /*chunk_bytes=*/100);  // 25 floats, 12 doubles per exchange
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << i;
  std::printf("chunked all-reduce ok on rank %d\n", world.rank());
}

TEST(ExpertParallel, LayoutAndBadSplits) {
  const ParallelLayout l(4, 2, 3);
  EXPECT_EQ(l.dp(), 2);
  EXPECT_EQ(l.ep_rank(), 1);
  EXPECT_EQ(l.dp_rank(), 1);
  EXPECT_EQ(l.expert_group(), (std::vector<int>{2, 3}));
  EXPECT_EQ(l.replica_group(), (std::vector<int>{1, 3}));
  EXPECT_THROW(ParallelLayout(4, 3, 0), InputError);

  ProcessGroup one(ProcessGroupOptions{});
  EXPECT_THROW(one.all_to_all(torch::ones({3, 2}), {2}, {3}), InputError);
  // 8 experts do not split over 3 ranks.
  struct Three : model::ExpertExchange {
    int rank() const override { return 0; }
    int size() const override { return 3; }
    Tensor all_to_all(const Tensor& x, const std::vector<int64_t>&,
                      const std::vector<int64_t>&) override {
      return x;
    }
  };
  model::CausalLM lm = tiny_moe(1);
  EXPECT_THROW(model::shard_experts(*lm, std::make_shared<Three>()), InputError);
}

TEST(Launch, ExpertParallelTwoRanksMatchOneProcess) {
  auto r = launch_workers("EpWorker.ExpertParallelStepMatchesSingleProcess", 2, 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] dp1 x ep2 (1 chunks) vs one process"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("SKIPPED ] EpWorker"), std::string::npos) << r.output;
}

// Four ranks (DP = 2 x EP = 2) of `worker`, each of which must print `line`.
void expect_four_ranks_match(const std::string& worker, const std::string& line) {
  auto r = launch_workers(worker, 4, 180);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.output.find("[rank " + std::to_string(rank) + "] " + line), std::string::npos)
        << r.output;
  }
}

TEST(Launch, DataTimesExpertParallelFourRanksMatchOneProcess) {
  expect_four_ranks_match("EpWorker.ExpertParallelStepMatchesSingleProcess",
                          "dp2 x ep2 (1 chunks) vs one process");
}

TEST(Launch, LinaScheduledBackwardFourRanksMatchOneProcess) {
  expect_four_ranks_match("EpWorker.ScheduledBackwardMatchesSingleProcess",
                          "scheduled dp2 x ep2 (1 chunks) vs one process");
}

TEST(Launch, ChunkedExchangeFourRanksMatchOneProcess) {
  expect_four_ranks_match("EpWorker.ChunkedExchangeMatchesSingleProcess",
                          "scheduled dp2 x ep2 (3 chunks) vs one process");
}

// One launch per worker test: each builds its own group on the launcher's port.
TEST(Launch, AllToAllWithUnequalSplits) {
  auto r = launch_workers("EpWorker.AllToAllWithUnequalSplitsAndItsGradient");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] all_to_all ok on rank 1"), std::string::npos) << r.output;
}

TEST(Launch, ChunkedAllReduceEqualsUnchunked) {
  auto r = launch_workers("EpWorker.ChunkedAllReduceEqualsUnchunked");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] chunked all-reduce ok on rank 0"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace streamrl::dist
