#include "streamrl/engine/static_batch.h"

#include <algorithm>
#include <chrono>

#include "streamrl/core/errors.h"
#include "streamrl/engine/sampler.h"
#include "streamrl/model/kv_cache.h"

namespace streamrl::engine {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool is_stop(const SamplingParams& p, int32_t token) {
  return std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) !=
         p.stop_token_ids.end();
}

}  // namespace

uint64_t sample_stream(int64_t request_id, int32_t sample_index) {
  return (static_cast<uint64_t>(request_id) << 16) ^ static_cast<uint64_t>(sample_index);
}

std::vector<Sample> generate_static(model::CausalLM& model,
                                    const std::vector<GenerateRequest>& requests,
                                    int64_t weight_version) {
  torch::NoGradGuard no_grad;
  const auto start = Clock::now();
  const int64_t max_pos = model->config().max_position_embeddings;

  // 1. One row per sample; the first sample of each request owns the prefilled slot.
  std::vector<Sample> samples;
  std::vector<const SamplingParams*> params;
  std::vector<int64_t> owner_row;  // per request: row whose slot is prefilled
  int64_t max_total = 1, max_prompt = 1;
  for (const auto& r : requests) {
    if (r.prompt_ids.empty())
      throw InputError("request " + std::to_string(r.request_id) + ": empty prompt");
    const int64_t total = static_cast<int64_t>(r.prompt_ids.size()) + r.params.max_new_tokens;
    if (total > max_pos) {
      throw InputError("request " + std::to_string(r.request_id) + ": prompt (" +
                       std::to_string(r.prompt_ids.size()) + " tokens) + max_new_tokens (" +
                       std::to_string(r.params.max_new_tokens) + ") exceeds the model's " +
                       std::to_string(max_pos) + " positions");
    }
    max_total = std::max(max_total, total);
    max_prompt = std::max<int64_t>(max_prompt, r.prompt_ids.size());
    owner_row.push_back(static_cast<int64_t>(samples.size()));
    for (int i = 0; i < r.n; ++i) {
      Sample s;
      s.request_id = r.request_id;
      s.sample_index = i;
      s.prompt_ids = r.prompt_ids;
      s.weight_version = weight_version;
      samples.push_back(std::move(s));
      params.push_back(&r.params);
    }
  }
  const int64_t B = static_cast<int64_t>(samples.size());
  if (B == 0) return samples;
  model::KVCache cache(model->config(), B, max_total);

  // 2. Prefill each distinct prompt once (right-padded batch), then share its cache prefix.
  const int64_t R = static_cast<int64_t>(requests.size());
  auto tokens = torch::zeros({R, max_prompt}, torch::kLong);
  auto valid = torch::zeros({R, max_prompt}, torch::kBool);
  auto positions = torch::arange(max_prompt, torch::kLong).repeat({R, 1});
  auto slots = torch::tensor(owner_row, torch::kLong);
  auto tok_a = tokens.accessor<int64_t, 2>();
  auto valid_a = valid.accessor<bool, 2>();
  for (int64_t r = 0; r < R; ++r) {
    const auto& ids = requests[r].prompt_ids;
    for (size_t t = 0; t < ids.size(); ++t) tok_a[r][t] = ids[t], valid_a[r][t] = true;
  }
  auto prefill_start = Clock::now();
  torch::Tensor prompt_logits = model->forward_cached(tokens, positions, valid, slots, cache);
  std::vector<int64_t> row_request(B);
  torch::Tensor logits = torch::empty({B, prompt_logits.size(1)});
  for (int64_t r = 0; r < R; ++r) {
    for (int i = 0; i < requests[r].n; ++i) {
      const int64_t row = owner_row[r] + i;
      row_request[row] = r;
      cache.copy_prefix(owner_row[r], row, requests[r].prompt_ids.size());
      logits[row].copy_(prompt_logits[r]);
    }
  }
  const double prefill_s = seconds_since(prefill_start);

  // 3. Decode: sample for every active row, then run the still-active rows one token further.
  auto decode_start = Clock::now();
  std::vector<int64_t> active(B);
  for (int64_t b = 0; b < B; ++b) active[b] = b;
  while (!active.empty()) {
    std::vector<const SamplingParams*> p;
    std::vector<double> u;
    for (int64_t b : active) {
      p.push_back(params[b]);
      u.push_back(counter_uniform(params[b]->seed,
                                  sample_stream(samples[b].request_id, samples[b].sample_index),
                                  samples[b].output_ids.size()));
    }
    SampledTokens st = sample_tokens(logits, p, u);
    auto tok = st.tokens.accessor<int64_t, 1>();
    auto lp = st.logprobs.accessor<float, 1>();
    std::vector<int64_t> still;
    for (size_t i = 0; i < active.size(); ++i) {
      Sample& s = samples[active[i]];
      const int32_t t = static_cast<int32_t>(tok[i]);
      s.output_ids.push_back(t);
      s.logprobs.push_back(lp[i]);
      if (is_stop(*params[active[i]], t)) {
        s.finish_reason = FinishReason::kStop;
      } else if (static_cast<int>(s.output_ids.size()) >= params[active[i]]->max_new_tokens) {
        s.finish_reason = FinishReason::kLength;
      } else {
        still.push_back(active[i]);
        continue;
      }
      s.prefill_s = prefill_s;
      s.queue_s = std::chrono::duration<double>(prefill_start - start).count();
      s.decode_s = seconds_since(decode_start);
    }
    active = std::move(still);
    if (active.empty()) break;
    const int64_t A = static_cast<int64_t>(active.size());
    auto step_tokens = torch::empty({A, 1}, torch::kLong);
    auto step_pos = torch::empty({A, 1}, torch::kLong);
    auto st_a = step_tokens.accessor<int64_t, 2>();
    auto sp_a = step_pos.accessor<int64_t, 2>();
    for (int64_t i = 0; i < A; ++i) {
      const Sample& s = samples[active[i]];
      st_a[i][0] = s.output_ids.back();
      sp_a[i][0] = static_cast<int64_t>(s.prompt_ids.size() + s.output_ids.size() - 1);
    }
    logits = model->forward_cached(step_tokens, step_pos, torch::ones({A, 1}, torch::kBool),
                                   torch::tensor(active, torch::kLong), cache);
  }
  return samples;
}

}  // namespace streamrl::engine
