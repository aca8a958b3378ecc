// Colocated and disaggregated training, each in a fresh `streamrl train` process, with glibc's
// default malloc thresholds and with the fixed ones streamrl sets (core/allocator.h): the
// measurement that found why colocate trained twice as slowly as disagg.
#pragma once

#include "registry.h"

namespace streamrl::bench {

nlohmann::json run_allocator_bench(const BenchOptions& options);

}  // namespace streamrl::bench
