// GPU-tagged tests (CTest label `gpu`): the device-generic paths on CUDA. Without a GPU they skip;
// scripts/gpu_check sets STREAMRL_REQUIRE_CUDA=1, which turns a missing GPU into a failure.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "device_checks.h"
#include "run_binary.h"
#include "streamrl/model/checkpoint.h"

namespace streamrl {
namespace {
namespace fs = std::filesystem;
using testing_util::run_streamrl;

bool cuda_required() {
  const char* v = std::getenv("STREAMRL_REQUIRE_CUDA");
  return v != nullptr && std::string(v) == "1";
}

#define REQUIRE_GPUS(n)                                                                 \
  do {                                                                                  \
    const int64_t have = torch::cuda::is_available() ? torch::cuda::device_count() : 0; \
    if (have < (n)) {                                                                   \
      if (cuda_required() && (n) == 1) FAIL() << "STREAMRL_REQUIRE_CUDA=1 but no GPU";  \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), " << have << " visible";     \
    }                                                                                   \
  } while (0)

const torch::Device kCuda(torch::kCUDA, 0);

TEST(Gpu, EngineAndTrainerLogprobsAgree) {
  REQUIRE_GPUS(1);
  const double fp32 =
      testing_util::engine_trainer_logprob_gap(kCuda, torch::kFloat32, torch::kFloat32);
  const double bf16 =
      testing_util::engine_trainer_logprob_gap(kCuda, torch::kBFloat16, torch::kBFloat16);
  std::cout << "engine-trainer log-prob gap on cuda: fp32 " << fp32 << ", bf16 " << bf16 << "\n";
  EXPECT_LT(fp32, 1e-4);
  EXPECT_LT(bf16, 2e-2);
}

TEST(Gpu, PolicyUpdateMatchesTheCpu) {
  REQUIRE_GPUS(1);
  const double fp32 = testing_util::update_gap_vs_cpu(kCuda, torch::kFloat32);
  const double bf16 = testing_util::update_gap_vs_cpu(kCuda, torch::kBFloat16);
  std::cout << "update gap vs cpu: fp32 " << fp32 << ", bf16 autocast " << bf16 << "\n";
  EXPECT_LT(fp32, 1e-3);
  EXPECT_LT(bf16, 5e-2);
}

class GpuRun : public testing::Test {
 protected:
  // An SFT checkpoint (trained on CUDA) and an RL config over it (called after a test's
  // REQUIRE_GPUS).
  void make_checkpoint() {
    dir_ = testing_util::fresh_temp_dir("gpu_run");
    auto r = run_streamrl(
        {"sft", "--config", testing_util::write_tiny_sft_config(dir_), "run.device=cuda"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream g(dir_ + "/rl.yaml");
    g << "run: {dir: " << dir_ << "/runs, threads: 1, seed: 3}\n"
      << "policy: {init_from: " << dir_ << "/runs/sft/final}\n"
      << "rollout: {prompts_per_iteration: 3, group_size: 4, max_new_tokens: 24}\n"
      << "train: {iterations: 1, micro_batch_tokens: 64, optim: {lr: 1, eps: 1}}\n"
      << "algo: {kl: {coef: 0.01}, entropy_coef: 0.01}\n"
      << "eval: {n: 0}\ncheckpoint: {every: 0}\n";
  }
  double max_difference(const std::string& a, const std::string& b) {
    model::CausalLM ma = model::load_model(dir_ + "/runs/" + a + "/final");
    model::CausalLM mb = model::load_model(dir_ + "/runs/" + b + "/final");
    double worst = 0;
    auto wb = mb->named_parameters();
    for (const auto& p : ma->named_parameters()) {
      worst = std::max(worst, (p.value() - wb[p.key()]).abs().max().item<double>());
    }
    return worst;
  }
  std::string dir_;
};

// One colocated iteration on CUDA in fp32 is the CPU's iteration: same samples (counter-based
// sampling on near-identical logits), same update (eps = 1: ~ lr * g). In bf16 the samples
// differ, so that run is checked for a finite, moving update only; async likewise.
TEST_F(GpuRun, ColocateAndAsyncIterationsOnCuda) {
  REQUIRE_GPUS(1);
  ASSERT_NO_FATAL_FAILURE(make_checkpoint());
  for (const auto& [name, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"cpu", {"mode=colocate"}},
           {"cuda32", {"mode=colocate", "run.device=cuda", "model.dtype=float32"}},
           {"cuda16", {"mode=colocate", "run.device=cuda"}},
           {"async", {"mode=async", "run.device=cuda", "sgs.devices=[cuda:0]"}}}) {
    std::vector<std::string> args = {"train", "--config", dir_ + "/rl.yaml", "run.name=" + name,
                                     "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_streamrl(args);
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.output;
  }
  const double cuda32 = max_difference("cpu", "cuda32");
  std::cout << "colocate cuda fp32 vs cpu: max |dw| " << cuda32 << "; moved "
            << max_difference("sft", "cpu") << "\n";
  EXPECT_GT(max_difference("sft", "cpu"), 1e-4);
  EXPECT_LT(cuda32, 1e-4);
  EXPECT_GT(max_difference("sft", "cuda16"), 1e-4);
  EXPECT_GT(max_difference("sft", "async"), 1e-4);
}

TEST_F(GpuRun, TwoRanksOnTwoGpusGiveTheSameParametersAsOne) {
  REQUIRE_GPUS(2);
  ASSERT_NO_FATAL_FAILURE(make_checkpoint());
  auto one = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "run.name=dp1", "mode=disagg",
                           "run.device=cuda", "model.dtype=float32", "--json"});
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_streamrl({"launch", "--nproc", "2", "--", "train", "--config", dir_ + "/rl.yaml",
                           "run.name=dp2", "mode=disagg", "run.device=cuda", "model.dtype=float32",
                           "--json"});
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_LT(max_difference("dp1", "dp2"), 1e-4);
}

}  // namespace
}  // namespace streamrl
