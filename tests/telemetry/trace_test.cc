// Chrome trace: bounded span buffer, merging another process's trace onto one timeline, and
// flushing only the new events into a file that stays a whole trace.
#include "streamrl/telemetry/trace.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <set>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

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

// Its events sorted: flush() may order them otherwise than to_json().
nlohmann::json sorted(nlohmann::json j) {
  std::sort(j["traceEvents"].begin(), j["traceEvents"].end());
  return j;
}

// A trace file parsed (it must be valid JSON), its events sorted.
nlohmann::json parsed_file(const fs::path& path) {
  return sorted(nlohmann::json::parse(core::read_file(path)));
}

ino_t inode(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  return st.st_ino;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(Trace, FlushAppendsTheNewEventsAndTheFileStaysTheWholeTrace) {
  const fs::path dir = fresh_dir("trace_flush_test");
  const fs::path file = dir / "trace.json";
  const auto t0 = Clock::now();
  const auto ms = [&](int i) { return t0 + std::chrono::milliseconds(i); };
  Trace trace(t0);
  trace.name_track(1, "trainer");
  trace.span(1, "step 0", ms(0), ms(1), {{"iteration", 0}});
  trace.flush(file);
  EXPECT_EQ(parsed_file(file), sorted(trace.to_json()));
  const std::string first = core::read_file(file);
  const ino_t first_inode = inode(file);

  trace.name_track(2, "sgs instance 0");
  trace.span(2, "decode", ms(1), ms(3));
  trace.span(1, "step 1", ms(2), ms(4));
  trace.flush(file);
  EXPECT_EQ(parsed_file(file), sorted(trace.to_json()));
  trace.write(dir / "written.json");
  EXPECT_EQ(parsed_file(file), parsed_file(dir / "written.json"));
  // Appended in place: the same file, its events up to the first flush's last one untouched.
  const std::string second = core::read_file(file);
  EXPECT_EQ(inode(file), first_inode);
  const size_t first_events_end = first.rfind(']');
  EXPECT_EQ(second.compare(0, first_events_end, first, 0, first_events_end), 0);
  const Trace::Contents c = Trace::read(file);
  EXPECT_EQ(c.spans.size(), 3u);
  EXPECT_EQ(c.track_names.at(2), "sgs instance 0");

  trace.flush(file);  // nothing new
  EXPECT_EQ(core::read_file(file), second);

  // A file replaced or removed under the trace is written whole again, and merges like a
  // written one.
  trace.write(file);
  trace.span(1, "step 2", ms(4), ms(5));
  trace.flush(file);
  EXPECT_EQ(parsed_file(file), sorted(trace.to_json()));
  fs::remove(file);
  trace.span(1, "step 3", ms(5), ms(6));
  trace.flush(file);
  EXPECT_EQ(parsed_file(file), sorted(trace.to_json()));
  Trace lead(t0);
  lead.merge_file(file);
  EXPECT_EQ(lead.size(), 5u);
  fs::remove_all(dir);
}

TEST(Trace, FlushedFileCountsSpansItMissedAndStaysBounded) {
  const fs::path dir = fresh_dir("trace_bound_test");
  const fs::path file = dir / "trace.json";
  const auto t0 = Clock::now();
  Trace trace(t0, /*max_spans=*/2);
  const auto step = [&](int i) {
    trace.span(1, "step " + std::to_string(i), t0 + std::chrono::milliseconds(i),
               t0 + std::chrono::milliseconds(i + 1));
  };
  const auto span_names = [&] {
    std::set<std::string> names;
    for (const auto& e : Trace::read(file).spans) names.insert(e["name"]);
    return names;
  };
  step(0);
  trace.flush(file);
  // Steps 1 to 3 with room for 2: step 1 is dropped before it reaches the file, step 0 stays.
  for (int i = 1; i <= 3; ++i) step(i);
  trace.flush(file);
  EXPECT_EQ(span_names(), (std::set<std::string>{"step 0", "step 2", "step 3"}));
  EXPECT_EQ(parsed_file(file)["otherData"]["dropped_spans"], 1);
  // Two more would make 5 spans in the file, over 2 * max_spans: rewritten with the kept ones.
  step(4);
  step(5);
  trace.flush(file);
  EXPECT_EQ(span_names(), (std::set<std::string>{"step 4", "step 5"}));
  EXPECT_EQ(parsed_file(file), sorted(trace.to_json()));
  EXPECT_EQ(parsed_file(file)["otherData"]["dropped_spans"], 4);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace streamrl::telemetry
