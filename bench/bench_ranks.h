// Benches measured with real processes: `streamrl bench NAME` relaunched as ranks under the
// launcher; an environment variable (set to rank 0's output path) tells the copies to run their
// rank's side, and rank 0's figures come back as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "registry.h"
#include "streamrl/dist/process_group.h"

namespace streamrl::bench {

// Runs `bench` as `nproc` ranks with `worker_env` set and returns what rank 0 wrote. Throws
// RuntimeFailure naming the ranks' log when a rank fails or rank 0 wrote nothing.
nlohmann::json launch_bench_ranks(const std::string& bench, int nproc, const char* worker_env,
                                  const BenchOptions& options);

// A rank's end: rank 0 writes `result` to `out_path`, then every rank waits for the others.
nlohmann::json finish_bench_rank(dist::ProcessGroup& world, const nlohmann::json& result,
                                 const std::string& out_path, const std::string& bench);

}  // namespace streamrl::bench
