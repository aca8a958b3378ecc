#include "streamrl/rl/trajectory.h"

#include "streamrl/core/byte_codec.h"
#include "streamrl/core/errors.h"

namespace streamrl::rl {

std::string encode_samples(const std::vector<ScoredSample>& samples) {
  core::ByteWriter w;
  w.put<uint64_t>(samples.size());
  for (const ScoredSample& s : samples) {
    w.put<int64_t>(s.sample.request_id);
    w.put<int32_t>(s.sample.sample_index);
    w.put(s.sample.prompt_ids);
    w.put(s.sample.output_ids);
    w.put(s.sample.logprobs);
    w.put(s.sample.sampled_mask);
    w.put<int64_t>(s.sample.weight_version);
    w.put<int32_t>(s.sample.turns);
    w.put<double>(s.score);
    w.put<double>(s.reward);
    w.put<double>(s.advantage);
    w.put<int32_t>(s.difficulty);
    w.put(s.ref_logprobs);
    w.put(s.sample.routed_experts);  // MoE routing replay on the other stages
    w.put<int32_t>(s.sample.routing_layers);
    w.put<int32_t>(s.sample.routing_k);
  }
  return w.take();
}

std::vector<ScoredSample> decode_samples(const std::string& bytes) {
  core::ByteReader r(bytes, "sample bytes");
  const uint64_t n = r.get<uint64_t>();
  std::vector<ScoredSample> out;
  for (uint64_t i = 0; i < n; ++i) {
    ScoredSample s;
    s.sample.request_id = r.get<int64_t>();
    s.sample.sample_index = r.get<int32_t>();
    s.sample.prompt_ids = r.get_vector<int32_t>();
    s.sample.output_ids = r.get_vector<int32_t>();
    s.sample.logprobs = r.get_vector<float>();
    s.sample.sampled_mask = r.get_vector<uint8_t>();
    s.sample.weight_version = r.get<int64_t>();
    s.sample.turns = r.get<int32_t>();
    s.score = r.get<double>();
    s.reward = r.get<double>();
    s.advantage = r.get<double>();
    s.difficulty = r.get<int32_t>();
    s.ref_logprobs = r.get_vector<float>();
    s.sample.routed_experts = r.get_vector<int16_t>();
    s.sample.routing_layers = r.get<int32_t>();
    s.sample.routing_k = r.get<int32_t>();
    out.push_back(std::move(s));
  }
  if (!r.done()) throw RuntimeFailure("sample bytes have trailing data");
  return out;
}

}  // namespace streamrl::rl
