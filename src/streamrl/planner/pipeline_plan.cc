#include "streamrl/planner/pipeline_plan.h"

#include <algorithm>
#include <utility>

#include "streamrl/core/errors.h"
#include "streamrl/pipeline/schedule_search.h"

namespace streamrl::planner {

PipelinePlan plan_pipeline(const std::vector<int64_t>& lengths, const PipelineProfile& profile,
                           const pipeline::Partition& partition, const PipelinePlanOptions& options,
                           PipelineEmulator& emulator) {
  if (lengths.empty()) throw InputError("plan_pipeline: the batch has no sequences");
  const int P = partition.stages, V = partition.chunks;
  PipelinePlan plan;

  // 1. The baseline, also the memory reference when no budget is given.
  const int static_count = options.static_micro_batches > 0 ? options.static_micro_batches : 2 * P;
  const auto shaped = [&](std::vector<pipeline::MicroBatch> mbs) {
    if (options.padded) {
      for (auto& mb : mbs) mb = pipeline::padded(mb, lengths, options.token_cost);
    }
    return mbs;
  };
  std::vector<pipeline::MicroBatch> fixed =
      shaped(pipeline::split_static(lengths, static_count, options.token_cost));
  const PipelineEmulation base =
      emulator.run(pipeline::interleaved_one_f_one_b(P, V, static_cast<int>(fixed.size())),
                   pipeline_op_costs(profile, partition, fixed));
  plan.static_step_s = base.step_s;
  plan.static_bubble_ratio = base.bubble_ratio;

  // 2. Candidate splits, each searched for its best schedule.
  std::vector<std::pair<const char*, std::vector<pipeline::MicroBatch>>> splits;
  pipeline::SplitOptions split{options.token_cost, options.target_tokens, options.max_tokens, P};
  splits.emplace_back("balanced", shaped(pipeline::split_balanced(lengths, split)));
  if (options.padded) splits.emplace_back("sorted", pipeline::split_sorted(lengths, split));
  split.target_tokens = std::max<int64_t>(1, options.target_tokens / 2);
  splits.emplace_back("balanced_fine", shaped(pipeline::split_balanced(lengths, split)));
  if (options.padded) splits.emplace_back("sorted_fine", pipeline::split_sorted(lengths, split));
  // Finer still: more micro-batches shorten the fill and drain where per-op costs allow.
  split.target_tokens = std::max<int64_t>(1, options.target_tokens / 4);
  splits.emplace_back("balanced_finer", shaped(pipeline::split_balanced(lengths, split)));
  split.target_tokens = std::max<int64_t>(1, options.target_tokens / 8);
  splits.emplace_back("balanced_finest", shaped(pipeline::split_balanced(lengths, split)));
  // The finest with a ramp of smaller micro-batches at each end: a shorter fill and drain.
  splits.emplace_back("tapered", shaped(pipeline::split_tapered(lengths, split, 3)));
  splits.emplace_back("static", std::move(fixed));

  pipeline::SearchOptions search;
  search.base.activation_budget_bytes = options.activation_budget_bytes;
  search.time_budget_s = options.time_budget_s / static_cast<double>(splits.size());
  search.max_candidates = options.max_candidates_per_split;
  search.seed = options.seed;
  double best_step = 0;
  for (auto& [name, mbs] : splits) {
    const pipeline::OpCosts costs = pipeline_op_costs(profile, partition, mbs);
    const pipeline::SearchResult r = pipeline::search_schedule(
        costs, search, [&](const pipeline::Schedule& s) { return emulator.run(s, costs).step_s; });
    plan.candidates += r.candidates;
    if (plan.split.empty() || r.step_s < best_step) {
      best_step = r.step_s;
      plan.split = name, plan.candidate = r.candidate, plan.schedule = r.schedule;
      plan.micro_batches = std::move(mbs);
      plan.emulation = emulator.run(plan.schedule, costs);
    }
  }
  return plan;
}

}  // namespace streamrl::planner
