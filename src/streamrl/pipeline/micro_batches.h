// Cutting one batch of sequences into pipeline micro-batches. The dynamic split (PipeWeaver/DIP's
// sub-micro-batches) balances token cost, so no micro-batch is the straggler every stage waits
// on; the static baseline cuts a fixed number of micro-batches of equal sample count in arrival
// order, as a fixed 1F1B configuration does. Sequences are never split.
#pragma once

#include <cstdint>
#include <vector>

namespace streamrl::pipeline {

// Compute cost of one sequence of `len` tokens: linear (MLP, projections) plus quadratic
// (attention) in its length.
struct TokenCost {
  double per_token = 1;
  double per_token_sq = 0;

  double of(int64_t len) const {
    return per_token * static_cast<double>(len) +
           per_token_sq * static_cast<double>(len) * static_cast<double>(len);
  }
};

struct MicroBatch {
  std::vector<int> samples;  // indices into the batch, ascending
  int64_t tokens = 0;        // sum of lengths: activation memory and transfer size
  int64_t tokens_sq = 0;     // sum of squared lengths: the attention share of compute
  double cost = 0;           // sum of TokenCost::of over the samples
};

struct SplitOptions {
  TokenCost cost;
  // Tokens aimed at per sub-micro-batch: the split starts from ceil(total tokens / target) bins.
  // Large enough to keep the device efficient (DIP found too-small sub-micro-batches waste it).
  int64_t target_tokens = 4096;
  // Activation-memory cap per sub-micro-batch, in tokens (0: none). Bins are added until every
  // bin fits; a sequence longer than the cap sits alone in its bin.
  int64_t max_tokens = 0;
  // The bin count is rounded up to a multiple of this (1: none), e.g. the stage count, so that
  // every stage fills and the interleaved order applies. Never above the sequence count.
  int round_up_to = 1;
};

// Greedy LPT: sequences by decreasing cost, each into the cheapest bin it fits. Bins come out in
// decreasing cost order; empty bins are dropped (there are at most as many bins as sequences).
// Throws InputError on a negative length, target_tokens < 1 or round_up_to < 1.
std::vector<MicroBatch> split_balanced(const std::vector<int64_t>& lengths,
                                       const SplitOptions& options);

// split_balanced with a ramp at both ends of the step: for each of `levels` sizes, halving from
// target_tokens / 2, two micro-batches (one per end) of the shortest sequences left, each filled
// while it stays within that size (at least one sequence); the rest split_balanced. A pipeline's
// fill waits on the first micro-batch and its drain on the last, so small ones there shorten both
// (the schedule search's orderings put them at the ends). Balanced micro-batches first, then the
// small ones, each part in decreasing cost. Throws as split_balanced; InputError on levels < 0.
std::vector<MicroBatch> split_tapered(const std::vector<int64_t>& lengths,
                                      const SplitOptions& options, int levels);

// The static baseline: min(count, N) micro-batches of consecutive samples in arrival order,
// sizes differing by at most one (the first N mod count one larger). Throws InputError on
// count < 1 or a negative length.
std::vector<MicroBatch> split_static(const std::vector<int64_t>& lengths, int count,
                                     const TokenCost& cost = {});

// Executors that pad (each micro-batch one dense [rows, longest] batch) compute and send the
// padded shape: the micro-batch with tokens = rows * longest, tokens_sq = rows * longest^2 and its
// cost on that shape. Samples are unchanged.
MicroBatch padded(const MicroBatch& mb, const std::vector<int64_t>& lengths,
                  const TokenCost& cost = {});

// The static baseline for padding executors (group by length, as HF's group_by_length does):
// min(count, N) micro-batches of equal sample count, as split_static, over the sequences sorted
// longest first; padded tokens and costs. Samples ascending within a micro-batch.
std::vector<MicroBatch> split_static_grouped(const std::vector<int64_t>& lengths, int count,
                                             const TokenCost& cost = {});

// The split for padding executors: sequences longest first, cut into consecutive runs whose
// padded size (rows * longest) stays within options.target_tokens (a longer sequence alone), so
// each micro-batch holds similar lengths. Samples ascending within a micro-batch; micro-batches
// longest first; costs and tokens are the padded ones. max_tokens and round_up_to are not used.
std::vector<MicroBatch> split_sorted(const std::vector<int64_t>& lengths,
                                     const SplitOptions& options);

}  // namespace streamrl::pipeline
