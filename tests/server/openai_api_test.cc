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

TEST_F(OpenAiApi, ChoiceAppliesStopSequencesAndReportsLogprobs) {
  CompletionRequest r = parse({{"prompt", {{1}, {1}}}, {"n", 2}, {"stop", "c"}, {"logprobs", 1}});
  engine::Sample s;
  s.sample_index = 1;
  s.output_ids = tok_->encode("abcd");
  s.logprobs = {-0.1f, -0.2f, -0.3f, -0.4f};
  s.finish_reason = engine::FinishReason::kLength;
  Choice c = make_choice(s, 1, r, *tok_);
  EXPECT_EQ(c.json["index"], 3);  // job 1, sample 1, n = 2
  EXPECT_EQ(c.json["text"], "ab");
  EXPECT_EQ(c.json["finish_reason"], "stop");
  EXPECT_EQ(c.completion_tokens, 3);
  EXPECT_EQ(c.json["logprobs"]["tokens"], nlohmann::json({"a", "b", "c"}));
  EXPECT_EQ(c.json["logprobs"]["text_offset"], nlohmann::json({0, 1, 2}));
  EXPECT_TRUE(c.json["logprobs"]["top_logprobs"].is_null());
  EXPECT_FLOAT_EQ(c.json["logprobs"]["token_logprobs"][2].get<float>(), -0.3f);

  r.stop.clear();
  r.logprobs = -1;
  c = make_choice(s, 0, r, *tok_);
  EXPECT_EQ(c.json["text"], "abcd");
  EXPECT_EQ(c.json["finish_reason"], "length");
  EXPECT_TRUE(c.json["logprobs"].is_null());
}

TEST_F(OpenAiApi, ResponseAndErrorShapes) {
  CompletionMeta meta{"cmpl-x", 100, "tiny"};
  auto j = completion_response(meta, {}, usage_json(3, 4));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
  auto e = error_json("bad", "invalid_request_error");
  EXPECT_EQ(e["error"]["message"], "bad");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
}

}  // namespace
}  // namespace streamrl::server
