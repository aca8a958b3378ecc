// Native /generate parsing and sample lines.
#include "streamrl/server/native_api.h"

#include <gtest/gtest.h>

#include "streamrl/core/errors.h"

namespace streamrl::server {
namespace {

TEST(NativeApi, ParsesTextAndIdPromptsWithDefaults) {
  auto tok = tokenizer::make_tokenizer("char");
  nlohmann::json body = {
      {"requests",
       {{{"id", "q1"}, {"prompt", "ab"}, {"n", 2}, {"max_new_tokens", 9}, {"length_estimate", 40}},
        {{"prompt_ids", {7, 8}}, {"temperature", 0}, {"seed", 3}, {"stop_token_ids", {4}}}}}};
  GenerateRequest r = parse_generate_request(body.dump(), *tok);
  ASSERT_EQ(r.jobs.size(), 2u);
  EXPECT_EQ(r.ids[0], "q1");
  EXPECT_EQ(r.ids[1], 1);  // default id: position
  EXPECT_EQ(r.jobs[0].prompt_ids.front(), tok->bos_id());
  EXPECT_EQ(r.jobs[0].n, 2);
  EXPECT_EQ(r.jobs[0].params.max_new_tokens, 9);
  EXPECT_DOUBLE_EQ(r.jobs[0].length_estimate, 40);
  EXPECT_EQ(r.jobs[1].prompt_ids, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(r.jobs[1].params.max_new_tokens, engine::SamplingParams().max_new_tokens);
  EXPECT_EQ(r.jobs[1].params.stop_token_ids, (std::vector<int32_t>{4, tok->eos_id()}));
}

// generation_config.json's values (RequestDefaults) fill what a request leaves out; its EOS ids
// stop besides the tokenizer's, unless ignore_eos.
TEST(NativeApi, RequestDefaultsFillAbsentFields) {
  auto tok = tokenizer::make_tokenizer("char");
  const RequestDefaults defaults{0.7f, 0.8f, 20, {90, tok->eos_id(), 91}};
  nlohmann::json body = {{"requests",
                          {{{"prompt", "ab"}},
                           {{"prompt", "ab"}, {"temperature", 0}, {"top_p", 1}, {"top_k", 0}},
                           {{"prompt", "ab"}, {"ignore_eos", true}}}}};
  GenerateRequest r = parse_generate_request(body.dump(), *tok, defaults);
  EXPECT_FLOAT_EQ(r.jobs[0].params.temperature, 0.7f);
  EXPECT_FLOAT_EQ(r.jobs[0].params.top_p, 0.8f);
  EXPECT_EQ(r.jobs[0].params.top_k, 20);
  EXPECT_EQ(r.jobs[0].params.stop_token_ids, (std::vector<int32_t>{tok->eos_id(), 90, 91}));
  EXPECT_FLOAT_EQ(r.jobs[1].params.temperature, 0);
  EXPECT_FLOAT_EQ(r.jobs[1].params.top_p, 1);
  EXPECT_EQ(r.jobs[1].params.top_k, 0);
  EXPECT_TRUE(r.jobs[2].params.stop_token_ids.empty());
}

TEST(NativeApi, ErrorsNameTheRequest) {
  auto tok = tokenizer::make_tokenizer("char");
  auto expect_error = [&](const nlohmann::json& body, const std::string& needle) {
    try {
      parse_generate_request(body.dump(), *tok);
      ADD_FAILURE() << "accepted " << body.dump();
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({{"requests", nlohmann::json::array()}}, "non-empty array");
  expect_error({{"requests", {{{"prompt", "a"}}, {{"prompt", "a"}, {"prompt_ids", {1}}}}}},
               "requests[1]: give exactly one");
  expect_error({{"requests", {{{"prompt", "a"}, {"top_k", -1}}}}}, "requests[0]: 'top_k'");
  expect_error({{"requests", {{{"prompt", "a"}, {"max_tokens", 3}}}}},
               "unknown field 'max_tokens'");
  expect_error({{"requests", {{{"prompt", "a"}, {"tools", {"nope"}}}}}}, "nope");
  expect_error({{"requests", {{{"prompt", "a"}, {"tools", nlohmann::json::array()}}}}},
               "requests[0]: 'tools' must be a non-empty array");
  expect_error({{"requests", {{{"prompt", "a"}, {"max_turns", 2}}}}}, "'max_turns' needs 'tools'");
  expect_error({{"requests", {{{"prompt", "a"}, {"tools", {"calc"}}, {"max_turns", 0}}}}},
               "'max_turns'");
}

// "tools": the engine runs each sample's rollout (a turn with a call gets the tool's result
// appended); a request without them runs one turn.
TEST(NativeApi, ToolsMakeTheEngineRunTheRollout) {
  auto tok = tokenizer::make_tokenizer("char");
  nlohmann::json body = {
      {"requests", {{{"prompt", "a"}, {"tools", {"calc"}}, {"max_turns", 3}}, {{"prompt", "a"}}}}};
  GenerateRequest r = parse_generate_request(body.dump(), *tok);
  ASSERT_TRUE(r.jobs[0].turn_hooks.on_turn);
  EXPECT_FALSE(r.jobs[1].turn_hooks.on_turn);
  engine::Sample turn;
  turn.output_ids =
      tok->encode(R"(<tool_call>{"name":"calc","arguments":{"expression":"6*7"}}</tool_call>)");
  turn.finish_reason = engine::FinishReason::kStop;
  const engine::TurnWork work = r.jobs[0].turn_hooks.on_turn(turn, 0);
  ASSERT_TRUE(work) << "a turn with a call continues";
  EXPECT_EQ(tok->decode(work()), "<tool_response>42</tool_response>");
  turn.turns = 3;  // max_turns reached
  EXPECT_FALSE(r.jobs[0].turn_hooks.on_turn(turn, 0));
}

TEST(NativeApi, SampleLineCarriesTheSampleRecord) {
  auto tok = tokenizer::make_tokenizer("char");
  engine::Sample s;
  s.sample_index = 1;
  s.prompt_ids = {1, 7};
  s.output_ids = tok->encode("hi");
  s.logprobs = {-1.0f, -2.0f};
  s.finish_reason = engine::FinishReason::kStop;
  s.weight_version = 4;
  s.queue_s = 0.5;
  auto line = sample_line("q", s, *tok);
  EXPECT_EQ(line["id"], "q");
  EXPECT_EQ(line["sample_index"], 1);
  EXPECT_EQ(line["text"], "hi");
  EXPECT_EQ(line["finish_reason"], "stop");
  EXPECT_EQ(line["weight_version"], 4);
  EXPECT_EQ(line["logprobs"].size(), 2u);
  for (const char* key : {"prompt_ids", "output_ids", "queue_s", "prefill_s", "decode_s"}) {
    EXPECT_TRUE(line.contains(key)) << key;
  }
  EXPECT_FALSE(line.contains("sampled_mask")) << "a one-turn sample";
  s.sampled_mask = {1, 0};
  s.turns = 2;
  line = sample_line("q", s, *tok);
  EXPECT_EQ(line["sampled_mask"], nlohmann::json({1, 0}));
  EXPECT_EQ(line["turns"], 2);
}

}  // namespace
}  // namespace streamrl::server
