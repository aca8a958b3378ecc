#include "streamrl/core/packing.h"

#include <algorithm>

namespace streamrl::core {

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

int64_t padded_tokens(const std::vector<int64_t>& lengths,
                      const std::vector<std::vector<size_t>>& packs) {
  int64_t padded = 0;
  for (const auto& idx : packs) {
    if (!idx.empty()) padded += static_cast<int64_t>(idx.size()) * lengths[idx.front()];
  }
  return padded;
}

EagerPacks pack_eager(const std::vector<int64_t>& lengths, int64_t token_budget, bool more_coming) {
  EagerPacks out;
  for (auto& idx : pack_by_token_budget(lengths, token_budget)) {
    const int64_t longest = lengths[idx.front()];
    const int64_t padded = static_cast<int64_t>(idx.size()) * longest;
    int64_t real = 0;
    for (size_t i : idx) real += lengths[i];
    const bool partial = padded + longest <= token_budget;
    if (more_coming && (partial || real < kMinPackFill * static_cast<double>(padded))) {
      out.keep.insert(out.keep.end(), idx.begin(), idx.end());
    } else {
      out.run.push_back(std::move(idx));
    }
  }
  return out;
}

}  // namespace streamrl::core
