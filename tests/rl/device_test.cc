// The device-generic paths of generation and the policy update, run on the CPU (tests/gpu runs
// the same checks with CUDA): an engine on bf16 weights against an fp32 trainer, and the update.
#include <gtest/gtest.h>

#include "device_checks.h"

namespace streamrl {
namespace {

TEST(DeviceGeneric, EngineAndTrainerLogprobsAgreeOnTheCpu) {
  const torch::Device cpu(torch::kCPU);
  EXPECT_LT(testing_util::engine_trainer_logprob_gap(cpu, torch::kFloat32, torch::kFloat32), 1e-4);
  // bf16 weights take the engine's generic attention (gathered slots), not the CPU kernel.
  const double bf16 =
      testing_util::engine_trainer_logprob_gap(cpu, torch::kBFloat16, torch::kFloat32);
  EXPECT_GT(bf16, 0.0);
  EXPECT_LT(bf16, 0.1);
}

TEST(DeviceGeneric, UpdateOnTheCpuIsTheReference) {
  EXPECT_LT(testing_util::update_gap_vs_cpu(torch::kCPU, torch::kFloat32), 1e-6);
}

}  // namespace
}  // namespace streamrl
