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
#include "streamrl/core/errors.h"
#include "streamrl/dist/launcher.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/server/http_server.h"

namespace streamrl::dist {
namespace {

using namespace std::chrono_literals;

model::CausalLM tiny_model(uint64_t seed) { return testing_util::tiny_model(seed, 100, 1024); }

// One SGS instance: an engine behind the HTTP server on a free port.
struct Instance {
  explicit Instance(uint64_t seed) {
    engine::EngineConfig ec;
    ec.max_batch_size = 16;
    ec.max_seq_len = 1024;
    engine = std::make_unique<engine::Engine>(tiny_model(seed), ec);
    server::ServerConfig sc;
    sc.threads = 1;
    server = std::make_unique<server::Server>(*engine, *tok, sc);
    url = "http://127.0.0.1:" + std::to_string(server->port());
  }
  std::unique_ptr<tokenizer::Tokenizer> tok = tokenizer::make_tokenizer("char");
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<server::Server> server;
  std::string url;
};

// Thread-safe collector of samples.
struct Inbox {
  void push(engine::Sample&& s) {
    std::lock_guard<std::mutex> lock(mu);
    samples.push_back(std::move(s));
    cv.notify_all();
  }
  bool wait_for(size_t n, std::chrono::seconds timeout = 60s) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [&] { return samples.size() >= n; });
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return samples.size();
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<engine::Sample> samples;
};

engine::Request request(int64_t id, int n, int max_new_tokens, Inbox* inbox = nullptr) {
  engine::Request r;
  r.request_id = id;
  r.prompt_ids = {1, static_cast<int32_t>(5 + id % 50), 7};
  r.n = n;
  r.params.max_new_tokens = max_new_tokens;
  r.params.seed = 1000 + id;
  if (inbox) r.on_sample = [inbox](engine::Sample&& s) { inbox->push(std::move(s)); };
  return r;
}

// Eight requests of 2 samples: 0 and 1 end after one token, the rest run 300. Placement
// alternates between two instances, so when the first sample arrives the first instance still
// holds requests 2, 4 and 6. Fills `n_of` with each request's sample count.
std::vector<engine::Request> two_short_then_long(std::map<int64_t, int>* n_of) {
  std::vector<engine::Request> reqs;
  for (int64_t id = 0; id < 8; ++id) {
    reqs.push_back(request(id, 2, id < 2 ? 1 : 300));
    (*n_of)[id] = 2;
  }
  return reqs;
}

RemoteSgsOptions fast_options() {
  RemoteSgsOptions o;
  o.connect_timeout_s = 2;
  o.stream_idle_timeout_s = 30;
  o.weight_timeout_s = 10;
  o.health_timeout_s = 2;
  o.health_interval_s = 0;
  return o;
}

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

// Every request's samples arrived exactly once, with indices 0..n-1.
void expect_complete_groups(const std::vector<engine::Sample>& samples,
                            const std::map<int64_t, int>& n_of) {
  std::map<int64_t, std::set<int32_t>> got;
  for (const auto& s : samples) {
    EXPECT_TRUE(got[s.request_id].insert(s.sample_index).second)
        << "request " << s.request_id << " sample " << s.sample_index << " arrived twice";
  }
  for (const auto& [id, n] : n_of) {
    ASSERT_EQ(got[id].size(), static_cast<size_t>(n)) << "request " << id;
    EXPECT_EQ(*got[id].rbegin(), n - 1) << "request " << id;
  }
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
  EXPECT_EQ(b.engine->stats().weight_version, 1);
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

// A host that vanished: TCP connections complete (the kernel's backlog) but nothing ever answers.
class BlackHole {
 public:
  BlackHole() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    EXPECT_EQ(listen(fd_, 64), 0);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    url = "http://127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  }
  ~BlackHole() { close(fd_); }
  std::string url;

 private:
  int fd_ = -1;
};

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
  std::vector<engine::Request> reqs;
  for (int64_t id = 0; id < 4; ++id) {
    reqs.push_back(request(id, 2, 6));
    n_of[id] = 2;
  }
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
