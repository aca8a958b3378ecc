// Lina's training scheduler measured with real processes (issue #22): `bench lina` launches two
// ranks of this binary with expert parallelism 2 (each holds half of the tiny MoE's experts and
// trades routed tokens by all-to-all), which run the same steps with the shared gradients
// all-reduced during backward under fair sharing (DeepSpeed-MoE's baseline) and under Lina's rule,
// interleaved, beside a profile step with nothing overlapped. The link simulation, fed with that
// profile, predicts both policies, so its error at our scale is known before it is trusted at the
// paper's.
#pragma once

#include "registry.h"

namespace streamrl::bench {

// Set in the launched ranks: the file rank 0 writes its figures to.
inline constexpr const char* kLinaTrainWorkerEnv = "STREAMRL_BENCH_LINA_TRAIN_OUT";

// A rank's side (called by `bench lina` when kLinaTrainWorkerEnv is set).
nlohmann::json run_lina_train_worker(const BenchOptions& options, const std::string& out_path);

// Launches the two ranks and returns rank 0's figures.
nlohmann::json measure_lina_training(const BenchOptions& options);

}  // namespace streamrl::bench
