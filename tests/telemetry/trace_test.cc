// Chrome trace: bounded span buffer, and merging another process's trace onto one timeline.
#include "streamrl/telemetry/trace.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>

#include "streamrl/core/errors.h"

namespace streamrl::telemetry {
namespace {

namespace fs = std::filesystem;
using Clock = Trace::Clock;

TEST(Trace, KeepsTheNewestSpansAndAllTrackNames) {
  const auto t0 = Clock::now();
  Trace trace(t0, /*max_spans=*/3);
  trace.name_track(1, "trainer");
  for (int i = 0; i < 5; ++i) {
    trace.span(1, "step " + std::to_string(i), t0 + std::chrono::milliseconds(i),
               t0 + std::chrono::milliseconds(i + 1));
  }
  EXPECT_EQ(trace.size(), 3u);
  EXPECT_EQ(trace.dropped(), 2u);
  const nlohmann::json j = trace.to_json();
  ASSERT_EQ(j["traceEvents"].size(), 4u);
  EXPECT_EQ(j["traceEvents"][0]["ph"], "M");
  EXPECT_EQ(j["traceEvents"][1]["name"], "step 2");
  EXPECT_EQ(j["traceEvents"][3]["name"], "step 4");
  EXPECT_DOUBLE_EQ(j["traceEvents"][3]["ts"].get<double>(), 4000.0);
  EXPECT_EQ(j["otherData"]["dropped_spans"], 2);
}

TEST(Trace, MergesAnotherTraceOntoThisOrigin) {
  const fs::path dir = fs::temp_directory_path() / ("trace_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto t0 = Clock::now();
  Trace lead(t0);
  lead.name_track(1, "trainer rank 0");
  // A trace that started 50 ms later, with a span 10 ms after its own origin.
  Trace other(t0 + std::chrono::milliseconds(50));
  other.name_track(101, "trainer rank 1");
  other.span(101, "micro-batch", t0 + std::chrono::milliseconds(60),
             t0 + std::chrono::milliseconds(70));
  other.write(dir / "rank1.json");
  lead.merge_file(dir / "rank1.json");
  const auto c = [&] {
    lead.write(dir / "trace.json");
    return Trace::read(dir / "trace.json");
  }();
  ASSERT_EQ(c.spans.size(), 1u);
  EXPECT_NEAR(c.spans[0]["ts"].get<double>(), 60000.0, 1.0);  // on the lead's timeline
  EXPECT_EQ(c.track_names.at(101), "trainer rank 1");
  EXPECT_EQ(c.track_names.at(1), "trainer rank 0");
  EXPECT_THROW(lead.merge_file(dir / "missing.json"), InputError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace streamrl::telemetry
