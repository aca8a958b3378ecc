// Prometheus text exposition (format 0.0.4) of an SGS instance's counters for `GET /metrics`.
#pragma once

#include <cstdint>
#include <string>

#include "streamrl/engine/engine.h"

namespace streamrl::server {

// Counters the HTTP layer keeps beside the engine's.
struct ServerCounters {
  int64_t http_requests = 0;      // requests received, any route
  int64_t inflight_requests = 0;  // generation requests (completions, generate) being served
  int64_t aborted_requests = 0;   // engine requests aborted: client gone, timeout or shutdown
  int64_t weight_version = 0;     // version every request admitted from now on runs with
};

// Every metric with its # HELP and # TYPE lines, names prefixed "streamrl_".
// `streamrl_tokens_per_second` is generated tokens per second of engine busy time (a rate over
// wall time is `rate(streamrl_generated_tokens_total[1m])`).
std::string metrics_text(const engine::EngineStats& stats, const ServerCounters& counters);

}  // namespace streamrl::server
