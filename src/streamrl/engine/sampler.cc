#include "streamrl/engine/sampler.h"

namespace streamrl::engine {

const char* to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAborted:
      return "aborted";
  }
  return "unknown";
}

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

double counter_uniform(uint64_t seed, uint64_t stream, uint64_t step) {
  uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ step);
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);  // 53 random bits
}

SampledTokens sample_tokens(const torch::Tensor& logits,
                            const std::vector<const SamplingParams*>& params,
                            const std::vector<double>& uniforms) {
  torch::NoGradGuard no_grad;
  const int64_t B = logits.size(0), V = logits.size(1);
  TORCH_CHECK(
      static_cast<int64_t>(params.size()) == B && static_cast<int64_t>(uniforms.size()) == B,
      "sample_tokens: need one params and one uniform per row");
  std::vector<float> temp(B), top_p(B), u(B);
  std::vector<int64_t> top_k(B);
  bool any_filter = false;
  for (int64_t b = 0; b < B; ++b) {
    const SamplingParams& p = *params[b];
    temp[b] = p.temperature > 0 ? p.temperature : 1.0f;
    top_k[b] = (p.top_k > 0 && p.top_k < V) ? p.top_k : V;
    top_p[b] = p.top_p;
    u[b] = static_cast<float>(uniforms[b]);
    any_filter |= top_k[b] < V || p.top_p < 1.0f;
  }
  // Per-row parameters go to the logits' device in one small copy each; all sampling stays there.
  const torch::Device dev = logits.device();
  auto t_temp = torch::from_blob(temp.data(), {B, 1}, torch::kFloat32).to(dev);
  torch::Tensor logp = torch::log_softmax(logits.to(torch::kFloat32) / t_temp, -1);  // [B, V]
  torch::Tensor probs = logp.exp();

  // Always invert the CDF in descending-probability order, filtered or not, so that a row's token
  // depends only on its own logits, parameters and uniform, never on its batch neighbours.
  auto [sorted, order] = probs.sort(-1, /*descending=*/true);
  torch::Tensor kept = sorted;
  if (any_filter) {
    torch::Tensor rank =
        torch::arange(V, torch::TensorOptions(dev).dtype(torch::kLong)).view({1, V});
    auto t_k = torch::from_blob(top_k.data(), {B, 1}, torch::kLong).to(dev);
    auto t_p = torch::from_blob(top_p.data(), {B, 1}, torch::kFloat32).to(dev);
    // Keep a token while the mass before it is below top_p (the first token is always kept).
    torch::Tensor before = sorted.cumsum(-1) - sorted;
    kept = sorted * ((rank < t_k) & ((before < t_p) | (rank == 0)));
  }
  torch::Tensor cdf = kept.cumsum(-1);
  auto t_u = torch::from_blob(u.data(), {B, 1}, torch::kFloat32).to(dev);
  torch::Tensor pos = torch::searchsorted(cdf, t_u * cdf.narrow(1, V - 1, 1), false, /*right=*/true)
                          .clamp_max(V - 1);
  torch::Tensor choice = order.gather(1, pos).squeeze(1);
  std::vector<uint8_t> greedy(B);
  bool any_greedy = false;
  for (int64_t b = 0; b < B; ++b) any_greedy |= (greedy[b] = params[b]->temperature <= 0);
  if (any_greedy) {
    auto t_g = torch::from_blob(greedy.data(), {B}, torch::kUInt8).to(dev).to(torch::kBool);
    choice = torch::where(t_g, logp.argmax(-1), choice);
  }
  SampledTokens out;
  out.tokens = choice;
  out.logprobs = logp.gather(1, choice.unsqueeze(1)).squeeze(1);
  int64_t top = 0;
  for (int64_t b = 0; b < B; ++b) top = std::max<int64_t>(top, params[b]->top_logprobs);
  if (top > 0) {
    out.top_ids = order.narrow(1, 0, std::min(top, V));
    out.top_logprobs = logp.gather(1, out.top_ids);
  }
  return out;
}

}  // namespace streamrl::engine
