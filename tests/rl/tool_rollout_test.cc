// Multi-turn tool rollouts on the real engine with the real calc tool. A tiny model overfit on one
// calc demonstration must replay it as a rollout: the call, the tool's answer appended (not
// sampled), the next call carrying that value, the answer; and the trainer's log-probs of such a
// multi-turn trajectory must equal the engine's.
#include "streamrl/rl/tool_rollout.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>

#include "streamrl/core/errors.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/tasks/builtin/calc_task.h"
#include "streamrl/tokenizer/char_tokenizer.h"
#include "streamrl/tools/builtin_tools.h"
#include "tiny_model.h"

namespace streamrl::rl {
namespace {

// A tiny model that has memorised `p`'s demonstration (tool results as context, not trained).
model::CausalLM overfit(const PromptEncoder& enc, const tasks::Problem& p) {
  torch::manual_seed(0);
  model::CausalLM lm = testing_util::tiny_model(3, enc.tokenizer().vocab_size(), 512, 0.02);
  const PromptEncoder::Target target = enc.target(p);
  const SequenceBatch b = make_sequence_batch({enc.prompt_ids(p)}, {target.ids}, {&target.trained});
  torch::optim::Adam opt(lm->parameters(), torch::optim::AdamOptions(1e-2));
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    auto out = lm->score(b.tokens, b.valid);
    auto loss = -(out.logprobs * b.completion).sum() / b.num_completion_tokens;
    loss.backward();
    opt.step();
  }
  return lm;
}

engine::Request request(int64_t id, const std::vector<int32_t>& prompt, const PromptEncoder& enc,
                        float temperature, int n = 1) {
  engine::Request r;
  r.request_id = id;
  r.prompt_ids = prompt;
  r.n = n;
  r.params.temperature = temperature;
  r.params.seed = 5;
  r.params.max_new_tokens = 120;
  r.params.stop_token_ids = enc.stop_ids();
  return r;
}

TEST(ToolRollout, ReplaysAMemorisedTwoCallRolloutWithTheRealTool) {
  tokenizer::CharTokenizer tok;
  const PromptEncoder enc(tok);
  const tasks::Problem p = tasks::make_calc_problem({22, 698, 83, 81}, {61, 4, 6, 7});
  model::CausalLM lm = overfit(enc, p);
  const PromptEncoder::Target target = enc.target(p);

  engine::EngineConfig ec;
  ec.max_batch_size = 4;
  ec.max_seq_len = 512;
  engine::Engine engine(lm, ec);
  std::vector<engine::Request> reqs;
  reqs.push_back(request(0, enc.prompt_ids(p), enc, 0.0f, /*n=*/2));
  reqs.push_back(request(1, enc.prompt_ids(tasks::make_calc_problem({5}, {7})), enc, 0.0f));
  ToolRolloutConfig config;
  config.max_turns = 4;
  const auto rollouts =
      run_tool_rollouts(engine, reqs, tools::builtin_tool_runner({"calc"}), tok, config);
  ASSERT_EQ(rollouts.size(), 3u);
  EXPECT_EQ(engine.held_samples(), 0);  // every slot released
  for (int i = 0; i < 2; ++i) {
    const ToolRollout& r = rollouts[i];
    EXPECT_EQ(r.sample.request_id, 0);
    EXPECT_EQ(r.sample.sample_index, i);
    EXPECT_EQ(r.tool_calls, 2);
    EXPECT_EQ(r.tool_errors, 0);
    EXPECT_EQ(r.sample.turns, 3);
    EXPECT_EQ(tok.decode(r.sample.output_ids), p.demonstration);
    EXPECT_EQ(r.sample.output_ids, target.ids);
    EXPECT_EQ(r.sample.sampled_mask, target.trained);  // tool results were appended, not sampled
    EXPECT_EQ(tasks::get_task("calc").verify(p, tok.decode(r.sample.output_ids)), 1.0);
  }
  // The unmemorised prompt ends too, within max_turns, whatever it wrote.
  EXPECT_EQ(rollouts[2].sample.request_id, 1);
  EXPECT_LE(rollouts[2].sample.turns, config.max_turns);

  // The slower orchestrations (bench workflow's baselines) produce the same rollouts: every turn a
  // fresh request re-prefilling the conversation, and turns in lock-step.
  for (const bool keep_kv : {false, true}) {
    ToolRolloutConfig slow = config;
    slow.keep_kv = keep_kv;
    slow.turn_barrier = true;
    engine::Engine other(lm, ec);
    const auto again =
        run_tool_rollouts(other, reqs, tools::builtin_tool_runner({"calc"}), tok, slow);
    ASSERT_EQ(again.size(), rollouts.size());
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(again[i].sample.output_ids, rollouts[i].sample.output_ids) << keep_kv;
      EXPECT_EQ(again[i].sample.sampled_mask, rollouts[i].sample.sampled_mask) << keep_kv;
      EXPECT_EQ(again[i].sample.turns, 3) << keep_kv;
      EXPECT_EQ(again[i].tool_calls, 2) << keep_kv;
    }
    EXPECT_EQ(other.held_samples(), 0);
  }

  // An open workload (requests submitted as their arrival times pass): the same rollouts, the
  // late one timed from its own arrival; arrival lists that do not fit are refused.
  for (const bool engine_turns : {true, false}) {
    ToolRolloutConfig open = config;
    open.engine_turns = engine_turns;
    open.keep_kv = engine_turns;
    open.arrival_s = {0.0, 0.2};
    engine::Engine other(lm, ec);
    const auto t0 = std::chrono::steady_clock::now();
    const auto again =
        run_tool_rollouts(other, reqs, tools::builtin_tool_runner({"calc"}), tok, open);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(again.size(), rollouts.size());
    for (size_t i = 0; i < again.size(); ++i) {
      EXPECT_EQ(again[i].sample.output_ids, rollouts[i].sample.output_ids) << engine_turns;
    }
    EXPECT_GE(wall, 0.2) << "the second request was submitted before its arrival";
    EXPECT_LE(again[2].seconds, wall - 0.2 + 1e-3) << "not timed from its arrival";
  }
  for (const std::vector<double>& bad :
       std::vector<std::vector<double>>{{0.0}, {0.2, 0.1}, {0.0, INFINITY}}) {
    ToolRolloutConfig open = config;
    open.arrival_s = bad;
    engine::Engine other(lm, ec);
    EXPECT_THROW(run_tool_rollouts(other, reqs, tools::builtin_tool_runner({"calc"}), tok, open),
                 InputError);
  }
}

TEST(ToolRollout, TrainerLogprobsOfAMultiTurnTrajectoryMatchTheEngines) {
  tokenizer::CharTokenizer tok;
  const PromptEncoder enc(tok);
  const tasks::Problem p = tasks::make_calc_problem({74, 59, 350, 12}, {49, 3, 3, 8});
  model::CausalLM lm = overfit(enc, p);
  engine::EngineConfig ec;
  ec.max_batch_size = 4;
  ec.max_seq_len = 512;
  engine::Engine engine(lm, ec);
  const auto rollouts = run_tool_rollouts(engine, {request(0, enc.prompt_ids(p), enc, 1.0f, 4)},
                                          tools::builtin_tool_runner({"calc"}), tok, {});
  ASSERT_EQ(rollouts.size(), 4u);
  torch::NoGradGuard no_grad;
  int multi_turn = 0;
  for (const ToolRollout& r : rollouts) {
    const engine::Sample& s = r.sample;
    multi_turn += s.turns > 1;
    ASSERT_EQ(s.logprobs.size(), s.output_ids.size());
    const SequenceBatch b = make_sequence_batch(
        {s.prompt_ids}, {s.output_ids}, {s.sampled_mask.empty() ? nullptr : &s.sampled_mask});
    const torch::Tensor lp = lm->score(b.tokens, b.valid).logprobs[0];
    for (size_t i = 0; i < s.output_ids.size(); ++i) {
      const bool sampled = s.sampled_mask.empty() || s.sampled_mask[i];
      if (!sampled) {
        EXPECT_EQ(s.logprobs[i], 0.0f);
        continue;
      }
      EXPECT_NEAR(lp[s.prompt_ids.size() + i].item<double>(), s.logprobs[i], 2e-4) << i;
    }
  }
  EXPECT_GT(multi_turn, 0);
}

}  // namespace
}  // namespace streamrl::rl
