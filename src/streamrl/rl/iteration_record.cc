#include "streamrl/rl/iteration_record.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "streamrl/tasks/length_stats.h"

namespace streamrl::rl {

SampleTotals sample_totals(const IterationStats& st, dist::ProcessGroup* group) {
  SampleTotals t;
  t.samples = static_cast<double>(st.rewards.size());
  for (double r : st.rewards) t.reward += r;
  for (double sc : st.scores) t.correct += sc >= 1.0;
  if (group) {
    const std::vector<double> g = group->all_reduce_sum({t.reward, t.correct, t.samples});
    t = {g[0], g[1], g[2]};
  }
  return t;
}

IterationRecord iteration_record(const RlRunConfig& c, int64_t it, const IterationStats& st,
                                 const SampleTotals& totals, const UpdateResult& up,
                                 const RlLoop& loop, double iter_s,
                                 const dist::ProcessGroup* group) {
  const int64_t done = it + 1;
  const double gen_s = loop.generator_seconds();
  const double trainer_busy = up.seconds + st.sample_work_s + st.weight_update_s;
  // Reward and accuracy over all ranks' samples; lengths and versions below are this rank's.
  const double samples = totals.samples, correct = totals.correct;
  const double reward_mean = totals.reward / std::max(1.0, samples);
  // Every sample may have been refused (async with a tight staleness bound).
  tasks::LengthSummary ls =
      st.lengths.empty() ? tasks::LengthSummary{} : tasks::summarize(st.lengths);
  double mean_len = 0;
  for (double l : st.lengths) mean_len += l;
  mean_len /= std::max<size_t>(1, st.lengths.size());
  int64_t min_version = it, max_version = it;
  if (!st.versions.empty()) {
    min_version = *std::min_element(st.versions.begin(), st.versions.end());
    max_version = *std::max_element(st.versions.begin(), st.versions.end());
  }
  const auto& m = up.metrics;
  nlohmann::json rec = {
      {"step", done},
      {"mode", core::mode_name(c.mode)},
      {"weight_version", it},
      {"sample_weight_version", {{"min", min_version}, {"max", max_version}}},
      {"staleness_max", it - min_version},
      {"refused_samples", loop.refused()},
      {"reward_mean", reward_mean},
      {"accuracy", correct / std::max(1.0, samples)},
      {"response_length", {{"mean", mean_len}, {"p50", ls.p50}, {"p90", ls.p90}, {"max", ls.max}}},
      {"kl", m.kl_mean()},
      {"entropy", m.entropy_mean()},
      {"clip_fraction", m.clip_fraction()},
      {"ppo_kl", m.ppo_kl()},
      {"loss", m.loss},
      {"grad_norm", up.grad_norm},
      {"optimizer_steps", up.steps},
      {"skipped_zero_advantage", up.skipped_samples},
      {"lr", up.lr},
      {"samples", static_cast<int64_t>(samples)},
      // The generator's busy time in this iteration's window; in async the window's tokens
      // are partly the next iteration's, and the last window has none (null, not infinity).
      {"generated_tokens_per_s",
       gen_s > 1e-6 ? nlohmann::json(st.generated_tokens / gen_s) : nlohmann::json(nullptr)},
      {"samples_per_s", samples / std::max(1e-9, iter_s)},
      {"stage_seconds",
       {{"generate", gen_s},
        {"sample_work", st.sample_work_s},
        {"reference", st.reference_s},
        {"train", up.seconds},
        {"train_cpu", up.cpu_seconds},  // the trainer thread's CPU time in those spans
        {"weight_update", st.weight_update_s},
        {"trainer_wait", st.wait_s},
        // Waiting for the other ranks and exchanging with them: a slow or dropped link between
        // hosts, or a straggling rank, shows here.
        {"collectives", st.collectives_s},
        {"iteration", iter_s}}},
      // Colocated roles time-share the cores: each idles while the other stage runs.
      {"idle_fraction",
       {{"generator", std::max(0.0, 1.0 - gen_s / iter_s)},
        {"trainer", std::max(0.0, 1.0 - trainer_busy / iter_s)}}},
  };
  if (!up.moe.empty()) {
    // routing_mismatch: how often the trainer's routers disagreed with the engine's on the same
    // tokens (before any replay); peers found MoE RL unstable when this is high.
    rec["moe"] = up.moe.to_json(/*routing=*/true);
    rec["moe"]["routing_replay"] = c.moe.routing_replay;
    rec["moe"]["curriculum"] = c.update.moe_curriculum;
  }
  if (!up.sparse_attention.is_null()) rec["sparse_attention"] = up.sparse_attention;
  if (loop.ranker_metrics()) rec["ranker"] = *loop.ranker_metrics();
  if (c.dynamic_sampling.enabled) rec["dynamic_sampling"] = loop.dynamic_sampling();
  if (c.overlong.filter) rec["overlong_filtered"] = loop.filtered();
  if (c.data.curriculum.enabled) {
    nlohmann::json rates = nlohmann::json::object();
    for (const auto& [d, p] : loop.pass_rates()) rates[std::to_string(d)] = p;
    rec["curriculum_pass_rate"] = rates;
  }
  if (st.tool_samples > 0) {
    const double n = static_cast<double>(st.tool_samples);
    rec["tools"] = {{"turns_per_sample", static_cast<double>(st.turns) / n},
                    {"calls_per_sample", static_cast<double>(st.tool_calls) / n}};
  }
  if (group) rec["trainer_ranks"] = group->world_size();
  if (group && c.parallel.pp > 1) {
    // The (last) step's schedule and plan, with every step's micro-batches.
    nlohmann::json pipe = up.pipeline.is_object() ? up.pipeline : nlohmann::json::object();
    pipe["stages"] = c.parallel.pp;
    pipe["micro_batches"] = up.micro_batches;
    rec["pipeline"] = std::move(pipe);
  }
  return {std::move(rec), reward_mean, mean_len};
}

nlohmann::json sample_record(int64_t done, const IterationStats& st) {
  std::vector<size_t> order(st.lengths.size());
  std::iota(order.begin(), order.end(), 0);
  const bool by_prompt = st.prompts.size() == order.size();
  if (by_prompt) {
    // Samples of a group are recorded in sample order, so a stable sort keeps it.
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return st.prompts[a] < st.prompts[b]; });
  }
  std::vector<double> lengths;
  std::vector<int> zero;
  std::map<int, int> group_of;  // prompt index -> position of its group
  for (size_t i : order) {
    lengths.push_back(st.lengths[i]);
    zero.push_back(st.zero_advantage[i]);
    if (by_prompt) group_of.emplace(st.prompts[i], static_cast<int>(group_of.size()));
  }
  std::vector<int> released_after(group_of.size(), -1);
  for (const auto& [prompt, group] : group_of) {
    const auto r = st.replaced.find(prompt);
    if (r == st.replaced.end()) continue;
    const auto dropped = group_of.find(r->second);
    if (dropped != group_of.end()) released_after[group] = dropped->second;
  }
  return {{"step", done},
          {"lengths", lengths},
          {"zero_advantage", zero},
          {"released_after", released_after}};
}

}  // namespace streamrl::rl
