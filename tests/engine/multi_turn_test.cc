// Multi-turn rollouts in the engine (issue 18): a held sample keeps its KV cache between turns and
// prefills only what is appended; its tokens and log-probs equal those of re-prefilling the whole
// conversation as a new prompt.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "engine_model.h"
#include "streamrl/core/errors.h"
#include "streamrl/engine/engine.h"
#include "streamrl/engine/engine_thread.h"

namespace streamrl::engine {
namespace {

Request greedy_turn(int64_t id, std::vector<int32_t> prompt, int max_new, std::vector<Sample>* sink,
                    bool hold) {
  Request r;
  r.request_id = id;
  r.prompt_ids = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_new_tokens = max_new;
  r.hold_kv = hold;
  r.on_sample = [sink](Sample&& s) { sink->push_back(std::move(s)); };
  return r;
}

// The last turn of `s`: its final `n` output tokens and their log-probs.
std::vector<int32_t> tail(const std::vector<int32_t>& v, size_t n) {
  return {v.end() - static_cast<std::ptrdiff_t>(n), v.end()};
}

TEST(MultiTurn, KvReuseMatchesReprefillingTheConversation) {
  EngineConfig cfg;
  cfg.max_batch_size = 4;
  Engine engine(engine_model(), cfg);
  std::vector<Sample> out, other;
  const std::vector<int32_t> prompt = {1, 5, 7, 3};
  engine.add_request(greedy_turn(0, prompt, 6, &out, /*hold=*/true));
  engine.add_request(greedy_turn(1, {1, 9}, 30, &other, false));  // shares the batch throughout
  engine.run_until_idle();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(engine.held_samples(), 1);
  const std::vector<std::vector<int32_t>> appended = {{2, 9, 4}, {6}};
  const std::vector<int> turn_tokens = {5, 4};
  for (size_t turn = 0; turn < appended.size(); ++turn) {
    const Sample before = out.back();
    engine.add_request(greedy_turn(10 + turn, {1, 2}, 12, &other, false));
    engine.continue_sample({0, 0, appended[turn], turn_tokens[turn]});
    engine.run_until_idle();
    ASSERT_EQ(out.size(), turn + 2);
    const Sample& s = out.back();
    EXPECT_EQ(s.turns, static_cast<int>(turn) + 2);
    ASSERT_EQ(s.output_ids.size(),
              before.output_ids.size() + appended[turn].size() + turn_tokens[turn]);
    ASSERT_EQ(s.sampled_mask.size(), s.output_ids.size());
    ASSERT_EQ(s.logprobs.size(), s.output_ids.size());
    for (size_t t = 0; t < appended[turn].size(); ++t) {
      const size_t at = before.output_ids.size() + t;
      EXPECT_EQ(s.output_ids[at], appended[turn][t]);
      EXPECT_EQ(s.sampled_mask[at], 0);
      EXPECT_EQ(s.logprobs[at], 0.0f);
    }
    // Earlier turns are unchanged.
    for (size_t t = 0; t < before.output_ids.size(); ++t) {
      EXPECT_EQ(s.output_ids[t], before.output_ids[t]);
      EXPECT_EQ(s.logprobs[t], before.logprobs[t]);
    }

    // The reference: a fresh engine prefills the whole conversation so far as the prompt.
    Engine fresh(engine_model(), cfg);
    std::vector<Sample> ref;
    std::vector<int32_t> conversation = prompt;
    conversation.insert(conversation.end(), before.output_ids.begin(), before.output_ids.end());
    conversation.insert(conversation.end(), appended[turn].begin(), appended[turn].end());
    fresh.add_request(greedy_turn(0, conversation, turn_tokens[turn], &ref, false));
    fresh.run_until_idle();
    ASSERT_EQ(ref.size(), 1u);
    const size_t n = static_cast<size_t>(turn_tokens[turn]);
    EXPECT_EQ(tail(s.output_ids, n), ref[0].output_ids);
    for (size_t t = 0; t < n; ++t) {
      EXPECT_NEAR(s.logprobs[s.logprobs.size() - n + t], ref[0].logprobs[t], 1e-4) << t;
      EXPECT_EQ(s.sampled_mask[s.sampled_mask.size() - n + t], 1);
    }
  }
  EXPECT_EQ(other.size(), 3u);
  engine.release_sample(0, 0);
  engine.step();
  EXPECT_EQ(engine.held_samples(), 0);
}

// A held sample keeps its slot: with one slot the next request waits (run_until_idle returns
// instead of spinning) until the rollout is released; a continuation that cannot fit max_seq_len
// ends its turn at once.
TEST(MultiTurn, HeldSampleKeepsItsSlotUntilReleased) {
  EngineConfig cfg;
  cfg.max_batch_size = 1;
  cfg.max_seq_len = 32;
  Engine engine(engine_model(), cfg);
  std::vector<Sample> held, next;
  engine.add_request(greedy_turn(0, {1, 5}, 4, &held, true));
  engine.run_until_idle();
  engine.add_request(greedy_turn(1, {1, 6}, 4, &next, false));
  engine.run_until_idle();
  EXPECT_TRUE(next.empty());
  EXPECT_EQ(engine.stats().waiting_requests, 1);
  engine.continue_sample({0, 0, std::vector<int32_t>(20, 3), 10});  // 6 + 20 + 10 > 32
  engine.run_until_idle();
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[1].output_ids, held[0].output_ids);  // nothing appended or sampled
  EXPECT_EQ(held[1].finish_reason, FinishReason::kLength);
  EXPECT_THROW(engine.continue_sample({0, 0, {1, 23}, 2}), InputError);  // vocabulary is 23
  engine.release_sample(0, 0);
  engine.run_until_idle();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].output_ids.size(), 4u);
  EXPECT_EQ(engine.held_samples(), 0);
}

// Aborting the request releases its held sample and drops its queued continuation.
TEST(MultiTurn, AbortReleasesHeldSamples) {
  EngineConfig cfg;
  cfg.max_batch_size = 2;
  Engine engine(engine_model(), cfg);
  std::vector<Sample> out;
  Request r = greedy_turn(0, {1, 5}, 3, &out, true);
  r.n = 2;
  engine.add_request(std::move(r));
  engine.run_until_idle();
  EXPECT_EQ(engine.held_samples(), 2);
  engine.continue_sample({0, 1, {4}, 3});
  engine.abort(0);
  engine.run_until_idle();
  EXPECT_EQ(engine.held_samples(), 0);
  EXPECT_EQ(out.size(), 2u);  // the continuation never ran
  std::vector<Sample> more;
  Request again = greedy_turn(1, {1, 6}, 3, &more, false);
  again.n = 2;
  engine.add_request(std::move(again));
  engine.run_until_idle();
  EXPECT_EQ(more.size(), 2u);  // both slots are free again
}

// Request::on_turn: the engine runs the turns itself (the RL loop's tool rollouts) and gives the
// caller one sample, the same trajectory, tokens and log-probs as a caller continuing a held
// sample with the same appended tokens.
TEST(MultiTurn, EngineRunTurnsMatchTheCallersTurns) {
  EngineConfig cfg;
  cfg.max_batch_size = 4;
  const std::vector<std::vector<int32_t>> appended = {{2, 9, 4}, {6}};
  const int cap = 5;

  Engine held_engine(engine_model(), cfg);
  std::vector<Sample> turns, other;
  held_engine.add_request(greedy_turn(0, {1, 5, 7, 3}, cap, &turns, /*hold=*/true));
  held_engine.add_request(greedy_turn(1, {1, 9}, 30, &other, false));
  held_engine.run_until_idle();
  for (const auto& a : appended) {
    held_engine.continue_sample({0, 0, a, cap});
    held_engine.run_until_idle();
  }
  ASSERT_EQ(turns.size(), 3u);

  Engine engine(engine_model(), cfg);
  std::vector<Sample> out;
  std::vector<size_t> turn_starts;
  Request r = greedy_turn(0, {1, 5, 7, 3}, cap, &out, /*hold=*/false);
  r.on_turn = [&](const Sample& s, size_t turn_start) -> TurnWork {
    turn_starts.push_back(turn_start);
    if (s.turns > 2) return nullptr;
    return [ids = appended[static_cast<size_t>(s.turns - 1)]] { return ids; };
  };
  engine.add_request(std::move(r));
  engine.add_request(greedy_turn(1, {1, 9}, 30, &other, false));
  engine.run_until_idle();
  ASSERT_EQ(out.size(), 1u) << "one sample per rollout";
  const Sample& s = out[0];
  EXPECT_EQ(s.turns, 3);
  EXPECT_EQ(s.output_ids, turns.back().output_ids);
  EXPECT_EQ(s.sampled_mask, turns.back().sampled_mask);
  ASSERT_EQ(s.logprobs.size(), turns.back().logprobs.size());
  for (size_t t = 0; t < s.logprobs.size(); ++t) {
    EXPECT_NEAR(s.logprobs[t], turns.back().logprobs[t], 1e-5) << t;
  }
  EXPECT_EQ(turn_starts, (std::vector<size_t>{0, cap + 3, 2 * cap + 4}));
  EXPECT_EQ(engine.held_samples(), 0);
  EXPECT_EQ(engine.stats().running_samples, 0);
}

// An engine-run rollout that an abort or max_seq_len ends still reaches its caller exactly once
// (its on_rollout_end first, once) and frees its slot; on an engine thread, the next turn starts
// without waiting for other work.
TEST(MultiTurn, EngineRunRolloutsEndOnceAndFreeTheirSlots) {
  EngineConfig cfg;
  cfg.max_batch_size = 2;
  cfg.max_seq_len = 40;
  Engine engine(engine_model(), cfg);
  const auto forever = [](const Sample&, size_t) -> TurnWork {
    return [] { return std::vector<int32_t>{4, 4}; };
  };
  std::vector<Sample> out;
  std::vector<Sample> ended;  // what on_rollout_end saw, in order
  const auto end = [&](const Sample& s, size_t) { ended.push_back(s); };
  Request r = greedy_turn(0, {1, 5}, 3, &out, false);
  r.n = 2;
  r.on_turn = forever;
  r.on_rollout_end = end;
  engine.add_request(std::move(r));
  engine.run_until_idle();  // turns of 3 + 2 appended until 40 tokens cannot hold another
  ASSERT_EQ(out.size(), 2u);
  for (const Sample& s : out) {
    EXPECT_EQ(s.finish_reason, FinishReason::kLength);
    EXPECT_GT(s.turns, 5);
    EXPECT_LE(s.prompt_ids.size() + s.output_ids.size(), 40u);
  }
  ASSERT_EQ(ended.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(ended[i].output_ids, out[i].output_ids);
  EXPECT_EQ(engine.held_samples(), 0);

  std::vector<Sample> aborted;
  ended.clear();
  r = greedy_turn(1, {1, 6}, 2, &aborted, false);
  r.n = 2;
  r.on_turn = forever;
  r.on_rollout_end = end;
  engine.add_request(std::move(r));
  for (int i = 0; i < 4; ++i) engine.step();
  engine.abort(1);
  engine.run_until_idle();
  ASSERT_EQ(aborted.size(), 2u);
  for (const Sample& s : aborted) EXPECT_EQ(s.finish_reason, FinishReason::kAborted);
  ASSERT_EQ(ended.size(), 2u) << "an aborted rollout's hooks were not told it ended";
  for (const Sample& s : ended) EXPECT_EQ(s.request_id, 1);
  EXPECT_EQ(engine.held_samples(), 0);

  Request hold = greedy_turn(2, {1, 6}, 2, &aborted, true);
  hold.on_turn = forever;
  EXPECT_THROW(engine.add_request(std::move(hold)), InputError);

  // On an engine thread: three turns, each started when the last ended.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Sample> threaded;
  Request t;
  t.request_id = 3;
  t.prompt_ids = {1, 7};
  t.params.temperature = 0;
  t.params.max_new_tokens = 2;
  t.on_turn = [](const Sample& s, size_t) -> TurnWork {
    if (s.turns >= 3) return nullptr;
    return [] { return std::vector<int32_t>{5}; };
  };
  t.on_sample = [&](Sample&& s) {
    std::lock_guard<std::mutex> lock(mu);
    threaded.push_back(std::move(s));
    cv.notify_all();
  };
  EngineThread thread(engine);
  engine.add_request(std::move(t));
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return !threaded.empty(); }))
      << "the rollout never finished on the engine thread";
  EXPECT_EQ(threaded[0].turns, 3);
  EXPECT_EQ(threaded[0].output_ids.size(), 2u + 1 + 2 + 1 + 2);
}

// A rollout's turn callback (its tools) runs off the engine thread: the other samples decode and
// finish meanwhile. A callback that throws ends its own rollout as aborted and step() rethrows.
TEST(MultiTurn, EngineRunTurnsLetOtherSamplesDecodeWhileToolsRun) {
  EngineConfig cfg;
  cfg.max_batch_size = 2;
  Engine engine(engine_model(), cfg);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Sample> tooled, plain;
  bool saw_plain_done = false;
  Request r = greedy_turn(0, {1, 5}, 2, &tooled, false);
  r.on_turn = [&](const Sample& s, size_t) -> TurnWork {
    if (s.turns > 1) return nullptr;
    // A slow tool: it returns once the other request has finished (or after 3 s, when the engine
    // thread itself is stuck here and nothing else can decode).
    return [&] {
      std::unique_lock<std::mutex> lock(mu);
      saw_plain_done = cv.wait_for(lock, std::chrono::seconds(3), [&] { return !plain.empty(); });
      return std::vector<int32_t>{4};
    };
  };
  Request other;
  other.request_id = 1;
  other.prompt_ids = {1, 9};
  other.params.temperature = 0;
  other.params.max_new_tokens = 12;
  other.on_sample = [&](Sample&& s) {
    std::lock_guard<std::mutex> lock(mu);
    plain.push_back(std::move(s));
    cv.notify_all();
  };
  engine.add_request(std::move(r));
  engine.add_request(std::move(other));
  engine.run_until_idle();
  ASSERT_EQ(tooled.size(), 1u);
  EXPECT_TRUE(saw_plain_done) << "the tool call blocked the engine";
  EXPECT_EQ(tooled[0].turns, 2);
  EXPECT_EQ(tooled[0].output_ids.size(), 2u + 1 + 2);

  // The callback throws as it decides (engine thread), its work throws (off it), or its work
  // returns a token the model does not have.
  const std::pair<TurnCallback, std::string> breaking[] = {
      {[](const Sample&, size_t) -> TurnWork { throw std::runtime_error("tool runner broke"); },
       "tool runner broke"},
      {[](const Sample&, size_t) -> TurnWork {
         return []() -> std::vector<int32_t> { throw std::runtime_error("tool runner broke"); };
       },
       "tool runner broke"},
      {[](const Sample&, size_t) -> TurnWork {
         return [] { return std::vector<int32_t>{4, 100000}; };
       },
       "turn of request 2: token id 100000 outside the vocabulary"}};
  for (const auto& [broken, message] : breaking) {
    std::vector<Sample> failed;
    Request bad = greedy_turn(2, {1, 6}, 2, &failed, false);
    bad.on_turn = broken;
    engine.add_request(std::move(bad));
    bool threw = false;
    for (int i = 0; i < 200 && failed.empty(); ++i) {
      try {
        if (!engine.step()) engine.wait_for_work(std::chrono::milliseconds(20));
      } catch (const std::exception& e) {
        threw = std::string(e.what()).find(message) == 0;
      }
    }
    EXPECT_TRUE(threw) << message;
    ASSERT_EQ(failed.size(), 1u);
    EXPECT_EQ(failed[0].finish_reason, FinishReason::kAborted);
    engine.run_until_idle();  // the engine serves on; the failed rollout left nothing held
    EXPECT_EQ(engine.held_samples(), 0);
  }
}

// A rollout whose turn calls for nothing more leaves in the step that ended it: no thread hop, no
// later step.
TEST(MultiTurn, EngineRunRolloutsThatEndLeaveAtOnce) {
  EngineConfig cfg;
  cfg.max_batch_size = 2;
  Engine engine(engine_model(), cfg);
  std::vector<Sample> out;
  Request r = greedy_turn(0, {1, 5}, 3, &out, false);
  r.on_turn = [](const Sample& s, size_t) -> TurnWork {
    if (s.turns >= 2) return nullptr;
    return [] { return std::vector<int32_t>{4}; };
  };
  engine.add_request(std::move(r));
  int steps = 0;
  bool worked = false;  // whether the last step() ran the model
  while (out.empty() && steps < 100) {
    worked = engine.step();
    if (worked) {
      ++steps;
    } else {
      engine.wait_for_work(std::chrono::milliseconds(20));
    }
  }
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].turns, 2);
  // Three steps sample the first turn; the second turn's prefill samples its first token, two
  // more steps the rest, and that sixth step delivers the rollout.
  EXPECT_TRUE(worked) << "the rollout was delivered by a later, idle step";
  EXPECT_EQ(steps, 6);
  EXPECT_EQ(engine.held_samples(), 0);
}

}  // namespace
}  // namespace streamrl::engine
