// The native batch API (`POST /generate`) for a trainer's remote SGS client: prompts as text or
// token ids, and every finished sample streamed back as one JSON line carrying the Sample record
// unchanged (ids, log-probs, finish reason, weight version, timings; a multi-turn rollout's
// sampled_mask and turns).
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>
#include <vector>

#include "streamrl/engine/sample.h"
#include "streamrl/server/inflight.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::server {

struct GenerateRequest {
  std::vector<nlohmann::json> ids;  // the client's id of each job (any JSON value; default: index)
  std::vector<PromptJob> jobs;
  std::string run_id;  // "run_id": the trainer run asking ("" = any weights will do)
};

// Parses {"run_id"?, "requests": [{"id", "prompt" | "prompt_ids", "n", "max_new_tokens",
// "temperature", "top_p", "top_k", "seed", "stop_token_ids", "length_estimate", "ignore_eos",
// "tools", "max_turns"}, ...]}. Absent temperature/top_p/top_k take `defaults`, other fields those
// of engine::SamplingParams; a text prompt becomes tokenizer::encode_prompt(text); EOS and
// defaults.stop_token_ids stop unless "ignore_eos" (for fixed-length benchmarks). "tools" (built-in
// tool names) makes each sample a multi-turn tool rollout the engine runs to its end
// (engine/tool_turns.h; at most "max_turns" replies, default 8). Throws InputError with one line
// naming the request and field.
GenerateRequest parse_generate_request(std::string_view body, const tokenizer::Tokenizer& tok,
                                       const RequestDefaults& defaults = {});

// {"id", "sample_index", "prompt_ids", "output_ids", "text", "logprobs", "finish_reason",
//  "weight_version", "queue_s", "prefill_s", "decode_s"} for one finished sample (the server adds
//  "run_id" for a request that named one).
nlohmann::json sample_line(const nlohmann::json& id, const engine::Sample& sample,
                           const tokenizer::Tokenizer& tok);

}  // namespace streamrl::server
