// Prometheus text: every metric has HELP and TYPE lines and its value.
#include "streamrl/server/metrics_text.h"

#include <gtest/gtest.h>

namespace streamrl::server {
namespace {

TEST(MetricsText, EveryMetricHasHelpTypeAndValue) {
  engine::EngineStats s;
  s.waiting_requests = 3;
  s.generated_tokens = 200;
  s.busy_seconds = 4;
  ServerCounters c;
  c.weight_version = 7;
  const std::string text = metrics_text(s, c);
  for (const char* name :
       {"waiting_requests", "running_samples", "generated_tokens_total", "finished_samples_total",
        "engine_steps_total", "tokens_per_second", "weight_version", "aborted_requests_total"}) {
    const std::string n = std::string("streamrl_") + name;
    EXPECT_NE(text.find("# HELP " + n + " "), std::string::npos) << n;
    EXPECT_NE(text.find("# TYPE " + n + " "), std::string::npos) << n;
  }
  EXPECT_NE(text.find("\nstreamrl_waiting_requests 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nstreamrl_tokens_per_second 50\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nstreamrl_weight_version 7\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE streamrl_generated_tokens_total counter"), std::string::npos);
}

}  // namespace
}  // namespace streamrl::server
