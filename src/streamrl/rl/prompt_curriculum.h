// Which training prompts an RL iteration draws (DataOptions): a task's train split in order, only
// problems up to data.max_difficulty (a fixed curriculum), and with data.curriculum pass_rate an
// online one that prefers difficulties whose recent pass rate is neither 0 nor 1, where GRPO's
// group advantages are non-zero.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>

#include "streamrl/tasks/task.h"

namespace streamrl::rl {

struct CurriculumOptions {
  bool enabled = false;  // data.curriculum: "none" (default) | "pass_rate"
  int window = 256;      // data.curriculum_window: recent samples per difficulty behind the rate
  double floor = 0.05;   // data.curriculum_floor: least acceptance weight, so that no difficulty
                         // starves and its pass rate keeps being measured
  // data.curriculum_power (1): exponent on 4 p (1 - p); above 1 it concentrates the draws on
  // the difficulties nearest p = 1/2 (a rarely solved difficulty mostly yields lucky answers).
  double power = 1.0;
};

// Per-difficulty pass rates over the last `window` scored samples and the acceptance weights
// they give: max(floor, (4 p (1 - p))^power), 1 for a difficulty not yet seen.
class PassRateCurriculum {
 public:
  explicit PassRateCurriculum(CurriculumOptions options = {}) : o_(options) {}

  void observe(int difficulty, double score);  // a score >= 1 is a pass
  std::map<int, double> weights() const;
  std::map<int, double> pass_rates() const;

  // The recent outcomes, for a checkpoint, and back.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  CurriculumOptions o_;
  std::map<int, std::deque<uint8_t>> recent_;
};

// Training problem `index` of a run seeded with `seed` (deterministic, so resumed and re-run
// iterations draw the same prompts). Without a difficulty cap and without weights it is plain
// draw_problem(train, index). Otherwise candidates are drawn from a stream of their own for
// `index`: a candidate above `max_difficulty` (when >= 0) is skipped, and one of difficulty d is
// accepted with probability weights[d] (missing: 1). When no candidate of kCandidates is
// accepted, the last one within the cap is taken. Throws InputError when none is within the cap.
inline constexpr int kCurriculumCandidates = 256;
tasks::Problem draw_training_problem(const tasks::Task& task, uint64_t seed, uint64_t index,
                                     int max_difficulty, const std::map<int, double>* weights);

}  // namespace streamrl::rl
