// OpenAI completions: request parsing (defaults, prompt shapes, one-line errors) and choice JSON.
#include "streamrl/server/openai_api.h"

#include <gtest/gtest.h>

#include "streamrl/core/errors.h"

namespace streamrl::server {
namespace {

class OpenAiApi : public ::testing::Test {
 protected:
  CompletionRequest parse(const nlohmann::json& body) {
    return parse_completion_request(body.dump(), *tok_, 64);
  }
  void expect_error(const nlohmann::json& body, const std::string& needle) {
    try {
      parse(body);
      ADD_FAILURE() << "accepted " << body.dump();
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  std::unique_ptr<tokenizer::Tokenizer> tok_ = tokenizer::make_tokenizer("char");
};

TEST_F(OpenAiApi, DefaultsFollowOpenAi) {
  CompletionRequest r = parse({{"model", "m"}, {"prompt", "ab"}});
  ASSERT_EQ(r.jobs.size(), 1u);
  const PromptJob& j = r.jobs[0];
  EXPECT_EQ(j.prompt_ids,
            (std::vector<int32_t>{tok_->bos_id(), tok_->encode("a")[0], tok_->encode("b")[0]}));
  EXPECT_EQ(j.n, 1);
  EXPECT_EQ(j.params.max_new_tokens, 16);
  EXPECT_FLOAT_EQ(j.params.temperature, 1.0f);
  EXPECT_FLOAT_EQ(j.params.top_p, 1.0f);
  EXPECT_EQ(j.params.stop_token_ids, (std::vector<int32_t>{tok_->eos_id()}));
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(r.stream);
}

TEST_F(OpenAiApi, RequestDefaultsReplaceOpenAiDefaultsAndAddStopIds) {
  const RequestDefaults defaults{0.6f, 0.9f, 50, {77}};
  CompletionRequest r = parse_completion_request(
      nlohmann::json{{"prompt", "ab"}, {"top_k", 5}}.dump(), *tok_, 64, defaults);
  const PromptJob& j = r.jobs[0];
  EXPECT_FLOAT_EQ(j.params.temperature, 0.6f);
  EXPECT_FLOAT_EQ(j.params.top_p, 0.9f);
  EXPECT_EQ(j.params.top_k, 5);  // given: the request wins
  EXPECT_EQ(j.params.stop_token_ids, (std::vector<int32_t>{tok_->eos_id(), 77}));
}

TEST_F(OpenAiApi, PromptShapesAndSamplingFields) {
  CompletionRequest r = parse({{"prompt", {"a", "bc"}},
                               {"n", 3},
                               {"max_tokens", 5},
                               {"temperature", 0},
                               {"top_p", 0.5},
                               {"top_k", 7},
                               {"seed", 9},
                               {"stop", "x"},
                               {"stop_token_ids", {4}},
                               {"logprobs", 0},
                               {"stream", true},
                               {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(r.jobs.size(), 2u);
  EXPECT_EQ(r.jobs[1].prompt_ids.size(), 3u);
  EXPECT_EQ(r.jobs[1].n, 3);
  EXPECT_EQ(r.jobs[1].params.max_new_tokens, 5);
  EXPECT_EQ(r.jobs[1].params.top_k, 7);
  EXPECT_EQ(r.jobs[1].params.seed, 9u);
  EXPECT_EQ(r.jobs[1].params.stop_token_ids, (std::vector<int32_t>{4, tok_->eos_id()}));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x"}));
  EXPECT_EQ(r.logprobs, 0);
  EXPECT_TRUE(r.stream && r.include_usage);

  EXPECT_EQ(parse({{"prompt", {5, 6, 7}}}).jobs.at(0).prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(parse({{"prompt", {{5}, {6, 7}}}}).jobs.size(), 2u);
  // max_tokens: null fills the context (64) after the prompt.
  EXPECT_EQ(parse({{"prompt", {5, 6}}, {"max_tokens", nullptr}}).jobs[0].params.max_new_tokens, 62);
}

TEST_F(OpenAiApi, BadFieldsAreNamed) {
  expect_error({{"n", 1}}, "'prompt' is required");
  expect_error({{"prompt", "a"}, {"temprature", 1}}, "unknown field 'temprature'");
  expect_error({{"prompt", "a"}, {"temperature", -1}}, "'temperature' must be a number >= 0");
  expect_error({{"prompt", "a"}, {"top_p", 0}}, "'top_p'");
  expect_error({{"prompt", "a"}, {"n", 0}}, "'n' must be an integer");
  expect_error({{"prompt", "a"}, {"max_tokens", "many"}}, "'max_tokens'");
  expect_error({{"prompt", "a"}, {"stop", {""}}}, "'stop'");
  expect_error({{"prompt", "a"}, {"echo", true}}, "'echo' is not supported");
  expect_error({{"prompt", nlohmann::json::array()}}, "'prompt' must be");
  expect_error({{"prompt", {1, -2}}}, "non-negative");
  try {
    parse_completion_request("{not json", *tok_, 64);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "request body is not valid JSON");
  }
}

// Feeds `text` as the tokens of sample `sample_index` of job `job`, then its end.
void feed(CompletionChoices& choices, const tokenizer::Tokenizer& tok, size_t job,
          int32_t sample_index, const std::string& text, bool* stop_asked = nullptr) {
  InflightEvent e;
  e.job = job;
  e.sample_index = sample_index;
  float lp = -0.1f;
  for (int32_t id : tok.encode(text)) {
    e.token = id;
    e.logprob = lp;
    lp -= 0.1f;
    e.top = {{id, e.logprob}, {tok.encode("z")[0], -5.0f}};
    const bool stop = choices.apply(e).stop_sample;
    if (stop_asked) *stop_asked |= stop;
  }
  engine::Sample s;
  s.sample_index = sample_index;
  s.finish_reason = engine::FinishReason::kLength;
  e.sample = s;
  choices.apply(e);
}

TEST_F(OpenAiApi, ChoicesStopBeforeTheMatchAndReportLogprobs) {
  CompletionRequest r = parse({{"prompt", {{1}, {1}}}, {"n", 2}, {"stop", "c"}, {"logprobs", 1}});
  EXPECT_EQ(r.jobs[0].params.top_logprobs, 1);
  CompletionChoices choices(r, *tok_);
  bool stop_asked = false;
  feed(choices, *tok_, 1, 1, "abcd", &stop_asked);
  feed(choices, *tok_, 0, 0, "xy");
  EXPECT_TRUE(stop_asked);  // the engine is told to finish the sample at "c"
  auto all = choices.choices();
  ASSERT_EQ(all.size(), 4u);
  const auto& c = all[3];  // job 1, sample 1, n = 2
  EXPECT_EQ(c["index"], 3);
  EXPECT_EQ(c["text"], "ab");
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_EQ(c["logprobs"]["tokens"], nlohmann::json({"a", "b"}));
  EXPECT_EQ(c["logprobs"]["text_offset"], nlohmann::json({0, 1}));
  EXPECT_FLOAT_EQ(c["logprobs"]["token_logprobs"][1].get<float>(), -0.2f);
  EXPECT_FLOAT_EQ(c["logprobs"]["top_logprobs"][1]["b"].get<float>(), -0.2f);
  EXPECT_EQ(all[0]["text"], "xy");
  EXPECT_EQ(all[0]["finish_reason"], "length");
  EXPECT_EQ(choices.completion_tokens(), 4);
}

TEST_F(OpenAiApi, ChatRequestsUseTheTemplateAndStreamDeltas) {
  std::vector<tokenizer::ChatMessage> seen;
  ChatEncoder encode = [&](const std::vector<tokenizer::ChatMessage>& m) {
    seen = m;
    return std::vector<int32_t>{1, 2, 3};
  };
  const nlohmann::json body = {{"model", "m"},
                               {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                               {"logprobs", true},
                               {"top_logprobs", 2},
                               {"max_completion_tokens", 5},
                               {"stream", true}};
  CompletionRequest r = parse_chat_request(body.dump(), *tok_, encode, 64);
  EXPECT_TRUE(r.chat);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].content, "hi");
  EXPECT_EQ(r.jobs.at(0).prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.jobs[0].params.max_new_tokens, 5);
  EXPECT_EQ(r.jobs[0].params.top_logprobs, 2);
  // Without max_tokens a chat completion may fill the context.
  nlohmann::json open = body;
  open.erase("max_completion_tokens");
  EXPECT_EQ(parse_chat_request(open.dump(), *tok_, encode, 64).jobs[0].params.max_new_tokens, 61);

  CompletionChoices choices(r, *tok_);
  InflightEvent e;
  e.token = tok_->encode("o")[0];
  auto first = choices.apply(e).chunk_choices;
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0]["delta"]["role"], "assistant");
  EXPECT_EQ(first[0]["delta"]["content"], "o");
  EXPECT_EQ(first[0]["logprobs"]["content"][0]["token"], "o");
  auto second = choices.apply(e).chunk_choices;
  EXPECT_FALSE(second.at(0)["delta"].contains("role"));
  auto chunk = completion_response(r, {"chatcmpl-1", 5, "m"}, second, nullptr, true);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");

  EXPECT_THROW(parse_chat_request(body.dump(), *tok_, nullptr, 64), InputError);  // no template
  nlohmann::json bad = body;
  bad["messages"] = {{{"role", "wizard"}, {"content", "x"}}};
  EXPECT_THROW(parse_chat_request(bad.dump(), *tok_, encode, 64), InputError);
  bad = body;
  bad["tools"] = nlohmann::json::array({nlohmann::json::object()});
  EXPECT_THROW(parse_chat_request(bad.dump(), *tok_, encode, 64), InputError);
}

TEST_F(OpenAiApi, ResponseAndErrorShapes) {
  CompletionRequest r = parse({{"prompt", "a"}});
  CompletionMeta meta{"cmpl-x", 100, "tiny"};
  auto j = completion_response(r, meta, {}, usage_json(3, 4), false);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
  r.chat = true;
  EXPECT_EQ(completion_response(r, meta, {}, nullptr, false)["object"], "chat.completion");
  auto e = error_json("bad", "invalid_request_error");
  EXPECT_EQ(e["error"]["message"], "bad");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  auto models = models_json("tiny", 7, 64);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][0]["object"], "model");
}

}  // namespace
}  // namespace streamrl::server
