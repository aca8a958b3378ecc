#include "streamrl/rl/rl_run.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <optional>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/core/log.h"
#include "streamrl/core/threads.h"
#include "streamrl/engine/engine.h"
#include "streamrl/engine/sampler.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/safetensors.h"
#include "streamrl/rl/advantages.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/rl/train_checkpoint.h"
#include "streamrl/tasks/dataset.h"
#include "streamrl/tasks/length_stats.h"
#include "streamrl/tasks/split.h"
#include "streamrl/telemetry/metrics_log.h"
#include "streamrl/telemetry/progress.h"

namespace streamrl::rl {
namespace fs = std::filesystem;

RlRunConfig RlRunConfig::from_config(const core::Config& root) {
  RlRunConfig c;
  c.optim.lr = 1e-4;  // RL fine-tuning default: much smaller than SFT's
  c.optim.min_lr_ratio = 1.0;
  c.optim.weight_decay = 0.0;
  c.run.read(root.section("run"));
  root.get("mode", c.mode);
  core::Config policy = root.section("policy");
  c.init_from = policy.require<std::string>("init_from");
  c.data.read(root.section("data"));
  core::Config rollout = root.section("rollout");
  rollout.get("prompts_per_iteration", c.prompts_per_iteration);
  rollout.get("group_size", c.group_size);
  rollout.get("max_new_tokens", c.max_new_tokens);
  rollout.get("temperature", c.temperature);
  rollout.get("top_p", c.top_p);
  rollout.get("max_batch_size", c.max_batch_size);
  core::Config train = root.section("train");
  train.get("iterations", c.iterations);
  train.get("micro_batch_tokens", c.update.micro_batch_tokens);
  train.get("recompute_old_logprobs", c.update.recompute_old_logprobs);
  c.optim.total_steps = c.iterations;
  c.optim.read(train.section("optim"));
  c.optim.total_steps = c.iterations;
  core::Config algo = root.section("algo");
  c.adv.read(algo);
  c.loss.read(algo);
  read_eval(root.section("eval"), &c.eval_every, &c.eval);
  c.checkpoint.read(root.section("checkpoint"));
  root.check_all_used();
  if (c.mode != "colocate") {
    throw InputError("mode '" + c.mode + "' is not available yet (available: colocate)");
  }
  if (c.iterations < 1 || c.prompts_per_iteration < 1 || c.group_size < 1) {
    throw InputError(
        "train.iterations, rollout.prompts_per_iteration and rollout.group_size must be >= 1");
  }
  if (c.group_size > c.max_batch_size) {
    throw InputError("rollout.group_size (" + std::to_string(c.group_size) +
                     ") exceeds rollout.max_batch_size (" + std::to_string(c.max_batch_size) + ")");
  }
  if (c.max_new_tokens < 1 || !(c.temperature > 0)) {
    throw InputError("rollout.max_new_tokens >= 1 and rollout.temperature > 0 required");
  }
  return c;
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Everything an iteration produced, for the metrics line.
struct IterationStats {
  std::vector<double> rewards, scores, lengths;
  double generate_s = 0, reference_s = 0, train_s = 0, weight_update_s = 0;
  int64_t generated_tokens = 0;
};

}  // namespace

nlohmann::json run_rl(const RlRunConfig& c, const std::string& resolved_config_yaml) {
  auto run_start = Clock::now();
  core::apply_core_budget(c.run.threads > 0 ? c.run.threads : core::available_cores());
  const fs::path run_dir = c.run.dir();

  // 1. Data, tokenizer, policy, optional frozen reference, optimizer.
  std::unique_ptr<tasks::Task> owned;
  const tasks::Task& task = c.data.load(&owned);
  auto tok = tokenizer::load_tokenizer(c.init_from);
  model::CausalLM policy = model::load_model(c.init_from);
  std::optional<model::CausalLM> ref;
  if (c.loss.kl.coef > 0) ref.emplace(model::load_model(c.init_from));
  auto optimizer = make_adamw(*policy, c.optim);

  int64_t start_iter = 0;
  if (c.run.resume) {
    if (auto ck = latest_checkpoint(run_dir)) {
      model::load_weights(policy, model::read_safetensors_dir(ck->dir), ck->dir.string());
      start_iter = load_training_state(ck->dir, *optimizer).at("step").get<int64_t>();
      SLOG(kInfo) << "resuming " << run_dir.string() << " from iteration " << start_iter;
    }
  } else if (latest_checkpoint(run_dir)) {
    throw InputError(run_dir.string() + " already has checkpoints; set run.resume=true to " +
                     "continue it or choose another run.name");
  }
  core::write_file_atomic(run_dir / "config.yaml", resolved_config_yaml);
  telemetry::MetricsLog metrics(run_dir / "metrics.jsonl", start_iter);

  // Colocated: the engine runs the policy module itself, so updates are visible to generation
  // with no weight transfer.
  engine::EngineConfig ec;
  ec.max_batch_size = c.max_batch_size;
  ec.max_seq_len = static_cast<int>(policy->config().max_position_embeddings);
  engine::Engine engine(policy, ec, start_iter);

  auto evaluate_now = [&]() {
    torch::NoGradGuard no_grad;
    return evaluate(policy, *tok, task, c.eval);
  };
  nlohmann::json before;
  if (start_iter == 0 && c.eval.n > 0) {
    EvalResult e = evaluate_now();
    before = e.to_json();
    metrics.write({{"step", 0}, {"eval", before}});
    SLOG(kInfo) << "held-out accuracy before RL: " << e.accuracy;
  }

  // 2. Iterations.
  telemetry::Progress progress("rl " + c.run.name, c.iterations);
  for (int64_t it = start_iter; it < c.iterations; ++it) {
    auto iter_start = Clock::now();
    IterationStats st;
    // 2a. Generate: every prompt of the iteration with group_size samples.
    std::vector<tasks::Problem> problems;
    std::vector<ScoredSample> scored;
    std::mutex mu;
    for (int i = 0; i < c.prompts_per_iteration; ++i) {
      const uint64_t index = static_cast<uint64_t>(it) * c.prompts_per_iteration + i;
      problems.push_back(tasks::draw_problem(task, c.run.seed, tasks::Split::kTrain, index));
    }
    for (int i = 0; i < c.prompts_per_iteration; ++i) {
      engine::Request r;
      r.request_id = i;
      r.prompt_ids = encode_prompt(*tok, problems[i].prompt);
      r.n = c.group_size;
      r.params.temperature = c.temperature;
      r.params.top_p = c.top_p;
      r.params.max_new_tokens =
          std::min<int>(c.max_new_tokens, ec.max_seq_len - static_cast<int>(r.prompt_ids.size()));
      r.params.seed = c.run.seed * 1000003ull + static_cast<uint64_t>(it);
      if (tok->eos_id() >= 0) r.params.stop_token_ids = {tok->eos_id()};
      // Per-sample work runs on arrival: the reward is a function of this one sample.
      r.on_sample = [&, i](engine::Sample&& s) {
        ScoredSample ss;
        std::string text = tok->decode(s.output_ids);
        ss.score = task.verify(problems[i], text);
        ss.reward = ss.score;
        ss.difficulty = problems[i].difficulty;
        ss.sample = std::move(s);
        std::lock_guard<std::mutex> lock(mu);
        scored.push_back(std::move(ss));
      };
      engine.add_request(std::move(r));
    }
    auto gen_start = Clock::now();
    engine.run_until_idle();
    st.generate_s = since(gen_start);
    // Completion order depends on timing-free engine steps, but sort for a canonical batch.
    std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
      return std::make_pair(a.sample.request_id, a.sample.sample_index) <
             std::make_pair(b.sample.request_id, b.sample.sample_index);
    });

    // 2b. Reference log-probs (only with a KL term) and group advantages.
    if (ref) {
      auto t0 = Clock::now();
      for (auto& s : scored) s.ref_logprobs = reference_logprobs(*ref, s.sample);
      st.reference_s = since(t0);
    }
    if (ref && c.loss.kl.placement == KlPlacement::kReward) {
      // KL in the reward (k1, rl_algorithms.md §3.2): the sequence's summed log-ratio against the
      // reference, under the generating policy, is subtracted from its outcome reward.
      for (auto& s : scored) {
        double k1 = 0;
        for (size_t t = 0; t < s.ref_logprobs.size(); ++t) {
          k1 += s.sample.logprobs[t] - s.ref_logprobs[t];
        }
        s.reward -= c.loss.kl.coef * k1;
      }
    }
    std::vector<double> rewards;
    std::vector<int64_t> groups;
    for (const auto& s : scored) {
      rewards.push_back(s.reward);
      st.scores.push_back(s.score);
      groups.push_back(s.sample.request_id);
      st.lengths.push_back(static_cast<double>(s.sample.output_ids.size()));
      st.generated_tokens += static_cast<int64_t>(s.sample.output_ids.size());
    }
    std::vector<double> adv = grouped_advantages(rewards, groups, c.adv);
    for (size_t i = 0; i < scored.size(); ++i) scored[i].advantage = adv[i];
    st.rewards = rewards;

    // 2c. One optimizer step on the whole batch.
    auto train_start = Clock::now();
    UpdateResult up;
    try {
      up = policy_update(policy, *optimizer, scored, c.loss, c.update, lr_at(c.optim, it),
                         c.optim.grad_clip);
    } catch (const RuntimeFailure& e) {
      auto last = latest_checkpoint(run_dir);
      throw RuntimeFailure(
          std::string(e.what()) + " at iteration " + std::to_string(it) +
          "; stopped, last good checkpoint: " + (last ? last->dir.string() : std::string("none")));
    }
    st.train_s = since(train_start);
    const int64_t done = it + 1;
    const double iter_s = since(iter_start);

    // 2d. Metrics.
    double reward_mean = 0, correct = 0;
    for (double r : st.rewards) reward_mean += r;
    for (double sc : st.scores) correct += sc >= 1.0;
    reward_mean /= std::max<size_t>(1, st.rewards.size());
    tasks::LengthSummary ls = tasks::summarize(st.lengths);
    double mean_len = 0;
    for (double l : st.lengths) mean_len += l;
    mean_len /= std::max<size_t>(1, st.lengths.size());
    const auto& m = up.metrics;
    nlohmann::json rec = {
        {"step", done},
        {"mode", c.mode},
        {"weight_version", it},
        {"reward_mean", reward_mean},
        {"accuracy", correct / std::max<size_t>(1, st.rewards.size())},
        {"response_length",
         {{"mean", mean_len}, {"p50", ls.p50}, {"p90", ls.p90}, {"max", ls.max}}},
        {"kl", m.kl_mean()},
        {"entropy", m.entropy_mean()},
        {"clip_fraction", m.clip_fraction()},
        {"ppo_kl", m.ppo_kl()},
        {"loss", m.loss},
        {"grad_norm", up.grad_norm},
        {"lr", up.lr},
        {"samples", st.rewards.size()},
        {"generated_tokens_per_s", st.generated_tokens / std::max(1e-9, st.generate_s)},
        {"samples_per_s", st.rewards.size() / std::max(1e-9, iter_s)},
        {"stage_seconds",
         {{"generate", st.generate_s},
          {"reference", st.reference_s},
          {"train", up.seconds},
          {"weight_update", st.weight_update_s},
          {"iteration", iter_s}}},
        // Colocated roles time-share the cores: each idles while the other stage runs.
        {"idle_fraction",
         {{"generator", 1.0 - st.generate_s / iter_s}, {"trainer", 1.0 - st.train_s / iter_s}}},
    };
    if (c.eval_every > 0 && done % c.eval_every == 0 && done < c.iterations && c.eval.n > 0) {
      rec["eval"] = evaluate_now().to_json();
    }
    metrics.write(rec);
    char status[96];
    std::snprintf(status, sizeof(status), "reward %.3f len %.0f kl %.4f %.1fs/it", reward_mean,
                  mean_len, m.kl_mean(), iter_s);
    progress.update(done, status);
    if (c.checkpoint.every > 0 && done % c.checkpoint.every == 0 && done < c.iterations) {
      save_training_checkpoint(run_dir, done, policy, tok->to_json(), *optimizer,
                               {{"step", done}, {"kind", "rl"}}, c.checkpoint.keep);
    }
  }
  progress.finish();

  // 3. Final checkpoint and held-out evaluation.
  save_training_checkpoint(run_dir, c.iterations, policy, tok->to_json(), *optimizer,
                           {{"step", c.iterations}, {"kind", "rl"}}, c.checkpoint.keep);
  model::save_checkpoint(run_dir / "final", policy, tok->to_json());
  nlohmann::json result = {{"run_dir", run_dir.string()},
                           {"checkpoint", (run_dir / "final").string()},
                           {"iterations", c.iterations},
                           {"resumed_from_iteration", start_iter}};
  if (c.eval.n > 0) {
    EvalResult after = evaluate_now();
    metrics.write({{"step", c.iterations}, {"final_eval", after.to_json()}});
    result["eval_after"] = after.to_json();
    result["accuracy_after"] = after.accuracy;
    if (!before.is_null()) {
      result["eval_before"] = before;
      result["accuracy_before"] = before["accuracy"];
    }
  }
  result["minutes"] = since(run_start) / 60.0;
  return result;
}

}  // namespace streamrl::rl
