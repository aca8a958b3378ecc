// Static (batch-at-a-time) versus continuous batching on the same engine, on a long-tailed
// workload drawn from the default task's length distribution.
#pragma once

#include "registry.h"

namespace streamrl::bench {

nlohmann::json run_engine_throughput(const BenchOptions& options);

}  // namespace streamrl::bench
