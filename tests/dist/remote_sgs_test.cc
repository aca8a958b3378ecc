// Remote SGS client and pool against real `streamrl serve` servers in this process (tiny random
// model, char tokenizer, localhost): samples stream back per request id, weights travel as
// buckets and change what the instance generates, a dead URL is one clear error naming it, and a
// pool re-dispatches a dying instance's unfinished requests so every group still gets all of its
// samples.
#include "../tiny_model.h"
#include "streamrl/dist/remote_sgs_pool.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <set>
#include <thread>

#include "run_binary.h"
#include "sgs_fixtures.h"
#include "streamrl/core/errors.h"
#include "streamrl/dist/launcher.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/server/http_server.h"

namespace streamrl::dist {
namespace {

using namespace std::chrono_literals;
using namespace sgs_testing;  // NOLINT: the shared fixtures of sgs_fixtures.h

TEST(RemoteSgsClient, SamplesStreamBackPerRequest) {
  Instance inst(1);
  std::vector<FailedRequests> failures;
  RemoteSgsClient client(inst.url, fast_options(),
                         [&](FailedRequests f) { failures.push_back(std::move(f)); });
  Inbox inbox;
  client.submit({request(10, 2, 5, &inbox), request(11, 3, 8, &inbox)});
  client.submit({request(12, 1, 3, &inbox)});
  ASSERT_TRUE(inbox.wait_for(6));
  std::set<std::pair<int64_t, int32_t>> seen;
  for (const auto& s : inbox.samples) {
    seen.emplace(s.request_id, s.sample_index);
    EXPECT_EQ(s.prompt_ids, request(s.request_id, 1, 1).prompt_ids);
    EXPECT_EQ(s.output_ids.size(), s.logprobs.size());
    EXPECT_LE(s.output_ids.size(), 8u);
    EXPECT_EQ(s.weight_version, 0);
  }
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_TRUE(seen.count({11, 2}));
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (!client.unfinished().empty() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(client.unfinished().empty());
  EXPECT_EQ(client.outstanding_samples(), 0);
  EXPECT_TRUE(failures.empty());
  EXPECT_EQ(client.error(), "");
  EXPECT_THROW(client.submit({request(13, 1, 3)}), InputError);  // no on_sample
}

TEST(RemoteSgsClient, WeightsTravelInBucketsAndChangeTheSamples) {
  Instance inst(1);
  RemoteSgsOptions o = fast_options();
  o.max_bucket_bytes = 8192;  // the tiny model needs several buckets
  RemoteSgsClient client(inst.url, o, nullptr);
  EXPECT_EQ(client.health().weight_version, 0);
  EXPECT_DOUBLE_EQ(client.health().busy_seconds, 0.0);  // no step yet

  // Greedy samples from the instance's own weights and from another model's.
  auto greedy = [&](int64_t id) {
    Inbox inbox;
    engine::Request r = request(id, 1, 12, &inbox);
    r.prompt_ids = {1, 9, 9};
    r.params.temperature = 0;
    client.submit({std::move(r)});
    EXPECT_TRUE(inbox.wait_for(1));
    return inbox.samples.at(0);
  };
  const engine::Sample before = greedy(1);
  model::CausalLM other = tiny_model(2);
  client.update_weights(5, other->named_weights());
  EXPECT_EQ(client.health().weight_version, 5);
  EXPECT_GT(client.health().busy_seconds, 0.0);  // it has generated
  const engine::Sample after = greedy(2);
  EXPECT_EQ(after.weight_version, 5);
  EXPECT_NE(before.output_ids, after.output_ids);

  // Pushing an older version is refused with the server's reason and the URL.
  try {
    client.update_weights(3, other->named_weights());
    ADD_FAILURE() << "an older weight version was accepted";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find(inst.url), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not newer"), std::string::npos) << e.what();
  }
}

TEST(RemoteSgsClient, DeadUrlIsOneClearError) {
  const std::string url = "http://127.0.0.1:" + std::to_string(free_port());
  std::mutex mu;
  std::condition_variable cv;
  std::vector<FailedRequests> failures;
  RemoteSgsClient client(url, fast_options(), [&](FailedRequests f) {
    std::lock_guard<std::mutex> lock(mu);
    failures.push_back(std::move(f));
    cv.notify_all();
  });
  try {
    client.health();
    ADD_FAILURE() << "health of a dead URL succeeded";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find(url + " is unreachable"), std::string::npos) << e.what();
  }
  EXPECT_THROW(client.update_weights(1, tiny_model(1)->named_weights()), RuntimeFailure);

  Inbox inbox;
  client.submit({request(1, 2, 5, &inbox), request(2, 1, 5, &inbox)});
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return !failures.empty(); }));
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].url, url);
  EXPECT_NE(failures[0].error.find(url), std::string::npos) << failures[0].error;
  ASSERT_EQ(failures[0].requests.size(), 2u);
  EXPECT_EQ(failures[0].requests[0].n, 2);
  EXPECT_EQ(failures[0].missing[0], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(client.error(), failures[0].error);
  EXPECT_TRUE(client.unfinished().empty());
}

TEST(RemoteSgsPool, DyingInstanceLosesNoRequest) {
  Instance a(1), b(1);
  Inbox inbox;
  RemoteSgsPool pool({a.url, b.url}, fast_options(),
                     [&](engine::Sample&& s) { inbox.push(std::move(s)); });
  // Least-loaded placement alternates a, b, a, b...: requests 0 and 1 are short, the rest long,
  // so when the first sample arrives instance a still holds requests 2, 4 and 6.
  std::map<int64_t, int> n_of;
  std::vector<engine::Request> reqs = two_short_then_long(&n_of);
  pool.submit(std::move(reqs));
  ASSERT_TRUE(inbox.wait_for(1));
  a.server->stop();
  ASSERT_TRUE(inbox.wait_for(16, 120s)) << inbox.size() << " of 16 samples";
  std::this_thread::sleep_for(100ms);  // a duplicate would arrive now
  expect_complete_groups(inbox.samples, n_of);
  EXPECT_GE(pool.redispatched_requests(), 1);
  EXPECT_EQ(pool.live_urls(), std::vector<std::string>{b.url});
  pool.check_alive();

  // The survivor still takes weights; the dead one is skipped.
  pool.update_weights(1, tiny_model(3)->named_weights());
  EXPECT_EQ(b.server_version(), 1);  // installed; the engine swaps at its next step
}

TEST(RemoteSgsPool, UnreachableInstanceIsSkippedAndAllDeadIsAnError) {
  Instance live(1);
  const std::string dead = "http://127.0.0.1:" + std::to_string(free_port());
  Inbox inbox;
  RemoteSgsPool pool({dead, live.url}, fast_options(),
                     [&](engine::Sample&& s) { inbox.push(std::move(s)); });
  std::map<int64_t, int> n_of;
  std::vector<engine::Request> reqs;
  for (int64_t id = 0; id < 4; ++id) {
    reqs.push_back(request(id, 3, 6));
    n_of[id] = 3;
  }
  pool.submit(std::move(reqs));
  ASSERT_TRUE(inbox.wait_for(12)) << inbox.size() << " of 12 samples";
  expect_complete_groups(inbox.samples, n_of);
  EXPECT_EQ(pool.live_urls(), std::vector<std::string>{live.url});

  live.server->stop();
  pool.submit({request(9, 1, 4)});
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (!pool.live_urls().empty() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(10ms);
  }
  try {
    pool.check_alive();
    ADD_FAILURE() << "a pool of dead instances is alive";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find(dead), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(live.url), std::string::npos) << e.what();
  }
  EXPECT_THROW(pool.submit({request(10, 1, 4)}), RuntimeFailure);
}

TEST(RemoteSgsPool, SilentInstanceFailsItsHealthCheckAndLosesNoRequest) {
  BlackHole silent;
  Instance live(1);
  RemoteSgsOptions o = fast_options();
  o.stream_idle_timeout_s = 60;  // the stream alone would wait this long
  o.health_interval_s = 0.3;
  o.health_timeout_s = 0.5;
  Inbox inbox;
  RemoteSgsPool pool({silent.url, live.url}, o,
                     [&](engine::Sample&& s) { inbox.push(std::move(s)); });
  std::map<int64_t, int> n_of;
  std::vector<engine::Request> reqs = four_pairs(&n_of);
  const auto start = std::chrono::steady_clock::now();
  pool.submit(std::move(reqs));
  ASSERT_TRUE(inbox.wait_for(8, 20s)) << inbox.size() << " of 8 samples";
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("silent instance detected and its requests re-dispatched in %.2f s\n", took);
  EXPECT_LT(took, 10.0);
  expect_complete_groups(inbox.samples, n_of);
  EXPECT_EQ(pool.live_urls(), std::vector<std::string>{live.url});
  EXPECT_EQ(pool.redispatched_requests(), 2);
}

TEST(RemoteSgsPool, KilledServeProcessLosesNoRequest) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("remote_sgs_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  const std::string ckpt = (dir / "tiny").string();
  model::CausalLM lm = tiny_model(4);
  model::save_checkpoint(ckpt, lm, tokenizer::make_tokenizer("char")->to_json());
  testing_util::ServeProcess a(ckpt), b(ckpt);
  const std::string url_a = a.wait_for_url(), url_b = b.wait_for_url();
  ASSERT_FALSE(url_a.empty() || url_b.empty());

  Inbox inbox;
  RemoteSgsPool pool({url_a, url_b}, fast_options(),
                     [&](engine::Sample&& s) { inbox.push(std::move(s)); });
  pool.update_weights(1, tiny_model(5)->named_weights());  // both processes install version 1
  std::map<int64_t, int> n_of;
  std::vector<engine::Request> reqs = two_short_then_long(&n_of);
  pool.submit(std::move(reqs));
  ASSERT_TRUE(inbox.wait_for(1));
  a.kill_now();  // mid-generation, no goodbye
  ASSERT_TRUE(inbox.wait_for(16, 120s)) << inbox.size() << " of 16 samples";
  std::this_thread::sleep_for(100ms);
  expect_complete_groups(inbox.samples, n_of);
  for (const auto& s : inbox.samples) EXPECT_EQ(s.weight_version, 1);
  EXPECT_GE(pool.redispatched_requests(), 1);
  EXPECT_EQ(pool.live_urls(), std::vector<std::string>{url_b});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace streamrl::dist
