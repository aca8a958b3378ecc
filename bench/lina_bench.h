// Lina (arXiv 2210.17223; issue #22). Training, measured: two launched ranks with expert
// parallelism, fair share vs Lina's scheduler, and the link simulation's prediction of both
// (lina_train.h); the same simulation at the paper's scale beside it. Inference, measured: the
// tiny MoE (configs/model/tiny_moe.json) is trained by SFT with top-2 gating and a light balancing
// loss and served top-1, as the paper's models are; its routing of training-split problems builds
// the expert-path popularity tables, and on held-out batches each MoE layer's expert load is
// predicted before the gate. Figures: how often
// the predicted top-2k experts are the actual ones (paper 54-58 %), and the layer latency with one
// expert per rank (static) vs Lina's placement (replicate hot, pack cold, corrected after the
// gate), each rank's expert FFNs timed on its tokens with the model's weights and a layer taking
// its slowest rank's time; beside it the latency the loads alone predict.
#pragma once

#include "registry.h"

namespace streamrl::bench {

// Runs in a fresh temporary directory (removed afterwards).
nlohmann::json run_lina_bench(const BenchOptions& options);

}  // namespace streamrl::bench
