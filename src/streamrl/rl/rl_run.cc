#include "streamrl/rl/rl_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/core/log.h"
#include "streamrl/core/threads.h"
#include "streamrl/dist/process_group.h"
#include "streamrl/engine/engine.h"
#include "streamrl/engine/sampler.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/safetensors.h"
#include "streamrl/rl/advantages.h"
#include "streamrl/rl/collapse_watch.h"
#include "streamrl/rl/prompt_curriculum.h"
#include "streamrl/rl/rollout_generator.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/rl/train_checkpoint.h"
#include "streamrl/sgs/dispatch.h"
#include "streamrl/tasks/dataset.h"
#include "streamrl/tasks/length_stats.h"
#include "streamrl/tasks/split.h"
#include "streamrl/tasks/verifiers.h"
#include "streamrl/telemetry/metrics_log.h"
#include "streamrl/telemetry/progress.h"
#include "streamrl/telemetry/report.h"
#include "streamrl/telemetry/trace.h"

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
  core::Config dynamic = rollout.section("dynamic_sampling");
  dynamic.get("enabled", c.dynamic_sampling.enabled);
  c.dynamic_sampling.max_refills = c.prompts_per_iteration;
  dynamic.get("max_refills", c.dynamic_sampling.max_refills);
  core::Config train = root.section("train");
  train.get("iterations", c.iterations);
  train.get("micro_batch_tokens", c.update.micro_batch_tokens);
  train.get("recompute_old_logprobs", c.update.recompute_old_logprobs);
  c.update.temperature = c.temperature;
  c.optim.total_steps = c.iterations;
  c.optim.read(train.section("optim"));
  c.optim.total_steps = c.iterations;
  core::Config algo = root.section("algo");
  c.adv.read(algo);
  c.loss.read(algo);
  c.overlong.read(algo);
  root.section("resources").get("trainer_threads", c.trainer_threads);
  sgs::SgsConfig sgs_defaults;
  sgs_defaults.instances = 1;
  sgs_defaults.dispatch.policy = sgs::DispatchPolicy::kLeastLoaded;
  c.sgs = sgs::SgsConfig::read(root.section("sgs"), sgs_defaults);
  root.section("sgs").get("urls", c.sgs_urls);
  c.sgs_remote = dist::RemoteSgsOptions::read(root.section("sgs"));
  root.section("async").get("max_staleness", c.max_staleness);
  rollout.get("sample_timeout_s", c.sample_timeout_s);
  root.section("telemetry").get("trace", c.trace);
  root.section("telemetry").get("tensorboard", c.tensorboard);
  root.section("telemetry").get("samples", c.sample_log);
  read_eval(root.section("eval"), &c.eval_every, &c.eval);
  c.checkpoint.read(root.section("checkpoint"));
  root.check_all_used();
  if (c.mode != "colocate" && c.mode != "disagg" && c.mode != "stream" && c.mode != "async") {
    throw InputError("mode '" + c.mode +
                     "' is unknown (available: colocate, disagg, stream, async)");
  }
  if (!c.sgs_urls.empty() && c.mode == "colocate") {
    throw InputError("sgs.urls: remote generation needs a dedicated mode (disagg, stream, async)");
  }
  if (c.trainer_threads < 1 || c.max_staleness < 0 || !(c.sample_timeout_s > 0)) {
    throw InputError(
        "resources.trainer_threads must be >= 1, async.max_staleness >= 0 and "
        "rollout.sample_timeout_s > 0");
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
  if (c.dynamic_sampling.max_refills < 0) {
    throw InputError("rollout.dynamic_sampling.max_refills must be >= 0");
  }
  if (c.overlong.buffer >= c.max_new_tokens) {
    throw InputError("algo.overlong.buffer (" + std::to_string(c.overlong.buffer) +
                     ") must be below rollout.max_new_tokens (" + std::to_string(c.max_new_tokens) +
                     ")");
  }
  return c;
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Trace tracks (Perfetto rows): rank r's trainer is track 1 + 100 r, its SGS instances follow.
constexpr int kTrainerTrack = 1;
constexpr int kGeneratorTrack = 2;
constexpr int kTracksPerRank = 100;
int trainer_track(int rank) { return kTrainerTrack + kTracksPerRank * rank; }
int generator_track(int rank) { return kGeneratorTrack + kTracksPerRank * rank; }
std::string rank_trace_file(int rank) { return "trace.rank" + std::to_string(rank) + ".json"; }

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
  std::map<int, double> weights;  // curriculum acceptance weights when the batch was drawn
  // (prompt index, sample index, difficulty, score) of every scored sample, for the curriculum.
  std::vector<std::tuple<int, int, int, double>> outcomes;
};

// Everything an iteration measured, for its metrics line.
struct IterationStats {
  std::vector<double> rewards, scores, lengths;
  std::vector<int> zero_advantage;  // per sample, 1 when its advantage is 0
  std::vector<int64_t> versions;
  int64_t generated_tokens = 0;
  double sample_work_s = 0, reference_s = 0, wait_s = 0, weight_update_s = 0;
};

// The iteration loop of every mode. Modes differ only in where the generator runs, when
// per-sample work happens, whether micro-batches run eagerly, and when the next prompts go out.
class RlLoop {
 public:
  RlLoop(const RlRunConfig& c, const tasks::Task& task, const PromptEncoder& prompts,
         model::CausalLM& policy, std::optional<model::CausalLM>& ref,
         torch::optim::Optimizer& optimizer, telemetry::Trace* trace, dist::ProcessGroup* group)
      : c_(c),
        task_(task),
        prompts_(prompts),
        policy_(policy),
        ref_(ref),
        optimizer_(optimizer),
        trace_(trace),
        group_(group),
        rank_(group ? group->rank() : 0),
        world_(group ? group->world_size() : 1),
        track_(trainer_track(rank_)),
        dedicated_(c.mode != "colocate"),
        streaming_(c.mode == "stream" || c.mode == "async"),
        async_(c.mode == "async"),
        // Request ids are k * stride_ + prompt index; refill prompts follow the P regular ones.
        stride_(c.prompts_per_iteration +
                (c.dynamic_sampling.enabled ? world_ * c.dynamic_sampling.max_refills : 0)),
        curriculum_(c.data.curriculum) {}

  // The online curriculum's recent outcomes, for checkpoints (null when it is off).
  nlohmann::json curriculum_state() const {
    return c_.data.curriculum.enabled ? curriculum_.state() : nlohmann::json();
  }
  void restore_curriculum(const nlohmann::json& state) {
    if (c_.data.curriculum.enabled && state.is_object()) curriculum_.restore(state);
  }

  void start(std::unique_ptr<RolloutGenerator> generator, int64_t first_iteration) {
    gen_ = std::move(generator);  // a dedicated pool starts from a copy of the trainer's weights
    submit(first_iteration);
    if (async_ && first_iteration + 1 < c_.iterations) submit(first_iteration + 1);
  }

  // Runs iteration `k` (trainer weights version k) to its optimizer step; fills `st` and returns
  // the step's result. Then sends the new weights and the next prompts as the mode prescribes.
  UpdateResult run_iteration(int64_t k, IterationStats* st) {
    const double gen_busy0 = gen_->busy_seconds();
    PolicyStep step(policy_, optimizer_, c_.loss, c_.update);
    step.set_trace(trace_, track_);
    step.set_process_group(group_);
    if (!dedicated_) {
      const auto t0 = Clock::now();
      gen_->drive_until_idle();
      gen_seconds_ = since(t0);
    }
    IterationBatch& b = batches_.at(k);
    // Each complete group goes to the step (and the iteration's statistics) once; groups of k
    // that completed while k-1 was collected (async) go first.
    auto train_ready = [&](bool eager) {
      for (const auto& s : b.dropped) record(s, st);
      b.dropped.clear();
      if (b.ready.empty()) return;
      for (const auto& s : b.ready) record(s, st);
      step.add(std::exchange(b.ready, {}), eager);
    };
    train_ready(streaming_);
    std::vector<engine::Sample> raw;  // disagg/colocate: per-sample work after the full batch
    // Dynamic sampling adds refill prompts as groups complete; with the whole batch collected
    // before per-sample work (colocate, disagg) they are known only after it, hence two loops.
    auto expected = [&] { return static_cast<size_t>(own_prompts() + b.refills) * c_.group_size; };
    size_t received = 0;
    for (const auto& g : b.arrived) received += g;
    while (received < expected()) {
      if (!dedicated_) {
        const auto t0 = Clock::now();
        gen_->drive_until_idle();
        gen_seconds_ += since(t0);
      }
      while (received < expected()) {
        engine::Sample s = next_sample(st);
        const int64_t j = s.request_id / stride_;
        if (j == k) ++received;
        if (!streaming_ && j == k) {
          raw.push_back(std::move(s));
          continue;
        }
        accept(std::move(s), st);
        train_ready(/*eager=*/true);
      }
      for (auto& s : raw) accept(std::move(s), st);
      raw.clear();
      train_ready(streaming_);
    }

    UpdateResult up;
    try {
      telemetry::ScopedSpan span(trace_, track_, "optimizer step");
      up = step.finish(lr_at(c_.optim, k), c_.optim.grad_clip);
    } catch (const RuntimeFailure& e) {
      auto last = latest_checkpoint(c_.run.dir());
      throw RuntimeFailure(
          std::string(e.what()) + " at iteration " + std::to_string(k) +
          "; stopped, last good checkpoint: " + (last ? last->dir.string() : std::string("none")));
    }
    refused_ = b.refused;
    dynamic_ = {{"dropped_groups", b.dropped_groups}, {"refills", b.refills}};
    filtered_ = b.filtered;
    if (c_.data.curriculum.enabled) {
      // In prompt and sample order, so the window holds the same outcomes in every mode.
      std::sort(b.outcomes.begin(), b.outcomes.end());
      for (const auto& [i, n, d, score] : b.outcomes) curriculum_.observe(d, score);
    }
    batches_.erase(k);

    // New weights, then the next prompts: the engine installs them before admitting those.
    const int64_t version = k + 1;
    {
      const auto t0 = Clock::now();
      telemetry::ScopedSpan span(trace_, track_, "weight transfer");
      gen_->update_weights(version, policy_);  // colocated: only the version (same module)
      st->weight_update_s = since(t0);
    }
    ranker_metrics_ = gen_->end_iteration();
    const int64_t next = async_ ? k + 2 : k + 1;
    if (next < c_.iterations) submit(next);
    if (dedicated_) gen_seconds_ = gen_->busy_seconds() - gen_busy0;
    return up;
  }

  double generator_seconds() const { return gen_seconds_; }
  const std::optional<nlohmann::json>& ranker_metrics() const { return ranker_metrics_; }
  int64_t refused() const { return refused_; }
  const nlohmann::json& dynamic_sampling() const { return dynamic_; }
  int filtered() const { return filtered_; }
  std::map<int, double> pass_rates() const { return curriculum_.pass_rates(); }

 private:
  // Data parallelism: rank r generates and trains prompts r, r + world, r + 2 world, ...
  int own_prompts() const {
    const int P = c_.prompts_per_iteration;
    return P / world_ + (rank_ < P % world_ ? 1 : 0);
  }

  void submit(int64_t k) {
    IterationBatch& b = batches_[k];
    const int P = c_.prompts_per_iteration;
    b.groups.assign(stride_, {});
    b.arrived.assign(stride_, 0);
    b.problems.assign(stride_, {});
    if (c_.data.curriculum.enabled) b.weights = curriculum_.weights();
    for (int i = 0; i < P; ++i) b.problems[i] = problem(k, i);
    std::vector<engine::Request> requests;
    for (int i = rank_; i < P; i += world_) requests.push_back(request(k, i));
    gen_->submit(std::move(requests));
  }

  // Dynamic sampling: one more prompt for iteration k, in place of a dropped group.
  void submit_refill(int64_t k) {
    IterationBatch& b = batches_.at(k);
    const int i = c_.prompts_per_iteration + b.refills * world_ + rank_;
    b.refills += 1;
    b.problems[i] = problem(k, i);
    gen_->submit({request(k, i)});
  }

  // Prompt i of iteration k: the run's training problem k * P + i, or for a refill one from a
  // stream of its own (deterministic, so resumed runs draw the same prompts).
  tasks::Problem problem(int64_t k, int i) const {
    constexpr uint64_t kRefillStream = uint64_t{1} << 40;
    const int P = c_.prompts_per_iteration;
    const uint64_t index = i < P ? static_cast<uint64_t>(k * P + i)
                                 : kRefillStream + static_cast<uint64_t>(k * stride_ + i);
    const IterationBatch& b = batches_.at(k);
    return draw_training_problem(task_, c_.run.seed, index, c_.data.max_difficulty,
                                 c_.data.curriculum.enabled ? &b.weights : nullptr);
  }

  engine::Request request(int64_t k, int i) const {
    const int max_seq_len = static_cast<int>(policy_->config().max_position_embeddings);
    engine::Request r;
    r.request_id = k * stride_ + i;
    r.prompt_ids = prompts_.prompt_ids(batches_.at(k).problems[i]);
    r.n = c_.group_size;
    r.params.temperature = c_.temperature;
    r.params.top_p = c_.top_p;
    r.params.max_new_tokens =
        std::min<int>(c_.max_new_tokens, max_seq_len - static_cast<int>(r.prompt_ids.size()));
    r.params.seed = c_.run.seed * 1000003ull + static_cast<uint64_t>(k);
    r.params.stop_token_ids = prompts_.stop_ids();
    return r;
  }

  engine::Sample next_sample(IterationStats* st) {
    const auto t0 = Clock::now();
    const auto deadline = t0 + std::chrono::duration<double>(c_.sample_timeout_s);
    while (true) {
      if (auto s = gen_->queue().pop(std::chrono::milliseconds(200))) {
        st->wait_s += since(t0);
        return std::move(*s);
      }
      gen_->check_alive();
      if (!dedicated_ || Clock::now() > deadline) {
        throw TimeoutError("no sample from the generator within " +
                           std::to_string(dedicated_ ? c_.sample_timeout_s : 0.2) +
                           " s (rollout.sample_timeout_s)");
      }
    }
  }

  // Per-sample work, a function of this one sample: reward, reference log-probs, KL shaping. A
  // group is complete when all its samples are back; its advantages are then known.
  // Its time counts towards the trainer's busy time of the iteration in which it runs.
  void accept(engine::Sample s, IterationStats* st) {
    const int64_t j = s.request_id / stride_;
    const int i = static_cast<int>(s.request_id % stride_);
    IterationBatch& b = batches_.at(j);
    b.arrived[i] += 1;
    gen_->observe(s);  // ranker and length distribution for the next dispatch
    // Trained at step j with weights j: refuse samples from weights older than j - bound.
    if (j - s.weight_version > c_.max_staleness) {
      b.refused += 1;
    } else {
      const auto t0 = Clock::now();
      telemetry::ScopedSpan span(trace_, track_, "sample work");
      ScoredSample ss;
      const std::string text = prompts_.tokenizer().decode(s.output_ids);
      ss.score = task_.verify(b.problems[i], text);
      ss.reward =
          c_.data.reward == "demonstration"
              ? static_cast<double>(tasks::trim(text) == tasks::trim(b.problems[i].demonstration))
              : ss.score;
      ss.reward -=
          overlong_penalty(static_cast<int>(s.output_ids.size()), c_.max_new_tokens, c_.overlong);
      ss.difficulty = b.problems[i].difficulty;
      b.outcomes.emplace_back(i, s.sample_index, ss.difficulty, ss.score);
      if (ref_) {
        const auto r0 = Clock::now();
        ss.ref_logprobs = reference_logprobs(*ref_, s);
        st->reference_s += since(r0);
        if (c_.loss.kl.placement == KlPlacement::kReward) {
          // KL in the reward (k1, rl_algorithms.md §3.2): the summed log-ratio against the
          // reference under the generating policy is subtracted from the outcome reward.
          double k1 = 0;
          for (size_t t = 0; t < ss.ref_logprobs.size(); ++t) {
            k1 += s.logprobs[t] - ss.ref_logprobs[t];
          }
          ss.reward -= c_.loss.kl.coef * k1;
        }
      }
      st->sample_work_s += since(t0);
      ss.sample = std::move(s);
      b.groups[i].push_back(std::move(ss));
    }
    if (b.arrived[i] < c_.group_size) return;
    // Canonical order inside the group, so the step does not depend on completion order.
    auto& g = b.groups[i];
    std::sort(g.begin(), g.end(), [](const ScoredSample& x, const ScoredSample& y) {
      return x.sample.sample_index < y.sample.sample_index;
    });
    std::vector<double> rewards;
    for (const auto& x : g) rewards.push_back(x.reward);
    const bool all_equal =
        std::adjacent_find(rewards.begin(), rewards.end(), std::not_equal_to<>()) == rewards.end();
    if (c_.dynamic_sampling.enabled && all_equal) {
      b.dropped_groups += 1;
      for (auto& x : g) b.dropped.push_back(std::move(x));
      g.clear();
      if (b.refills < c_.dynamic_sampling.max_refills) submit_refill(j);
      return;
    }
    const std::vector<double> adv = group_advantages(rewards, c_.adv);
    for (size_t n = 0; n < g.size(); ++n) g[n].advantage = adv[n];
    for (auto& x : g) {
      if (c_.overlong.filter && x.sample.finish_reason == engine::FinishReason::kLength) {
        x.advantage = 0;  // not trained: recorded as a zero-advantage sample
        b.filtered += 1;
        b.dropped.push_back(std::move(x));
      } else {
        b.ready.push_back(std::move(x));
      }
    }
    g.clear();
  }

  void record(const ScoredSample& s, IterationStats* st) {
    st->rewards.push_back(s.reward);
    st->scores.push_back(s.score);
    st->lengths.push_back(static_cast<double>(s.sample.output_ids.size()));
    st->zero_advantage.push_back(s.advantage == 0.0);
    st->versions.push_back(s.sample.weight_version);
    st->generated_tokens += static_cast<int64_t>(s.sample.output_ids.size());
  }

  const RlRunConfig& c_;
  const tasks::Task& task_;
  const PromptEncoder& prompts_;
  model::CausalLM& policy_;
  std::optional<model::CausalLM>& ref_;
  torch::optim::Optimizer& optimizer_;
  telemetry::Trace* trace_;
  dist::ProcessGroup* group_;
  const int rank_, world_;
  const int track_;  // this rank's trainer track in the trace
  const bool dedicated_, streaming_, async_;
  const int64_t stride_;
  PassRateCurriculum curriculum_;
  std::unique_ptr<RolloutGenerator> gen_;
  std::map<int64_t, IterationBatch> batches_;
  double gen_seconds_ = 0;
  int64_t refused_ = 0;
  nlohmann::json dynamic_;
  int filtered_ = 0;
  std::optional<nlohmann::json> ranker_metrics_;
};

}  // namespace

nlohmann::json run_rl(const RlRunConfig& c, const std::string& resolved_config_yaml) {
  auto run_start = Clock::now();
  const bool dedicated = c.mode != "colocate";
  // Trainer data parallelism under `streamrl launch` (torchrun's environment): each rank trains
  // its share of the prompts and the gradients are summed; rank 0 alone writes the run directory
  // and evaluates. Collectives may wait for rank 0's evaluation, hence the generous bound.
  std::unique_ptr<dist::ProcessGroup> group;
  const dist::ProcessGroupOptions pgo = dist::process_group_options_from_env(
      std::chrono::milliseconds(static_cast<int64_t>(c.sample_timeout_s * 1000)));
  if (pgo.world_size > 1) {
    if (!c.sgs_urls.empty()) {
      throw InputError("sgs.urls with several trainer processes is not supported (one run)");
    }
    group = std::make_unique<dist::ProcessGroup>(pgo);
  }
  const bool lead = pgo.rank == 0;
  const int rank = pgo.rank;
  core::apply_core_budget(dedicated
                              ? c.trainer_threads
                              : (c.run.threads > 0 ? c.run.threads : core::available_cores()));
  const fs::path run_dir = c.run.dir();

  // 1. Data, tokenizer, policy, optional frozen reference, optimizer.
  std::unique_ptr<tasks::Task> owned;
  const tasks::Task& task = c.data.load(&owned);
  auto tok = tokenizer::load_tokenizer(c.init_from);
  const PromptEncoder prompts = PromptEncoder::for_task(*tok, c.init_from, task);
  model::CausalLM policy = model::load_model(c.init_from);
  std::optional<model::CausalLM> ref;
  if (c.loss.kl.coef > 0) ref.emplace(model::load_model(c.init_from));
  auto optimizer = make_adamw(*policy, c.optim);

  int64_t start_iter = 0;
  nlohmann::json curriculum_state;  // the online curriculum's outcomes at the checkpoint
  if (c.run.resume) {
    if (auto ck = resume_training_checkpoint(run_dir, policy, *optimizer)) {
      start_iter = ck->state.at("step").get<int64_t>();
      curriculum_state = ck->state.value("curriculum", nlohmann::json());
      SLOG(kInfo) << "resuming " << run_dir.string() << " from iteration " << start_iter;
    }
  } else if (latest_checkpoint(run_dir)) {
    throw InputError(run_dir.string() + " already has checkpoints; set run.resume=true to " +
                     "continue it or choose another run.name");
  }
  if (group) {  // every rank starts from rank 0's parameters
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> params = policy->parameters();
    group->broadcast_from_rank0(params);
  }
  std::optional<telemetry::MetricsLog> metrics, sample_log;
  if (lead) {
    core::write_file_atomic(run_dir / "config.yaml", resolved_config_yaml);
    metrics.emplace(run_dir / "metrics.jsonl", start_iter, c.tensorboard);
    if (c.sample_log) sample_log.emplace(run_dir / "samples.jsonl", start_iter);
  }
  telemetry::Trace trace_store;
  // Every rank keeps its own trace; ranks > 0 write it next to rank 0's, which merges them.
  telemetry::Trace* trace = c.trace ? &trace_store : nullptr;
  const fs::path trace_file = run_dir / (lead ? std::string("trace.json") : rank_trace_file(rank));
  if (trace) {
    const std::string of_rank = group ? " rank " + std::to_string(rank) : "";
    trace->name_track(trainer_track(rank), "trainer" + of_rank + " (" + c.mode + ")");
    const int instances = !c.sgs_urls.empty() ? static_cast<int>(c.sgs_urls.size())
                          : dedicated         ? c.sgs.instances
                                              : 1;
    for (int i = 0; i < instances; ++i) {
      trace->name_track(generator_track(rank) + i,
                        "SGS instance " + std::to_string(i) +
                            (group ? " (rank " + std::to_string(rank) + ")" : ""));
    }
  }

  // The sampled pass (eval.samples) runs before and after training only: it costs `samples`
  // times the greedy pass.
  auto evaluate_now = [&](bool sampled) {
    torch::NoGradGuard no_grad;
    telemetry::ScopedSpan span(trace, trainer_track(rank), "held-out eval");
    EvalConfig ec = c.eval;
    if (!sampled) ec.samples = 0;
    return evaluate(policy, prompts, task, ec);
  };
  nlohmann::json before;
  CollapseWatch collapse;  // over this process's iterations (a resumed run starts afresh)
  if (start_iter == 0 && c.eval.n > 0 && lead) {
    EvalResult e = evaluate_now(true);
    before = e.to_json();
    collapse.observe_eval(e.accuracy);
    metrics->write({{"step", 0}, {"eval", before}});
    SLOG(kInfo) << "held-out accuracy before RL: " << e.accuracy;
  }

  // 2. The generator: colocated, the engine runs the trainer's module itself (no weight
  // transfer); otherwise a private copy on its own thread and cores.
  engine::EngineConfig ec;
  ec.max_batch_size = c.max_batch_size;
  ec.max_seq_len = static_cast<int>(policy->config().max_position_embeddings);
  ec.trace = trace;
  ec.trace_track = generator_track(rank);
  RlLoop loop(c, task, prompts, policy, ref, *optimizer, trace, group.get());
  loop.restore_curriculum(curriculum_state);
  // With sgs.urls, `streamrl serve` processes generate and weights travel over HTTP.
  loop.start(!c.sgs_urls.empty()
                 ? RolloutGenerator::remote(c.sgs_urls, c.sgs_remote, policy, start_iter)
             : dedicated ? RolloutGenerator::dedicated(policy, ec, c.sgs, start_iter)
                         : RolloutGenerator::colocated(policy, ec, start_iter),
             start_iter);

  // 3. Iterations.
  telemetry::Progress progress("rl " + c.run.name, c.iterations);
  for (int64_t it = start_iter; it < c.iterations; ++it) {
    auto iter_start = Clock::now();
    IterationStats st;
    UpdateResult up = loop.run_iteration(it, &st);
    const int64_t done = it + 1;
    const double iter_s = since(iter_start);
    const double gen_s = loop.generator_seconds();
    const double trainer_busy = up.seconds + st.sample_work_s + st.weight_update_s;

    double reward_mean = 0, correct = 0, samples = static_cast<double>(st.rewards.size());
    for (double r : st.rewards) reward_mean += r;
    for (double sc : st.scores) correct += sc >= 1.0;
    if (group) {  // over all ranks' samples (lengths and versions below are rank 0's)
      const std::vector<double> g = group->all_reduce_sum({reward_mean, correct, samples});
      reward_mean = g[0], correct = g[1], samples = g[2];
    }
    reward_mean /= std::max(1.0, samples);
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
        {"mode", c.mode},
        {"weight_version", it},
        {"sample_weight_version", {{"min", min_version}, {"max", max_version}}},
        {"staleness_max", it - min_version},
        {"refused_samples", loop.refused()},
        {"reward_mean", reward_mean},
        {"accuracy", correct / std::max(1.0, samples)},
        {"response_length",
         {{"mean", mean_len}, {"p50", ls.p50}, {"p90", ls.p90}, {"max", ls.max}}},
        {"kl", m.kl_mean()},
        {"entropy", m.entropy_mean()},
        {"clip_fraction", m.clip_fraction()},
        {"ppo_kl", m.ppo_kl()},
        {"loss", m.loss},
        {"grad_norm", up.grad_norm},
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
          {"iteration", iter_s}}},
        // Colocated roles time-share the cores: each idles while the other stage runs.
        {"idle_fraction",
         {{"generator", std::max(0.0, 1.0 - gen_s / iter_s)},
          {"trainer", std::max(0.0, 1.0 - trainer_busy / iter_s)}}},
    };
    if (loop.ranker_metrics()) rec["ranker"] = *loop.ranker_metrics();
    if (c.dynamic_sampling.enabled) rec["dynamic_sampling"] = loop.dynamic_sampling();
    if (c.overlong.filter) rec["overlong_filtered"] = loop.filtered();
    if (c.data.curriculum.enabled) {
      nlohmann::json rates = nlohmann::json::object();
      for (const auto& [d, p] : loop.pass_rates()) rates[std::to_string(d)] = p;
      rec["curriculum_pass_rate"] = rates;
    }
    if (group) rec["trainer_ranks"] = group->world_size();
    if (!lead) continue;
    collapse.observe_iteration(reward_mean, mean_len);
    if (c.eval_every > 0 && done % c.eval_every == 0 && done < c.iterations && c.eval.n > 0) {
      const EvalResult e = evaluate_now(false);
      collapse.observe_eval(e.accuracy);
      rec["eval"] = e.to_json();
    }
    if (auto warning = collapse.check()) {
      SLOG(kWarn) << *warning;
      rec["collapse_warning"] = *warning;
    }
    metrics->write(rec);
    if (sample_log) {
      sample_log->write(
          {{"step", done}, {"lengths", st.lengths}, {"zero_advantage", st.zero_advantage}});
    }
    char status[96];
    std::snprintf(status, sizeof(status), "reward %.3f len %.0f kl %.4f %.1fs/it", reward_mean,
                  mean_len, m.kl_mean(), iter_s);
    progress.update(done, status);
    if (c.checkpoint.every > 0 && done % c.checkpoint.every == 0 && done < c.iterations) {
      nlohmann::json state = {{"step", done}, {"kind", "rl"}};
      if (c.data.curriculum.enabled) state["curriculum"] = loop.curriculum_state();
      save_training_checkpoint(run_dir, done, policy, tok->to_json(), *optimizer, state,
                               c.checkpoint.keep);
      if (trace) trace->write(trace_file);
    }
  }
  progress.finish();
  if (group && trace) {
    // Rank 0 merges the other ranks' traces once all are written (the barrier has a timeout).
    if (!lead) trace->write(trace_file);
    group->barrier();
    if (lead) {
      for (int r = 1; r < group->world_size(); ++r) {
        trace->merge_file(run_dir / rank_trace_file(r));
        fs::remove(run_dir / rank_trace_file(r));
      }
    }
  }
  if (!lead) {
    return {{"rank", pgo.rank}, {"iterations", c.iterations}, {"minutes", since(run_start) / 60.0}};
  }

  // 4. Final checkpoint and held-out evaluation.
  save_training_checkpoint(run_dir, c.iterations, policy, tok->to_json(), *optimizer,
                           {{"step", c.iterations}, {"kind", "rl"}}, c.checkpoint.keep);
  model::save_checkpoint(run_dir / "final", policy, tok->to_json(),
                         model::checkpoint_side_files(c.init_from));
  nlohmann::json result = {{"run_dir", run_dir.string()},
                           {"mode", c.mode},
                           {"checkpoint", (run_dir / "final").string()},
                           {"iterations", c.iterations},
                           {"resumed_from_iteration", start_iter}};
  if (c.eval.n > 0) {
    EvalResult after = evaluate_now(true);
    collapse.observe_eval(after.accuracy);
    nlohmann::json rec = {{"step", c.iterations}, {"final_eval", after.to_json()}};
    if (auto warning = collapse.check()) {
      SLOG(kWarn) << *warning;
      rec["collapse_warning"] = *warning;
    }
    metrics->write(rec);
    result["eval_after"] = after.to_json();
    result["accuracy_after"] = after.accuracy;
    if (!before.is_null()) {
      result["eval_before"] = before;
      result["accuracy_before"] = before["accuracy"];
      for (const auto& line : describe_change(before, after.to_json())) SLOG(kInfo) << line;
    }
  }
  result["warnings"] = collapse.warnings();
  if (trace) {
    trace->write(trace_file);
    result["trace"] = trace_file.string();
  }
  result["report"] = telemetry::write_report(run_dir).string();
  result["minutes"] = since(run_start) / 60.0;
  return result;
}

}  // namespace streamrl::rl
