// The OpenAI-compatible completions API (`POST /v1/completions`, the legacy text-completion
// endpoint): request parsing and validation, and the JSON of responses, stream chunks, usage and
// errors. No I/O here; http_server.cc drives it.
//
// Differences from OpenAI, by design: `top_k`, `stop_token_ids`, `ignore_eos` and
// `length_estimate` are extensions (as in vLLM); `echo`, `suffix`, `best_of` != n, `logit_bias` and
// non-zero presence/frequency penalties are rejected; `top_logprobs` is always null (the engine
// keeps only the sampled token's log-prob); unknown fields are rejected (400) so typos do not pass
// silently.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "streamrl/engine/sample.h"
#include "streamrl/server/inflight.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::server {

struct CompletionRequest {
  std::string model;            // echoed in responses; "" = the server's model name
  std::vector<PromptJob> jobs;  // one per prompt, each with n samples
  std::vector<std::string> stop;
  int logprobs = -1;  // -1 = no logprobs; k >= 0 = return per-token log-probs
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage
};

// Parses a request body. A text prompt becomes tokenizer::encode_prompt(text), the rule the trainer
// uses; a prompt of token ids is used as given. Absent temperature/top_p/top_k take `defaults`;
// EOS and defaults.stop_token_ids stop unless `ignore_eos`. `max_tokens` defaults to 16 as in
// OpenAI; null means "up to max_seq_len". Throws InputError with one line naming the bad field.
CompletionRequest parse_completion_request(std::string_view body, const tokenizer::Tokenizer& tok,
                                           int max_seq_len, const RequestDefaults& defaults = {});

// Identity shared by every response and chunk of one request.
struct CompletionMeta {
  std::string id;       // "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

struct Choice {
  nlohmann::json json;  // {index, text, logprobs, finish_reason}
  int64_t completion_tokens = 0;
};

// The choice for a finished sample of job `job`: index = job * n + sample_index (OpenAI's order),
// stop sequences applied, `logprobs` = {tokens, token_logprobs, top_logprobs: null, text_offset}
// with offsets into the choice's text, or null. Aborted samples report finish_reason "abort".
Choice make_choice(const engine::Sample& sample, size_t job, const CompletionRequest& request,
                   const tokenizer::Tokenizer& tok);

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

// The whole response (`choices` sorted by index), or one server-sent-event chunk: the chunk of a
// finished choice has usage null; the include_usage chunk has no choices and the usage.
nlohmann::json completion_response(const CompletionMeta& meta, std::vector<nlohmann::json> choices,
                                   const nlohmann::json& usage);

// {"error": {"message", "type", "param": null, "code": null}} as OpenAI clients expect.
nlohmann::json error_json(const std::string& message, const std::string& type);

}  // namespace streamrl::server
