// What a server that other programs rely on must hold to (issue 14): a seed reproduces across
// requests, an update that does not fit the model is refused before the swap and leaves the
// server serving, weights belong to a run (a new run takes over, another run's requests are
// refused), and /health answers while more streams are open than the old fixed thread pool had.
#include <gtest/gtest.h>
#include <httplib.h>

#include <future>
#include <sstream>
#include <thread>

#include "../tiny_model.h"
#include "streamrl/dist/weight_wire.h"
#include "streamrl/server/http_server.h"

namespace streamrl::server {
namespace {

using namespace std::chrono_literals;

class ServerFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override { start(/*tied=*/false); }

  void start(bool tied, int max_batch_size = 64) {
    server_.reset();
    model::ModelConfig mc = testing_util::tiny_model_config(100, 4096);
    mc.tie_word_embeddings = tied;
    engine::EngineConfig ec;
    ec.max_batch_size = max_batch_size;
    ec.max_seq_len = 4096;
    engine_ = std::make_unique<engine::Engine>(model::CausalLM(mc, 11), ec);
    ServerConfig config;
    config.threads = 1;
    server_ = std::make_unique<Server>(*engine_, *tok_, config);
  }

  httplib::Client client() {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(30);
    return c;
  }

  httplib::Result post(const std::string& path, const std::string& body,
                       const httplib::Headers& headers = {}) {
    return client().Post(path.c_str(), headers, body, "application/json");
  }

  nlohmann::json health() {
    auto res = client().Get("/health");
    EXPECT_TRUE(res) << "no /health answer";
    return res ? nlohmann::json::parse(res->body) : nullptr;
  }

  struct Reply {
    int status = -1;  // -1: no response
    std::string body;
  };
  // Pushes `tensors` as `version` of `run`; returns the last bucket's (or the refused one's) reply.
  Reply push(int64_t version, const std::string& run,
             const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
    Reply last;
    httplib::Headers headers;
    if (!run.empty()) headers.emplace("X-Streamrl-Run", run);
    for (const auto& b : dist::encode_weight_buckets(version, tensors, 16 << 10)) {
      auto res = client().Post("/update_weights", headers, b, "application/octet-stream");
      last = res ? Reply{res->status, res->body} : Reply{};
      if (last.status != 200) break;
    }
    return last;
  }

  std::string completion_text(const nlohmann::json& body) {
    auto res = post("/v1/completions", body.dump());
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
    if (!res || res->status != 200) return "";
    auto j = nlohmann::json::parse(res->body);
    std::string text;
    for (const auto& c : j["choices"]) text += c["text"].get<std::string>() + "|";
    return text;
  }

  std::unique_ptr<tokenizer::Tokenizer> tok_ = tokenizer::make_tokenizer("char");
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<Server> server_;
};

TEST_F(ServerFaultsTest, SeedReproducesAcrossRequests) {
  const nlohmann::json body = {{"prompt", "12+30="}, {"max_tokens", 24}, {"temperature", 1},
                               {"seed", 42},         {"n", 2},           {"ignore_eos", true}};
  const std::string first = completion_text(body);
  // Other traffic in between must not shift the random streams.
  completion_text({{"prompt", "x"}, {"max_tokens", 5}, {"seed", 1}});
  EXPECT_EQ(completion_text(body), first);
  nlohmann::json other_seed = body;
  other_seed["seed"] = 43;
  EXPECT_NE(completion_text(other_seed), first);
  // The two samples of one request differ (the sample index keys the stream too).
  const size_t bar = first.find('|');
  EXPECT_NE(first.substr(0, bar), first.substr(bar + 1)) << first;
}

TEST_F(ServerFaultsTest, TiedModelRefusesAForeignLmHeadAndKeepsServing) {
  start(/*tied=*/true);
  model::ModelConfig mc = testing_util::tiny_model_config(100, 4096);
  mc.tie_word_embeddings = true;
  model::CausalLM next(mc, 12);
  auto tensors = next->named_weights();
  torch::Tensor embed;
  for (auto& [name, t] : tensors) {
    if (name == "model.embed_tokens.weight") embed = t;
  }
  for (torch::Tensor head : {torch::randn_like(embed), torch::randn({3, 4})}) {
    auto with_head = tensors;
    with_head.emplace_back("lm_head.weight", head);
    Reply res = push(1, "", with_head);
    EXPECT_EQ(res.status, 400) << res.body;
    EXPECT_NE(res.body.find("lm_head.weight"), std::string::npos) << res.body;
    EXPECT_EQ(health()["status"], "ok");
    EXPECT_EQ(health()["weight_version"], 0);
    EXPECT_NE(completion_text({{"prompt", "ab"}, {"max_tokens", 4}}), "");
  }
  // The tied head itself (equal to the embedding) is accepted; the model uses the embedding.
  auto with_head = tensors;
  with_head.emplace_back("lm_head.weight", embed.clone());
  Reply res = push(1, "", with_head);
  EXPECT_EQ(res.status, 200) << res.body;
  EXPECT_NE(completion_text({{"prompt", "ab"}, {"max_tokens", 4}}), "");
  EXPECT_EQ(health()["weight_version"], 1);
  EXPECT_EQ(health()["engine_failures"], 0);
}

TEST_F(ServerFaultsTest, WeightVersionsBelongToARun) {
  model::CausalLM a = testing_util::tiny_model(21, 100, 4096);
  model::CausalLM b = testing_util::tiny_model(22, 100, 4096);
  Reply res = push(5, "run-a", a->named_weights());
  ASSERT_EQ(res.status, 200) << res.body;
  EXPECT_EQ(health()["run_id"], "run-a");
  // A new (or resumed) run starts its own versions and takes the instance over.
  res = push(1, "run-b", b->named_weights());
  ASSERT_EQ(res.status, 200) << res.body;
  EXPECT_EQ(health()["weight_version"], 1);
  EXPECT_EQ(health()["run_id"], "run-b");
  // Within one run, versions must still increase.
  res = push(1, "run-b", b->named_weights());
  EXPECT_EQ(res.status, 400);
  EXPECT_NE(res.body.find("not newer"), std::string::npos) << res.body;

  // Requests of the old run are refused; the new run's samples say whose they are.
  auto generate = [&](const std::string& run) {
    return post("/generate",
                nlohmann::json{{"run_id", run},
                               {"requests", {{{"prompt_ids", {1, 2, 3}}, {"max_new_tokens", 3}}}}}
                    .dump());
  };
  auto old_run = generate("run-a");
  ASSERT_TRUE(old_run);
  EXPECT_EQ(old_run->status, 409) << old_run->body;
  EXPECT_NE(old_run->body.find("run-b"), std::string::npos) << old_run->body;
  auto new_run = generate("run-b");
  ASSERT_TRUE(new_run && new_run->status == 200);
  auto line = nlohmann::json::parse(new_run->body.substr(0, new_run->body.find('\n')));
  EXPECT_EQ(line["run_id"], "run-b");
  EXPECT_EQ(line["weight_version"], 1);
}

TEST_F(ServerFaultsTest, HealthAnswersWhileManyStreamsAreOpen) {
  // More streams than the 32 threads the server used to have. One engine slot: one stream
  // generates, the others wait their turn, and every one holds its connection throughout.
  start(/*tied=*/false, /*max_batch_size=*/1);
  std::vector<std::future<void>> streams;
  std::atomic<int> started{0};
  for (int i = 0; i < 40; ++i) {
    streams.push_back(std::async(std::launch::async, [&, i] {
      httplib::Client c("127.0.0.1", server_->port());
      c.set_read_timeout(120);
      nlohmann::json body = {{"prompt", "s" + std::to_string(i)},
                             {"max_tokens", 4000},
                             {"stream", true},
                             {"ignore_eos", true}};
      started.fetch_add(1);
      c.Post("/v1/completions", body.dump(), "application/json");
    }));
    // Spaced out: a burst of connects beyond the listen backlog waits for SYN retries.
    std::this_thread::sleep_for(25ms);
  }
  while (started.load() < 40) std::this_thread::sleep_for(10ms);
  httplib::Client c("127.0.0.1", server_->port());
  c.set_read_timeout(5);
  // Every stream gets its own connection thread: all 40 are served at once (the old fixed pool
  // of 32 threads left 8 queued, and health behind them).
  int inflight = 0;
  for (auto give_up = std::chrono::steady_clock::now() + 60s;
       inflight < 40 && std::chrono::steady_clock::now() < give_up;) {
    std::this_thread::sleep_for(50ms);
    auto metrics = c.Get("/metrics");
    ASSERT_TRUE(metrics) << "no /metrics answer within 5 s while requests stream";
    const size_t at = metrics->body.find("\nstreamrl_inflight_requests ");
    ASSERT_NE(at, std::string::npos) << metrics->body;
    inflight = std::stoi(metrics->body.substr(at + 28));
  }
  EXPECT_EQ(inflight, 40);
  auto res = c.Get("/health");
  ASSERT_TRUE(res) << "no /health answer within 5 s while 40 requests stream";
  EXPECT_EQ(res->status, 200);
  server_->stop();  // ends the streams
  for (auto& s : streams) s.get();
}

}  // namespace
}  // namespace streamrl::server
