// `streamrl bench serve`: an in-process HTTP load generator against a local `serve` (the tiny
// model, or --ckpt): requests/s, output tokens/s, time to first token and full-response time at
// concurrency 1, 8 and 32 over per-token SSE streams, and /health latency while 32 requests stream.
#pragma once

#include "registry.h"

namespace streamrl::bench {

nlohmann::json run_serve_bench(const BenchOptions& options);

}  // namespace streamrl::bench
