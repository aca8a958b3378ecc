// Training forward+backward and decode throughput of the tiny default model, each also as a
// fraction of the GEMM roofline measured in the same run.
#pragma once

#include "registry.h"

namespace streamrl::bench {

nlohmann::json run_model_speed(const BenchOptions& options);

}  // namespace streamrl::bench
