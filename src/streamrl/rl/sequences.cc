#include "streamrl/rl/sequences.h"

#include <algorithm>

namespace streamrl::rl {

std::vector<int32_t> encode_prompt(const tokenizer::Tokenizer& tok, const std::string& prompt) {
  std::vector<int32_t> ids;
  if (tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  auto body = tok.encode(prompt);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

SequenceBatch make_sequence_batch(const std::vector<std::vector<int32_t>>& prompts,
                                  const std::vector<std::vector<int32_t>>& completions) {
  TORCH_CHECK(prompts.size() == completions.size(), "make_sequence_batch: ", prompts.size(),
              " prompts but ", completions.size(), " completions");
  const int64_t B = prompts.size();
  int64_t T = 1;
  for (int64_t b = 0; b < B; ++b) {
    T = std::max<int64_t>(T, prompts[b].size() + completions[b].size());
  }
  SequenceBatch out;
  out.tokens = torch::zeros({B, T}, torch::kLong);
  out.valid = torch::zeros({B, T}, torch::kBool);
  out.completion = torch::zeros({B, T}, torch::kBool);
  auto tok = out.tokens.accessor<int64_t, 2>();
  auto valid = out.valid.accessor<bool, 2>();
  auto comp = out.completion.accessor<bool, 2>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t t = 0;
    for (int32_t id : prompts[b]) tok[b][t] = id, valid[b][t++] = true;
    for (int32_t id : completions[b]) tok[b][t] = id, valid[b][t] = true, comp[b][t++] = true;
    out.num_completion_tokens += completions[b].size();
  }
  return out;
}

std::vector<std::vector<size_t>> pack_by_token_budget(const std::vector<int64_t>& lengths,
                                                      int64_t token_budget) {
  std::vector<size_t> order(lengths.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<size_t>> out;
  for (size_t i : order) {
    // Sorted longest first, so the first item of a micro-batch is its longest.
    if (out.empty() ||
        static_cast<int64_t>(out.back().size() + 1) * lengths[out.back().front()] > token_budget) {
      out.emplace_back();
    }
    out.back().push_back(i);
  }
  return out;
}

}  // namespace streamrl::rl
