#include "moe_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "rounds.h"
#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/stats.h"
#include "streamrl/core/threads.h"
#include "streamrl/rl/rl_run.h"
#include "streamrl/rl/sft.h"
#include "streamrl/telemetry/metrics_log.h"

namespace streamrl::bench {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr double kGoalSpeedup = 1.15;    // issue #17 (the paper reaches up to 1.29)
constexpr double kGoalLossDelta = 0.01;  // adaptive's held-out loss within 1 % of top-2's
constexpr double kSameLoss = 1.01;       // "the same loss": within 1 % of top-2's final one

struct GatingVariant {
  std::string name;
  std::string gating;  // model.moe.gating
  double threshold;
  bool curriculum;
};

const std::vector<GatingVariant>& variants() {
  static const std::vector<GatingVariant> kAll = {
      {"top2", "topk", 0.0, false},
      {"adaptive_0.1", "adaptive", 0.1, false},
      {"adaptive_0.2", "adaptive", 0.2, false},
      {"adaptive_0.1_curriculum", "adaptive", 0.1, true},
      {"adaptive_0.2_curriculum", "adaptive", 0.2, true},
  };
  return kAll;
}

// The SFT recipe every variant shares: same seed (same init), same data order in the first epoch,
// same steps and batch (same tokens). The paper's top-1-only balancing loss at its coefficient.
struct SftShape {
  int steps, batch_size, epoch_size, eval_every, loss_n;
};

std::string sft_yaml(const fs::path& root, const std::string& name, const GatingVariant& v,
                     const SftShape& s, int steps) {
  std::ostringstream y;
  y << "run: {name: " << name << ", dir: " << root.string()
    << ", seed: 0, threads: 1, resume: true}\n"
    << "model:\n  config: " << source_path("configs/model/tiny_moe.json").string()
    << "\n  tokenizer: char\n"
    << "  moe: {gating: " << v.gating << ", threshold: " << v.threshold
    << ", aux_loss: top1, aux_loss_coef: 0.01, z_loss_coef: 0.001}\n"
    << "data: {task: sum}\n"
    << "train:\n  steps: " << steps << "\n  batch_size: " << s.batch_size
    << "\n  epoch_size: " << s.epoch_size
    << "\n  moe_curriculum: " << (v.curriculum ? "true" : "false")
    << "\n  micro_batch_tokens: 4096\n  log_every: 1\n"
    << "  optim: {lr: 3.0e-3, warmup_steps: 20, min_lr_ratio: 0.05, weight_decay: 0.01, "
       "grad_clip: 1.0}\n"
    << "eval: {every: 0, n: 0, loss_n: " << s.loss_n << "}\n"
    << "checkpoint: {every: 0, keep: 1}\n";
  return y.str();
}

// The training seconds at which the held-out loss first reached `target`, interpolated linearly
// between evaluations; NaN when it never did.
double time_to_loss(const std::vector<std::pair<double, double>>& curve, double target) {
  for (size_t i = 0; i < curve.size(); ++i) {
    if (curve[i].second > target) continue;
    if (i == 0) return curve[0].first;
    const auto [t0, l0] = curve[i - 1];
    const auto [t1, l1] = curve[i];
    return t0 + (t1 - t0) * (l0 - target) / std::max(1e-12, l0 - l1);
  }
  return NAN;
}

struct SftRun {
  std::vector<std::pair<double, double>> eval_curve;  // (train seconds, held-out loss)
  std::vector<double> two_expert_share;               // per layer, mean over all steps
  std::vector<double> expert_load;                    // per layer, mean over all steps
  double flop_ratio = 0;  // expert GEMM work per token over top-2's: mean experts per token / 2
  fs::path checkpoint;

  double final_eval_loss() const { return eval_curve.back().second; }
  double train_seconds() const { return eval_curve.back().first; }
};

// Trains `name` on to `steps` of the recipe's `shape.steps` (resuming its checkpoint; the cosine
// schedule spans the whole recipe, so chunks train exactly as one run would) and adds the held-out
// loss there to its curve.
void sft_chunk(const fs::path& root, const std::string& name, const GatingVariant& v,
               const SftShape& shape, int steps, SftRun* run) {
  const core::Config cfg = core::Config::from_string(sft_yaml(root, name, v, shape, steps));
  rl::SftConfig c = rl::SftConfig::from_config(cfg);
  c.optim.total_steps = shape.steps;
  const json result = rl::run_sft(c, cfg.resolved_yaml());
  run->checkpoint = result.at("checkpoint").get<std::string>();
  run->eval_curve.push_back(
      {result.at("train_seconds").get<double>(), result.at("eval_loss").get<double>()});
}

// The router statistics of a finished run, averaged over its steps.
void read_router_stats(const fs::path& run_dir, const GatingVariant& v, SftRun* r) {
  int steps = 0;
  for (const json& rec : telemetry::MetricsLog::read(run_dir / "metrics.jsonl")) {
    if (!rec.contains("moe")) continue;
    const auto share = rec["moe"]["two_expert_share"].get<std::vector<double>>();
    const auto load = rec["moe"]["expert_load"].get<std::vector<double>>();
    r->two_expert_share.resize(share.size(), 0.0);
    r->expert_load.resize(load.size(), 0.0);
    for (size_t l = 0; l < share.size(); ++l) r->two_expert_share[l] += share[l];
    for (size_t l = 0; l < load.size(); ++l) r->expert_load[l] += load[l];
    ++steps;
  }
  double experts = 0;
  for (double& s : r->two_expert_share) s /= std::max(1, steps), experts += 1 + s;
  for (double& l : r->expert_load) l /= std::max(1, steps);
  // top-2 always uses two experts per token; adaptive one plus its two-expert share.
  r->flop_ratio =
      v.gating == "topk" ? 1.0 : experts / (2.0 * std::max<size_t>(1, r->two_expert_share.size()));
}

// One round: every variant trained from the same init, interleaved in chunks of
// `shape.eval_every` steps (A B C D E A B ...) so that a drift in the machine's load falls on all
// of them alike rather than on whichever ran last.
std::map<std::string, SftRun> run_sft_round(const fs::path& root, int round,
                                            const SftShape& shape) {
  std::map<std::string, SftRun> runs;
  auto name = [&](const GatingVariant& v) { return v.name + "_r" + std::to_string(round); };
  for (int steps = std::min(shape.eval_every, shape.steps);;
       steps = std::min(steps + shape.eval_every, shape.steps)) {
    for (const GatingVariant& v : variants())
      sft_chunk(root, name(v), v, shape, steps, &runs[v.name]);
    if (steps == shape.steps) break;
  }
  for (const GatingVariant& v : variants()) read_router_stats(root / name(v), v, &runs[v.name]);
  return runs;
}

// One async RL run of the MoE policy from `init_from`: per-iteration reward and routing mismatch.
json run_rl_variant(const fs::path& root, const std::string& name, const fs::path& init_from,
                    const GatingVariant& gating, bool replay, const BenchOptions& options) {
  std::vector<std::string> overrides = {
      "mode=async",
      "run.name=" + name,
      "run.dir=" + root.string(),
      "run.resume=false",
      "policy.init_from=" + init_from.string(),
      "model.moe.gating=" + gating.gating,
      "model.moe.threshold=" + std::to_string(gating.threshold),
      std::string("algo.moe_routing_replay=") + (replay ? "true" : "false"),
      "eval.n=0",
      "checkpoint.every=0",
      "checkpoint.keep=1"};
  if (options.quick) {
    // An untrained policy's groups all score 0: without an entropy term their samples would
    // skip the forward pass that compares the routings.
    for (const char* o : {"train.iterations=2", "rollout.prompts_per_iteration=2",
                          "rollout.group_size=2", "rollout.max_new_tokens=32",
                          "rollout.dynamic_sampling.enabled=false", "algo.entropy_coef=0.001"}) {
      overrides.push_back(o);
    }
  } else {
    for (const char* o : {"train.iterations=12", "rollout.prompts_per_iteration=8",
                          "rollout.group_size=4", "rollout.dynamic_sampling.max_refills=8"}) {
      overrides.push_back(o);
    }
  }
  for (const auto& o : options.overrides) overrides.push_back(o);
  const core::Config cfg =
      core::Config::from_file(source_path("configs/rl_sum.yaml").string(), overrides);
  const rl::RlRunConfig rc = rl::RlRunConfig::from_config(cfg);
  rl::run_rl(rc, cfg.resolved_yaml());
  std::vector<double> reward, mismatch, ppo_kl;
  for (const json& rec : telemetry::MetricsLog::read(rc.run.dir() / "metrics.jsonl")) {
    if (!rec.contains("reward_mean")) continue;
    reward.push_back(rec["reward_mean"].get<double>());
    ppo_kl.push_back(rec.value("ppo_kl", 0.0));
    if (rec.contains("moe") && rec["moe"]["routing_mismatch"].is_number()) {
      mismatch.push_back(rec["moe"]["routing_mismatch"].get<double>());
    }
  }
  return {{"reward_curve", reward},
          {"routing_mismatch_curve", mismatch},
          {"routing_mismatch", mismatch.empty() ? json(nullptr) : json(core::median(mismatch))},
          {"ppo_kl_median", ppo_kl.empty() ? json(nullptr) : json(core::median(ppo_kl))}};
}

}  // namespace

json run_moe_bench(const BenchOptions& options) {
  core::apply_core_budget(1);  // each run on one core, like the tiny SFT recipes
  const fs::path root =
      fs::temp_directory_path() / ("streamrl_bench_moe_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const SftShape shape = options.quick ? SftShape{6, 4, 8, 3, 8} : SftShape{240, 16, 960, 10, 128};
  const int rounds_n = options.quick ? 1 : 3;
  Rounds rounds("moe", 1);
  std::map<std::string, SftRun> last;  // per variant, of the last round
  json rl;
  try {
    for (int r = 0; r < rounds_n; ++r) {
      rounds.begin_round(r);
      std::map<std::string, SftRun> runs = run_sft_round(root, r, shape);
      const double target = runs["top2"].final_eval_loss() * kSameLoss;
      const double top2_time = time_to_loss(runs["top2"].eval_curve, target);
      for (const GatingVariant& v : variants()) {
        const SftRun& s = runs[v.name];
        rounds.add("eval_loss." + v.name, s.final_eval_loss());
        rounds.add("train_seconds." + v.name, s.train_seconds());
        rounds.add("flop_ratio." + v.name, s.flop_ratio);
        rounds.add("eval_loss_delta." + v.name,
                   s.final_eval_loss() / runs["top2"].final_eval_loss() - 1.0);
        const double t = time_to_loss(s.eval_curve, target);
        // Never reaching top-2's loss within the same tokens counts as no speed-up at all.
        rounds.add("speedup." + v.name, std::isfinite(t) ? top2_time / t : 0.0);
      }
      last = std::move(runs);
    }
    // RL from the adaptive (T = 0.1) SFT policy, routed the same way in the engine and trainer.
    const GatingVariant& adaptive = variants()[1];
    const fs::path init = last[adaptive.name].checkpoint;
    rl["no_replay"] = run_rl_variant(root, "rl_no_replay", init, adaptive, false, options);
    rl["replay"] = run_rl_variant(root, "rl_replay", init, adaptive, true, options);
  } catch (...) {
    fs::remove_all(root);
    throw;
  }
  fs::remove_all(root);

  json by_variant = json::object();
  std::string best;
  double best_speedup = 0;
  for (const GatingVariant& v : variants()) {
    const SftRun& s = last[v.name];
    const double speedup = rounds.median("speedup." + v.name);
    const double delta = rounds.median("eval_loss_delta." + v.name);
    by_variant[v.name] = {
        {"gating", v.gating},
        {"threshold", v.threshold},
        {"curriculum", v.curriculum},
        {"speedup_over_top2", rounds.summary("speedup." + v.name)},
        {"eval_loss", rounds.summary("eval_loss." + v.name)},
        {"eval_loss_delta", rounds.summary("eval_loss_delta." + v.name)},
        {"train_seconds", rounds.summary("train_seconds." + v.name)},
        {"expert_flop_ratio", rounds.median("flop_ratio." + v.name)},
        {"two_expert_share", s.two_expert_share},
        {"expert_load", s.expert_load},
        {"eval_loss_curve", s.eval_curve},
    };
    if (v.gating != "topk" && delta <= kGoalLossDelta && speedup > best_speedup) {
      best = v.name, best_speedup = speedup;
    }
  }
  if (best.empty()) best = variants()[1].name;  // none held the loss: report the paper's default
  const json& b = by_variant[best];
  const double speedup = rounds.median("speedup." + best);
  const double delta = rounds.median("eval_loss_delta." + best);
  return {
      {"model", "configs/model/tiny_moe.json"},
      {"task", "sum"},
      {"quick", options.quick},
      {"rounds", rounds_n},
      {"load", rounds.load_json()},
      {"sft",
       {{"steps", shape.steps},
        {"batch_size", shape.batch_size},
        {"epoch_size", shape.epoch_size},
        {"heldout_problems", shape.loss_n},
        {"same_loss", "time to reach top-2's final held-out loss x 1.01"}}},
      {"best_variant", best},
      {"adaptive_over_top2_speedup", speedup},
      {"eval_loss_delta", delta},
      {"two_expert_share", b["two_expert_share"]},
      {"expert_flop_ratio", b["expert_flop_ratio"]},
      {"variants", by_variant},
      {"routing_mismatch",
       {{"no_replay", rl["no_replay"]["routing_mismatch"]},
        {"replay", rl["replay"]["routing_mismatch"]}}},
      {"rl", rl},
      {"goal", {{"min_speedup", kGoalSpeedup}, {"max_eval_loss_delta", kGoalLossDelta}}},
      {"goal_met", speedup >= kGoalSpeedup && delta <= kGoalLossDelta},
  };
}

}  // namespace streamrl::bench
