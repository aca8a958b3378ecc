// Prometheus text for /metrics (see metrics_text.h).
#include "streamrl/server/metrics_text.h"

#include <sstream>

namespace streamrl::server {
namespace {

void metric(std::ostringstream& out, const char* name, const char* type, const char* help,
            double value) {
  out << "# HELP streamrl_" << name << ' ' << help << "\n# TYPE streamrl_" << name << ' ' << type
      << "\nstreamrl_" << name << ' ' << value << '\n';
}

}  // namespace

std::string metrics_text(const engine::EngineStats& s, const ServerCounters& c) {
  std::ostringstream out;
  out.precision(17);
  metric(out, "waiting_requests", "gauge", "Requests queued in the engine, not yet admitted.",
         static_cast<double>(s.waiting_requests));
  metric(out, "running_samples", "gauge", "Samples in the running batch.",
         static_cast<double>(s.running_samples));
  metric(out, "generated_tokens_total", "counter", "Tokens generated since start.",
         static_cast<double>(s.generated_tokens));
  metric(out, "finished_samples_total", "counter", "Samples finished since start (any reason).",
         static_cast<double>(s.finished_samples));
  metric(out, "engine_steps_total", "counter", "Engine steps (decode iterations) since start.",
         static_cast<double>(s.steps));
  metric(out, "engine_busy_seconds_total", "counter", "Seconds the engine spent inside steps.",
         s.busy_seconds);
  metric(out, "tokens_per_second", "gauge", "Generated tokens per second of engine busy time.",
         s.busy_seconds > 0 ? static_cast<double>(s.generated_tokens) / s.busy_seconds : 0.0);
  metric(out, "weight_version", "gauge", "Weight version that newly admitted requests use.",
         static_cast<double>(c.weight_version));
  metric(out, "http_requests_total", "counter", "HTTP requests received.",
         static_cast<double>(c.http_requests));
  metric(out, "inflight_requests", "gauge", "Generation HTTP requests being served.",
         static_cast<double>(c.inflight_requests));
  metric(out, "aborted_requests_total", "counter",
         "Engine requests aborted because the client left, timed out, or the server stopped.",
         static_cast<double>(c.aborted_requests));
  return out.str();
}

}  // namespace streamrl::server
