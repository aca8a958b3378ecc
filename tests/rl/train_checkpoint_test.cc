// Resumable training checkpoints: resume falls back past a latest checkpoint that does not read
// back (a write cut short) to the newest good one, naming the bad one, and temp directories left
// by a killed writer are removed.
#include "streamrl/rl/train_checkpoint.h"
#include "../tiny_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "streamrl/rl/optim.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::rl {
namespace {

namespace fs = std::filesystem;

TEST(TrainCheckpoint, ResumeSkipsATruncatedLatestCheckpointAndRemovesStrayTempDirs) {
  const fs::path run = fs::temp_directory_path() / ("train_ckpt_" + std::to_string(getpid()));
  fs::remove_all(run);
  const std::string tok = tokenizer::make_tokenizer("char")->to_json();
  model::CausalLM a = testing_util::tiny_model(1, 50, 64);
  model::CausalLM b = testing_util::tiny_model(2, 50, 64);
  OptimConfig oc;
  auto opt_a = make_adamw(*a, oc);
  auto opt_b = make_adamw(*b, oc);
  save_training_checkpoint(run, 1, a, tok, *opt_a, {{"step", 1}}, 0);
  save_training_checkpoint(run, 2, b, tok, *opt_b, {{"step", 2}}, 0);
  // A SIGKILL during the write of step 3 (by a process that is gone) and a torn step 2.
  const fs::path stray = run / "checkpoints" / "step_3.tmp.999999999";
  fs::create_directories(stray);
  const fs::path weights = run / "checkpoints" / "step_2" / "model.safetensors";
  fs::resize_file(weights, fs::file_size(weights) / 2);

  model::CausalLM resumed = testing_util::tiny_model(3, 50, 64);
  auto opt = make_adamw(*resumed, oc);
  testing::internal::CaptureStderr();
  auto ck = resume_training_checkpoint(run, resumed, *opt);
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(ck.has_value());
  EXPECT_EQ(ck->ref.step, 1);
  EXPECT_EQ(ck->state["step"], 1);
  EXPECT_NE(log.find("skipping unreadable checkpoint " + (run / "checkpoints" / "step_2").string()),
            std::string::npos)
      << log;
  EXPECT_FALSE(fs::exists(stray));
  auto want = a->named_weights();
  auto got = resumed->named_weights();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(torch::equal(want[i].second, got[i].second)) << want[i].first;
  }
  // With no readable checkpoint at all there is nothing to resume.
  fs::remove_all(run / "checkpoints" / "step_1");
  EXPECT_FALSE(resume_training_checkpoint(run, resumed, *opt).has_value());
  fs::remove_all(run);
}

}  // namespace
}  // namespace streamrl::rl
