// The training side of bench sparse_attention: a whole training step dense vs with DSV's sparse
// heads, and the long-context task's quality after SFT dense vs with DSV for the same steps.
#pragma once

#include <nlohmann/json.hpp>

namespace streamrl::bench {

// Forward + backward of a whole model (configs/model/tiny.json's shape) on one sequence of each
// length, dense against every head sparse at ~90 % sparsity: "step_speedup" by length.
nlohmann::json sparse_training_steps(bool quick);

// `streamrl sft` on the retrieve task dense and with model.sparse_attention for the same steps and
// seed, then both scored on held-out problems of the same difficulty: answer loss and accuracy.
nlohmann::json sparse_training_quality(bool quick);

}  // namespace streamrl::bench
