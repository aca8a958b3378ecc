// The instance pool: every sample delivered once to the sink, plan order and batch size respected,
// timeouts, weight updates on every instance. Tiny random model: behaviour, not quality.
#include "streamrl/sgs/instance_pool.h"
#include "../tiny_model.h"

#include <gtest/gtest.h>

#include <set>

#include "streamrl/core/errors.h"

namespace streamrl::sgs {
namespace {

using std::chrono::milliseconds;

model::CausalLM tiny_model() {
  return testing_util::tiny_model(5, 23, 256, /*initializer_range=*/0);
}

PoolConfig pool_config(int instances, int max_batch = 8) {
  PoolConfig pc;
  pc.instances = instances;
  pc.engine.max_batch_size = max_batch;
  pc.engine.max_seq_len = 256;
  return pc;
}

// Exactly `len` tokens per sample: no stop token.
engine::Request fixed(int64_t id, int len, int n = 1) {
  engine::Request r;
  r.request_id = id;
  r.prompt_ids = {1, static_cast<int32_t>(3 + id % 10), 4};
  r.n = n;
  r.params.max_new_tokens = len;
  r.params.seed = 9;
  r.length_estimate = len;
  return r;
}

TEST(InstancePool, DeliversEverySampleOnceFollowingTheAssignment) {
  auto lm = tiny_model();
  SampleQueue q;
  std::mutex mu;
  std::map<int64_t, int> instance_of;
  InstancePool pool(lm, pool_config(2), [&](int inst, engine::Sample&& s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      instance_of[s.request_id] = inst;
    }
    q.push(std::move(s));
  });
  std::vector<engine::Request> reqs;
  std::vector<DispatchItem> items;
  for (int i = 0; i < 10; ++i) {
    reqs.push_back(fixed(i, 3 + 4 * i, i % 3 == 0 ? 2 : 1));
    items.push_back({static_cast<double>(3 + 4 * i), reqs.back().n, 3});
  }
  DispatchConfig dc;
  dc.policy = DispatchPolicy::kRandom;
  dc.max_batch_size = 4;
  Assignment a = dispatch(items, 2, dc);
  pool.submit(std::move(reqs), a);
  ASSERT_TRUE(pool.wait(milliseconds(60000)));
  EXPECT_EQ(pool.pending_samples(), 0);
  auto samples = q.drain();
  ASSERT_EQ(samples.size(), 14u);
  std::set<std::pair<int64_t, int>> seen;
  for (const auto& s : samples) {
    EXPECT_TRUE(seen.insert({s.request_id, s.sample_index}).second);
    EXPECT_EQ(static_cast<int>(s.output_ids.size()), 3 + 4 * s.request_id);
  }
  for (int k = 0; k < 2; ++k) {
    for (size_t i : a.instances[k].order) EXPECT_EQ(instance_of.at(static_cast<int64_t>(i)), k);
  }
}

TEST(InstancePool, BatchSizeOneRunsThePlanOrder) {
  auto lm = tiny_model();
  std::vector<int64_t> order;
  std::mutex mu;
  InstancePool pool(lm, pool_config(1), [&](int, engine::Sample&& s) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(s.request_id);
  });
  // LPT order with one sample at a time: completion order is the admission order, even though
  // shorter requests would finish first in a shared batch.
  std::vector<DispatchItem> items = {{4, 1, 3}, {12, 1, 3}, {8, 1, 3}};
  std::vector<engine::Request> reqs = {fixed(0, 4), fixed(1, 12), fixed(2, 8)};
  DispatchConfig dc;
  dc.policy = DispatchPolicy::kLeastLoaded;
  dc.admission = engine::AdmissionPolicy::kLongestFirst;
  dc.max_batch_size = 1;
  pool.submit(std::move(reqs), dispatch(items, 1, dc));
  ASSERT_TRUE(pool.wait(milliseconds(60000)));
  EXPECT_EQ(order, (std::vector<int64_t>{1, 2, 0}));
  // With room for all three, the shortest finishes first.
  order.clear();
  pool.submit(0, {fixed(0, 4), fixed(1, 12), fixed(2, 8)}, 3);
  ASSERT_TRUE(pool.wait(milliseconds(60000)));
  EXPECT_EQ(order, (std::vector<int64_t>{0, 2, 1}));
}

TEST(InstancePool, WaitRespectsTheTimeout) {
  auto lm = tiny_model();
  SampleQueue q;
  InstancePool pool(lm, pool_config(2), q.sink());
  pool.submit(0, {fixed(0, 200, 4)});
  pool.submit(1, {fixed(1, 200, 4)});
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(pool.wait(milliseconds(0)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1000));
  EXPECT_GT(pool.pending_samples(), 0);
  ASSERT_TRUE(pool.wait(milliseconds(60000)));
  EXPECT_EQ(q.size(), 8u);
  EXPECT_FALSE(q.pop(milliseconds(0)) == std::nullopt);
}

TEST(InstancePool, OwnCallbackAndWeightUpdates) {
  auto lm = tiny_model();
  SampleQueue q;
  InstancePool pool(lm, pool_config(2), q.sink(), 3);
  std::map<std::string, torch::Tensor> w;
  for (auto& [name, t] : lm->named_weights()) w[name] = t.detach().clone() * 0.5;
  pool.update_weights(7, w);
  std::atomic<int> own{0};
  engine::Request r = fixed(5, 6);
  r.on_sample = [&](engine::Sample&& s) {
    EXPECT_EQ(s.weight_version, 7);
    own += 1;
  };
  pool.submit(1, {std::move(r)});
  pool.submit(0, {fixed(6, 6)});
  ASSERT_TRUE(pool.wait(milliseconds(60000)));
  EXPECT_EQ(own.load(), 1);
  auto got = q.drain();
  ASSERT_EQ(got.size(), 1u);  // the request with its own callback bypassed the sink
  EXPECT_EQ(got[0].weight_version, 7);
  w.begin()->second = torch::zeros({1});
  EXPECT_THROW(pool.update_weights(8, w), InputError);
}

TEST(InstancePool, RejectsBadSubmissions) {
  auto lm = tiny_model();
  InstancePool pool(lm, pool_config(2, 4), {});
  EXPECT_THROW(pool.submit(2, {fixed(0, 4)}), InputError);
  EXPECT_THROW(pool.submit(0, {fixed(0, 4, 5)}), InputError);  // n beyond the batch
  EXPECT_THROW(pool.submit(0, {fixed(0, 4)}, 9), InputError);  // batch beyond the engine
  EXPECT_THROW(pool.submit(0, {fixed(0, 300)}), InputError);   // beyond max_seq_len
  Assignment a;
  a.instances.resize(2);
  a.instances[0].order = {0, 0};
  a.instances[0].batch_size = 2;
  EXPECT_THROW(pool.submit({fixed(0, 4)}, a), InputError);  // not exactly once
  EXPECT_EQ(pool.pending_samples(), 0);
}

}  // namespace
}  // namespace streamrl::sgs
