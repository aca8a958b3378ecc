// The one sample record that flows from the engine through the SGS to the trainer unchanged.
// Fields may be added; their meaning never changes between stages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace streamrl::engine {

enum class FinishReason { kStop, kLength, kAborted };

const char* to_string(FinishReason reason);

// How to sample one request's outputs. Defaults reproduce plain ancestral sampling.
struct SamplingParams {
  float temperature = 1.0f;             // 0 = greedy
  int top_k = 0;                        // 0 = no limit
  float top_p = 1.0f;                   // nucleus mass kept; 1 = no limit
  uint64_t seed = 0;                    // same seed + same inputs = same tokens, at any batch size
  int max_new_tokens = 128;             // hard cap on generated tokens
  std::vector<int32_t> stop_token_ids;  // finishing tokens (kept in output_ids)
  int top_logprobs = 0;  // most likely alternatives reported with each output token (0 = none)
};

// A token and its log-probability (one of a sampled token's top alternatives).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

struct Sample {
  int64_t request_id = 0;    // caller's id of the prompt
  int32_t sample_index = 0;  // 0..n-1 within the request's group
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;
  std::vector<float> logprobs;  // [output_ids.size()] log-prob of each output token under the
                                // sampling distribution before top-k/top-p (logits/temperature)
  // [output_ids.size()] when params.top_logprobs > 0: that many most likely tokens at each step,
  // most likely first, under the distribution of `logprobs`; empty otherwise.
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  FinishReason finish_reason = FinishReason::kLength;
  int64_t weight_version = 0;  // weights when the sample started; weights installed while it
                               // runs generate its later tokens (their log-probs say so)
  double queue_s = 0;          // seconds waiting before prefill, steady clock
  double prefill_s = 0;        // seconds in prefill
  double decode_s = 0;         // seconds from first decode step to finish
  // MoE policies with EngineConfig::record_routing: the experts each fed token went to, as
  // [position][MoE layer][slot] (routing_layers x routing_k per position, -1 = unused slot), for
  // positions 0 .. prompt + output - 2 (the last output token is never fed).
  std::vector<int16_t> routed_experts;
  int32_t routing_layers = 0, routing_k = 0;
  // Multi-turn rollouts (Request::hold_kv, Engine::continue_sample): output_ids then hold every
  // turn and what was appended between turns (tool results), and sampled_mask says which tokens
  // the model sampled (1) and which were appended (0, log-prob 0, never trained on). Empty when
  // every output token was sampled. `turns` counts the model's turns.
  std::vector<uint8_t> sampled_mask;
  int32_t turns = 1;
};

}  // namespace streamrl::engine
