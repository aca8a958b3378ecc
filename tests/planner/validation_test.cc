#include "streamrl/planner/validation.h"

#include <gtest/gtest.h>

#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

using nlohmann::json;

ModeSetup constant_setup(double step) {
  ModeSetup s;
  s.generator.step_seconds = [step](double, double) { return step; };
  s.generator.max_batch = 64;
  s.trainer.tokens_per_s = 1000;
  s.trainer.step_overhead_s = 0.5;
  s.weight_update_s = 0.25;
  return s;
}

TEST(Validation, ParsesTheRlModesJsonAndComparesEachMode) {
  // 2 prompts x 4 samples of 100 tokens, prompts of 10 tokens: generation 1 s at 10 ms a step,
  // training 880 tokens at 1000/s + 0.5 s; colocate 2.38 s, disagg 2.63 s per iteration.
  const json measured = {
      {"workload",
       {{"prompts_per_iteration", 2},
        {"group_size", 4},
        {"iterations", 2},
        {"prompt_tokens_mean", 10},
        {"generator_threads", 1},
        {"trainer_threads", 1}}},
      {"modes",
       {{"colocate", {{"iteration_seconds", 2.38}, {"lengths", std::vector<int>(8, 100)}}},
        {"disagg",
         {{"stage_seconds", {{"iteration", 2.0}, {"generate", 1.0}}},
          {"lengths", {std::vector<int>(8, 100), std::vector<int>(8, 100)}}}}}}};
  MeasuredRun run = MeasuredRun::from_json(measured);
  EXPECT_EQ(run.prompts, 2);
  EXPECT_EQ(run.group_size, 4);
  EXPECT_EQ(run.iteration_seconds.size(), 2u);
  EXPECT_EQ(run.lengths.at("disagg").size(), 2u);
  const json r =
      compare_modes(run, {{"colocate", constant_setup(0.01)}, {"disagg", constant_setup(0.01)}});
  EXPECT_NEAR(r["modes"]["colocate"]["predicted_s"].get<double>(), 2.38, 1e-9);
  EXPECT_NEAR(r["modes"]["colocate"]["relative_error"].get<double>(), 0, 1e-9);
  EXPECT_NEAR(r["modes"]["disagg"]["predicted_s"].get<double>(), 2.63, 1e-9);
  EXPECT_NEAR(r["max_relative_error"].get<double>(), 0.63 / 2.0, 1e-9);
  EXPECT_THROW(compare_modes(run, {{"colocate", constant_setup(0.01)}}), InputError);
}

TEST(Validation, EachModeKeepsTheBatchItGeneratedAt) {
  // The colocated engine runs rollout.max_batch_size (128), the SGS instances of the dedicated
  // modes sgs.max_batch_size (64): the workload's batch is colocate's, a mode's own overrides it.
  const json lengths = std::vector<int>(8, 10);
  json measured = {
      {"workload", {{"prompts_per_iteration", 2}, {"group_size", 4}, {"max_batch_size", 128}}},
      {"modes",
       {{"colocate", {{"iteration_seconds", 1.0}, {"lengths", lengths}}},
        {"stream", {{"iteration_seconds", 1.0}, {"lengths", lengths}, {"max_batch_size", 64}}}}}};
  MeasuredRun run = MeasuredRun::from_json(measured);
  EXPECT_EQ(run.batch_of("colocate"), 128);
  EXPECT_EQ(run.batch_of("stream"), 64);
  EXPECT_EQ(run.max_batch, 128);
  // Without a workload batch, the largest mode's is the one to profile up to.
  measured["workload"].erase("max_batch_size");
  measured["modes"]["colocate"]["max_batch_size"] = 32;
  run = MeasuredRun::from_json(measured);
  EXPECT_EQ(run.batch_of("colocate"), 32);
  EXPECT_EQ(run.max_batch, 64);
  measured["modes"]["stream"]["max_batch_size"] = 0;
  EXPECT_THROW(MeasuredRun::from_json(measured), InputError);
}

TEST(Validation, StageCalibrationScalesToTheMeasuredStages) {
  // The machine was twice as slow in the measured run as when profiled: generation took 2 s and
  // training 2.76 s (twice 1 s and 0.88 + 0.5 s). Calibrated on disagg, stream is predicted from
  // the doubled speeds: 2 x (1 + 0.88 + 0.5) + 0.25 = 5.01 s.
  const json measured = {
      {"workload",
       {{"prompts_per_iteration", 2},
        {"group_size", 4},
        {"iterations", 3},
        {"prompt_tokens_mean", 10}}},
      {"modes",
       {{"disagg",
         {{"iteration_s", 5.01},
          {"generate_s", 2.0},
          {"train_s", 2.76},
          {"lengths", std::vector<int>(8, 100)}}},
        {"stream", {{"iteration_s", 5.01}, {"lengths", std::vector<int>(8, 100)}}}}}};
  MeasuredRun run = MeasuredRun::from_json(measured);
  const json r =
      compare_modes(run, {{"disagg", constant_setup(0.01)}, {"stream", constant_setup(0.01)}});
  EXPECT_NEAR(r["modes"]["disagg"]["predicted_s"].get<double>(), 2.63, 1e-9);
  EXPECT_NEAR(r["modes"]["stream"]["calibrated_s"].get<double>(), 5.01, 1e-9);
  EXPECT_NEAR(r["modes"]["stream"]["calibration"]["gen_scale"].get<double>(), 2.0, 1e-9);
  EXPECT_NEAR(r["max_relative_error_stage_calibrated"].get<double>(), 0, 1e-9);
  EXPECT_GT(r["max_relative_error"].get<double>(), 0.4);
}

TEST(Validation, SkippedGroupsAreNotTrainedAndVariantsAreSeparateRuns) {
  // 2 groups of 4 x (10 + 100) tokens; iteration 2 skipped one group (zero advantage): training
  // 880 tokens then 440 at 1000/s + 0.5 s. Steady-state colocate = 1 s generation + 0.94 s.
  const json measured = {
      {"workload", {{"group_size", 4}, {"iterations", 2}, {"prompt_tokens_mean", 10}}},
      {"modes",
       {{"colocate_1thread",
         {{"iteration_s", 1.94},
          {"response_length_per_iteration",
           {{{"p50", 100}, {"p90", 100}, {"max", 100}, {"samples", 8}, {"skipped", 0}},
            {{"p50", 100}, {"p90", 100}, {"max", 100}, {"samples", 8}, {"skipped", 4}}}}}},
        {"colocate", {{"iteration_s", 4.0}, {"lengths", std::vector<int>(8, 100)}}}}}};
  MeasuredRun run = MeasuredRun::from_json(measured);
  EXPECT_EQ(run.skipped.at("colocate_1thread"), (std::vector<int>{0, 4}));
  EXPECT_EQ(label_mode("colocate_1thread"), Mode::kColocate);
  const json r = compare_modes(
      run, {{"colocate_1thread", constant_setup(0.01)}, {"colocate", constant_setup(0.01)}});
  EXPECT_NEAR(r["modes"]["colocate_1thread"]["predicted_s"].get<double>(), 1.94, 1e-9);
  EXPECT_NEAR(r["modes"]["colocate"]["predicted_s"].get<double>(), 2.38, 1e-9);
  // The faster colocate variant stands for the mode; the slow one (error 0.405) only counts in
  // the all-variants figure.
  EXPECT_EQ(r["colocate_baseline"], "colocate_1thread");
  EXPECT_NEAR(r["max_relative_error"].get<double>(), 0, 1e-9);
  EXPECT_NEAR(r["max_relative_error_all_variants"].get<double>(), 1 - 2.38 / 4.0, 1e-9);
  EXPECT_THROW(compare_modes(run, {{"colocate", constant_setup(0.01)}}), InputError);
}

TEST(Validation, RecordedZeroAdvantageFlagsSkipThoseGroups) {
  // Two groups of 4 x (10 + 100) tokens; every sample of group 1 had advantage 0, so only group 0
  // is trained: 440 tokens at 1000/s + 0.5 s after 1 s of generation.
  const json measured = {
      {"workload", {{"group_size", 4}, {"iterations", 1}, {"prompt_tokens_mean", 10}}},
      {"modes",
       {{"colocate",
         {{"iteration_s", 1.94},
          {"lengths", {std::vector<int>(8, 100)}},
          {"zero_advantage", {{0, 1, 0, 0, 1, 1, 1, 1}}}}}}}};
  MeasuredRun run = MeasuredRun::from_json(measured);
  EXPECT_EQ(run.skipped_groups.at("colocate"), (std::vector<std::vector<int>>{{0, 1}}));
  const json r = compare_modes(run, {{"colocate", constant_setup(0.01)}});
  EXPECT_NEAR(r["modes"]["colocate"]["predicted_s"].get<double>(), 1.94, 1e-9);
}

TEST(Validation, RecordedRefillsWaitForTheGroupTheyReplaced) {
  // Group 1 (all advantages 0) was dropped and group 2 submitted in its place: in colocate the
  // refill decodes only after the first wave (1 s), so generation takes 2 s; training groups 0
  // and 2, 880 tokens at 1000/s, and the 0.5 s step.
  const json measured = {
      {"workload", {{"group_size", 4}, {"iterations", 1}, {"prompt_tokens_mean", 10}}},
      {"modes",
       {{"colocate",
         {{"iteration_s", 3.38},
          {"lengths", {std::vector<int>(12, 100)}},
          {"zero_advantage", {{0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0}}},
          {"released_after", {{-1, -1, 1}}}}}}}};
  MeasuredRun run = MeasuredRun::from_json(measured);
  EXPECT_EQ(run.released_after.at("colocate"), (std::vector<std::vector<int>>{{-1, -1, 1}}));
  const json r = compare_modes(run, {{"colocate", constant_setup(0.01)}});
  EXPECT_NEAR(r["modes"]["colocate"]["predicted_s"].get<double>(), 3.38, 1e-9);
}

TEST(Validation, InterferenceSlowsOnlyOverlappingModes) {
  const json lengths = std::vector<int>(8, 100);
  const json measured = {
      {"workload", {{"group_size", 4}, {"iterations", 3}, {"prompt_tokens_mean", 10}}},
      {"modes",
       {{"disagg", {{"iteration_s", 2.63}, {"lengths", lengths}}},
        {"stream", {{"iteration_s", 2.0}, {"lengths", lengths}}}}}};
  MeasuredRun run = MeasuredRun::from_json(measured);
  ModeSetup slow = constant_setup(0.01);
  slow.gen_slowdown = 2;
  slow.train_slowdown = 1.5;
  const json plain =
      compare_modes(run, {{"disagg", constant_setup(0.01)}, {"stream", constant_setup(0.01)}});
  const json r = compare_modes(run, {{"disagg", slow}, {"stream", slow}});
  // Disagg never overlaps its stages: unchanged.
  EXPECT_NEAR(r["modes"]["disagg"]["predicted_s"].get<double>(), 2.63, 1e-9);
  // Stream's generation (1 s, x2 while the trainer is busy) outlasts the trainer's 1.38 s, so the
  // trainer is slowed all along (x1.5) and the generator for the trainer's share of its time.
  EXPECT_GT(r["modes"]["stream"]["predicted_s"].get<double>(),
            plain["modes"]["stream"]["predicted_s"].get<double>() + 0.5);
  const double kg = r["modes"]["stream"]["interference"]["gen_factor"].get<double>();
  EXPECT_GT(kg, 1.5);
  EXPECT_LT(kg, 2.0);
  EXPECT_NEAR(r["modes"]["stream"]["interference"]["train_factor"].get<double>(), 1.5, 1e-9);
}

TEST(Validation, LengthsFromQuantilesWhenNotListed) {
  const json measured = {{"prompts_per_iteration", 50},
                         {"group_size", 2},
                         {"colocate",
                          {{"iteration_seconds", 3.0},
                           {"response_length", {{"p50", 40}, {"p90", 120}, {"max", 300}}}}}};
  MeasuredRun run = MeasuredRun::from_json(measured);
  const auto& l = run.lengths.at("colocate").front();
  ASSERT_EQ(l.size(), 100u);
  EXPECT_EQ(*std::max_element(l.begin(), l.end()) <= 300, true);
  std::vector<int> sorted = l;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NEAR(sorted[50], 40, 3);
  EXPECT_NEAR(sorted[90], 120, 12);
}

TEST(Validation, MissingKeysAreNamed) {
  try {
    MeasuredRun::from_json({{"modes", {{"stream", {{"lengths", {1, 2}}}}}}});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("iteration_seconds"), std::string::npos);
  }
  EXPECT_THROW(MeasuredRun::from_json({{"modes", json::object()}}), InputError);
  EXPECT_THROW(MeasuredRun::from_json({{"async", {{"iteration_seconds", 1.0}}}}), InputError);
  EXPECT_THROW(MeasuredRun::from_json(json::array()), InputError);
}

}  // namespace
}  // namespace streamrl::planner
