// Skewness-aware SGS (StreamRL §5): generation time of one batch of the default task, sampled from
// a trained policy, over 2 instances for Random-FIFO, skew-aware dispatch with the length ranker,
// and skew-aware dispatch with oracle lengths; plus the ranker's held-out recall table.
#pragma once

#include "registry.h"

namespace streamrl::bench {

nlohmann::json run_skew_bench(const BenchOptions& options);

}  // namespace streamrl::bench
