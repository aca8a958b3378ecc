// Multi-turn rollouts in the engine (issue 18): a held sample keeps its KV cache between turns and
// prefills only what is appended; its tokens and log-probs equal those of re-prefilling the whole
// conversation as a new prompt.
#include <gtest/gtest.h>

#include "engine_model.h"
#include "streamrl/core/errors.h"
#include "streamrl/engine/engine.h"

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

}  // namespace
}  // namespace streamrl::engine
