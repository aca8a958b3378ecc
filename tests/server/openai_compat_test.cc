// The server as OpenAI-style clients use it (vLLM/SGLang habits): /v1/models, chat completions
// through the chat encoder (plain and streamed), top_logprobs, stop sequences that never reach the
// returned tokens, 405 for a wrong method, and a non-streaming request whose client hangs up is
// cancelled in the engine.
#include <gtest/gtest.h>
#include <httplib.h>

#include <sstream>
#include <thread>

#include "../tiny_model.h"
#include "streamrl/server/http_server.h"

namespace streamrl::server {
namespace {

using namespace std::chrono_literals;

std::vector<nlohmann::json> sse_chunks(const std::string& body) {
  std::vector<nlohmann::json> out;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("data: ") || line == "data: [DONE]") continue;
    out.push_back(nlohmann::json::parse(line.substr(6)));
  }
  return out;
}

class OpenAiCompatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine::EngineConfig ec;
    ec.max_batch_size = 8;
    ec.max_seq_len = 4096;
    engine_ = std::make_unique<engine::Engine>(testing_util::tiny_model(11, 100, 4096), ec);
    ServerConfig config;
    config.threads = 1;
    config.model_name = "tiny";
    // "role: content" lines, then "assistant: ", as a chat template would render them.
    config.chat_encoder = [this](const std::vector<tokenizer::ChatMessage>& messages) {
      std::string text;
      for (const auto& m : messages) text += m.role + ": " + m.content + "\n";
      return tokenizer::encode_prompt(*tok_, text + "assistant: ");
    };
    server_ = std::make_unique<Server>(*engine_, *tok_, config);
  }

  httplib::Client client() {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(30);
    return c;
  }

  nlohmann::json post(const std::string& path, const nlohmann::json& body) {
    auto res = client().Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
    return res ? nlohmann::json::parse(res->body, nullptr, false) : nullptr;
  }

  std::unique_ptr<tokenizer::Tokenizer> tok_ = tokenizer::make_tokenizer("char");
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<Server> server_;
};

TEST_F(OpenAiCompatTest, ModelsListsTheServedModel) {
  auto res = client().Get("/v1/models");
  ASSERT_TRUE(res && res->status == 200);
  auto j = nlohmann::json::parse(res->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "tiny");
  EXPECT_EQ(j["data"][0]["object"], "model");
}

TEST_F(OpenAiCompatTest, ChatCompletionPlainAndStreamedAgree) {
  nlohmann::json body = {
      {"model", "tiny"},
      {"messages",
       {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "2+2?"}}}},
      {"max_tokens", 12},
      {"seed", 3},
      {"ignore_eos", true},
      {"logprobs", true},
      {"top_logprobs", 3}};
  auto j = post("/v1/chat/completions", body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_TRUE(j["id"].get<std::string>().starts_with("chatcmpl-"));
  const auto& choice = j["choices"][0];
  EXPECT_EQ(choice["message"]["role"], "assistant");
  const std::string text = choice["message"]["content"];
  EXPECT_EQ(choice["finish_reason"], "length");
  const auto& content = choice["logprobs"]["content"];
  ASSERT_EQ(content.size(), 12u);
  std::string joined;
  for (const auto& t : content) {
    joined += t["token"].get<std::string>();
    ASSERT_EQ(t["top_logprobs"].size(), 3u);
    // The alternatives are the most likely tokens, best first, under the same distribution.
    EXPECT_GE(t["top_logprobs"][0]["logprob"].get<double>(), t["logprob"].get<double>() - 1e-5);
    EXPECT_GE(t["top_logprobs"][0]["logprob"].get<double>(),
              t["top_logprobs"][1]["logprob"].get<double>());
  }
  EXPECT_EQ(joined, text);
  const auto prompt = tokenizer::encode_prompt(*tok_, "system: be brief\nuser: 2+2?\nassistant: ");
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);

  body["stream"] = true;
  auto res = client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res && res->status == 200);
  auto chunks = sse_chunks(res->body);
  // One per token, then the finish; a token ending in U+FFFD (maybe half a character) waits for
  // the next one and both go in one chunk.
  ASSERT_GE(chunks.size(), 3u);
  ASSERT_LE(chunks.size(), 13u);
  std::string streamed;
  size_t tokens = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i]["object"], "chat.completion.chunk");
    const auto& delta = chunks[i]["choices"][0]["delta"];
    EXPECT_EQ(delta.contains("role"), i == 0);
    streamed += delta["content"].get<std::string>();
    tokens += chunks[i]["choices"][0]["logprobs"]["content"].size();
  }
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(tokens, 12u);
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "length");
}

TEST_F(OpenAiCompatTest, AStopSequenceNeverReachesTheTokensOrLogprobs) {
  nlohmann::json body = {{"prompt", "abc"},
                         {"max_tokens", 40},
                         {"temperature", 0},
                         {"ignore_eos", true},
                         {"logprobs", 2}};
  const auto full = post("/v1/completions", body)["choices"][0];
  const std::string text = full["text"];
  const auto pieces = full["logprobs"]["tokens"].get<std::vector<std::string>>();
  // A stop sequence of two plain-character tokens from the middle of the greedy completion.
  auto plain = [](const std::string& p) {
    return p.size() == 1 && static_cast<unsigned char>(p[0]) < 0x80;
  };
  size_t k = 4;
  while (k + 1 < pieces.size() && !(plain(pieces[k]) && plain(pieces[k + 1]))) ++k;
  ASSERT_LT(k + 1, pieces.size());
  const std::string stop = pieces[k] + pieces[k + 1];
  body["stop"] = {stop};
  for (bool stream : {false, true}) {
    body["stream"] = stream;
    std::string got, tokens;
    size_t token_entries = 0, top_entries = 0;
    if (!stream) {
      auto c = post("/v1/completions", body)["choices"][0];
      EXPECT_EQ(c["finish_reason"], "stop");
      got = c["text"];
      for (const auto& t : c["logprobs"]["tokens"]) tokens += t.get<std::string>();
      token_entries = c["logprobs"]["tokens"].size();
      top_entries = c["logprobs"]["top_logprobs"].size();
    } else {
      auto res = client().Post("/v1/completions", body.dump(), "application/json");
      ASSERT_TRUE(res && res->status == 200);
      for (const auto& chunk : sse_chunks(res->body)) {
        const auto& c = chunk["choices"][0];
        got += c["text"].get<std::string>();
        for (const auto& t : c["logprobs"]["tokens"]) tokens += t.get<std::string>();
        token_entries += c["logprobs"]["tokens"].size();
        top_entries += c["logprobs"]["top_logprobs"].size();
        if (!c["finish_reason"].is_null()) EXPECT_EQ(c["finish_reason"], "stop");
      }
    }
    const std::string want = text.substr(0, text.find(stop));
    EXPECT_EQ(got, want) << (stream ? "streamed" : "plain");
    EXPECT_EQ(tokens, want) << (stream ? "streamed" : "plain");
    EXPECT_EQ(top_entries, token_entries);
    EXPECT_LE(token_entries, k);  // no token of the match
  }
}

TEST_F(OpenAiCompatTest, WrongMethodIs405) {
  auto res = client().Get("/v1/completions");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->get_header_value("Allow"), "POST");
  EXPECT_NE(res->body.find("not allowed"), std::string::npos) << res->body;
  res = client().Post("/health", "{}", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  res = client().Get("/v1/nothing");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

TEST_F(OpenAiCompatTest, NonStreamingRequestOfAClientThatLeftIsCancelled) {
  std::thread caller([&] {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(0, 300000);  // gives up after 0.3 s and closes the connection
    c.Post("/v1/completions", R"({"prompt": "a", "max_tokens": 4000, "ignore_eos": true})",
           "application/json");
  });
  caller.join();
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (engine_->stats().finished_samples < 1 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(10ms);
  }
  const engine::EngineStats s = engine_->stats();
  EXPECT_EQ(s.finished_samples, 1);  // aborted, far short of its 4000 tokens
  EXPECT_LT(s.generated_tokens, 3000);
}

}  // namespace
}  // namespace streamrl::server
