// Per-batch pipeline planning (PipeWeaver/DIP, arXiv 2504.14145). Measured at PP = 2 with real
// processes (pipeline_measured.h); emulated at cluster scale: static 1F1B versus
// the dynamic plan on long-tailed RL batches from the default task, for a Qwen2.5-7B-like layer
// on an A100-class device at PP = 2, 4, 8 and V = 1, 2; the planner's wall time, and how much of
// it planning one batch ahead hides behind the (scaled-down) emulated step of the batch before.
#pragma once

#include "registry.h"

namespace streamrl::bench {

nlohmann::json run_pipeline_bench(const BenchOptions& options);

}  // namespace streamrl::bench
