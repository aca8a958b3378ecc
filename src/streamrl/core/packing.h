// How the trainer packs sequences into micro-batches, and when a streaming trainer runs a pack at
// once instead of waiting for more samples. rl::PolicyStep packs this way and the planner's
// emulator charges the padding of the same packs, so the two cannot drift apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace streamrl::core {

// Splits items of the given lengths into micro-batches whose padded size (rows x longest row)
// stays within `token_budget`, grouping similar lengths (longest first) so long-tailed batches do
// not pad every row to the longest one. An item longer than the budget gets a micro-batch alone.
// Returns indices into `lengths`; every index appears exactly once.
std::vector<std::vector<size_t>> pack_by_token_budget(const std::vector<int64_t>& lengths,
                                                      int64_t token_budget);

// Real / padded tokens below which an eager micro-batch waits for more samples: its rows are much
// shorter than its longest, and later samples may fill it with rows of similar length.
constexpr double kMinPackFill = 0.8;

// Rows x longest row summed over `packs` (indices into `lengths`, each pack longest first, as the
// functions here return them): the padded tokens a trainer computes for those micro-batches.
int64_t padded_tokens(const std::vector<int64_t>& lengths,
                      const std::vector<std::vector<size_t>>& packs);

struct EagerPacks {
  std::vector<std::vector<size_t>> run;  // micro-batches to run now, indices into the lengths
  std::vector<size_t> keep;              // indices that wait for later samples, in pack order
};

// pack_by_token_budget, then, while `more_coming`, a pack waits when it is partly filled (room for
// another row as long as its longest: the shortest leftovers, and a small micro-batch has the
// same fixed cost and less efficient matmuls) or mostly padding (under kMinPackFill real tokens).
// Without `more_coming` every pack runs.
EagerPacks pack_eager(const std::vector<int64_t>& lengths, int64_t token_budget, bool more_coming);

}  // namespace streamrl::core
