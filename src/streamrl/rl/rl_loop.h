// The iteration loop of every RL mode. Each iteration's prompts go to the
// generator; each finished sample gets its per-sample work (reward, reference log-probs) and each
// complete group its advantages (or is dropped and refilled by dynamic sampling); complete groups
// go to a trainer step; then the new weights and the next prompts go out. Modes differ only in
// their core::ModeTraits: where the generator runs, when per-sample work and micro-batches happen,
// and how many iterations of prompts are out ahead of the one training.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <vector>

#include "streamrl/dist/process_group.h"
#include "streamrl/engine/tool_turns.h"
#include "streamrl/model/transformer.h"
#include "streamrl/rl/policy_update.h"
#include "streamrl/rl/prompt_curriculum.h"
#include "streamrl/rl/rl_run_config.h"
#include "streamrl/rl/rollout_generator.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/tasks/task.h"
#include "streamrl/telemetry/trace.h"

namespace streamrl::rl {

// Trace tracks (Perfetto rows): rank r's trainer is track 1 + 100 r, its SGS instances follow.
int trainer_track(int rank);
int generator_track(int rank);

// Everything an iteration measured, for its metrics line.
struct IterationStats {
  std::vector<double> rewards, scores, lengths;
  std::vector<int> zero_advantage;  // per sample, 1 when its advantage is 0
  std::vector<int> prompts;         // per sample, its prompt's index in the iteration
  // Dynamic sampling: refill prompt index -> the index of the dropped prompt it replaced.
  std::map<int, int> replaced;
  std::vector<int64_t> versions;
  int64_t generated_tokens = 0;
  // Tool-using tasks: the model's turns and tool calls of the samples scored this iteration.
  int64_t tool_samples = 0, turns = 0, tool_calls = 0;
  double sample_work_s = 0, reference_s = 0, wait_s = 0, weight_update_s = 0;
  double collectives_s = 0;  // in the trainer ranks' collectives (0 with one process)
};

// One iteration's prompts and what has come back for them so far.
struct IterationBatch {
  std::vector<tasks::Problem> problems;
  std::vector<std::vector<ScoredSample>> groups;  // by prompt index
  std::vector<int> arrived;                       // samples back per prompt (refused included)
  std::vector<ScoredSample> ready;                // complete groups not yet given to a step
  int64_t refused = 0;                            // samples staler than the bound, not trained on
  // Scored but not trained: groups dropped by dynamic sampling, truncated samples filtered out
  // (algo.overlong.filter). They count in the iteration's statistics, not in the update.
  std::vector<ScoredSample> dropped;
  int refills = 0, dropped_groups = 0, filtered = 0;
  std::map<int, int> replaced;    // refill prompt index -> the dropped prompt it replaced
  std::map<int, double> weights;  // curriculum acceptance weights when the batch was drawn
  // (prompt index, sample index, difficulty, score) of every scored sample, for the curriculum.
  std::vector<std::tuple<int, int, int, double>> outcomes;
};

// Makes the trainer step of one iteration (a PolicyStep on the policy, by default).
using TrainerStepFactory = std::function<std::unique_ptr<TrainerStep>()>;

class RlLoop {
 public:
  // `policy` is the trainer's module (its weights go to the generator after each step); `ref`
  // the frozen reference (empty: none); `group` the trainer ranks (null: one process).
  RlLoop(const RlRunConfig& c, const tasks::Task& task, const PromptEncoder& prompts,
         model::CausalLM& policy, std::optional<model::CausalLM>& ref, TrainerStepFactory new_step,
         telemetry::Trace* trace, dist::ProcessGroup* group);

  // The online curriculum's recent outcomes, for checkpoints (null when it is off).
  nlohmann::json curriculum_state() const;
  void restore_curriculum(const nlohmann::json& state);

  // Takes the generator and submits the first iteration's prompts (and, ahead, the next ones).
  void start(std::unique_ptr<RolloutGenerator> generator, int64_t first_iteration);

  // Runs iteration `k` (trainer weights version k) to its optimizer step; fills `st` and returns
  // the step's result. Then sends the new weights and the next prompts as the mode prescribes.
  UpdateResult run_iteration(int64_t k, IterationStats* st);

  double generator_seconds() const { return gen_seconds_; }
  const std::optional<nlohmann::json>& ranker_metrics() const { return ranker_metrics_; }
  int64_t refused() const { return refused_; }
  const nlohmann::json& dynamic_sampling() const { return dynamic_; }
  int filtered() const { return filtered_; }
  std::map<int, double> pass_rates() const { return curriculum_.pass_rates(); }

 private:
  int own_prompts() const;
  void submit(int64_t k);
  void submit_refill(int64_t k, int replaced);
  tasks::Problem problem(int64_t k, int i) const;
  engine::Request request(int64_t k, int i) const;
  engine::Sample next_sample(IterationStats* st);
  void drive_colocated();
  void accept(engine::Sample s, IterationStats* st);
  void score(engine::Sample s, IterationBatch& b, IterationStats* st);
  void complete_group(int64_t j, int i);
  // Samples of `b` expected on this rank (its prompts and refills, whole groups) and received.
  size_t expected(const IterationBatch& b) const;
  static size_t received(const IterationBatch& b);
  // Pipeline stages: shows `step` the next iteration's samples when they are all in already.
  void preview_next(int64_t k, TrainerStep& step, IterationStats* st);
  void record(const ScoredSample& s, IterationStats* st) const;

  const RlRunConfig& c_;
  const tasks::Task& task_;
  const PromptEncoder& prompts_;
  model::CausalLM& policy_;
  std::optional<model::CausalLM>& ref_;
  const TrainerStepFactory new_step_;
  telemetry::Trace* trace_;
  dist::ProcessGroup* group_;
  const int rank_, world_;
  const int track_;  // this rank's trainer track in the trace
  const core::ModeTraits mode_;
  const int64_t stride_;
  PassRateCurriculum curriculum_;
  // The task's tools run each rollout's turns (on_turn empty: no tools).
  engine::ToolTurnHooks tool_turns_;
  std::unique_ptr<RolloutGenerator> gen_;
  std::map<int64_t, IterationBatch> batches_;
  double gen_seconds_ = 0;
  int64_t refused_ = 0;
  nlohmann::json dynamic_;
  int filtered_ = 0;
  std::optional<nlohmann::json> ranker_metrics_;
};

}  // namespace streamrl::rl
