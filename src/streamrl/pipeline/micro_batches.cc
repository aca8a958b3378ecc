#include "streamrl/pipeline/micro_batches.h"

#include <algorithm>
#include <iterator>
#include <numeric>
#include <string>

#include "streamrl/core/errors.h"

namespace streamrl::pipeline {
namespace {

void check_lengths(const std::vector<int64_t>& lengths) {
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 0) {
      throw InputError("micro-batches: sequence " + std::to_string(i) + " has length " +
                       std::to_string(lengths[i]));
    }
  }
}

void add(MicroBatch& mb, int sample, int64_t len, const TokenCost& cost) {
  mb.samples.push_back(sample);
  mb.tokens += len;
  mb.tokens_sq += len * len;
  mb.cost += cost.of(len);
}

// LPT into `bins` bins under the token cap; false when some sequence fits no bin.
bool lpt(const std::vector<int64_t>& lengths, const std::vector<int>& by_cost, int bins,
         const SplitOptions& options, std::vector<MicroBatch>& out) {
  out.assign(bins, MicroBatch{});
  for (int i : by_cost) {
    int best = -1;
    for (int b = 0; b < bins; ++b) {
      const bool fits = out[b].samples.empty() || options.max_tokens <= 0 ||
                        out[b].tokens + lengths[i] <= options.max_tokens;
      if (fits && (best < 0 || out[b].cost < out[best].cost)) best = b;
    }
    if (best < 0) return false;
    add(out[best], i, lengths[i], options.cost);
  }
  return true;
}

}  // namespace

std::vector<MicroBatch> split_balanced(const std::vector<int64_t>& lengths,
                                       const SplitOptions& options) {
  check_lengths(lengths);
  if (options.target_tokens < 1 || options.round_up_to < 1) {
    throw InputError("split_balanced: target_tokens and round_up_to must be >= 1 (got " +
                     std::to_string(options.target_tokens) + ", " +
                     std::to_string(options.round_up_to) + ")");
  }
  const int n = static_cast<int>(lengths.size());
  if (n == 0) return {};
  const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  int64_t bins = std::max<int64_t>(1, (total + options.target_tokens - 1) / options.target_tokens);
  if (options.max_tokens > 0) {
    bins = std::max(bins, (total + options.max_tokens - 1) / options.max_tokens);
  }
  auto rounded = [&](int64_t b) {
    return std::min<int64_t>(
        (b + options.round_up_to - 1) / options.round_up_to * options.round_up_to, n);
  };
  bins = rounded(bins);

  std::vector<int> by_cost(n);
  std::iota(by_cost.begin(), by_cost.end(), 0);
  std::stable_sort(by_cost.begin(), by_cost.end(), [&](int a, int b) {
    return options.cost.of(lengths[a]) > options.cost.of(lengths[b]);
  });
  std::vector<MicroBatch> out;
  // With as many bins as sequences an empty bin is always left, so this ends.
  while (!lpt(lengths, by_cost, static_cast<int>(bins), options, out)) bins = rounded(bins + 1);

  std::erase_if(out, [](const MicroBatch& mb) { return mb.samples.empty(); });
  for (MicroBatch& mb : out) std::sort(mb.samples.begin(), mb.samples.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const MicroBatch& a, const MicroBatch& b) { return a.cost > b.cost; });
  return out;
}

std::vector<MicroBatch> split_tapered(const std::vector<int64_t>& lengths,
                                      const SplitOptions& options, int levels) {
  check_lengths(lengths);
  if (levels < 0) {
    throw InputError("split_tapered: levels must be >= 0 (got " + std::to_string(levels) + ")");
  }
  std::vector<int> shortest(lengths.size());
  std::iota(shortest.begin(), shortest.end(), 0);
  std::stable_sort(shortest.begin(), shortest.end(),
                   [&](int a, int b) { return lengths[a] < lengths[b]; });
  std::vector<MicroBatch> ends;
  size_t next = 0;  // into shortest
  for (int level = levels; level >= 1; --level) {
    const int64_t cap = std::max<int64_t>(1, options.target_tokens >> level);
    for (int end = 0; end < 2 && next < shortest.size(); ++end) {
      MicroBatch mb;
      do {
        const int i = shortest[next++];
        add(mb, i, lengths[i], options.cost);
      } while (next < shortest.size() && mb.tokens + lengths[shortest[next]] <= cap);
      ends.push_back(std::move(mb));
    }
  }
  // The rest, balanced, with their indices mapped back.
  std::vector<int> rest(shortest.begin() + static_cast<std::ptrdiff_t>(next), shortest.end());
  std::sort(rest.begin(), rest.end());
  std::vector<int64_t> rest_lengths;
  for (int i : rest) rest_lengths.push_back(lengths[i]);
  std::vector<MicroBatch> out = split_balanced(rest_lengths, options);
  for (MicroBatch& mb : out) {
    for (int& i : mb.samples) i = rest[static_cast<size_t>(i)];
  }
  for (MicroBatch& mb : ends) std::sort(mb.samples.begin(), mb.samples.end());
  std::stable_sort(ends.begin(), ends.end(),
                   [](const MicroBatch& a, const MicroBatch& b) { return a.cost > b.cost; });
  out.insert(out.end(), std::make_move_iterator(ends.begin()), std::make_move_iterator(ends.end()));
  return out;
}

std::vector<MicroBatch> split_static(const std::vector<int64_t>& lengths, int count,
                                     const TokenCost& cost) {
  check_lengths(lengths);
  if (count < 1) {
    throw InputError("split_static: count must be >= 1 (got " + std::to_string(count) + ")");
  }
  const int n = static_cast<int>(lengths.size());
  const int bins = std::min(count, n);
  std::vector<MicroBatch> out(bins);
  for (int b = 0, i = 0; b < bins; ++b) {
    const int size = n / bins + (b < n % bins ? 1 : 0);
    for (int k = 0; k < size; ++k, ++i) add(out[b], i, lengths[i], cost);
  }
  return out;
}

MicroBatch padded(const MicroBatch& mb, const std::vector<int64_t>& lengths,
                  const TokenCost& cost) {
  int64_t longest = 0;
  for (int i : mb.samples) longest = std::max(longest, lengths[static_cast<size_t>(i)]);
  const int64_t rows = static_cast<int64_t>(mb.samples.size());
  MicroBatch out;
  out.samples = mb.samples;
  out.tokens = rows * longest;
  out.tokens_sq = rows * longest * longest;
  out.cost = static_cast<double>(rows) * cost.of(longest);
  return out;
}

namespace {

std::vector<int> longest_first(const std::vector<int64_t>& lengths) {
  std::vector<int> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return lengths[a] > lengths[b]; });
  return order;
}

}  // namespace

std::vector<MicroBatch> split_static_grouped(const std::vector<int64_t>& lengths, int count,
                                             const TokenCost& cost) {
  const std::vector<int> order = longest_first(lengths);
  std::vector<int64_t> sorted;
  for (int i : order) sorted.push_back(lengths[i]);
  std::vector<MicroBatch> out = split_static(sorted, count, cost);
  for (MicroBatch& mb : out) {
    for (int& s : mb.samples) s = order[s];
    std::sort(mb.samples.begin(), mb.samples.end());
    mb = padded(mb, lengths, cost);
  }
  return out;
}

std::vector<MicroBatch> split_sorted(const std::vector<int64_t>& lengths,
                                     const SplitOptions& options) {
  check_lengths(lengths);
  if (options.target_tokens < 1) throw InputError("split_sorted: target_tokens must be >= 1");
  const std::vector<int> order = longest_first(lengths);
  std::vector<MicroBatch> out;
  MicroBatch current;
  int64_t longest = 0;
  for (int i : order) {
    if (current.samples.empty()) longest = lengths[i];
    const int64_t rows = static_cast<int64_t>(current.samples.size()) + 1;
    if (!current.samples.empty() && rows * longest > options.target_tokens) {
      out.push_back(std::move(current));
      current = MicroBatch{};
      longest = lengths[i];
    }
    current.samples.push_back(i);
  }
  if (!current.samples.empty()) out.push_back(std::move(current));
  for (MicroBatch& mb : out) {
    std::sort(mb.samples.begin(), mb.samples.end());
    mb = padded(mb, lengths, options.cost);
  }
  return out;
}

}  // namespace streamrl::pipeline
