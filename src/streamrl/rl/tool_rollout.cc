#include "streamrl/rl/tool_rollout.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "streamrl/core/clock.h"
#include "streamrl/core/errors.h"
#include "streamrl/engine/tool_turns.h"
#include "streamrl/tools/builtin_tools.h"

namespace streamrl::rl {
namespace {

using Key = std::pair<int64_t, int32_t>;  // the caller's request id and sample index

struct Rollout {
  int max_new_tokens = 0;         // every turn's cap
  engine::SamplingParams params;  // without keep_kv: a later turn's request repeats the first's
  std::vector<int32_t> prompt;    // params and prompt
  engine::Sample trajectory;      // without keep_kv: the turns so far, assembled here
  size_t turn_start = 0;          // with keep_kv: where the current turn starts in output_ids
  std::vector<int32_t> appended;  // the last tool results, before the turn now running
  ToolRollout result;
};

// Appends a fresh request's turn (its whole output) after `appended` to a trajectory.
void append_turn(engine::Sample* t, const std::vector<int32_t>& appended, engine::Sample&& turn) {
  if (t->sampled_mask.empty()) t->sampled_mask.assign(t->output_ids.size(), 1);
  t->output_ids.insert(t->output_ids.end(), appended.begin(), appended.end());
  t->logprobs.insert(t->logprobs.end(), appended.size(), 0.0f);
  t->sampled_mask.insert(t->sampled_mask.end(), appended.size(), 0);
  t->output_ids.insert(t->output_ids.end(), turn.output_ids.begin(), turn.output_ids.end());
  t->logprobs.insert(t->logprobs.end(), turn.logprobs.begin(), turn.logprobs.end());
  t->sampled_mask.insert(t->sampled_mask.end(), turn.output_ids.size(), 1);
  t->finish_reason = turn.finish_reason;
  t->turns += 1;
}

// Submits the caller's requests as their arrival times pass (ToolRolloutConfig::arrival_s) and
// times each rollout from its request's submission.
class Arrivals {
 public:
  Arrivals(std::vector<engine::Request> requests, const std::vector<double>& arrival_s)
      : requests_(std::move(requests)), at_(arrival_s) {
    if (at_.empty()) at_.assign(requests_.size(), 0.0);
    if (at_.size() != requests_.size()) {
      throw InputError("tool rollouts: " + std::to_string(arrival_s.size()) +
                       " arrival times for " + std::to_string(requests_.size()) + " requests");
    }
    for (size_t i = 0; i < at_.size(); ++i) {
      if (!std::isfinite(at_[i]) || at_[i] < 0 || (i > 0 && at_[i] < at_[i - 1])) {
        throw InputError("tool rollouts: arrival times must be finite, >= 0 and non-decreasing");
      }
      arrived_[requests_[i].request_id] = at_[i];
    }
  }
  engine::Request& operator[](size_t i) { return requests_[i]; }
  size_t size() const { return requests_.size(); }

  // Adds every request whose time has come; returns whether any is still to come.
  bool submit_due(engine::Engine& engine) {
    const double now = core::seconds_since(t0_);
    while (next_ < requests_.size() && at_[next_] <= now) {
      engine.add_request(std::move(requests_[next_++]));
    }
    return next_ < requests_.size();
  }
  // Idles until the next arrival, at most a millisecond (a tool result may come back meanwhile).
  void wait() const {
    if (next_ >= at_.size()) return;
    const double left = at_[next_] - core::seconds_since(t0_);
    std::this_thread::sleep_for(std::chrono::duration<double>(std::clamp(left, 0.0, 1e-3)));
  }
  double since_arrival(int64_t request_id) const {
    return core::seconds_since(t0_) - arrived_.at(request_id);
  }

 private:
  std::vector<engine::Request> requests_;
  std::vector<double> at_;
  std::map<int64_t, double> arrived_;  // request id -> its arrival
  size_t next_ = 0;
  core::Clock::time_point t0_ = core::Clock::now();
};

// The way the trainer and `streamrl serve` run rollouts: the engine runs every turn itself
// (Request::on_turn, engine::tool_turns), the tools off its thread.
std::vector<ToolRollout> run_engine_turns(engine::Engine& engine,
                                          std::vector<engine::Request> requests,
                                          const tools::ToolRunner& runner,
                                          const tokenizer::Tokenizer& tok, int max_turns,
                                          bool pipelined, const std::vector<double>& arrival_s) {
  std::mutex mu;  // the turn callbacks run on threads of their own
  std::map<Key, ToolRollout> done;
  size_t ended = 0;
  // The runner is the caller's; the callbacks end with run_until_idle below.
  auto shared_runner = std::shared_ptr<const tools::ToolRunner>(&runner, [](auto*) {});
  const engine::ToolTurnHooks hooks = engine::tool_turns(
      shared_runner, tok, max_turns,
      [&](const engine::Sample& s, const engine::ToolTurn& turn) {
        std::lock_guard<std::mutex> lock(mu);
        ToolRollout& r = done.at({s.request_id, s.sample_index});
        r.tool_calls += turn.calls;
        r.tool_errors += turn.errors;
      },
      pipelined);
  Arrivals arrivals(std::move(requests), arrival_s);
  for (size_t k = 0; k < arrivals.size(); ++k) {
    engine::Request& r = arrivals[k];
    for (int i = 0; i < r.n; ++i) done[{r.request_id, i}];
    r.hold_kv = false;
    r.on_token = nullptr;
    hooks.attach(r);
    r.on_sample = [&](engine::Sample&& s) {
      std::lock_guard<std::mutex> lock(mu);
      ToolRollout& out = done.at({s.request_id, s.sample_index});
      out.sample = std::move(s);
      out.seconds = arrivals.since_arrival(s.request_id);
      ++ended;  // once per rollout: the engine delivers each sample once
    };
  }
  while (arrivals.submit_due(engine)) {
    if (!engine.step()) arrivals.wait();
  }
  engine.run_until_idle();
  if (ended != done.size()) {
    throw RuntimeFailure("tool rollouts: the engine stopped with " +
                         std::to_string(done.size() - ended) + " rollouts unfinished");
  }
  std::vector<ToolRollout> out;
  out.reserve(done.size());
  for (auto& [key, r] : done) out.push_back(std::move(r));
  return out;
}

}  // namespace

std::vector<ToolRollout> run_tool_rollouts(engine::Engine& engine,
                                           std::vector<engine::Request> requests,
                                           const tools::ToolRunner& runner,
                                           const tokenizer::Tokenizer& tok,
                                           const ToolRolloutConfig& config) {
  if (config.keep_kv && !config.turn_barrier && config.engine_turns) {
    return run_engine_turns(engine, std::move(requests), runner, tok, config.max_turns,
                            config.pipeline_calls, config.arrival_s);
  }
  std::vector<engine::Sample> finished_turns;  // filled by the callbacks, inside step()
  auto on_sample = [&finished_turns](engine::Sample&& s) {
    finished_turns.push_back(std::move(s));
  };
  std::map<Key, Rollout> rollouts;
  std::map<int64_t, Key> fresh;  // without keep_kv: a later turn's request id -> its rollout
  int64_t next_id = 0;
  size_t open = 0;
  Arrivals arrivals(std::move(requests), config.arrival_s);
  for (size_t k = 0; k < arrivals.size(); ++k) {
    engine::Request& r = arrivals[k];
    for (int i = 0; i < r.n; ++i) {
      Rollout& ro = rollouts[{r.request_id, i}];
      ro.max_new_tokens = r.params.max_new_tokens;
      if (!config.keep_kv) {
        ro.params = r.params;
        ro.prompt = r.prompt_ids;
      }
    }
    next_id = std::max(next_id, r.request_id + 1);
    open += static_cast<size_t>(r.n);
    r.hold_kv = config.keep_kv;
    r.on_token = nullptr;
    r.on_sample = on_sample;
  }
  std::map<Key, ToolRollout> done;
  auto finish = [&](const Key& key, Rollout& ro, engine::Sample&& last) {
    if (config.keep_kv) {
      engine.release_sample(key.first, key.second);
      ro.result.sample = std::move(last);
    } else {
      ro.result.sample = std::move(ro.trajectory);
    }
    ro.result.seconds = arrivals.since_arrival(key.first);
    done[key] = std::move(ro.result);
    --open;
  };
  while (open > 0) {
    const bool more = arrivals.submit_due(engine);
    bool progress = true;
    if (config.turn_barrier) {
      engine.run_until_idle();  // every running turn finishes before any continues
      progress = !finished_turns.empty();
    } else {
      progress = engine.step() || !finished_turns.empty();
    }
    if (!progress && more) {
      arrivals.wait();
      continue;
    }
    if (!progress) {
      throw RuntimeFailure("tool rollouts: the engine stopped with " + std::to_string(open) +
                           " rollouts unfinished");
    }
    std::vector<engine::Sample> turns = std::move(finished_turns);
    finished_turns.clear();
    for (engine::Sample& s : turns) {
      const auto f = fresh.find(s.request_id);
      const Key key = f != fresh.end() ? f->second : Key{s.request_id, s.sample_index};
      Rollout& ro = rollouts.at(key);
      // This turn's tokens: after what the held sample had before it, or a fresh request's all.
      const size_t start = config.keep_kv ? std::min(ro.turn_start, s.output_ids.size()) : 0;
      const std::string reply = tok.decode(std::vector<int32_t>(
          s.output_ids.begin() + static_cast<std::ptrdiff_t>(start), s.output_ids.end()));
      const bool stopped = s.finish_reason == engine::FinishReason::kStop;
      int turns = s.turns;
      if (!config.keep_kv) {
        if (f == fresh.end()) {
          ro.trajectory = std::move(s);  // the first turn
        } else {
          append_turn(&ro.trajectory, ro.appended, std::move(s));
          fresh.erase(f);
        }
        turns = ro.trajectory.turns;
      }
      std::optional<engine::ToolTurn> tool_turn =
          engine::next_tool_turn(reply, stopped, turns, config.max_turns, runner, tok);
      if (!tool_turn) {
        finish(key, ro, std::move(s));
        continue;
      }
      ro.result.tool_calls += tool_turn->calls;
      ro.result.tool_errors += tool_turn->errors;
      ro.appended = std::move(tool_turn->appended);
      if (config.keep_kv) {
        ro.turn_start = s.output_ids.size() + ro.appended.size();
        engine.continue_sample({key.first, key.second, ro.appended, ro.max_new_tokens});
        continue;
      }
      engine::Request next;
      next.request_id = next_id++;
      next.prompt_ids = ro.prompt;
      next.prompt_ids.insert(next.prompt_ids.end(), ro.trajectory.output_ids.begin(),
                             ro.trajectory.output_ids.end());
      next.prompt_ids.insert(next.prompt_ids.end(), ro.appended.begin(), ro.appended.end());
      next.params = ro.params;
      next.on_sample = on_sample;
      try {
        engine.add_request(std::move(next));
        fresh[next_id - 1] = key;
      } catch (const InputError&) {  // the conversation no longer fits max_seq_len
        finish(key, ro, engine::Sample{});
      }
    }
  }
  engine.step();  // applies the releases queued above, so no slot stays held on return
  std::vector<ToolRollout> out;
  out.reserve(done.size());
  for (auto& [key, r] : done) out.push_back(std::move(r));
  return out;
}

std::vector<ToolRollout> run_task_rollouts(model::CausalLM& model, const PromptEncoder& prompts,
                                           const tasks::Task& task,
                                           const std::vector<tasks::Problem>& problems, int n,
                                           const engine::SamplingParams& params, int max_batch_size,
                                           const ToolRolloutConfig& config,
                                           const tools::ToolRunner* runner) {
  engine::EngineConfig ec;
  ec.max_batch_size = std::max(max_batch_size, n);
  ec.max_seq_len = static_cast<int>(model->config().max_position_embeddings);
  engine::Engine engine(model, ec);
  std::vector<engine::Request> reqs;
  for (size_t i = 0; i < problems.size(); ++i) {
    engine::Request r;
    r.request_id = static_cast<int64_t>(i);
    r.prompt_ids = prompts.prompt_ids(problems[i]);
    r.n = n;
    r.params = params;
    // Every turn's cap, but no first turn beyond the model's length (later turns end there).
    r.params.max_new_tokens = std::max(
        1, std::min(params.max_new_tokens, ec.max_seq_len - static_cast<int>(r.prompt_ids.size())));
    reqs.push_back(std::move(r));
  }
  if (runner)
    return run_tool_rollouts(engine, std::move(reqs), *runner, prompts.tokenizer(), config);
  return run_tool_rollouts(engine, std::move(reqs), tools::builtin_tool_runner(task.tools()),
                           prompts.tokenizer(), config);
}

}  // namespace streamrl::rl
