// Which layers each pipeline stage holds: L layers cut into P stages x V model chunks of
// contiguous layers, balancing a measured per-layer cost (not the layer count, which leaves the
// stage holding the embedding or the LM head as the straggler). Chunk c of stage s is virtual
// stage c*P + s (interleaved placement), so the cut is over the model's layer order.
#pragma once

#include <vector>

namespace streamrl::pipeline {

struct Partition {
  int stages = 1;               // P
  int chunks = 1;               // V
  std::vector<int> boundaries;  // [P*V + 1]: virtual stage v holds layers [b[v], b[v+1])

  int first_layer(int stage, int chunk) const { return boundaries[chunk * stages + stage]; }
  int end_layer(int stage, int chunk) const { return boundaries[chunk * stages + stage + 1]; }
  // [P*V] summed cost of each virtual stage's layers, in virtual-stage order.
  std::vector<double> virtual_stage_costs(const std::vector<double>& layer_costs) const;
};

// The contiguous cut into P*V non-empty ranges that minimises the largest range's cost (exact
// dynamic programme, O(P*V*L^2)); among equal maxima, the first found. Throws InputError when
// layer_costs has fewer than P*V entries or a negative or non-finite entry.
Partition partition_layers(const std::vector<double>& layer_costs, int stages, int chunks = 1);

// The baseline: P*V ranges of equal layer count (the first L mod (P*V) one layer longer).
Partition partition_by_count(int layers, int stages, int chunks = 1);

}  // namespace streamrl::pipeline
