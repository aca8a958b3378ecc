// The engine thread's failure handling: a step that throws either stops the loop with the error
// (a trainer's pool) or aborts what the engine held, reloads the last installed weights and
// serves on (a server).
#include "streamrl/engine/engine_thread.h"
#include "engine_model.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <stdexcept>

#include "streamrl/core/errors.h"

namespace streamrl::engine {
namespace {

using namespace std::chrono_literals;

// Thread-safe sample collector.
struct Inbox {
  void push(Sample&& s) {
    std::lock_guard<std::mutex> lock(mu);
    samples.push_back(std::move(s));
    cv.notify_all();
  }
  bool wait_for(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 30s, [&] { return samples.size() >= n; });
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Sample> samples;
};

Request greedy(int64_t id, int len, Inbox* inbox) {
  Request r;
  r.request_id = id;
  r.prompt_ids = {1, 5, 4};
  r.params.max_new_tokens = len;
  r.params.temperature = 0;
  r.on_sample = [inbox](Sample&& s) { inbox->push(std::move(s)); };
  return r;
}

// A request whose finished sample makes the step throw, as a bug on the engine thread would.
Request poisoned(int64_t id) {
  Request r;
  r.request_id = id;
  r.prompt_ids = {1, 2};
  r.params.max_new_tokens = 1;
  r.on_sample = [](Sample&&) { throw std::runtime_error("poisoned sample"); };
  return r;
}

std::map<std::string, torch::Tensor> weights_of(model::CausalLM& m) {
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, t] : m->named_weights()) out[name] = t.detach().clone();
  return out;
}

TEST(EngineThread, RecoversFromAFailedStepWithTheLastGoodWeights) {
  EngineConfig cfg;
  cfg.max_batch_size = 8;
  Engine engine(engine_model(1), cfg);
  EngineThread thread(engine, {}, OnEngineFailure::kRecover);
  model::CausalLM v1 = engine_model(2);
  engine.update_weights(1, weights_of(v1));
  Inbox before;
  engine.add_request(greedy(1, 6, &before));
  ASSERT_TRUE(before.wait_for(1));
  EXPECT_EQ(before.samples[0].weight_version, 1);

  // The weights get damaged (as by an update that failed half-copied), then a step throws while
  // a long request runs: the long one is aborted and the last good weights come back.
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : engine.model()->named_weights()) t.zero_();
  }
  Inbox victim;
  engine.add_request(greedy(2, 100, &victim));
  engine.add_request(poisoned(3));
  ASSERT_TRUE(victim.wait_for(1));
  EXPECT_EQ(victim.samples[0].finish_reason, FinishReason::kAborted);
  EXPECT_EQ(thread.failures(), 1);
  EXPECT_EQ(thread.last_failure(), "poisoned sample");
  EXPECT_EQ(thread.error(), "");

  // Serving goes on with version 1's weights: the same greedy sample as before the failure.
  Inbox after;
  engine.add_request(greedy(4, 6, &after));
  ASSERT_TRUE(after.wait_for(1));
  EXPECT_EQ(after.samples[0].output_ids, before.samples[0].output_ids);
  EXPECT_EQ(after.samples[0].weight_version, 1);
  const auto good = weights_of(v1);
  for (auto& [name, t] : engine.model()->named_weights()) {
    EXPECT_TRUE(torch::equal(t, good.at(name))) << name;
  }
}

TEST(EngineThread, StopModeEndsTheLoopWithTheError) {
  Engine engine(engine_model(1), EngineConfig{});
  EngineThread thread(engine);
  engine.add_request(poisoned(1));
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  while (thread.error().empty() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(thread.error(), "poisoned sample");
  EXPECT_EQ(thread.failures(), 0);
}

TEST(EngineThread, UpdateThatDoesNotFitIsRefusedBeforeTheSwap) {
  model::ModelConfig mc = testing_util::tiny_model_config(23, 128);
  mc.tie_word_embeddings = true;
  Engine engine(model::CausalLM(mc, 1), EngineConfig{});
  model::CausalLM other(mc, 2);
  auto w = weights_of(other);
  w["lm_head.weight"] = torch::randn_like(w.at("model.embed_tokens.weight"));
  EXPECT_THROW(engine.update_weights(1, w), InputError);
  w["lm_head.weight"] = w.at("model.embed_tokens.weight").clone();
  engine.update_weights(1, w);  // the tied head itself is fine
  w["model.norm.weight"] = torch::zeros({3}, torch::kInt64);
  EXPECT_THROW(engine.update_weights(2, w), InputError);
}

}  // namespace
}  // namespace streamrl::engine
