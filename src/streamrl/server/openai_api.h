// The OpenAI-compatible API, as vLLM and SGLang users call it: `POST /v1/completions` (text
// completions) and `POST /v1/chat/completions` (messages rendered with the checkpoint's chat
// template): request parsing and validation, and the JSON of choices, stream chunks, usage and
// errors. No I/O here; http_server_openai.cc drives it.
//
// Differences from OpenAI, by design: `top_k`, `stop_token_ids`, `ignore_eos` and
// `length_estimate` are extensions (as in vLLM); `echo`, `suffix`, `best_of` != n, `logit_bias`,
// non-zero presence/frequency penalties, tools and response formats are rejected; unknown fields
// are rejected (400) so typos do not pass silently. Log-probs (and top_logprobs) are those of the
// sampling distribution, softmax(logits / temperature).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "streamrl/engine/sample.h"
#include "streamrl/server/completion_text.h"
#include "streamrl/server/inflight.h"
#include "streamrl/tokenizer/chat_template.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::server {

struct CompletionRequest {
  bool chat = false;            // /v1/chat/completions
  std::string model;            // echoed in responses; "" = the server's model name
  std::vector<PromptJob> jobs;  // one per prompt, each with n samples (chat: one prompt)
  std::vector<std::string> stop;
  // -1 = no log-probs; k >= 0 = per-token log-probs with k top alternatives each (completions:
  // "logprobs": k; chat: "logprobs": true with "top_logprobs": k).
  int logprobs = -1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage
};

// Parses a completions request body. A text prompt becomes tokenizer::encode_prompt(text), the rule
// the trainer uses; a prompt of token ids is used as given. Absent temperature/top_p/top_k take
// `defaults`; EOS and defaults.stop_token_ids stop unless `ignore_eos`. `max_tokens` defaults to
// 16 as in OpenAI; null means "up to max_seq_len". Throws InputError with one line naming the bad
// field.
CompletionRequest parse_completion_request(std::string_view body, const tokenizer::Tokenizer& tok,
                                           int max_seq_len, const RequestDefaults& defaults = {});

// Turns chat messages into the prompt's token ids (the checkpoint's chat template, generation
// prompt added). Throws InputError.
using ChatEncoder = std::function<std::vector<int32_t>(const std::vector<tokenizer::ChatMessage>&)>;

// Parses a chat completions body: "messages" through `encode`, `max_tokens` (or
// `max_completion_tokens`) absent = up to max_seq_len, the sampling fields as for completions.
CompletionRequest parse_chat_request(std::string_view body, const tokenizer::Tokenizer& tok,
                                     const ChatEncoder& encode, int max_seq_len,
                                     const RequestDefaults& defaults = {});

// Identity shared by every response and chunk of one request.
struct CompletionMeta {
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// The choices of one request as their tokens stream in: each choice's text is cut at the stop
// sequences (ChoiceText), and what may be sent is handed out as stream-chunk choices, or kept for
// the whole response. Choice index = job * n + sample_index (OpenAI's order).
class CompletionChoices {
 public:
  CompletionChoices(const CompletionRequest& request, const tokenizer::Tokenizer& tok);
  ~CompletionChoices();

  struct Update {
    std::vector<nlohmann::json> chunk_choices;  // to send now (streaming)
    bool stop_sample = false;  // a stop sequence matched: finish this sample in the engine
  };
  // A token or finished sample of the request (see Inflight). Aborted samples end their choice
  // with finish_reason "abort".
  Update apply(const InflightEvent& event);

  // The whole response's choices, by index.
  std::vector<nlohmann::json> choices() const;
  // Tokens returned so far over all choices (usage.completion_tokens).
  int64_t completion_tokens() const { return completion_tokens_; }

 private:
  struct State;
  const CompletionRequest& request_;
  const tokenizer::Tokenizer& tok_;
  std::vector<State> states_;
  int64_t completion_tokens_ = 0;
};

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

// The whole response ("text_completion" / "chat.completion") or one stream chunk
// ("text_completion" / "chat.completion.chunk"; usage null except in the include_usage chunk).
nlohmann::json completion_response(const CompletionRequest& request, const CompletionMeta& meta,
                                   std::vector<nlohmann::json> choices, const nlohmann::json& usage,
                                   bool chunk);

// GET /v1/models: the one model this server serves.
nlohmann::json models_json(const std::string& model, int64_t created, int max_seq_len);

// {"error": {"message", "type", "param": null, "code": null}} as OpenAI clients expect.
nlohmann::json error_json(const std::string& message, const std::string& type);

}  // namespace streamrl::server
