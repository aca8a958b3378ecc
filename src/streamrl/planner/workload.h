// Workloads for the planner: output-length distributions and the batches of one RL iteration
// (prompts, GRPO groups, true output lengths and the ranker's estimates).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace streamrl::planner {

// A histogram over output lengths [1, max].
class LengthDistribution {
 public:
  // The long-tailed shape of the paper's CodeMath set (Fig. 7: mode near 2K of 20K, decay to 10K,
  // a low plateau to 20K), scaled proportionally to `max_output` as the paper's 5K/10K variants.
  static LengthDistribution codemath(int max_output);
  // Resamples observed lengths.
  static LengthDistribution empirical(const std::vector<int>& lengths);

  int draw(std::mt19937_64& rng) const;
  double mean() const;
  double quantile(double q) const;  // q in [0, 1]
  int max() const { return static_cast<int>(values_.back()); }

 private:
  std::vector<double> values_;   // ascending support points
  std::vector<double> weights_;  // probability of each point
};

// One iteration's samples. Groups are the GRPO prompt groups, admitted and trained together.
struct Batch {
  int group_size = 1;
  std::vector<int> prompt_tokens;  // [groups]
  std::vector<int> output_tokens;  // [groups * group_size], group-major
  std::vector<double> estimate;    // [groups] ranker's length estimate (for skew-aware, LPT)
  // [groups] 1 = the group's rewards were all equal (zero advantage): generated but not trained,
  // as the trainer skips such samples. Empty = every group is trained.
  std::vector<uint8_t> skipped;
  // [groups] DAPO dynamic sampling: -1 = submitted with the batch; g = a refill, submitted once
  // group g (dropped for equal rewards) was in. Empty = every group is submitted with the batch.
  std::vector<int> released_after;

  bool trained(int group) const { return skipped.empty() || !skipped[group]; }
  // 0 for a group submitted with the batch, else 1 + the wave of the group it replaced.
  int wave(int group) const;

  int groups() const { return static_cast<int>(prompt_tokens.size()); }
  int samples() const { return static_cast<int>(output_tokens.size()); }
  int64_t total_tokens() const;  // prompt + output tokens over all samples (training tokens)
  void check() const;            // InputError on inconsistent sizes or non-positive lengths
};

struct BatchSpec {
  int groups = 1024;
  int group_size = 1;
  double prompt_mean = 400;         // prompt tokens, exponential around this mean
  double within_group_sigma = 0.3;  // log-normal spread of lengths inside a group
  double ranker_noise = 0;          // log-normal noise of the estimates (0 = oracle)
};

// Draws a batch: a base length per group from `dist`, spread inside the group, estimates with
// noise. Deterministic in `seed`.
Batch draw_batch(const LengthDistribution& dist, const BatchSpec& spec, uint64_t seed);

// Fraction of the truly longest `fraction` of groups (by mean output length) that are also among
// the predicted longest `fraction` (the paper's ranker recall, Table 4).
double top_recall(const Batch& batch, double fraction);

}  // namespace streamrl::planner
