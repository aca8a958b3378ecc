#include "streamrl/engine/static_batch.h"

#include <algorithm>
#include <utility>

#include "streamrl/core/errors.h"
#include "streamrl/engine/engine.h"

namespace streamrl::engine {

uint64_t sample_stream(int64_t request_id, int32_t sample_index) {
  return (static_cast<uint64_t>(request_id) << 16) ^ static_cast<uint64_t>(sample_index);
}

std::vector<Sample> generate_static(model::CausalLM& model,
                                    const std::vector<GenerateRequest>& requests,
                                    int64_t weight_version) {
  const int64_t max_pos = model->config().max_position_embeddings;
  int64_t max_total = 2, samples = 0;
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
    samples += r.n;
  }
  if (samples == 0) return {};
  // A slot per sample, so everything is admitted at the first step and nothing joins later.
  EngineConfig ec;
  ec.max_batch_size = static_cast<int>(samples);
  ec.max_seq_len = static_cast<int>(max_total);
  Engine engine(model, ec, weight_version);
  std::vector<std::pair<size_t, Sample>> done;  // (position of the request, sample)
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerateRequest& g = requests[i];
    Request r;
    r.request_id = g.request_id;
    r.prompt_ids = g.prompt_ids;
    r.n = g.n;
    r.params = g.params;
    r.on_sample = [&done, i](Sample&& s) { done.emplace_back(i, std::move(s)); };
    engine.add_request(std::move(r));
  }
  engine.run_until_idle();
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.first, a.second.sample_index) <
           std::make_pair(b.first, b.second.sample_index);
  });
  std::vector<Sample> out;
  for (auto& [i, s] : done) out.push_back(std::move(s));
  return out;
}

}  // namespace streamrl::engine
