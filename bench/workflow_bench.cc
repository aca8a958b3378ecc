#include "workflow_bench.h"

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "rounds.h"
#include "streamrl/core/clock.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/stats.h"
#include "streamrl/core/threads.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/rl/tool_rollout.h"
#include "streamrl/tasks/split.h"
#include "streamrl/tasks/task.h"
#include "streamrl/tokenizer/tokenizer.h"
#include "streamrl/tools/calc_tool.h"

namespace streamrl::bench {
namespace {

struct RolloutVariant {
  const char* name;
  bool keep_kv;
  bool turn_barrier;
  bool engine_turns;
  bool pipeline_calls;
};

// Slowest first. "engine" is what the trainer, `eval` and `streamrl serve` run: the engine runs
// the turns, tools off its thread, each call started as its closing tag is sampled (decoding
// pipelining); "engine_serial" starts the calls when the turn ends; "streamed" is the same
// rollouts with this thread running each turn's tools between engine steps.
constexpr RolloutVariant kVariants[] = {{"module", false, true, false, false},
                                        {"kv_reuse", true, true, false, false},
                                        {"streamed", true, false, false, false},
                                        {"engine_serial", true, false, true, false},
                                        {"engine", true, false, true, true}};

struct Run {
  std::vector<double> latency;  // per rollout, seconds
  double seconds = 0;
  int64_t tokens = 0;
  int tool_calls = 0;
  std::vector<double> turns;
  std::vector<std::vector<int32_t>> trajectories;
};

// The calc tool behind a fixed latency: a tool that runs elsewhere (a sandbox, a search API)
// answers in tens of milliseconds or more, not calc's microseconds.
class DelayedTool : public tools::Tool {
 public:
  DelayedTool(std::shared_ptr<const tools::Tool> inner, double seconds)
      : inner_(std::move(inner)), seconds_(seconds) {}
  std::string name() const override { return inner_->name(); }
  nlohmann::json schema() const override { return inner_->schema(); }
  std::string run(const nlohmann::json& arguments) const override {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds_));
    return inner_->run(arguments);
  }

 private:
  std::shared_ptr<const tools::Tool> inner_;
  double seconds_;
};

constexpr double kSlowToolSeconds = 0.02;

Run run_variant(model::CausalLM& lm, const rl::PromptEncoder& enc, const tasks::Task& task,
                const std::vector<tasks::Problem>& problems, const RolloutVariant& v, int batch,
                const tools::ToolRunner* runner = nullptr, std::vector<double> arrival_s = {}) {
  engine::SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_new_tokens = 200;
  greedy.stop_token_ids = enc.stop_ids();
  rl::ToolRolloutConfig tc;
  tc.keep_kv = v.keep_kv;
  tc.turn_barrier = v.turn_barrier;
  tc.engine_turns = v.engine_turns;
  tc.pipeline_calls = v.pipeline_calls;
  tc.arrival_s = std::move(arrival_s);
  const auto t0 = core::Clock::now();
  Run out;
  for (rl::ToolRollout& r :
       rl::run_task_rollouts(lm, enc, task, problems, 1, greedy, batch, tc, runner)) {
    out.latency.push_back(r.seconds);
    out.tokens += static_cast<int64_t>(r.sample.output_ids.size());
    out.tool_calls += r.tool_calls;
    out.turns.push_back(r.sample.turns);
    out.trajectories.push_back(std::move(r.sample.output_ids));
  }
  out.seconds = core::seconds_since(t0);
  return out;
}

// Poisson arrivals (fixed seed) of `n` rollouts at `rate` per second.
std::vector<double> poisson_arrivals(int n, double rate) {
  std::mt19937_64 rng(11);
  std::exponential_distribution<double> gap(rate);
  std::vector<double> at;
  double t = 0;
  for (int i = 0; i < n; ++i) {
    at.push_back(t);
    t += gap(rng);
  }
  return at;
}

}  // namespace

nlohmann::json run_workflow_bench(const BenchOptions& options) {
  const int threads = options.threads > 0 ? options.threads : 1;
  core::apply_core_budget(threads);
  const std::filesystem::path ckpt = options.ckpt.empty() ? source_path("runs/sft_calc/final")
                                                          : std::filesystem::path(options.ckpt);
  if (!std::filesystem::exists(ckpt / "config.json")) {
    throw InputError("bench workflow needs a policy that calls tools: " + ckpt.string() +
                     " has no checkpoint (run `streamrl sft --config configs/sft_calc.yaml`, or "
                     "give --ckpt)");
  }
  model::CausalLM lm = model::load_model(ckpt);
  auto tok = tokenizer::load_tokenizer(ckpt);
  const rl::PromptEncoder enc = rl::PromptEncoder::for_checkpoint(*tok, ckpt);
  const tasks::Task& task = tasks::get_task("calc");
  const int n = options.quick ? 8 : 64;
  const int batch = options.quick ? 4 : 16;
  std::vector<tasks::Problem> problems;
  for (int i = 0; i < n; ++i)
    problems.push_back(tasks::draw_problem(task, 0, tasks::Split::kEval, i));

  torch::NoGradGuard no_grad;
  Rounds log("workflow", threads);
  const int rounds = options.quick ? 1 : 5;
  std::map<std::string, Run> last;
  for (int round = 0; round < rounds; ++round) {
    log.begin_round(round);
    for (const RolloutVariant& v : kVariants) {
      Run run = run_variant(lm, enc, task, problems, v, batch);
      const std::string name = v.name;
      log.add(name + "_p50_s", core::percentile(run.latency, 0.5));
      log.add(name + "_p90_s", core::percentile(run.latency, 0.9));
      log.add(name + "_total_s", run.seconds);
      last[name] = std::move(run);
    }
  }
  // The same rollouts with a slow tool: module-level and this thread running the tools stall
  // every other rollout for each call; the engine running them does not.
  tools::ToolRunner slow;
  slow.add(std::make_shared<DelayedTool>(std::make_shared<tools::CalcTool>(), kSlowToolSeconds));
  Rounds slow_log("workflow_slow_tool", threads);
  for (int round = 0; round < std::max(1, rounds / 2); ++round) {
    slow_log.begin_round(round);
    for (const RolloutVariant& v : kVariants) {
      if (std::string(v.name) == "kv_reuse") continue;
      const Run run = run_variant(lm, enc, task, problems, v, batch, &slow);
      slow_log.add(std::string(v.name) + "_p50_s", core::percentile(run.latency, 0.5));
      slow_log.add(std::string(v.name) + "_p90_s", core::percentile(run.latency, 0.9));
      slow_log.add(std::string(v.name) + "_total_s", run.seconds);
    }
  }
  // Online, as Teola measures: the rollouts arrive one by one (Poisson) at half the rate the
  // module-level way sustains in the closed batch, so neither way is overloaded and a rollout's
  // latency (from its arrival) is its own critical path plus what it shares the engine with, not
  // its place in a queue (in the closed batch every rollout arrives at once and waits for a slot,
  // so p90 there is bound by the batch's throughput). Module-level runs with its turn barrier (as
  // in the closed batch) and without it, as a server batching each fresh request as it comes:
  // then only re-prefilling and this thread running the tools separate it from the engine path.
  constexpr RolloutVariant kOnline[] = {kVariants[0],  // module
                                        {"module_no_barrier", false, false, false, false},
                                        kVariants[4]};  // engine
  auto online = [&](const Rounds& closed, const std::string& name,
                    const tools::ToolRunner* runner) {
    const double offered = 0.5 * n / closed.median("module_total_s");
    const std::vector<double> arrivals = poisson_arrivals(n, offered);
    Rounds on(name, threads);
    for (int round = 0; round < std::max(1, rounds / 2 + 1); ++round) {
      on.begin_round(round);
      for (const RolloutVariant& v : kOnline) {
        const Run run = run_variant(lm, enc, task, problems, v, batch, runner, arrivals);
        on.add(std::string(v.name) + "_p50_s", core::percentile(run.latency, 0.5));
        on.add(std::string(v.name) + "_p90_s", core::percentile(run.latency, 0.9));
      }
    }
    auto speedup = [&](const std::string& base) {
      return nlohmann::json{{"p50", on.ratio_median(base + "_p50_s", "engine_p50_s")},
                            {"p90", on.ratio_median(base + "_p90_s", "engine_p90_s")}};
    };
    return nlohmann::json{{"rollouts_per_s", offered},
                          {"load", "half the module-level way's closed-batch throughput, Poisson"},
                          {"latency_speedup", speedup("module")},
                          {"latency_speedup_no_barrier", speedup("module_no_barrier")},
                          {"seconds_rounds", on.to_json()}};
  };
  const nlohmann::json online_fast = online(log, "workflow_online", nullptr);
  const nlohmann::json online_slow = online(slow_log, "workflow_slow_tool_online", &slow);
  const Run& module = last["module"];
  const Run& engine = last["engine"];
  int same = 0;
  for (size_t i = 0; i < module.trajectories.size(); ++i) {
    same += module.trajectories[i] == engine.trajectories[i] &&
            engine.trajectories[i] == last["streamed"].trajectories[i] &&
            engine.trajectories[i] == last["engine_serial"].trajectories[i];
  }
  // How much of the p50 gain each change brings: kv_reuse over module, no turn barrier over that,
  // the engine running the turns over this thread running them, then decoding pipelining.
  const double m = log.median("module_p50_s"), k = log.median("kv_reuse_p50_s"),
               s = log.median("streamed_p50_s"), es = log.median("engine_serial_p50_s"),
               e = log.median("engine_p50_s");
  const double gain = m - e;
  return {
      {"rollouts", n},
      {"max_batch_size", batch},
      {"threads", threads},
      {"checkpoint", ckpt.string()},
      {"tool_calls_per_rollout", static_cast<double>(engine.tool_calls) / n},
      {"turns",
       {{"p50", core::percentile(engine.turns, 0.5)},
        {"p90", core::percentile(engine.turns, 0.9)},
        {"max", core::percentile(engine.turns, 1.0)}}},
      {"tokens_per_rollout", static_cast<double>(engine.tokens) / n},
      {"same_trajectories", static_cast<double>(same) / n},
      {"latency_speedup",
       {{"p50", log.ratio_median("module_p50_s", "engine_p50_s")},
        {"p90", log.ratio_median("module_p90_s", "engine_p90_s")}}},
      {"latency_speedup_rounds", log.ratio("module_p50_s", "engine_p50_s")},
      {"throughput_speedup", log.ratio_median("module_total_s", "engine_total_s")},
      {"throughput_speedup_rounds", log.ratio("module_total_s", "engine_total_s")},
      {"ablation_p50_share",
       {{"kv_reuse", gain > 0 ? (m - k) / gain : 0.0},
        {"no_turn_barrier", gain > 0 ? (k - s) / gain : 0.0},
        {"engine_turns", gain > 0 ? (s - es) / gain : 0.0},
        {"decoding_pipelining", gain > 0 ? (es - e) / gain : 0.0}}},
      {"decoding_pipelining_speedup",
       {{"p50", log.ratio_median("engine_serial_p50_s", "engine_p50_s")},
        {"p90", log.ratio_median("engine_serial_p90_s", "engine_p90_s")}}},
      {"kv_reuse_latency_speedup_p50", log.ratio_median("module_p50_s", "kv_reuse_p50_s")},
      {"engine_over_streamed",
       {{"p50", log.ratio_median("streamed_p50_s", "engine_p50_s")},
        {"p90", log.ratio_median("streamed_p90_s", "engine_p90_s")},
        {"total", log.ratio_median("streamed_total_s", "engine_total_s")}}},
      {"online", online_fast},
      {"slow_tool",
       {{"tool_seconds", kSlowToolSeconds},
        {"latency_speedup",
         {{"p50", slow_log.ratio_median("module_p50_s", "engine_p50_s")},
          {"p90", slow_log.ratio_median("module_p90_s", "engine_p90_s")}}},
        {"throughput_speedup", slow_log.ratio_median("module_total_s", "engine_total_s")},
        {"decoding_pipelining_speedup",
         {{"p50", slow_log.ratio_median("engine_serial_p50_s", "engine_p50_s")},
          {"p90", slow_log.ratio_median("engine_serial_p90_s", "engine_p90_s")}}},
        {"engine_over_streamed",
         {{"p50", slow_log.ratio_median("streamed_p50_s", "engine_p50_s")},
          {"p90", slow_log.ratio_median("streamed_p90_s", "engine_p90_s")},
          {"total", slow_log.ratio_median("streamed_total_s", "engine_total_s")}}},
        {"online", online_slow},
        {"seconds_rounds", slow_log.to_json()}}},
      {"seconds_rounds", log.to_json()},
      {"load", log.load_json()},
      {"goal_latency_speedup", 1.5},
  };
}

}  // namespace streamrl::bench
