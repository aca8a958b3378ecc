// DSV's dispatcher picks a kernel by a measured speed-up table: below some length gathering the
// kept key blocks costs more than it saves, and where that length lies depends on the machine and
// the layer's shape. This measures it: block selection plus the sparse kernel against dense causal
// attention, forward and backward, at doubling lengths.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "streamrl/sparse/key_blocks.h"

namespace streamrl::sparse {

struct SpeedupRow {
  int64_t tokens = 0;
  double dense_s = 0, sparse_s = 0;  // median seconds of one layer's attention, fwd + bwd
};

struct SpeedupTable {
  std::vector<SpeedupRow> rows;
  // The shortest measured length from which sparse is faster at every longer measured length;
  // past the longest one when it never is (dense throughout).
  int64_t min_tokens = 0;
  nlohmann::json to_json() const;
};

// One layer of `heads` query heads over `kv_heads` (head_dim each) with `config`'s blocks and
// low-rank scores of `rank`, at 2 * config.block tokens doubling up to max_tokens, `repeats`
// times each (interleaved dense, sparse), on `device`.
SpeedupTable measure_speedup_table(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t rank,
                                   const KeyBlockConfig& config, int64_t max_tokens,
                                   torch::Device device, int repeats = 3);

}  // namespace streamrl::sparse
