// OpenAI-compatible completions and chat completions: request parsing (see openai_api.h).
#include "streamrl/server/openai_api.h"

#include <limits>

#include "streamrl/core/errors.h"
#include "streamrl/server/json_fields.h"

namespace streamrl::server {
namespace {

constexpr double kNoLimit = std::numeric_limits<double>::max();
constexpr int kMaxN = 1 << 16;

// `prompt`: a string, a list of strings, a list of token ids, or a list of lists of token ids.
std::vector<std::vector<int32_t>> parse_prompts(const nlohmann::json& body,
                                                const tokenizer::Tokenizer& tok) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) throw InputError("'prompt' is required");
  const nlohmann::json& p = *it;
  if (p.is_string()) return {tokenizer::encode_prompt(tok, p.get<std::string>())};
  const char* shapes =
      "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of "
      "token ids";
  if (!p.is_array() || p.empty()) throw InputError(shapes);
  std::vector<std::vector<int32_t>> prompts;
  if (p[0].is_number_integer()) return {token_ids(p, "prompt")};
  for (const auto& item : p) {
    if (item.is_string()) {
      prompts.push_back(tokenizer::encode_prompt(tok, item.get<std::string>()));
    } else if (item.is_array()) {
      prompts.push_back(token_ids(item, "prompt"));
    } else {
      throw InputError(shapes);
    }
  }
  return prompts;
}

std::vector<std::string> parse_stop(const nlohmann::json& body) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return {};
  std::vector<std::string> stop;
  if (it->is_string()) {
    stop.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (const auto& s : *it) {
      if (!s.is_string()) throw InputError("'stop' must be a string or a list of strings");
      stop.push_back(s.get<std::string>());
    }
  } else {
    throw InputError("'stop' must be a string or a list of strings");
  }
  for (const auto& s : stop) {
    if (s.empty()) throw InputError("'stop' sequences must not be empty");
  }
  return stop;
}

// Fields OpenAI defines that we accept only at their neutral value.
void reject_unsupported(const nlohmann::json& body, int n) {
  if (bool_field(body, "echo", false)) throw InputError("'echo' is not supported");
  if (body.contains("suffix") && !body["suffix"].is_null() && body["suffix"] != "") {
    throw InputError("'suffix' is not supported");
  }
  if (int_field(body, "best_of", n, 1, kMaxN) != n) {
    throw InputError("'best_of' is not supported (must equal n)");
  }
  for (const char* key : {"tools", "functions", "response_format"}) {
    if (body.contains(key) && !body[key].is_null()) {
      throw InputError("'" + std::string(key) + "' is not supported");
    }
  }
  if (body.contains("logit_bias") && !body["logit_bias"].is_null() && !body["logit_bias"].empty()) {
    throw InputError("'logit_bias' is not supported");
  }
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    if (number_field(body, key, 0, -2, 2) != 0) {
      throw InputError("'" + std::string(key) + "' is not supported (must be 0)");
    }
  }
}

// The fields both endpoints share: sampling, stop, stream, model. `prompts` become the jobs, with
// `max_tokens` new tokens each (0 = up to max_seq_len).
CompletionRequest parse_common(const nlohmann::json& body, const tokenizer::Tokenizer& tok,
                               std::vector<std::vector<int32_t>> prompts, int max_tokens,
                               int max_seq_len, const RequestDefaults& defaults) {
  CompletionRequest r;
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) throw InputError("'model' must be a string");
    r.model = body["model"].get<std::string>();
  }
  const int n = static_cast<int>(int_field(body, "n", 1, 1, kMaxN));
  reject_unsupported(body, n);

  engine::SamplingParams params;
  params.temperature =
      static_cast<float>(number_field(body, "temperature", defaults.temperature, 0, kNoLimit));
  params.top_p = static_cast<float>(number_field(body, "top_p", defaults.top_p, 0, 1));
  if (params.top_p <= 0) throw InputError("'top_p' must be a number in (0, 1]");
  params.top_k =
      static_cast<int>(std::max<int64_t>(0, int_field(body, "top_k", defaults.top_k, -1, 1 << 30)));
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer()) throw InputError("'seed' must be an integer");
    params.seed = body["seed"].get<uint64_t>();
  }
  if (body.contains("stop_token_ids") && !body["stop_token_ids"].is_null()) {
    params.stop_token_ids = token_ids(body["stop_token_ids"], "stop_token_ids");
  }
  if (!bool_field(body, "ignore_eos", false)) {
    add_stop_ids(&params.stop_token_ids, defaults.stop_token_ids, tok.eos_id());
  }
  r.stop = parse_stop(body);
  r.stream = bool_field(body, "stream", false);
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const auto& so = body["stream_options"];
    if (!so.is_object()) throw InputError("'stream_options' must be an object");
    reject_unknown_fields(so, {"include_usage"}, "stream_options");
    r.include_usage = bool_field(so, "include_usage", false);
  }
  const double length_estimate = number_field(body, "length_estimate", 0, 0, kNoLimit);
  for (auto& ids : prompts) {
    PromptJob job;
    job.n = n;
    job.params = params;
    job.params.max_new_tokens =
        max_tokens > 0 ? max_tokens : std::max(1, max_seq_len - static_cast<int>(ids.size()));
    job.length_estimate = length_estimate;
    job.prompt_ids = std::move(ids);
    r.jobs.push_back(std::move(job));
  }
  return r;
}

void set_logprobs(CompletionRequest* r, int logprobs) {
  r->logprobs = logprobs;
  for (auto& job : r->jobs) job.params.top_logprobs = std::max(0, logprobs);
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view text, const tokenizer::Tokenizer& tok,
                                           int max_seq_len, const RequestDefaults& defaults) {
  const nlohmann::json body = parse_json_object(text);
  reject_unknown_fields(body,
                        {"model",
                         "prompt",
                         "n",
                         "max_tokens",
                         "temperature",
                         "top_p",
                         "top_k",
                         "seed",
                         "stop",
                         "stop_token_ids",
                         "logprobs",
                         "stream",
                         "stream_options",
                         "echo",
                         "suffix",
                         "best_of",
                         "logit_bias",
                         "presence_penalty",
                         "frequency_penalty",
                         "user",
                         "length_estimate",
                         "ignore_eos"},
                        "completions request");
  const bool fill_context = body.contains("max_tokens") && body["max_tokens"].is_null();
  const int max_tokens = static_cast<int>(int_field(body, "max_tokens", 16, 1, 1 << 30));
  CompletionRequest r = parse_common(body, tok, parse_prompts(body, tok),
                                     fill_context ? 0 : max_tokens, max_seq_len, defaults);
  set_logprobs(&r, static_cast<int>(int_field(body, "logprobs", -1, 0, 20)));
  return r;
}

CompletionRequest parse_chat_request(std::string_view text, const tokenizer::Tokenizer& tok,
                                     const ChatEncoder& encode, int max_seq_len,
                                     const RequestDefaults& defaults) {
  const nlohmann::json body = parse_json_object(text);
  reject_unknown_fields(body,
                        {"model",
                         "messages",
                         "n",
                         "max_tokens",
                         "max_completion_tokens",
                         "temperature",
                         "top_p",
                         "top_k",
                         "seed",
                         "stop",
                         "stop_token_ids",
                         "logprobs",
                         "top_logprobs",
                         "stream",
                         "stream_options",
                         "logit_bias",
                         "presence_penalty",
                         "frequency_penalty",
                         "user",
                         "length_estimate",
                         "ignore_eos",
                         "tools",
                         "functions",
                         "response_format"},
                        "chat completions request");
  if (!body.contains("messages") || body["messages"].is_null()) {
    throw InputError("'messages' is required");
  }
  if (!encode) throw InputError("this model has no chat template; use /v1/completions");
  std::vector<std::vector<int32_t>> prompts = {
      encode(tokenizer::parse_messages(body["messages"], "'messages'"))};
  const char* max_key =
      body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  const int max_tokens = static_cast<int>(int_field(body, max_key, 0, 1, 1 << 30));
  CompletionRequest r =
      parse_common(body, tok, std::move(prompts), max_tokens, max_seq_len, defaults);
  r.chat = true;
  const int top = static_cast<int>(int_field(body, "top_logprobs", 0, 0, 20));
  if (bool_field(body, "logprobs", false)) {
    set_logprobs(&r, top);
  } else if (top > 0) {
    throw InputError("'top_logprobs' needs 'logprobs': true");
  }
  return r;
}

nlohmann::json error_json(const std::string& message, const std::string& type) {
  return {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}};
}

}  // namespace streamrl::server
