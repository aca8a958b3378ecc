// The SGS HTTP server in-process on a free port, driven by httplib's client: OpenAI completions
// (plain and SSE), native streaming generate, weight updates, metrics, every error status, client
// disconnects, timeouts and concurrent clients. A tiny random model and the char tokenizer.
#include "streamrl/server/http_server.h"
#include "../tiny_model.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <map>
#include <sstream>
#include <thread>

#include "streamrl/core/errors.h"
#include "streamrl/engine/static_batch.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/server/openai_api.h"

namespace streamrl::server {
namespace {

model::CausalLM tiny_model(uint64_t seed) { return testing_util::tiny_model(seed, 100, 4096); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { start(ServerConfig{}); }

  void start(ServerConfig config) {
    server_.reset();
    engine::EngineConfig ec;
    ec.max_batch_size = 8;
    ec.max_seq_len = 4096;
    engine_ = std::make_unique<engine::Engine>(tiny_model(11), ec);
    config.threads = 1;
    config.model_name = "tiny";
    config.max_body_bytes = 16 << 10;
    config.max_request_samples = 64;
    server_ = std::make_unique<Server>(*engine_, *tok_, config);
  }

  httplib::Client client() {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(30);
    return c;
  }

  // POSTs `body` and checks the status; returns the parsed JSON response.
  nlohmann::json post(const std::string& path, const nlohmann::json& body, int status = 200) {
    auto res = client().Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    if (!res) return nullptr;
    EXPECT_EQ(res->status, status) << res->body;
    return nlohmann::json::parse(res->body, nullptr, false);
  }

  nlohmann::json get(const std::string& path) {
    auto res = client().Get(path.c_str());
    EXPECT_TRUE(res && res->status == 200) << path;
    return res ? nlohmann::json::parse(res->body) : nullptr;
  }

  // The error message of a failed request, after checking its status and OpenAI error shape.
  std::string error_of(const std::string& path, const std::string& body, int status) {
    auto res = client().Post(path.c_str(), body, "application/json");
    if (!res) return "no response: " + httplib::to_string(res.error());
    EXPECT_EQ(res->status, status) << res->body;
    auto j = nlohmann::json::parse(res->body, nullptr, false);
    EXPECT_TRUE(j.contains("error")) << res->body;
    if (!j.contains("error")) return "";
    EXPECT_EQ(j["error"]["type"], status == 504 ? "timeout_error" : "invalid_request_error");
    return j["error"]["message"].get<std::string>();
  }

  double metric(const std::string& name) {
    auto res = client().Get("/metrics");
    const std::string key = "\n" + name + " ";
    const size_t at = res ? res->body.find(key) : std::string::npos;
    EXPECT_NE(at, std::string::npos) << name;
    return at == std::string::npos ? -1 : std::stod(res->body.substr(at + key.size()));
  }

  std::unique_ptr<tokenizer::Tokenizer> tok_ = tokenizer::make_tokenizer("char");
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<Server> server_;
};

TEST_F(ServerTest, CompletionHasOpenAiShape) {
  auto j = post("/v1/completions", {{"model", "m1"}, {"prompt", "1+1="}, {"max_tokens", 5}});
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "m1");
  EXPECT_TRUE(j["id"].get<std::string>().starts_with("cmpl-"));
  EXPECT_TRUE(j["created"].is_number_integer());
  ASSERT_EQ(j["choices"].size(), 1u);
  const auto& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_TRUE(c["text"].is_string());
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_TRUE(c["finish_reason"] == "stop" || c["finish_reason"] == "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);  // <bos> + 4 characters
  EXPECT_LE(j["usage"]["completion_tokens"].get<int>(), 5);
  EXPECT_EQ(j["usage"]["total_tokens"].get<int>(), 5 + j["usage"]["completion_tokens"].get<int>());
  EXPECT_EQ(post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}})["model"], "tiny");
}

TEST_F(ServerTest, SeveralPromptsAndSamplesAreOrderedByIndex) {
  auto j = post("/v1/completions", {{"prompt", {"ab", "cd"}}, {"n", 3}, {"max_tokens", 4}});
  ASSERT_EQ(j["choices"].size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(j["choices"][i]["index"], i);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 6);  // each prompt counted once
}

TEST_F(ServerTest, LogprobsMatchTheNativeApiAndTheTokens) {
  auto c = post("/v1/completions", {{"prompt", "7*6="},
                                    {"max_tokens", 12},
                                    {"logprobs", 0},
                                    {"temperature", 0},
                                    {"ignore_eos", true}});
  const auto& lp = c["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 12u);
  std::string joined;
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(lp["text_offset"][i], joined.size());
    joined += lp["tokens"][i].get<std::string>();
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
  }
  EXPECT_EQ(joined, c["choices"][0]["text"]);

  auto res = client().Post("/generate",
                           nlohmann::json{{"requests",
                                           {{{"prompt", "7*6="},
                                             {"max_new_tokens", 12},
                                             {"temperature", 0},
                                             {"ignore_eos", true}}}}}
                               .dump(),
                           "application/json");
  ASSERT_TRUE(res && res->status == 200);
  auto line = nlohmann::json::parse(lines_of(res->body).at(0));
  EXPECT_EQ(line["text"], c["choices"][0]["text"]);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(line["logprobs"][i].get<double>(), lp["token_logprobs"][i].get<double>(), 1e-6);
  }
}

TEST_F(ServerTest, StopSequencesCutTheText) {
  nlohmann::json body = {{"prompt", "abc"},
                         {"max_tokens", 30},
                         {"temperature", 0},
                         {"ignore_eos", true},
                         {"logprobs", 0}};
  auto full = post("/v1/completions", body)["choices"][0];
  const auto tokens = full["logprobs"]["tokens"].get<std::vector<std::string>>();
  // A stop sequence made of two whole tokens from the middle of the greedy completion.
  size_t k = 2;
  while (k + 1 < tokens.size() && (tokens[k].empty() || tokens[k + 1].empty())) ++k;
  ASSERT_LT(k + 1, tokens.size());
  const std::string stop = tokens[k] + tokens[k + 1];
  const std::string text = full["text"];
  const size_t cut = text.find(stop);
  // Only tokens wholly before the match are returned (none that reaches into it).
  size_t kept = 0;
  for (size_t covered = 0; kept < tokens.size() && covered + tokens[kept].size() <= cut; ++kept) {
    covered += tokens[kept].size();
  }

  body["stop"] = {stop};
  auto j = post("/v1/completions", body);
  EXPECT_EQ(j["choices"][0]["text"], text.substr(0, cut));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["completion_tokens"], kept);
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), kept);
}

TEST_F(ServerTest, StreamSendsOneEventPerTokenThenUsageAndDone) {
  nlohmann::json body = {{"prompt", "hi"},
                         {"n", 2},
                         {"max_tokens", 6},
                         {"stream", true},
                         {"seed", 4},
                         {"ignore_eos", true},
                         {"stream_options", {{"include_usage", true}}}};
  auto res = client().Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res && res->status == 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  auto events = lines_of(res->body);
  // Per choice: 6 token events and a last one with the finish reason; then usage and [DONE].
  ASSERT_EQ(events.size(), 2u * 7 + 2) << res->body;
  for (const auto& e : events) ASSERT_TRUE(e.starts_with("data: ")) << e;
  EXPECT_EQ(events.back(), "data: [DONE]");
  std::map<int, std::string> text;
  std::map<int, int> token_events;
  std::map<int, std::string> finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    auto chunk = nlohmann::json::parse(events[i].substr(6));
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_TRUE(chunk["usage"].is_null());
    ASSERT_EQ(chunk["choices"].size(), 1u);
    const auto& c = chunk["choices"][0];
    const int index = c["index"].get<int>();
    EXPECT_TRUE(finish[index].empty()) << "an event after the choice finished";
    if (c["finish_reason"].is_null()) {
      token_events[index] += 1;
      text[index] += c["text"].get<std::string>();
    } else {
      finish[index] = c["finish_reason"];
    }
  }
  EXPECT_EQ(token_events, (std::map<int, int>{{0, 6}, {1, 6}}));
  EXPECT_EQ(finish, (std::map<int, std::string>{{0, "length"}, {1, "length"}}));
  auto usage = nlohmann::json::parse(events[events.size() - 2].substr(6));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 12);
  // The same seed gives the same text without streaming.
  body["stream"] = false;
  body.erase("stream_options");
  auto whole = post("/v1/completions", body);
  EXPECT_EQ(whole["choices"][0]["text"], text[0]);
  EXPECT_EQ(whole["choices"][1]["text"], text[1]);
}

TEST_F(ServerTest, GenerateStreamsOneLinePerSample) {
  nlohmann::json body = {
      {"requests",
       {{{"id", "a"}, {"prompt", "xy"}, {"n", 2}, {"max_new_tokens", 3}},
        {{"id", 7}, {"prompt_ids", {1, 9, 9}}, {"max_new_tokens", 20}, {"ignore_eos", true}}}}};
  auto res = client().Post("/generate", body.dump(), "application/json");
  ASSERT_TRUE(res && res->status == 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/x-ndjson");
  EXPECT_EQ(res->get_header_value("Transfer-Encoding"), "chunked");
  auto lines = lines_of(res->body);
  ASSERT_EQ(lines.size(), 3u);
  // Completion order: the 20-token sample finishes last.
  auto last = nlohmann::json::parse(lines[2]);
  EXPECT_EQ(last["id"], 7);
  EXPECT_EQ(last["prompt_ids"], nlohmann::json({1, 9, 9}));
  EXPECT_EQ(last["output_ids"].size(), 20u);
  EXPECT_EQ(last["finish_reason"], "length");
  std::set<int> samples;
  for (int i = 0; i < 2; ++i) {
    auto s = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(s["id"], "a");
    samples.insert(s["sample_index"].get<int>());
    EXPECT_EQ(s["logprobs"].size(), s["output_ids"].size());
    EXPECT_EQ(s["text"], tok_->decode(s["output_ids"].get<std::vector<int32_t>>()));
    EXPECT_EQ(s["weight_version"], 0);
    for (const char* key : {"queue_s", "prefill_s", "decode_s"}) EXPECT_GE(s[key], 0.0);
  }
  EXPECT_EQ(samples, (std::set<int>{0, 1}));
}

TEST_F(ServerTest, WeightUpdateInstallsANewVersion) {
  model::CausalLM other = tiny_model(99);
  auto buckets = dist::encode_weight_buckets(5, other->named_weights(), 16 << 10);
  ASSERT_GT(buckets.size(), 2u);
  auto cli = client();
  for (size_t i = 0; i < buckets.size(); ++i) {
    auto res = cli.Post("/update_weights", buckets[i], "application/octet-stream");
    ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "");
    auto j = nlohmann::json::parse(res->body);
    EXPECT_EQ(j["version"], 5);
    EXPECT_EQ(j["buckets_received"], i + 1);
    EXPECT_EQ(j["bucket_count"], buckets.size());
    EXPECT_EQ(j["complete"], i + 1 == buckets.size());
    if (i == 0) EXPECT_EQ(get("/weights/version")["pending"]["buckets_received"], 1);
  }
  const nlohmann::json health = get("/health");
  EXPECT_EQ(health["status"], "ok");
  EXPECT_EQ(health["weight_version"], 5);
  EXPECT_GE(health["busy_seconds"].get<double>(), 0.0);
  EXPECT_TRUE(get("/weights/version")["pending"].is_null());

  // New samples carry v5 and are what the new weights generate.
  nlohmann::json body = {{"requests",
                          {{{"prompt_ids", {1, 20, 30}},
                            {"max_new_tokens", 8},
                            {"temperature", 0},
                            {"ignore_eos", true}}}}};
  auto res = cli.Post("/generate", body.dump(), "application/json");
  ASSERT_TRUE(res && res->status == 200);
  auto line = nlohmann::json::parse(lines_of(res->body).at(0));
  EXPECT_EQ(line["weight_version"], 5);
  engine::GenerateRequest ref;
  ref.prompt_ids = {1, 20, 30};
  ref.params.max_new_tokens = 8;
  ref.params.temperature = 0;
  EXPECT_EQ(line["output_ids"].get<std::vector<int32_t>>(),
            engine::generate_static(other, {ref}).at(0).output_ids);
  EXPECT_EQ(metric("streamrl_weight_version"), 5);

  // Old versions, corrupt buckets and non-buckets are refused with the reason.
  auto refused = [&](const std::string& bytes, const std::string& needle) {
    auto r = cli.Post("/update_weights", bytes, "application/octet-stream");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(r->body.find(needle), std::string::npos) << r->body;
  };
  refused(buckets[0], "not newer than the installed version 5");
  std::string corrupt = dist::encode_weight_buckets(6, other->named_weights(), 16 << 10)[0];
  corrupt[corrupt.size() / 2] ^= 0x10;
  refused(corrupt, "checksum mismatch");
  refused("{\"weights\": 1}", "bad magic");
  EXPECT_EQ(get("/health")["weight_version"], 5);
}

TEST_F(ServerTest, MetricsArePrometheusText) {
  post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 4}, {"ignore_eos", true}});
  auto res = client().Get("/metrics");
  ASSERT_TRUE(res && res->status == 200);
  EXPECT_TRUE(res->get_header_value("Content-Type").starts_with("text/plain"));
  EXPECT_NE(res->body.find("# HELP streamrl_generated_tokens_total "), std::string::npos);
  EXPECT_NE(res->body.find("# TYPE streamrl_generated_tokens_total counter"), std::string::npos);
  EXPECT_GE(metric("streamrl_generated_tokens_total"), 4);
  EXPECT_GE(metric("streamrl_finished_samples_total"), 1);
  EXPECT_GE(metric("streamrl_engine_steps_total"), 1);
  EXPECT_GE(metric("streamrl_running_samples"), 0);
}

TEST_F(ServerTest, ErrorsHaveStatusAndOneLineReason) {
  EXPECT_EQ(error_of("/v1/completions", "{\"prompt\": ", 400), "request body is not valid JSON");
  EXPECT_NE(
      error_of("/v1/completions", R"({"prompt": "a", "temperature": -1})", 400).find("temperature"),
      std::string::npos);
  EXPECT_NE(error_of("/v1/completions", R"({"prompt": "a", "n": 9})", 400).find("max_batch_size"),
            std::string::npos);
  EXPECT_NE(error_of("/generate", R"({"requests": [{"prompt_ids": [1, 100]}]})", 400)
                .find("outside the vocabulary"),
            std::string::npos);
  EXPECT_NE(error_of("/generate", R"({"requests": [{"prompt": "a", "max_new_tokens": 5000}]})", 400)
                .find("max_seq_len"),
            std::string::npos);
  // Too large: the body (Content-Length and chunked upload) and the work asked for.
  const std::string big = nlohmann::json{{"prompt", std::string(20 << 10, 'a')}}.dump();
  EXPECT_NE(error_of("/v1/completions", big, 413).find("exceeds"), std::string::npos);
  auto chunked = client().Post(
      "/v1/completions",
      [&](size_t offset, httplib::DataSink& sink) {
        sink.write(big.data(), big.size());
        sink.done();
        return true;
      },
      "application/json");
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->status, 413);
  EXPECT_NE(
      error_of("/v1/completions", R"({"prompt": ["a", "b", "c"], "n": 30})", 413).find("samples"),
      std::string::npos);
  auto res = client().Get("/v2/nothing");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(nlohmann::json::parse(res->body)["error"]["message"], "no route for GET /v2/nothing");
}

TEST_F(ServerTest, DisconnectingClientCancelsItsRequests) {
  // A 1-token and a 4000-token request; the client hangs up after the first line.
  nlohmann::json body = {
      {"requests",
       {{{"id", "short"}, {"prompt_ids", {1, 5}}, {"max_new_tokens", 1}},
        {{"id", "long"}, {"prompt_ids", {1, 6}}, {"max_new_tokens", 4000}, {"ignore_eos", true}}}}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/generate";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string received;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    received.append(data, n);
    return received.find('\n') == std::string::npos;
  };
  auto res = client().send(req);
  EXPECT_EQ(res.error(), httplib::Error::Canceled);
  EXPECT_NE(received.find("\"short\""), std::string::npos);

  // The long sample leaves the engine (finished as aborted) long before its 4000 tokens. The
  // wait is generous because a loaded machine (ctest -j2) once needed more than 10 s; the token
  // count below, not the wait, is what shows the abort came early.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (engine_->stats().finished_samples < 2 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const engine::EngineStats s = engine_->stats();
  EXPECT_EQ(s.finished_samples, 2);
  EXPECT_LT(s.generated_tokens, 2000);
  EXPECT_EQ(metric("streamrl_aborted_requests_total"), 1);
}

TEST_F(ServerTest, SlowRequestTimesOutAndIsAborted) {
  ServerConfig config;
  config.request_timeout_s = 0.2;
  start(config);
  const std::string body = R"({"prompt": "a", "max_tokens": 4000, "ignore_eos": true})";
  EXPECT_NE(error_of("/v1/completions", body, 504).find("timed out"), std::string::npos);
  EXPECT_EQ(metric("streamrl_aborted_requests_total"), 1);
  // A stream that times out ends with an error event and [DONE].
  auto res =
      client().Post("/v1/completions",
                    R"({"prompt": "a", "max_tokens": 4000, "ignore_eos": true, "stream": true})",
                    "application/json");
  ASSERT_TRUE(res && res->status == 200);
  auto events = lines_of(res->body);
  ASSERT_GE(events.size(), 2u) << res->body;  // the tokens so far, the error, [DONE]
  EXPECT_NE(events[events.size() - 2].find("timeout_error"), std::string::npos);
  EXPECT_EQ(events.back(), "data: [DONE]");
}

TEST_F(ServerTest, PortInUseIsAnError) {
  ServerConfig config;
  config.port = server_->port();
  config.threads = 1;
  EXPECT_THROW(Server(*engine_, *tok_, config), RuntimeFailure);
}

TEST_F(ServerTest, ConcurrentClients) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      httplib::Client cli("127.0.0.1", server_->port());
      for (int i = 0; i < 3; ++i) {
        nlohmann::json body = {{"prompt", "t" + std::to_string(t)},
                               {"n", 2},
                               {"max_tokens", 6},
                               {"ignore_eos", true},
                               {"stream", i == 1}};
        auto res = cli.Post("/v1/completions", body.dump(), "application/json");
        if (!res || res->status != 200) continue;
        if (i == 1) {
          // Up to 6 token events and a finish per choice ("<unk>" may wait for the next token).
          const auto lines = lines_of(res->body);
          ok += lines.size() >= 5 && lines.size() <= 15 && lines.back() == "data: [DONE]";
        } else {
          auto j = nlohmann::json::parse(res->body);
          ok += j["choices"].size() == 2 && j["usage"]["completion_tokens"] == 12;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 12);
  EXPECT_EQ(engine_->stats().finished_samples, 24);
}

}  // namespace
}  // namespace streamrl::server
