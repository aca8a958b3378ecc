// `bench sparse_attention`: dense vs DSV-style block-sparse causal attention, forward + backward,
// at 4k, 8k and 16k tokens and 90 % sparsity (the block selection from low-rank scores counted in
// the sparse time), and a low-rank predictor trained on synthetic peaked attention: its loss and
// the real attention mass its chosen blocks cover.
#pragma once

#include "registry.h"

namespace streamrl::bench {

nlohmann::json run_sparse_attention_bench(const BenchOptions& options);

}  // namespace streamrl::bench
