// Trainer data parallelism across real processes: `streamrl launch` starts two copies of this test
// binary (the DpWorker tests, which run only under the launcher) that join a Gloo process group
// on localhost. A DP=2 step (half the batch per rank, summed loss over the global token count,
// gradients all-reduced) gives the same parameters as DP=1 on the whole batch; a dead or silent
// peer gives a clear error within the timeout instead of a hang.
#include "streamrl/dist/process_group.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "launch_fixtures.h"
#include "streamrl/core/clock.h"
#include "streamrl/core/errors.h"
#include "streamrl/dist/launcher.h"
#include "streamrl/model/transformer.h"
#include "tiny_model.h"

namespace streamrl::dist {
namespace {

using core::Clock;

model::CausalLM tiny_model(uint64_t seed) {
  model::ModelConfig c;
  c.vocab_size = 40;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.initializer_range = 0.3;
  return model::CausalLM(c, seed);
}

// A fixed batch of 4 right-padded sequences of different lengths.
std::pair<torch::Tensor, torch::Tensor> batch() {
  torch::manual_seed(7);
  torch::Tensor tokens = torch::randint(0, 40, {4, 7}, torch::kLong);
  torch::Tensor valid = torch::zeros({4, 7}, torch::kBool);
  const int64_t lengths[] = {7, 3, 5, 6};
  for (int b = 0; b < 4; ++b) valid[b].narrow(0, 0, lengths[b]).fill_(true);
  return {tokens, valid};
}

// Two SGD steps on rows [begin, end) of the batch; the summed token loss is divided by the token
// count of the whole batch across ranks, so the ranks' gradients add up to DP=1's.
void train_steps(model::CausalLM& lm, ProcessGroup* group, int64_t begin, int64_t end) {
  auto [tokens, valid] = batch();
  tokens = tokens.narrow(0, begin, end - begin);
  valid = valid.narrow(0, begin, end - begin);
  torch::optim::SGD opt(lm->parameters(), torch::optim::SGDOptions(0.5).momentum(0.9));
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    const double local_tokens = valid.sum().item<double>() - tokens.size(0);
    const double global_tokens =
        group ? group->all_reduce_sum(std::vector<double>{local_tokens})[0] : local_tokens;
    if (end > begin) {  // a rank without rows has no gradients at all
      const torch::Tensor loss = -lm->score(tokens, valid).logprobs.sum() / global_tokens;
      loss.backward();
    }
    if (group) all_reduce_gradients(*group, lm->parameters());
    opt.step();
  }
}

TEST(DpWorker, DataParallelStepMatchesSingleProcess) {
  REQUIRE_WORKER();
  torch::set_num_threads(1);
  ProcessGroup group(process_group_options_from_env(std::chrono::seconds(30)));
  ASSERT_EQ(group.world_size(), 2);
  const int rank = group.rank();

  // Ranks start from different weights; the broadcast gives every rank rank 0's.
  model::CausalLM dp = tiny_model(100 + rank);
  {
    auto params = dp->parameters();
    group.broadcast_from_rank0(params);
  }
  model::CausalLM start = tiny_model(100);
  EXPECT_EQ(testing_util::max_param_diff(dp, start), 0.0);

  train_steps(dp, &group, 2 * rank, 2 * rank + 2);

  model::CausalLM single = tiny_model(100);
  train_steps(single, nullptr, 0, 4);
  model::CausalLM local_only = tiny_model(100);
  train_steps(local_only, nullptr, 2 * rank, 2 * rank + 2);

  const double diff = testing_util::max_param_diff(dp, single);
  const double moved = testing_util::max_param_diff(single, start);
  const double without_sync = testing_util::max_param_diff(local_only, single);
  std::printf("dp2 vs dp1: max |diff| = %.3g; update size %.3g; without all-reduce %.3g\n", diff,
              moved, without_sync);
  EXPECT_LT(diff, 1e-5);
  EXPECT_GT(moved, 1e-2);         // the steps changed the weights
  EXPECT_GT(without_sync, 1e-3);  // and a rank's own half alone would not match

  // Uneven split: rank 0 trains on the whole batch, rank 1 on nothing (no gradients at all).
  model::CausalLM uneven = tiny_model(100);
  train_steps(uneven, &group, 0, rank == 0 ? 4 : 0);
  std::printf("uneven split vs dp1: max |diff| = %.3g\n",
              testing_util::max_param_diff(uneven, single));
  EXPECT_LT(testing_util::max_param_diff(uneven, single), 1e-5);
  group.barrier();
}

// What rank 0 alone has on disk (resumed optimizer state, the resumed step) and what rank 0 must
// collect (the other ranks' traces) travel through the group, so no rank reads another's files.
TEST(DpWorker, BytesTravelBetweenRanks) {
  REQUIRE_WORKER();
  ProcessGroup group(process_group_options_from_env(std::chrono::seconds(30)));
  const int rank = group.rank();
  const std::string blob("state\0with a zero byte", 22);
  EXPECT_EQ(group.broadcast_bytes_from_rank0(rank == 0 ? blob : "ignored"), blob);
  EXPECT_EQ(group.broadcast_bytes_from_rank0(""), "");
  const std::vector<std::string> all = group.all_gather_bytes(rank == 0 ? "" : "trace of rank 1");
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], "");
  EXPECT_EQ(all[1], "trace of rank 1");
  std::printf("bytes exchanged on rank %d\n", rank);
}

TEST(DpWorker, RanksWithDifferentWeightsAreCaught) {
  REQUIRE_WORKER();
  ProcessGroup group(process_group_options_from_env(std::chrono::seconds(30)));
  model::CausalLM lm = tiny_model(100);
  EXPECT_NO_THROW(check_same_on_every_rank(group, lm->parameters(), "weights"));
  if (group.rank() == 1) {
    torch::NoGradGuard no_grad;
    lm->parameters()[3].view({-1})[0].add_(1e-3);  // one element off, on one rank
  }
  try {
    check_same_on_every_rank(group, lm->parameters(), "policy weights");
    ADD_FAILURE() << "a rank with other weights passed";
  } catch (const RuntimeFailure& e) {  // on every rank, not only the one that drifted
    EXPECT_NE(std::string(e.what()).find("policy weights differ between trainer ranks (1 of 2"),
              std::string::npos)
        << e.what();
    std::printf("drift caught on rank %d: %s\n", group.rank(), e.what());
  }
}

TEST(DpWorker, DeadPeerIsAnErrorNotAHang) {
  REQUIRE_WORKER();
  ProcessGroup group(process_group_options_from_env(std::chrono::seconds(5)));
  std::vector<torch::Tensor> t = {torch::ones({3})};
  group.all_reduce_sum(t);
  EXPECT_EQ(t[0][0].item<float>(), 2.0f);
  if (group.rank() == 1) _exit(0);  // dies without a word, sockets and all
  const auto start = Clock::now();
  try {
    group.all_reduce_sum(t);
    ADD_FAILURE() << "all_reduce with a dead peer returned";
  } catch (const RuntimeFailure& e) {
    std::printf("dead peer error after %.2f s: %s\n", core::seconds_since(start), e.what());
    EXPECT_NE(std::string(e.what()).find("all_reduce failed"), std::string::npos);
  }
  EXPECT_LT(core::seconds_since(start), 8.0);
}

TEST(DpWorker, SilentPeerTimesOut) {
  REQUIRE_WORKER();
  ProcessGroup group(process_group_options_from_env(std::chrono::seconds(2)));
  group.barrier();
  if (group.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // alive, never joins the collective
    return;
  }
  const auto start = Clock::now();
  std::vector<double> v = {1.0};
  EXPECT_THROW(group.all_reduce_sum(v), TimeoutError);
  std::printf("silent peer timeout after %.2f s\n", core::seconds_since(start));
  EXPECT_LT(core::seconds_since(start), 6.0);
  std::fflush(stdout);
  _exit(3);  // a failing rank: the launcher must stop the silent one
}

// A subgroup with a longer timeout lets the ranks wait out one rank's long solo work (rank 0
// evaluating) that the world's 2 s bound would fail.
TEST(DpWorker, LongerTimeoutSubgroupOutlastsTheWorldsBound) {
  REQUIRE_WORKER();
  ProcessGroup world(process_group_options_from_env(std::chrono::seconds(2)));
  auto slow = world.subgroup({0, 1}, "slow", std::chrono::seconds(30));
  const auto start = Clock::now();
  if (world.rank() == 0) std::this_thread::sleep_for(std::chrono::seconds(4));
  slow->barrier();
  std::printf("waited %.2f s in the slow group\n", core::seconds_since(start));
  world.barrier();  // the world still works
}

TEST(Launch, DataParallelTwoRanksMatchOneRank) {
  auto r = launch_workers("DpWorker.DataParallelStepMatchesSingleProcess");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] dp2 vs dp1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 1] dp2 vs dp1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("SKIPPED ] DpWorker"), std::string::npos) << r.output;
}

TEST(Launch, LongerTimeoutSubgroupOutlastsTheWorldsBound) {
  auto r = launch_workers("DpWorker.LongerTimeoutSubgroupOutlastsTheWorldsBound");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] waited "), std::string::npos) << r.output;
}

TEST(Launch, BytesTravelBetweenRanks) {
  auto r = launch_workers("DpWorker.BytesTravelBetweenRanks");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] bytes exchanged on rank 1"), std::string::npos) << r.output;
}

TEST(Launch, RanksWithDifferentWeightsAreCaught) {
  auto r = launch_workers("DpWorker.RanksWithDifferentWeightsAreCaught");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] drift caught on rank 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 1] drift caught on rank 1"), std::string::npos) << r.output;
}

TEST(Launch, DeadPeerGivesAClearErrorWithinTheTimeout) {
  const auto start = Clock::now();
  auto r = launch_workers("DpWorker.DeadPeerIsAnErrorNotAHang");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] dead peer error after"), std::string::npos) << r.output;
  EXPECT_LT(core::seconds_since(start), 30.0);
}

TEST(Launch, FailingRankStopsTheOthers) {
  const auto start = Clock::now();
  auto r = launch_workers("DpWorker.SilentPeerTimesOut");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("[rank 0] silent peer timeout after"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0 exited with code 3; stopping the other ranks"), std::string::npos)
      << r.output;
  EXPECT_LT(core::seconds_since(start), 30.0);  // rank 1 would sleep 60 s
}

TEST(Launch, SetsTorchrunEnvironmentAndPrefixesOutput) {
  auto r = testing_util::run_streamrl(
      {"launch", "--nproc", "3", "--program", "/bin/sh", "--", "-c",
       "echo env $RANK $LOCAL_RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT; echo err $RANK >&2"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string p = "[rank " + std::to_string(rank) + "] ";
    EXPECT_NE(r.output.find(p + "env " + std::to_string(rank) + " " + std::to_string(rank) +
                            " 3 127.0.0.1 "),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find(p + "err " + std::to_string(rank)), std::string::npos) << r.output;
  }
}

TEST(Launch, TimeoutAndBadUsage) {
  const auto start = Clock::now();
  auto r = testing_util::run_streamrl(
      {"launch", "--nproc", "2", "--timeout", "1", "--program", "/bin/sh", "--", "-c", "sleep 30"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("timed out after 1 s"), std::string::npos) << r.output;
  EXPECT_LT(core::seconds_since(start), 15.0);

  r = testing_util::run_streamrl(
      {"launch", "--nproc", "2", "--program", "/nonexistent", "--", "x"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("not an executable"), std::string::npos) << r.output;
}

TEST(Launch, StopSignalIsForwardedToTheRanks) {
  const std::string dir = testing_util::fresh_temp_dir("launch_signal");
  const pid_t pid = testing_util::spawn_streamrl({"launch", "--nproc", "2", "--program", "/bin/sh",
                                                  "--", "-c", "touch " + dir + "/$RANK; sleep 30"});
  // Both ranks run, so the launcher's handlers are in place.
  const auto give_up = Clock::now() + std::chrono::seconds(30);
  while (!(std::filesystem::exists(dir + "/0") && std::filesystem::exists(dir + "/1")) &&
         Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto start = Clock::now();
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_LT(core::seconds_since(start), 10.0);  // the ranks' sleep ended with them
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
}

TEST(ProcessGroup, WorldOfOneIsTheIdentity) {
  ProcessGroup group(ProcessGroupOptions{});
  std::vector<torch::Tensor> t = {torch::arange(3, torch::kFloat)};
  group.all_reduce_sum(t);
  group.broadcast_from_rank0(t);
  group.barrier();
  EXPECT_TRUE(torch::equal(t[0], torch::arange(3, torch::kFloat)));
  EXPECT_EQ(group.all_reduce_sum(std::vector<double>{2.5}), std::vector<double>{2.5});
}

TEST(ProcessGroup, MissingPeerTimesOutAtRendezvous) {
  ProcessGroupOptions o;
  o.world_size = 2;
  o.master_port = free_port();
  o.timeout = std::chrono::milliseconds(1500);
  const auto start = Clock::now();
  try {
    ProcessGroup group(o);
    ADD_FAILURE() << "rendezvous without the peer succeeded";
  } catch (const RuntimeFailure& e) {
    std::printf("missing peer after %.2f s: %s\n", core::seconds_since(start), e.what());
    EXPECT_NE(std::string(e.what()).find("rendezvous at 127.0.0.1:"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(core::seconds_since(start), 10.0);
}

TEST(ProcessGroup, OptionsFromEnvironment) {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) {
    unsetenv(v);
  }
  EXPECT_EQ(process_group_options_from_env().world_size, 1);
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  EXPECT_THROW(process_group_options_from_env(), InputError);  // no MASTER_ADDR
  setenv("MASTER_ADDR", "10.0.0.1", 1);
  setenv("MASTER_PORT", "29511", 1);
  auto o = process_group_options_from_env();
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.local_rank, 1);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.master_port, 29511);
  setenv("RANK", "2", 1);
  EXPECT_THROW(process_group_options_from_env(), InputError);
  setenv("RANK", "x", 1);
  EXPECT_THROW(process_group_options_from_env(), InputError);
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
}

}  // namespace
}  // namespace streamrl::dist
