// OpenAI-compatible completions: parsing and response JSON (see openai_api.h).
#include "streamrl/server/openai_api.h"

#include <limits>

#include "streamrl/core/errors.h"
#include "streamrl/server/completion_text.h"
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
  if (body.contains("logit_bias") && !body["logit_bias"].is_null() && !body["logit_bias"].empty()) {
    throw InputError("'logit_bias' is not supported");
  }
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    if (number_field(body, key, 0, -2, 2) != 0) {
      throw InputError("'" + std::string(key) + "' is not supported (must be 0)");
    }
  }
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
  r.logprobs = static_cast<int>(int_field(body, "logprobs", -1, 0, 20));
  r.stream = bool_field(body, "stream", false);
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const auto& so = body["stream_options"];
    if (!so.is_object()) throw InputError("'stream_options' must be an object");
    reject_unknown_fields(so, {"include_usage"}, "stream_options");
    r.include_usage = bool_field(so, "include_usage", false);
  }
  const double length_estimate = number_field(body, "length_estimate", 0, 0, kNoLimit);

  const bool fill_context = body.contains("max_tokens") && body["max_tokens"].is_null();
  const int max_tokens = static_cast<int>(int_field(body, "max_tokens", 16, 1, 1 << 30));
  for (auto& ids : parse_prompts(body, tok)) {
    PromptJob job;
    job.n = n;
    job.params = params;
    job.params.max_new_tokens =
        fill_context ? std::max(1, max_seq_len - static_cast<int>(ids.size())) : max_tokens;
    job.length_estimate = length_estimate;
    job.prompt_ids = std::move(ids);
    r.jobs.push_back(std::move(job));
  }
  return r;
}

Choice make_choice(const engine::Sample& sample, size_t job, const CompletionRequest& request,
                   const tokenizer::Tokenizer& tok) {
  const std::vector<std::string> pieces = token_pieces(tok, sample.output_ids);
  const StopResult cut = apply_stop_sequences(pieces, request.stop);
  std::string finish_reason = "stop";
  if (!cut.stopped && sample.finish_reason == engine::FinishReason::kLength) {
    finish_reason = "length";
  } else if (!cut.stopped && sample.finish_reason == engine::FinishReason::kAborted) {
    finish_reason = "abort";
  }
  nlohmann::json logprobs = nullptr;
  if (request.logprobs >= 0) {
    std::vector<std::string> tokens(pieces.begin(), pieces.begin() + cut.tokens);
    std::vector<float> token_logprobs(sample.logprobs.begin(),
                                      sample.logprobs.begin() + cut.tokens);
    std::vector<int64_t> offsets;
    int64_t offset = 0;
    for (const auto& t : tokens) offsets.push_back(offset), offset += t.size();
    logprobs = {{"tokens", tokens},
                {"token_logprobs", token_logprobs},
                {"top_logprobs", nullptr},
                {"text_offset", offsets}};
  }
  Choice c;
  c.json = {{"index", job * request.jobs.at(job).n + sample.sample_index},
            {"text", cut.text},
            {"logprobs", logprobs},
            {"finish_reason", finish_reason}};
  c.completion_tokens = static_cast<int64_t>(cut.tokens);
  return c;
}

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

nlohmann::json completion_response(const CompletionMeta& meta, std::vector<nlohmann::json> choices,
                                   const nlohmann::json& usage) {
  return {{"id", meta.id},       {"object", "text_completion"},   {"created", meta.created},
          {"model", meta.model}, {"choices", std::move(choices)}, {"usage", usage}};
}

nlohmann::json error_json(const std::string& message, const std::string& type) {
  return {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}};
}

}  // namespace streamrl::server
