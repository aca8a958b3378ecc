#include "streamrl/rl/rl_loop.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <utility>

#include "streamrl/core/clock.h"
#include "streamrl/core/errors.h"
#include "streamrl/engine/tool_turns.h"
#include "streamrl/rl/advantages.h"
#include "streamrl/rl/mini_batch_step.h"
#include "streamrl/rl/train_checkpoint.h"
#include "streamrl/tasks/verifiers.h"
#include "streamrl/tools/builtin_tools.h"
#include "streamrl/tools/tool_call_parser.h"

namespace streamrl::rl {
namespace {

using core::Clock;
constexpr int kTrainerTrack = 1;
constexpr int kGeneratorTrack = 2;
constexpr int kTracksPerRank = 100;

}  // namespace

int trainer_track(int rank) { return kTrainerTrack + kTracksPerRank * rank; }
int generator_track(int rank) { return kGeneratorTrack + kTracksPerRank * rank; }

RlLoop::RlLoop(const RlRunConfig& c, const tasks::Task& task, const PromptEncoder& prompts,
               model::CausalLM& policy, std::optional<model::CausalLM>& ref,
               TrainerStepFactory new_step, telemetry::Trace* trace, dist::ProcessGroup* group)
    : c_(c),
      task_(task),
      prompts_(prompts),
      policy_(policy),
      ref_(ref),
      new_step_(std::move(new_step)),
      trace_(trace),
      group_(group),
      rank_(group ? group->rank() : 0),
      world_(group ? group->world_size() : 1),
      track_(trainer_track(rank_)),
      mode_(core::traits(c.mode)),
      // Request ids are k * stride_ + prompt index; refill prompts follow the P regular ones.
      stride_(c.prompts_per_iteration +
              (c.dynamic_sampling.enabled ? world_ * c.dynamic_sampling.max_refills : 0)),
      curriculum_(c.data.curriculum) {
  if (!task.tools().empty()) {
    tool_turns_ = engine::tool_turns(
        std::make_shared<const tools::ToolRunner>(tools::builtin_tool_runner(task.tools())),
        prompts.tokenizer(), c.max_turns);
  }
}

nlohmann::json RlLoop::curriculum_state() const {
  return c_.data.curriculum.enabled ? curriculum_.state() : nlohmann::json();
}

void RlLoop::restore_curriculum(const nlohmann::json& state) {
  if (c_.data.curriculum.enabled && state.is_object()) curriculum_.restore(state);
}

void RlLoop::start(std::unique_ptr<RolloutGenerator> generator, int64_t first_iteration) {
  gen_ = std::move(generator);  // a dedicated pool starts from a copy of the trainer's weights
  for (int64_t k = first_iteration;
       k <= first_iteration + mode_.iterations_ahead && k < c_.iterations; ++k) {
    submit(k);
  }
}

void RlLoop::drive_colocated() {
  const auto t0 = Clock::now();
  gen_->drive_until_idle();
  gen_seconds_ += core::seconds_since(t0);
}

UpdateResult RlLoop::run_iteration(int64_t k, IterationStats* st) {
  const double gen_busy0 = gen_->busy_seconds();
  // With train.mini_batches the step of each part of the iteration's groups runs as soon as they
  // are in (on arrival modes: while the generator goes on).
  std::unique_ptr<TrainerStep> step =
      c_.mini_batches > 1 ? std::make_unique<MiniBatchStep>(
                                new_step_, mini_batch_quotas(own_prompts(), c_.mini_batches),
                                lr_at(c_.optim, k), c_.optim.grad_clip)
                          : new_step_();
  if (!mode_.dedicated_generator) {
    gen_seconds_ = 0;
    drive_colocated();
  }
  IterationBatch& b = batches_.at(k);
  // Each complete group goes to the step (and the iteration's statistics) once; groups of k
  // that completed while k-1 was collected (async) go first.
  auto train_ready = [&](bool eager) {
    for (const auto& s : b.dropped) record(s, st);
    b.dropped.clear();
    if (b.ready.empty()) return;
    for (const auto& s : b.ready) record(s, st);
    step->add(std::exchange(b.ready, {}), eager);
  };
  train_ready(mode_.on_arrival);
  // Pipeline stages on arrival modes (parallel.pp_waves): pass w of the step starts once w / waves
  // of this rank's first count of samples are back; every rank runs waves - 1 before finish().
  const int waves = c_.parallel.pp > 1 && mode_.on_arrival ? c_.parallel.waves : 1;
  const size_t first_expected = static_cast<size_t>(own_prompts()) * c_.group_size;
  int next_wave = 1;
  size_t received = RlLoop::received(b);
  auto run_waves = [&](bool all) {
    for (; next_wave < waves && (all || received * waves >= first_expected * next_wave);
         ++next_wave) {
      telemetry::ScopedSpan span(trace_, track_, "pipeline wave");
      step->wave();
    }
  };
  run_waves(false);
  std::vector<engine::Sample> raw;  // whole-batch modes: per-sample work after the full batch
  // Dynamic sampling adds refill prompts as groups complete; with the whole batch collected
  // before per-sample work (colocate, disagg) they are known only after it, hence two loops.
  while (received < expected(b)) {
    if (!mode_.dedicated_generator) drive_colocated();
    while (received < expected(b)) {
      engine::Sample s = next_sample(st);
      const int64_t j = s.request_id / stride_;
      if (j == k) ++received;
      if (!mode_.on_arrival && j == k) {
        raw.push_back(std::move(s));
        continue;
      }
      accept(std::move(s), st);
      train_ready(/*eager=*/true);
      run_waves(false);
    }
    for (auto& s : raw) accept(std::move(s), st);
    raw.clear();
    train_ready(mode_.on_arrival);
  }

  run_waves(true);
  preview_next(k, *step, st);
  UpdateResult up;
  try {
    telemetry::ScopedSpan span(trace_, track_, "optimizer step");
    up = step->finish(lr_at(c_.optim, k), c_.optim.grad_clip);
  } catch (const RuntimeFailure& e) {
    auto last = latest_checkpoint(c_.run.dir());
    throw RuntimeFailure(
        std::string(e.what()) + " at iteration " + std::to_string(k) +
        "; stopped, last good checkpoint: " + (last ? last->dir.string() : std::string("none")));
  }
  refused_ = b.refused;
  dynamic_ = {{"dropped_groups", b.dropped_groups}, {"refills", b.refills}};
  st->replaced = b.replaced;
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
    st->weight_update_s = core::seconds_since(t0);
  }
  ranker_metrics_ = gen_->end_iteration();
  const int64_t next = k + 1 + mode_.iterations_ahead;
  if (next < c_.iterations) submit(next);
  if (mode_.dedicated_generator) gen_seconds_ = gen_->busy_seconds() - gen_busy0;
  return up;
}

size_t RlLoop::expected(const IterationBatch& b) const {
  return static_cast<size_t>(own_prompts() + b.refills) * c_.group_size;
}

size_t RlLoop::received(const IterationBatch& b) {
  size_t n = 0;
  for (int g : b.arrived) n += static_cast<size_t>(g);
  return n;
}

// In async modes the next iteration's groups come in while this one is collected; when all of
// this rank's are in before this step trains (what is queued is taken first), the pipeline
// stages can plan the next step's schedule while this one trains (PipeWeaver/DIP). Those samples
// go to the next step first and in this order (run_iteration's first train_ready). Whether a step
// previews depends on the config and k alone, so every rank of a pipeline does it alike.
void RlLoop::preview_next(int64_t k, TrainerStep& step, IterationStats* st) {
  if (c_.parallel.pp < 2 || !mode_.on_arrival || !mode_.dedicated_generator) return;
  const auto next = batches_.find(k + 1);
  if (next == batches_.end()) return;
  for (engine::Sample& s : gen_->queue().drain()) accept(std::move(s), st);
  const bool all_in = received(next->second) == expected(next->second);
  step.preview_next(all_in ? &next->second.ready : nullptr);
}

// Data parallelism: rank r generates and trains prompts r, r + world, r + 2 world, ...
int RlLoop::own_prompts() const {
  const int P = c_.prompts_per_iteration;
  return P / world_ + (rank_ < P % world_ ? 1 : 0);
}

void RlLoop::submit(int64_t k) {
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

// Dynamic sampling: one more prompt for iteration k, in place of the dropped group `replaced`.
void RlLoop::submit_refill(int64_t k, int replaced) {
  IterationBatch& b = batches_.at(k);
  const int i = c_.prompts_per_iteration + b.refills * world_ + rank_;
  b.refills += 1;
  b.replaced[i] = replaced;
  b.problems[i] = problem(k, i);
  gen_->submit({request(k, i)});
}

// Prompt i of iteration k: the run's training problem k * P + i, or for a refill one from a
// stream of its own (deterministic, so resumed runs draw the same prompts).
tasks::Problem RlLoop::problem(int64_t k, int i) const {
  constexpr uint64_t kRefillStream = uint64_t{1} << 40;
  const int P = c_.prompts_per_iteration;
  const uint64_t index = i < P ? static_cast<uint64_t>(k * P + i)
                               : kRefillStream + static_cast<uint64_t>(k * stride_ + i);
  const IterationBatch& b = batches_.at(k);
  return draw_training_problem(task_, c_.run.seed, index, c_.data.max_difficulty,
                               c_.data.curriculum.enabled ? &b.weights : nullptr);
}

engine::Request RlLoop::request(int64_t k, int i) const {
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
  tool_turns_.attach(r);  // each turn capped at max_new_tokens; the trajectory may be longer
  return r;
}

engine::Sample RlLoop::next_sample(IterationStats* st) {
  const bool dedicated = mode_.dedicated_generator;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration<double>(c_.sample_timeout_s);
  while (true) {
    if (auto s = gen_->queue().pop(std::chrono::milliseconds(200))) {
      st->wait_s += core::seconds_since(t0);
      return std::move(*s);
    }
    gen_->check_alive();
    if (!dedicated || Clock::now() > deadline) {
      throw TimeoutError("no sample from the generator within " +
                         std::to_string(dedicated ? c_.sample_timeout_s : 0.2) +
                         " s (rollout.sample_timeout_s)");
    }
  }
}

// A group is complete when all its samples are back; its advantages are then known. Per-sample
// time counts towards the trainer's busy time of the iteration in which it runs.
void RlLoop::accept(engine::Sample s, IterationStats* st) {
  const int64_t j = s.request_id / stride_;
  const int i = static_cast<int>(s.request_id % stride_);
  IterationBatch& b = batches_.at(j);
  b.arrived[i] += 1;
  gen_->observe(s);  // ranker and length distribution for the next dispatch
  // Trained at step j with weights j: refuse samples from weights older than j - bound.
  if (j - s.weight_version > c_.max_staleness) {
    b.refused += 1;
  } else {
    score(std::move(s), b, st);
  }
  if (b.arrived[i] == c_.group_size) complete_group(j, i);
}

// Per-sample work, a function of this one sample: reward, reference log-probs, KL shaping.
void RlLoop::score(engine::Sample s, IterationBatch& b, IterationStats* st) {
  const int i = static_cast<int>(s.request_id % stride_);
  const auto t0 = Clock::now();
  telemetry::ScopedSpan span(trace_, track_, "sample work");
  ScoredSample ss;
  const std::string text = prompts_.tokenizer().decode(s.output_ids);
  ss.score = task_.verify(b.problems[i], text);
  if (tool_turns_.on_turn) {
    st->tool_samples += 1;
    st->turns += s.turns;
    st->tool_calls += static_cast<int64_t>(tools::parse_tool_calls(text).size());
  }
  ss.reward =
      c_.data.reward == "demonstration"
          ? static_cast<double>(tasks::trim(text) == tasks::trim(b.problems[i].demonstration))
          : ss.score;
  // The overlong penalty reads the last turn: max_new_tokens caps each turn of a tool rollout.
  size_t last_turn = s.output_ids.size();
  if (!s.sampled_mask.empty()) {
    const auto tail = std::find(s.sampled_mask.rbegin(), s.sampled_mask.rend(), uint8_t{0});
    last_turn = static_cast<size_t>(tail - s.sampled_mask.rbegin());
  }
  ss.reward -= overlong_penalty(static_cast<int>(last_turn), c_.max_new_tokens, c_.overlong);
  ss.difficulty = b.problems[i].difficulty;
  b.outcomes.emplace_back(i, s.sample_index, ss.difficulty, ss.score);
  if (ref_) {
    const auto r0 = Clock::now();
    ss.ref_logprobs = reference_logprobs(*ref_, s);
    st->reference_s += core::seconds_since(r0);
    if (c_.loss.kl.placement == KlPlacement::kReward) {
      // KL in the reward (k1, rl_algorithms.md §3.2): the summed log-ratio against the
      // reference under the generating policy is subtracted from the outcome reward.
      double k1 = 0;
      for (size_t t = 0; t < ss.ref_logprobs.size(); ++t) {
        if (!s.sampled_mask.empty() && s.sampled_mask[t] == 0) continue;  // a tool result
        k1 += s.logprobs[t] - ss.ref_logprobs[t];
      }
      ss.reward -= c_.loss.kl.coef * k1;
    }
  }
  st->sample_work_s += core::seconds_since(t0);
  ss.sample = std::move(s);
  b.groups[i].push_back(std::move(ss));
}

void RlLoop::complete_group(int64_t j, int i) {
  IterationBatch& b = batches_.at(j);
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
    if (b.refills < c_.dynamic_sampling.max_refills) submit_refill(j, i);
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

void RlLoop::record(const ScoredSample& s, IterationStats* st) const {
  st->prompts.push_back(static_cast<int>(s.sample.request_id % stride_));
  st->rewards.push_back(s.reward);
  st->scores.push_back(s.score);
  st->lengths.push_back(static_cast<double>(s.sample.output_ids.size()));
  st->zero_advantage.push_back(s.advantage == 0.0);
  st->versions.push_back(s.sample.weight_version);
  const auto& mask = s.sample.sampled_mask;  // a tool rollout's appended results were not generated
  st->generated_tokens += mask.empty() ? static_cast<int64_t>(s.sample.output_ids.size())
                                       : std::count(mask.begin(), mask.end(), uint8_t{1});
}

}  // namespace streamrl::rl
